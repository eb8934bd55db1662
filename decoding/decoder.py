"""One call from a model's prefill and step functions to a jitted, checked constrained decoder."""

import functools
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from decoding.beam_search import BeamResult, beams_of, search_levels
from decoding.constraints import Constraint
from decoding.scoring import LevelScoring

# prefill_fn(params, inputs) -> (outputs [B, V], cache); leaves of cache lead with B.
PrefillFn = Callable[[PyTree, PyTree], tuple[Float[Array, "B V"], PyTree]]
# step_fn(params, codes [B, K], level, cache) -> (outputs [B, K, V], cache); see `make_decoder`.
ModelStepFn = Callable[..., tuple[Float[Array, "B K V"], PyTree]]
DecodeFn = Callable[[PyTree, PyTree], BeamResult]
Outputs = Literal["logits", "log_probs"]
_OUTPUTS = ("logits", "log_probs")
# Largest |logsumexp| of a normalized row: float32 log-softmax is off by ~1e-6 and bfloat16 by
# ~1e-3, while logits are off by log V-ish (rarely below 0.1 unless built to be normalized).
_NORM_TOL = 1e-2


def make_decoder(
    prefill_fn: PrefillFn,
    step_fn: ModelStepFn,
    constraint: Constraint,
    *,
    beam_size: int,
    num_levels: int,
    outputs: Outputs,
    scoring: LevelScoring | None = None,
    unroll: bool = True,
) -> DecodeFn:
    """A jitted `decode(params, inputs) -> BeamResult` over your model's two functions.

    Args:
      prefill_fn: `(params, inputs) -> (out [B, V], cache)`: reads the inputs (e.g. a history of
        tokens [B, T]) and scores level 0; every cache leaf leads with B.
      step_fn: `(params, codes [B, K], level, cache) -> (out [B, K, V], cache)`: feeds the codes
        chosen at level - 1 and scores level `level` (1..L-1; a traced int32 when `unroll` is
        False). The cache arrives with leaves [B, K, ...], one slice per beam, and the search
        reorders it as beams are chosen.
      constraint: the allowed SIDs (`StaticConstraint(StaticIndex.build(...))`, a baseline, or
        `Unconstrained`); host arrays are put on the default device once, here (place them
        yourself first, e.g. `decoding.sharding.replicate`, to keep your placement), and are
        passed to the program as arguments, so they never become compiled-in constants.
      beam_size, num_levels: K and L, static shapes of the program.
      outputs: what both functions return, required so that nobody gets it wrong silently:
        "logits" (log-softmax is applied in float32) or "log_probs" (normalized over V; checked
        on the first call, on the host: ValueError naming the function otherwise).
      scoring: optional level weights and prefix biases (`decoding.prior_correction`).
      unroll: False runs the sparse levels in a `lax.fori_loop` (shorter compile for large L).

    Returns:
      `decode(params, inputs)`: one jit-compiled program (params and inputs are arguments, never
      constants; it compiles again only for new shapes or dtypes) returning `BeamResult`. Its
      `.program` is the `jax.jit` function of (params, inputs, constraint, scoring), e.g. for
      `.lower(...)`.
    """
    if outputs not in _OUTPUTS:
        raise ValueError(f"outputs must be one of {_OUTPUTS}, got {outputs!r}")
    for name, n in (("beam_size", beam_size), ("num_levels", num_levels)):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"{name} must be an int >= 1, got {n!r}")
    program = jax.jit(
        functools.partial(
            _decode, prefill_fn, step_fn, outputs, int(beam_size), int(num_levels), unroll
        )
    )
    return _Decoder(
        program, constraint, scoring, check=outputs == "log_probs", fns=(prefill_fn, step_fn)
    )


class _Decoder:
    """The callable `make_decoder` returns; it holds the device copies of constraint and scoring."""

    def __init__(self, program, constraint: Constraint, scoring, *, check: bool, fns: tuple):
        self.program = program  # the jax.jit-compiled function of (params, inputs, ...)
        # Kept as given: a CpuTrie's host trie lives only as long as the object built with it.
        self.constraint = constraint
        # On device once, not transferred from the host again on every call.
        self._placed = jax.tree.map(_on_device, (constraint, scoring))
        self._unchecked = check
        self._fns = fns

    def __call__(self, params: PyTree, inputs: PyTree) -> BeamResult:
        result, deviation = self.program(params, inputs, *self._placed)
        # The first concrete call pays one device-to-host sync to check normalization; under an
        # outer jit the deviations are tracers, so the check waits for a concrete call.
        if self._unchecked and not isinstance(deviation, jax.core.Tracer):
            _raise_unless_normalized(jax.device_get(deviation), self._fns)
            self._unchecked = False
        return result


def _on_device(x: Any) -> Any:
    return x if isinstance(x, jax.Array) else jax.device_put(x)


def _decode(
    prefill_fn: PrefillFn,
    step_fn: ModelStepFn,
    outputs: Outputs,
    beam_size: int,
    num_levels: int,
    unroll: bool,
    params: PyTree,
    inputs: PyTree,
    constraint: Constraint,
    scoring: LevelScoring | None,
) -> tuple[BeamResult, Float[Array, " 2"]]:
    """Prefill, then the beam search; also max |logsumexp| of the prefill's and steps' outputs."""
    V = constraint.vocab_size
    out_BV, cache = prefill_fn(params, inputs)
    if jnp.ndim(out_BV) != 2 or out_BV.shape[1] != V:
        raise ValueError(
            f"prefill_fn {_name(prefill_fn)}: returned shape {jnp.shape(out_BV)}, "
            f"expected [B, V] with V={V} (the constraint's vocab_size)"
        )
    B = out_BV.shape[0]
    if outputs == "logits":
        lp_BV = jax.nn.log_softmax(out_BV.astype(jnp.float32), axis=-1)
        prefill_dev = jnp.zeros((), jnp.float32)
    else:
        # Passed on unchanged, so the beams are bit-identical to calling beam_search directly.
        lp_BV, prefill_dev = out_BV, _deviation(out_BV)
        # The steps' deviation rides in the cache (leaves lead with B): the search carries it
        # through the levels (a lax loop too) and returns it with its final carry.
        cache = (cache, jnp.zeros((B,), jnp.float32))

    def step(codes, level, cache):
        if outputs == "log_probs":
            cache, dev_BK = cache
        out_BKV, cache = step_fn(params, codes, level, cache)
        if jnp.shape(out_BKV) != (*codes.shape, V):
            raise ValueError(
                f"step_fn {_name(step_fn)}: returned shape {jnp.shape(out_BKV)}, expected "
                f"[B, K, V] = {(*codes.shape, V)}"
            )
        if outputs == "logits":
            return jax.nn.log_softmax(out_BKV.astype(jnp.float32), axis=-1), cache
        # One scalar for all beams: the search reorders [B, K] leaves by parent beam, and only
        # a value equal across beams survives that reordering as a maximum over all of them.
        return out_BKV, (cache, jnp.maximum(dev_BK, _deviation(out_BKV)))

    carry = search_levels(
        step,
        lp_BV,
        cache,
        constraint,
        beam_size=beam_size,
        num_levels=num_levels,
        unroll=unroll,
        scoring=scoring,
    )
    step_dev = carry.cache[1].max() if outputs == "log_probs" else jnp.zeros((), jnp.float32)
    return beams_of(carry), jnp.stack([prefill_dev, step_dev])


def _deviation(out: Float[Array, "..."]) -> Float[Array, ""]:
    """max |log sum exp| over rows: 0 for log-probs, far from 0 for logits."""
    return jnp.abs(jax.nn.logsumexp(out.astype(jnp.float32), axis=-1)).max()


def _raise_unless_normalized(deviation: np.ndarray, fns: tuple) -> None:
    bad = [
        f"{role} {_name(fn)} (max |logsumexp| over V = {dev:.3g})"
        for role, fn, dev in zip(("prefill_fn", "step_fn"), fns, deviation.tolist(), strict=True)
        if not dev <= _NORM_TOL  # NaN too
    ]
    if bad:
        raise ValueError(
            f"outputs='log_probs', but these do not return normalized log-probs: {'; '.join(bad)}. "
            "If they return logits, pass outputs='logits'."
        )


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
