"""One beam search over any `Constraint`: prefill outside, L levels inside one traceable program."""

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PyTree

from decoding.constraints import Candidates, Constraint, Level
from decoding.scoring import LevelScoring
from decoding.topk import top_k

# step_fn(codes [B, K], level, cache) -> (log_probs [B, K, V], cache)
StepFn = Callable[..., tuple[Float[Array, "B K V"], PyTree]]
_FMIN = float(jnp.finfo(jnp.float32).min)


@dataclasses.dataclass(frozen=True)
class BeamResult:
    """Beams sorted by score; invalid beams (fewer than K allowed SIDs) have score -inf."""

    tokens: Int[Array, "B K L"]
    scores: Float[Array, "B K"]
    valid: Bool[Array, "B K"]


jax.tree_util.register_dataclass(
    BeamResult, data_fields=["tokens", "scores", "valid"], meta_fields=[]
)


class Carry(NamedTuple):
    """Beam-search state between levels; every leaf's axis 1 is the beam, all in one beam order."""

    history: Int[Array, "B K L"]
    scores: Float[Array, "B K"]
    state: PyTree  # the constraint's state pytree, leaves [B, K, ...]
    cache: PyTree  # the step function's cache, leaves [B, K, ...]
    token: Int[Array, "B K"]  # codes chosen at the last level


def beam_search(
    step_fn: StepFn,
    initial_log_probs: Float[Array, "B V"],
    cache: PyTree,
    constraint: Constraint,
    *,
    beam_size: int,
    num_levels: int,
    unroll: bool = True,
    scoring: LevelScoring | None = None,
) -> BeamResult:
    """Constrained beam search; traceable, so call it inside `jax.jit`.

    `step_fn(tokens [B, K], level, cache) -> (log_probs [B, K, V], cache)` feeds the codes chosen at
    level-1 and is called for level = 1..num_levels-1; cache leaves have leading axis B and are
    tiled to [B, K, ...] and reordered along axis 1 as beams are chosen. With `unroll=False`, the
    levels from `constraint.scan_start` on run in a `lax.fori_loop` (level is then traced).
    Beams are ranked by the summed log-probs, or by `scoring`'s level scores when given.
    `decoding.make_decoder` wraps this with the prefill, jit and output checks.
    """
    carry = search_levels(
        step_fn,
        initial_log_probs,
        cache,
        constraint,
        beam_size=beam_size,
        num_levels=num_levels,
        unroll=unroll,
        scoring=scoring,
    )
    return beams_of(carry)


def search_levels(
    step_fn: StepFn,
    initial_log_probs: Float[Array, "B V"],
    cache: PyTree,
    constraint: Constraint,
    *,
    beam_size: int,
    num_levels: int,
    unroll: bool = True,
    scoring: LevelScoring | None = None,
) -> Carry:
    """`beam_search` up to its last level's carry (whose cache a caller may read back)."""
    _, V = initial_log_probs.shape
    K, L = beam_size, num_levels
    if K < 1 or L < 1:
        raise ValueError(f"beam_size and num_levels must be >= 1, got {K} and {L}")
    _check_built_for("constraint", constraint, V, L)
    if scoring is not None:
        _check_built_for("scoring", scoring, V, L)
        initial_log_probs = scoring.first(initial_log_probs)
        step_fn = scoring.wrap(step_fn)
    carry = first_level(initial_log_probs, cache, constraint, beam_size=K, num_levels=L)
    body = functools.partial(next_level, step_fn, constraint, K)
    # Dense levels need a Python int level (their candidate count V differs from the sparse
    # widths), so only the levels from scan_start on can share one traced loop body.
    loop_from = L if unroll else max(constraint.scan_start, 1)
    for level in range(1, min(loop_from, L)):
        carry = body(level, carry)
    if loop_from < L:
        carry = jax.lax.fori_loop(loop_from, L, body, carry)
    return carry


def beams_of(carry: Carry) -> BeamResult:
    """The final beams; invalid ones get all-zero tokens so no caller reads a stale prefix."""
    valid = carry.scores > -jnp.inf
    return BeamResult(jnp.where(valid[..., None], carry.history, 0), carry.scores, valid)


def _check_built_for(name: str, part, V: int, L: int) -> None:
    """`part` (a constraint or a scoring) must have the search's vocabulary and level count."""
    if (part.vocab_size, part.num_levels) != (V, L):
        raise ValueError(
            f"{name}: built for V={part.vocab_size}, L={part.num_levels}, "
            f"but initial_log_probs has V={V} and num_levels={L}"
        )


def first_level(
    initial_log_probs: Float[Array, "B V"],
    cache: PyTree,
    constraint: Constraint,
    *,
    beam_size: int,
    num_levels: int,
) -> Carry:
    """Level 0: the top-K allowed codes from the prefill's log-probs; the cache tiled to K."""
    B, _ = initial_log_probs.shape
    K = beam_size
    # Level 0 is a search from one root beam per row (Kin = 1, score 0), so `_select` runs
    # unchanged and every chosen beam has parent 0.
    state = jax.tree.map(lambda x: x[:, None], constraint.init_state(B))
    scores = jnp.zeros((B, 1), jnp.float32)
    cand = constraint.candidates(0, state, initial_log_probs[:, None, :].astype(jnp.float32))
    parent, token, aux, scores = _select(scores, cand, K)
    state = constraint.advance(0, _reorder(state, parent), token, aux)
    history = jnp.zeros((B, K, num_levels), jnp.int32).at[:, :, 0].set(token)
    # All K beams share the prefill's history, so the cache is copied, not gathered.
    cache = jax.tree.map(lambda x: jnp.repeat(x[:, None], K, axis=1), cache)
    return Carry(history, scores, state, cache, token)


def next_level(
    step_fn: StepFn, constraint: Constraint, K: int, level: Level, carry: Carry
) -> Carry:
    """One level >= 1: model step, constraint candidates, top-K, reorder, advance."""
    # The step sees beams in last level's order: log_probs[:, k] and cache[:, k] belong to old
    # beam k, which is exactly what `parent` indexes below.
    log_probs, cache = step_fn(carry.token, level, carry.cache)
    cand = constraint.candidates(level, carry.state, log_probs.astype(jnp.float32))
    parent, token, aux, scores = _select(carry.scores, cand, K)
    # Every per-beam leaf follows its parent, the cache included (the step already wrote the fed
    # token into it): a cache left in the old order would score beam k's children with the model
    # state of another prefix.
    history, state, cache = _reorder((carry.history, carry.state, cache), parent)
    state = constraint.advance(level, state, token, aux)
    history = jax.lax.dynamic_update_index_in_dim(history, token, level, axis=2)
    return Carry(history, scores, state, cache, token)


def _select(scores_BK: Float[Array, "B K"], cand: Candidates, K: int):
    """Top-K continuations over all beams' candidates; invalid ones score -inf."""
    B, Kin, C = cand.tokens.shape
    total = scores_BK[..., None] + cand.log_probs
    # A dead parent (-inf) carries the state of an invalid or padding pick, whose candidates
    # may look valid; masking them keeps dead beams dead.
    ok = cand.valid & (scores_BK > -jnp.inf)[..., None]
    # Clamping keeps a valid beam with a zero-probability token ahead of every invalid one.
    key_BX = jnp.where(ok, jnp.maximum(total, _FMIN), -jnp.inf).reshape(B, Kin * C)
    if Kin * C < K:
        # Fewer candidates than beams (small V or width at level 0): pad so top_k can return K.
        key_BX = jnp.pad(key_BX, ((0, 0), (0, K - Kin * C)), constant_values=-jnp.inf)
    # Flat index x = parent * C + slot (row-major [Kin, C]); top_k breaks ties by lower x, i.e.
    # by parent rank, then by slot, so the result is deterministic.
    top, flat = top_k(key_BX, K)
    # Padding picks (score -inf, so marked invalid) point at a real slot: gathers stay in range.
    flat = jnp.minimum(flat, Kin * C - 1)
    parent = flat // C
    # The slot is not the token (a sparse slot is an edge), so tokens and aux are gathered by x.
    token = _take_slots(cand.tokens.reshape(B, Kin * C), flat)
    aux = jax.tree.map(lambda a: _take_slots(a.reshape(B, Kin * C), flat), cand.aux)
    return parent, token, aux, top


def _take_slots(a: Array, flat: Int[Array, "B K"]) -> Array:
    """a [B, Kin * C] at flat slots x = parent * C + slot -> [B, K]."""
    # 0 <= flat < Kin * C (top_k indices, capped in `_select`), so a plain gather (mode="clip",
    # no negative wrap) reads the same entries without the default mode's index selects.
    return jnp.take_along_axis(a, flat, axis=1, mode="clip", wrap_negative_indices=False)


def _reorder(tree, parent: Int[Array, "B K"]):
    """Gathers every leaf [B, Kin, ...] along axis 1 by parent beam -> [B, K, ...]."""
    # vmap over B: each row's parents index its own Kin beams (never another row's).
    return jax.tree.map(lambda x: jax.vmap(_take_beams)(x, parent), tree)


def _take_beams(x: Array, parent: Int[Array, " K"]) -> Array:
    """x [Kin, ...] at rows parent -> [K, ...]."""
    # Parents are flat // C with 0 <= flat < Kin * C (see `_select`), so in [0, Kin): a plain
    # (clip) gather, without the negative-index wrap that `x[parent]` adds.
    return jnp.take(x, parent, axis=0, mode="clip")
