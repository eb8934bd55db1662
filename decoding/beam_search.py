"""One beam search over any `Constraint`: prefill outside, L levels inside one traceable program."""

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from decoding.constraints import Candidates, Constraint
from decoding.scoring import LevelScoring

StepFn = Callable[..., tuple[Float[Array, "B K V"], object]]
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


def beam_search(
    step_fn: StepFn,
    initial_log_probs: Float[Array, "B V"],
    cache,
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
    """
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
    loop_from = L if unroll else max(constraint.scan_start, 1)
    for level in range(1, min(loop_from, L)):
        carry = body(level, carry)
    if loop_from < L:
        carry = jax.lax.fori_loop(loop_from, L, body, carry)
    valid = carry.scores > -jnp.inf
    return BeamResult(jnp.where(valid[..., None], carry.history, 0), carry.scores, valid)


def _check_built_for(name: str, part, V: int, L: int) -> None:
    """`part` (a constraint or a scoring) must have the search's vocabulary and level count."""
    if (part.vocab_size, part.num_levels) != (V, L):
        raise ValueError(
            f"{name}: built for V={part.vocab_size}, L={part.num_levels}, "
            f"but initial_log_probs has V={V} and num_levels={L}"
        )


class Carry(NamedTuple):
    """Beam-search state between levels."""

    history: Int[Array, "B K L"]
    scores: Float[Array, "B K"]
    state: object  # the constraint's state pytree, leaves [B, K, ...]
    cache: object  # the step function's cache, leaves [B, K, ...]
    token: Int[Array, "B K"]  # codes chosen at the last level


def first_level(
    initial_log_probs: Float[Array, "B V"],
    cache,
    constraint: Constraint,
    *,
    beam_size: int,
    num_levels: int,
) -> Carry:
    """Level 0: the top-K allowed codes from the prefill's log-probs; the cache tiled to K."""
    B, _ = initial_log_probs.shape
    K = beam_size
    state = jax.tree.map(lambda x: x[:, None], constraint.init_state(B))
    scores = jnp.zeros((B, 1), jnp.float32)
    cand = constraint.candidates(0, state, initial_log_probs[:, None, :].astype(jnp.float32))
    parent, token, aux, scores = _select(scores, cand, K)
    state = constraint.advance(0, _reorder(state, parent), token, aux)
    history = jnp.zeros((B, K, num_levels), jnp.int32).at[:, :, 0].set(token)
    cache = jax.tree.map(lambda x: jnp.repeat(x[:, None], K, axis=1), cache)
    return Carry(history, scores, state, cache, token)


def next_level(step_fn: StepFn, constraint: Constraint, K: int, level, carry: Carry) -> Carry:
    """One level >= 1: model step, constraint candidates, top-K, reorder, advance."""
    log_probs, cache = step_fn(carry.token, level, carry.cache)
    cand = constraint.candidates(level, carry.state, log_probs.astype(jnp.float32))
    parent, token, aux, scores = _select(carry.scores, cand, K)
    history, state, cache = _reorder((carry.history, carry.state, cache), parent)
    state = constraint.advance(level, state, token, aux)
    history = jax.lax.dynamic_update_index_in_dim(history, token, level, axis=2)
    return Carry(history, scores, state, cache, token)


def _select(scores_BK: Float[Array, "B K"], cand: Candidates, K: int):
    """Top-K continuations over all beams' candidates; invalid ones score -inf."""
    B, Kin, C = cand.tokens.shape
    total = scores_BK[..., None] + cand.log_probs
    ok = cand.valid & (scores_BK > -jnp.inf)[..., None]
    # Clamping keeps a valid beam with a zero-probability token ahead of every invalid one.
    key_BX = jnp.where(ok, jnp.maximum(total, _FMIN), -jnp.inf).reshape(B, Kin * C)
    if Kin * C < K:
        key_BX = jnp.pad(key_BX, ((0, 0), (0, K - Kin * C)), constant_values=-jnp.inf)
    top, flat = jax.lax.top_k(key_BX, K)
    flat = jnp.minimum(flat, Kin * C - 1)
    parent = flat // C
    token = jnp.take_along_axis(cand.tokens.reshape(B, Kin * C), flat, axis=1)
    aux = jax.tree.map(lambda a: jnp.take_along_axis(a.reshape(B, Kin * C), flat, axis=1), cand.aux)
    return parent, token, aux, top


def _reorder(tree, parent: Int[Array, "B K"]):
    """Gathers every leaf [B, Kin, ...] along axis 1 by parent beam -> [B, K, ...]."""
    return jax.tree.map(lambda x: jax.vmap(lambda xb, pb: xb[pb])(x, parent), tree)
