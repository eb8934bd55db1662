"""Jit-compiled greedy, sampling and beam decoding of labels under a `LabelConstraint`."""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PyTree

from decoding.beam_search import _reorder, _select
from decoding.constraints import Candidates
from decoding.label_index import refuse_empty_rows, subset_words
from decoding.labels import LabelConstraint, LabelState

# prefill_fn(params, inputs) -> (logits [B, V], cache); leaves of cache lead with B.
PrefillFn = Callable[[PyTree, PyTree], tuple[Float[Array, "B V"], PyTree]]
# step_fn(params, tokens [B, K], step, cache) -> (logits [B, K, V], cache); step is traced.
StepFn = Callable[..., tuple[Float[Array, "B K V"], PyTree]]
Mode = Literal["greedy", "sample", "beam"]
_MODES = ("greedy", "sample", "beam")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sampler:
    """How each step picks among the allowed tokens (static: part of the compiled program)."""

    mode: Mode
    beam_size: int = 1  # K: beams ("beam"), samples per row ("sample"); 1 for "greedy"
    temperature: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0  # 1: no nucleus cut

    def __post_init__(self):
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {self.mode!r}")
        if isinstance(self.beam_size, bool) or not isinstance(self.beam_size, int):
            raise ValueError(f"beam_size must be an int, got {self.beam_size!r}")
        if self.beam_size < 1 or (self.mode == "greedy" and self.beam_size != 1):
            raise ValueError(f"beam_size must be >= 1 (1 for greedy), got {self.beam_size}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclasses.dataclass(frozen=True)
class LabelResult:
    """Outputs per row and beam (or sample); beams best first, samples in draw order."""

    tokens: Int[Array, "B K T"]  # EOS included, then EOS padding
    lengths: Int[Array, "B K"]  # tokens up to and including EOS
    scores: Float[Array, "B K"]  # summed model log-probs of the tokens (-inf: invalid)
    valid: Bool[Array, "B K"]  # finished with EOS within max_steps, under the grammar
    labels: Int[Array, "B K M"]  # the caller's label indices in output order, -1 padding
    num_labels: Int[Array, "B K"]


jax.tree_util.register_dataclass(
    LabelResult,
    data_fields=["tokens", "lengths", "scores", "valid", "labels", "num_labels"],
    meta_fields=[],
)


class _Carry(NamedTuple):
    step: Int[Array, ""]
    history: Int[Array, "B K T"]
    scores: Float[Array, "B K"]
    state: LabelState
    cache: PyTree
    token: Int[Array, "B K"]


def make_label_decoder(
    prefill_fn: PrefillFn,
    step_fn: StepFn,
    constraint: LabelConstraint,
    *,
    mode: Mode,
    beam_size: int = 1,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> "LabelDecoder":
    """A jitted `decode(params, inputs, rng=, allowed=, constraint=) -> LabelResult`.

    Args:
      prefill_fn: `(params, inputs) -> (logits [B, V], cache)` for the first output token; every
        cache leaf leads with B.
      step_fn: `(params, tokens [B, K], step, cache) -> (logits [B, K, V], cache)`: feeds the
        tokens chosen at step - 1 (step is a traced int32 >= 1); the cache arrives as [B, K, ...]
        and is reordered with the beams. Log-probs work too (log-softmax is applied either way).
      constraint: `LabelConstraint.build(...)`; its `max_steps` bounds the loop, which stops
        early once every row has emitted EOS.
      mode: "greedy" (argmax), "sample" (`beam_size` independent samples per row, with
        `temperature`, `top_k`, `top_p` applied to the allowed tokens only) or "beam" (beam
        search over `beam_size` beams; finished beams keep their score and their slot).

    Returns:
      `decode(params, inputs, *, rng=None, allowed=None, constraint=None)`: `allowed` is bool
      [B, num_labels] (per-row label subsets, caller's label order; a row that allows no label is
      a ValueError naming it), `constraint` swaps in another label set (same capacity and
      settings: no recompilation), `rng` a key ("sample" only).
    """
    sampler = Sampler(
        mode=mode, beam_size=beam_size, temperature=temperature, top_k=top_k, top_p=top_p
    )
    program = jax.jit(functools.partial(_decode, prefill_fn, step_fn, sampler))
    return LabelDecoder(program, constraint, sampler)


class LabelDecoder:
    """The callable `make_label_decoder` returns; holds the device copy of the constraint."""

    def __init__(self, program, constraint: LabelConstraint, sampler: Sampler):
        self.program = program  # jax.jit of (params, inputs, constraint, words, rng)
        self.sampler = sampler
        self.constraint = constraint
        self._placed = jax.device_put(constraint)

    def __call__(
        self,
        params: PyTree,
        inputs: PyTree,
        *,
        rng: Array | None = None,
        allowed: Bool[np.ndarray, "B N"] | None = None,
        constraint: LabelConstraint | None = None,
    ) -> LabelResult:
        c = self._placed if constraint is None else constraint
        if self.sampler.mode == "sample" and rng is None:
            raise ValueError("rng: mode='sample' needs a jax.random key")
        words = None
        if allowed is not None:
            # Packed on the host, from the host copy of the index (no device round trip).
            host = self.constraint if constraint is None else constraint
            packed = subset_words(host.index, np.asarray(allowed))
            refuse_empty_rows(packed)  # checked here: inside the program it is traced
            words = jax.device_put(packed)
        key = jax.random.key(0) if rng is None else rng
        return self.program(params, inputs, c, words, key)


def _decode(
    prefill_fn: PrefillFn,
    step_fn: StepFn,
    sampler: Sampler,
    params: PyTree,
    inputs: PyTree,
    constraint: LabelConstraint,
    words: Array | None,
    key: Array,
) -> LabelResult:
    """Prefill, step 0 from one root per row, then a while loop until EOS everywhere."""
    K, T, V = sampler.beam_size, constraint.max_steps, constraint.vocab_size
    out_BV, cache = prefill_fn(params, inputs)
    if jnp.ndim(out_BV) != 2 or out_BV.shape[1] != V:
        raise ValueError(
            f"prefill_fn: returned shape {jnp.shape(out_BV)}, expected [B, V] with V={V} "
            "(the label index's vocab_size)"
        )
    B = out_BV.shape[0]
    if words is not None:
        if words.shape[0] != B:
            raise ValueError(f"allowed: {words.shape[0]} rows for a batch of {B}")
        constraint = constraint.restrict(words)
    # Step 0 is a search from one root per row (Kin = 1), so the first pick draws K distinct
    # beams (or K samples) from the same distribution and every parent is 0.
    state = jax.tree.map(lambda x: x[:, None], constraint.init_state(B))
    lp = jax.nn.log_softmax(out_BV.astype(jnp.float32), axis=-1)[:, None]
    # Beam search and greedy pick among each beam's best K root tokens, sampling among all V.
    top = None if sampler.mode == "sample" else K
    # Every row is at the root: no children slots are needed beyond the narrow ones.
    cand = constraint.candidates(
        0, state, lp, width=constraint.index.capacity.narrow_width, root_top=top
    )
    parent, token, aux, scores = _pick(sampler, jnp.zeros((B, 1)), cand, jax.random.fold_in(key, 0))
    state = constraint.advance(0, _reorder(state, parent), token, aux)
    history = jnp.full((B, K, T), constraint.eos_id, jnp.int32).at[:, :, 0].set(token)
    cache = jax.tree.map(lambda x: jnp.repeat(x[:, None], K, axis=1), cache)

    def running(c: _Carry) -> Bool[Array, ""]:
        return (c.step < T) & jnp.any(~c.state.done & (c.scores > -jnp.inf))

    def body(c: _Carry) -> _Carry:
        out, cache = step_fn(params, c.token, c.step, c.cache)
        lp = jax.nn.log_softmax(out.astype(jnp.float32), axis=-1)

        def pick(width: int):
            cand = constraint.candidates(c.step, c.state, lp, width=width, root_top=top)
            return _pick(sampler, c.scores, cand, jax.random.fold_in(key, c.step))

        # The narrow children slots unless some row sits at a wider node: the same candidates
        # either way (the wide slots add only invalid ones), hence the same greedy and beam picks.
        parent, token, aux, scores = constraint.by_width(c.state, pick)
        history, state = c.history, c.state
        if sampler.mode == "beam":
            # Every per-beam leaf follows its parent (see beam_search.next_level), cache too.
            history, state, cache = _reorder((history, state, cache), parent)
        state = constraint.advance(c.step, state, token, aux)
        history = jax.lax.dynamic_update_index_in_dim(history, token, c.step, axis=2)
        return _Carry(c.step + 1, history, scores, state, cache, token)

    c = jax.lax.while_loop(
        running, body, _Carry(jnp.int32(1), history, scores, state, cache, token)
    )
    valid = c.state.done & c.state.ok & (c.scores > -jnp.inf)
    is_eos = c.history == constraint.eos_id
    lengths = jnp.where(valid, jnp.argmax(is_eos, axis=-1) + 1, 0)
    return LabelResult(
        tokens=c.history,
        lengths=lengths,
        scores=jnp.where(valid, c.scores, -jnp.inf),
        valid=valid,
        labels=jnp.where(valid[..., None], constraint.label_ids(c.state), -1),
        num_labels=jnp.where(valid, c.state.count, 0),
    )


def _pick(
    sampler: Sampler, scores: Float[Array, "B Kin"], cand: Candidates, key: Array
) -> tuple[Int[Array, "B K"], Int[Array, "B K"], Any, Float[Array, "B K"]]:
    """(parent, token, aux, new scores) of K picks among the candidates; -inf marks a row or
    beam with no allowed candidate."""
    K = sampler.beam_size
    if sampler.mode == "beam":
        return _select(scores, cand, K)
    B, Kin, C = cand.tokens.shape
    ok = cand.valid & (scores > -jnp.inf)[..., None]
    if sampler.mode == "greedy":
        # top_k(1), not argmax: XLA's CPU argmax is a variadic reduce, ~5x slower over V.
        slot = jax.lax.top_k(jnp.where(ok, cand.log_probs, -jnp.inf), 1)[1][..., 0]
    else:
        z = _filtered(jnp.where(ok, cand.log_probs / sampler.temperature, -jnp.inf), sampler)
        if Kin == 1:
            slot = jax.random.categorical(key, z[:, 0], axis=-1, shape=(K, B)).T
        else:
            slot = jax.random.categorical(key, z, axis=-1)
    if Kin == 1:
        slot = jnp.broadcast_to(slot.reshape(B, -1), (B, K))
    parent = jnp.zeros((B, K), jnp.int32) if Kin == 1 else jnp.broadcast_to(jnp.arange(K), (B, K))

    def take(x):
        return jnp.take_along_axis(x[:, parent[0]] if Kin == 1 else x, slot[..., None], -1)[..., 0]

    picked_ok = take(ok)
    new = jnp.where(
        picked_ok, jnp.take_along_axis(scores, parent, 1) + take(cand.log_probs), -jnp.inf
    )
    return parent, take(cand.tokens), jax.tree.map(take, cand.aux), new


def _filtered(z: Float[Array, "B K C"], sampler: Sampler) -> Float[Array, "B K C"]:
    """Top-k, then top-p (smallest set of best candidates holding p of the mass), as -inf cuts."""
    C = z.shape[-1]
    if sampler.top_k and sampler.top_k < C:
        kth = jax.lax.top_k(z, sampler.top_k)[0][..., -1:]
        z = jnp.where(z >= kth, z, -jnp.inf)
    if sampler.top_p < 1:
        desc = -jnp.sort(-z, axis=-1)
        probs = jax.nn.softmax(desc, axis=-1)
        # A candidate stays if the mass before it is below p (so the best one always stays);
        # the cut is the smallest logit kept.
        before = jnp.cumsum(probs, axis=-1) - probs
        kept = jnp.where(before < sampler.top_p, desc, jnp.inf)
        z = jnp.where(z >= kept.min(axis=-1, keepdims=True), z, -jnp.inf)
    return z
