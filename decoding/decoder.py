"""One call from a model's prefill and step functions to a jitted, checked constrained decoder."""

import functools
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from decoding.beam_search import BeamResult, beam_search
from decoding.constraints import Constraint
from decoding.scoring import LevelScoring

# prefill_fn(params, inputs) -> (outputs [B, V], cache[, context]); leaves of both lead with B.
PrefillFn = Callable[[PyTree, PyTree], tuple]
# step_fn(params, codes [B, K], level, cache[, context]) -> (outputs [B, K, V], cache); see
# `make_decoder`.
ModelStepFn = Callable[..., tuple[Float[Array, "B K V"], PyTree]]
# final_fn(params, tokens [B, K, L], *context) -> [B, K]; see `make_decoder`.
FinalFn = Callable[..., Float[Array, "B K"]]
# decode(params, inputs, *, constraint=None, scoring=None) -> BeamResult
DecodeFn = Callable[..., BeamResult]
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
    out_sharding: Any = None,
    final_fn: FinalFn | None = None,
) -> DecodeFn:
    """A jitted `decode(params, inputs) -> BeamResult` over your model's two functions.

    Args:
      prefill_fn: `(params, inputs) -> (out [B, V], cache)`: reads the inputs (e.g. a history of
        tokens [B, T]) and scores level 0; every cache leaf leads with B. It may return a third
        value, `context`: per-row data that every step reads and none changes (an encoder's
        outputs, a draft head's placeholder logits), leaves [B, ...]; it is passed to each step
        as it is, never copied per beam nor reordered.
      step_fn: `(params, codes [B, K], level, cache) -> (out [B, K, V], cache)`, or
        `(params, codes, level, cache, context)` when the prefill returns a context: feeds the
        codes chosen at level - 1 and scores level `level` (1..L-1; a traced int32 when
        `unroll` is False). The cache arrives with leaves [B, K, ...], one slice per beam, and
        the search reorders it as beams are chosen. `params` is whatever `decode` is given: a
        tuple of several models' parameters makes an ensemble, a (backbone, head) pair a
        draft head over a frozen backbone.
      constraint: the allowed SIDs (`StaticConstraint(StaticIndex.build(...))`, a baseline, or
        `Unconstrained`); host arrays are put on the default device once, here (place them
        yourself first, e.g. `decoding.sharding.replicate`, to keep your placement), and are
        passed to the program as arguments, so they never become compiled-in constants.
      beam_size, num_levels: K and L, static shapes of the program.
      outputs: what both functions return, required so that nobody gets it wrong silently:
        "logits" (log-softmax is applied in float32) or "log_probs" (normalized over V; checked
        on the first call, by a program of its own (the prefill and one step), on the host:
        ValueError naming the function otherwise).
      scoring: optional level weights and prefix biases (`decoding.prior_correction`).
      unroll: False runs the sparse levels in a `lax.fori_loop` (shorter compile for large L).
      out_sharding: optional sharding of the results (e.g. replicated over a mesh, so that
        every host of a multi-host run can read the beams).
      final_fn: optional `(params, tokens [B, K, L], *context) -> [B, K]`: a score of each
        finished beam's whole SID (an item-level score), added to the beam's score after the
        search; the beams are then sorted again (invalid ones stay last, at -inf).

    Returns:
      `decode(params, inputs, *, constraint=None, scoring=None)`: one jit-compiled program
      (params, inputs, constraint and scoring are arguments, never constants; it compiles again
      only for new shapes, dtypes or pytree structures) returning `BeamResult`. `constraint`
      and `scoring` replace the decoder's own for one call (None: the decoder's): per-request
      sets (`LiveConstraint`), per-row priors (`PrefixPrior`), another scoring. Its `.program`
      is the `jax.jit` function of (params, inputs, constraint, scoring), e.g. for
      `.lower(...)`.
    """
    if outputs not in _OUTPUTS:
        raise ValueError(f"outputs must be one of {_OUTPUTS}, got {outputs!r}")
    for name, n in (("beam_size", beam_size), ("num_levels", num_levels)):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"{name} must be an int >= 1, got {n!r}")
    K, L = int(beam_size), int(num_levels)
    program = jax.jit(
        functools.partial(_decode, prefill_fn, step_fn, outputs, K, L, unroll, final_fn),
        out_shardings=out_sharding,
    )
    check = None
    if outputs == "log_probs":
        check = jax.jit(functools.partial(_deviations, prefill_fn, step_fn, K, L))
    return _Decoder(program, constraint, scoring, check=check, fns=(prefill_fn, step_fn))


class _Decoder:
    """The callable `make_decoder` returns; it holds the device copies of constraint and scoring."""

    def __init__(self, program, constraint: Constraint, scoring, *, check, fns: tuple):
        self.program = program  # the jax.jit-compiled function of (params, inputs, ...)
        # Kept as given: a CpuTrie's host trie lives only as long as the object built with it.
        self.constraint = constraint
        # On device once, not transferred from the host again on every call.
        self._placed = jax.tree.map(_on_device, (constraint, scoring))
        self._check = check  # the normalization check of outputs="log_probs", until it passed
        self._fns = fns

    def __call__(
        self,
        params: PyTree,
        inputs: PyTree,
        *,
        constraint: Constraint | None = None,
        scoring: LevelScoring | None = None,
    ) -> BeamResult:
        own_constraint, own_scoring = self._placed
        result = self.program(
            params,
            inputs,
            own_constraint if constraint is None else constraint,
            own_scoring if scoring is None else scoring,
        )
        # The first concrete call checks normalization in a program of its own (prefill and one
        # step, once), so the decode program holds nothing but the decode: its beams are those
        # of the prefill and the search alone, to the last bit. Under an outer jit the result is
        # a tracer, so the check waits for a concrete call.
        if self._check is not None and not isinstance(result.scores, jax.core.Tracer):
            _raise_unless_normalized(jax.device_get(self._check(params, inputs)), self._fns)
            self._check = None
        return result


def _on_device(x: Any) -> Any:
    return x if isinstance(x, jax.Array) else jax.device_put(x)


def _prefill(prefill_fn: PrefillFn, params: PyTree, inputs: PyTree) -> tuple:
    """(out, cache, context tuple) of the prefill, whichever of its two forms it returns."""
    prefilled = prefill_fn(params, inputs)
    if not isinstance(prefilled, tuple) or len(prefilled) not in (2, 3):
        raise ValueError(
            f"prefill_fn {_name(prefill_fn)}: expected (out, cache) or (out, cache, context), "
            f"got {type(prefilled).__name__}"
        )
    out_BV, cache, *context = prefilled
    return out_BV, cache, tuple(context)


def _decode(
    prefill_fn: PrefillFn,
    step_fn: ModelStepFn,
    outputs: Outputs,
    beam_size: int,
    num_levels: int,
    unroll: bool,
    final_fn: FinalFn | None,
    params: PyTree,
    inputs: PyTree,
    constraint: Constraint,
    scoring: LevelScoring | None,
) -> BeamResult:
    """Prefill, then the beam search over the steps (then `final_fn`'s scores, if any)."""
    V = constraint.vocab_size
    out_BV, cache, context = _prefill(prefill_fn, params, inputs)
    if jnp.ndim(out_BV) != 2 or out_BV.shape[1] != V:
        raise ValueError(
            f"prefill_fn {_name(prefill_fn)}: returned shape {jnp.shape(out_BV)}, "
            f"expected [B, V] with V={V} (the constraint's vocab_size)"
        )
    # Log-probs are passed on unchanged, so the beams are bit-identical to calling beam_search
    # directly; logits are normalized in float32.
    if outputs == "logits":
        out_BV = jax.nn.log_softmax(out_BV.astype(jnp.float32), axis=-1)

    def step(codes, level, cache):
        # The context stays outside the search's cache: per row, shared by every beam.
        out_BKV, cache = step_fn(params, codes, level, cache, *context)
        if jnp.shape(out_BKV) != (*codes.shape, V):
            raise ValueError(
                f"step_fn {_name(step_fn)}: returned shape {jnp.shape(out_BKV)}, expected "
                f"[B, K, V] = {(*codes.shape, V)}"
            )
        if outputs == "logits":
            out_BKV = jax.nn.log_softmax(out_BKV.astype(jnp.float32), axis=-1)
        return out_BKV, cache

    result = beam_search(
        step,
        out_BV,
        cache,
        constraint,
        beam_size=beam_size,
        num_levels=num_levels,
        unroll=unroll,
        scoring=scoring,
    )
    if final_fn is None:
        return result
    return rescored(result, final_fn(params, result.tokens, *context))


def rescored(result: BeamResult, extra: Float[Array, "B K"]) -> BeamResult:
    """`result` with `extra` added to its valid beams' scores, sorted again by score (a stable
    sort: ties keep the search's order; invalid beams stay at -inf, last)."""
    scores = jnp.where(result.valid, result.scores + extra.astype(result.scores.dtype), -jnp.inf)
    order = jnp.argsort(-scores, axis=-1, stable=True)
    return BeamResult(
        jnp.take_along_axis(result.tokens, order[..., None], axis=1),
        jnp.take_along_axis(scores, order, axis=1),
        jnp.take_along_axis(result.valid, order, axis=1),
    )


def _deviations(
    prefill_fn: PrefillFn,
    step_fn: ModelStepFn,
    beam_size: int,
    num_levels: int,
    params: PyTree,
    inputs: PyTree,
) -> Float[Array, " 2"]:
    """max |logsumexp| of the prefill's outputs and of one step's (0 where there is none)."""
    out_BV, cache, context = _prefill(prefill_fn, params, inputs)
    prefill_dev = _deviation(out_BV)
    if num_levels == 1:
        return jnp.stack([prefill_dev, jnp.zeros((), jnp.float32)])
    # Level 1 as the search feeds it (K beams, the cache tiled per beam); any codes will do,
    # each row's best first code is as good as another.
    B = out_BV.shape[0]
    codes = jnp.broadcast_to(jnp.argmax(out_BV, axis=-1)[:, None], (B, beam_size))
    cache = jax.tree.map(lambda x: jnp.repeat(x[:, None], beam_size, axis=1), cache)
    out_BKV, _ = step_fn(params, codes.astype(jnp.int32), 1, cache, *context)
    return jnp.stack([prefill_dev, _deviation(out_BKV)])


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
