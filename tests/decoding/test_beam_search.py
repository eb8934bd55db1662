"""Beam search over STATIC and Unconstrained: exact top-K, validity flags, caches, jit modes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from decoding import StaticConstraint, StaticIndex, Unconstrained, beam_search
from tests.decoding.helpers import (
    all_sids,
    brute_top,
    distinct_sids,
    exhaustive_top,
    random_log_probs,
    run,
    table_step,
)


@pytest.mark.parametrize("dense_levels", [0, 1, 2, 3])
@pytest.mark.parametrize("unroll", [True, False])
def test_static_returns_exact_top_k_when_beam_covers_all_prefixes(dense_levels, unroll):
    rng = np.random.default_rng(0)
    V, L, N, B = 4, 3, 6, 2
    sids = rng.integers(0, V, (N, L))
    allowed = set(map(tuple, sids.tolist()))
    K = len(allowed)  # >= prefixes at every level, so beam search is exact
    lp = random_log_probs(rng, B, L, V)
    idx = StaticIndex.build(sids, vocab_size=V, dense_levels=dense_levels)
    res = run(StaticConstraint(idx), lp, K, unroll=unroll)
    for b in range(B):
        want = brute_top(allowed, lp[b], K)
        got_tokens = [tuple(t) for t in np.asarray(res.tokens[b]).tolist()]
        assert got_tokens == [s for _, s in want], f"batch row {b}: beams differ from brute force"
        np.testing.assert_allclose(res.scores[b], [s for s, _ in want], rtol=1e-5)
        assert bool(res.valid[b].all())


def test_unconstrained_is_exact_top_k_over_everything():
    rng = np.random.default_rng(1)
    V, L, B = 3, 2, 2
    lp = random_log_probs(rng, B, L, V)
    K = V**L
    res = run(Unconstrained(V, L), lp, K)
    for b in range(B):
        want = brute_top(all_sids(V, L).tolist(), lp[b], K)
        assert [tuple(t) for t in np.asarray(res.tokens[b]).tolist()] == [s for _, s in want]
    assert res.tokens.shape == (B, K, L) and res.tokens.dtype == jnp.int32
    assert res.scores.dtype == jnp.float32 and res.valid.dtype == jnp.bool_


def test_fewer_allowed_than_beams_marks_extra_beams_invalid():
    rng = np.random.default_rng(2)
    sids = np.array([[1, 2, 3], [1, 2, 0], [3, 3, 3]])
    lp = random_log_probs(rng, 2, 3, 4)
    res = run(StaticConstraint(StaticIndex.build(sids, vocab_size=4)), lp, 5)
    assert np.asarray(res.valid).sum(axis=1).tolist() == [3, 3]
    assert np.all(np.isneginf(np.asarray(res.scores)[:, 3:]))
    assert not np.asarray(res.valid)[:, 3:].any()
    assert np.isfinite(np.asarray(res.scores)[:, :3]).all()


def test_n1_v2_l1_and_single_item():
    lp = np.log(np.array([[[0.3, 0.7]]], np.float32))  # B=1, L=1, V=2
    res = run(StaticConstraint(StaticIndex.build(np.array([[0]]), vocab_size=2)), lp, 3)
    assert np.asarray(res.tokens[0, :, 0]).tolist()[0] == 0
    assert np.asarray(res.valid[0]).tolist() == [True, False, False]
    np.testing.assert_allclose(res.scores[0, 0], np.log(0.3), rtol=1e-6)


def test_cache_is_tiled_and_reordered_with_the_beams():
    """A step function that echoes the cache must see each beam's own prefix."""
    V, L, K, B = 3, 4, 4, 2

    def step(tokens, level, cache):
        hist = cache["hist"].at[:, :, level - 1].set(tokens)
        # Prefers continuing with the previous token +1: the cache must follow its beam.
        lp = jax.nn.log_softmax(
            5.0 * jax.nn.one_hot((tokens + 1) % V, V) + cache["bias"][:, :, None], axis=-1
        )
        return lp, {"hist": hist, "bias": cache["bias"]}

    init = jnp.log(jnp.full((B, V), 1.0 / V))
    cache = {"hist": jnp.full((B, L), -1, jnp.int32), "bias": jnp.zeros((B,))}
    f = jax.jit(functools.partial(beam_search, step, beam_size=K, num_levels=L))
    res = f(init, cache, Unconstrained(V, L))
    best = np.asarray(res.tokens[:, 0])
    assert ((best[:, 1:] - best[:, :-1]) % V == 1).all()


_P = 97  # hash buckets of the prefix model below


def _prefix_hash_step(table, tokens, level, cache):
    """A model whose level-l distribution depends on the whole prefix only through its cache.

    The cache is a hash of the beam's prefix [B, K]; a cache left with another beam scores the
    children with that beam's prefix.
    """
    h = (cache * 31 + tokens + 1) % _P
    return jnp.take(table, level, axis=0)[h], h


@pytest.mark.parametrize("unroll", [True, False])
@pytest.mark.parametrize("kind", ["static", "unconstrained"])
def test_a_step_reading_its_cache_gets_the_exact_top_k(kind, unroll):
    rng = np.random.default_rng(7)
    V, L = 3, 4
    if kind == "static":
        sids = distinct_sids(rng, 12, V, L)
        constraint = StaticConstraint(StaticIndex.build(sids, vocab_size=V, dense_levels=1))
    else:
        sids = all_sids(V, L)
        constraint = Unconstrained(V, L)
    K = len(sids)  # >= the allowed prefixes at every level, so beam search is exact
    table = jnp.asarray(random_log_probs(rng, L, _P, V))  # [L, P, V]
    cache = jnp.array([5, 41], jnp.int32)  # e.g. a hash of each row's history
    init = table[0][cache]
    step = functools.partial(_prefix_hash_step, table)
    search = jax.jit(functools.partial(beam_search, step, beam_size=K, num_levels=L, unroll=unroll))
    res = search(init, cache, constraint)
    want_sids, want_scores = exhaustive_top(step, init, cache, sids, K)
    assert bool(res.valid.all())
    np.testing.assert_array_equal(
        res.tokens,
        want_sids,
        err_msg="beams differ from exhaustive scoring: is the cache reordered with its beams?",
    )
    np.testing.assert_allclose(res.scores, want_scores, rtol=1e-6)


def test_mismatched_constraint_is_a_clear_error():
    lp = np.zeros((1, 2, 4), np.float32)
    with pytest.raises(ValueError, match="constraint"):
        run(Unconstrained(5, 2), lp, 2)


@pytest.mark.slow
def test_eager_and_jit_agree():
    rng = np.random.default_rng(5)
    V, L, K = 4, 2, 3
    sids = rng.integers(0, V, (6, L))
    lp = random_log_probs(rng, 2, L, V)
    c = StaticConstraint(StaticIndex.build(sids, vocab_size=V))
    eager = beam_search(
        table_step, jnp.asarray(lp[:, 0]), {"lp": jnp.asarray(lp)}, c, beam_size=K, num_levels=L
    )
    jitted = run(c, lp, K)
    np.testing.assert_array_equal(eager.tokens, jitted.tokens)
    np.testing.assert_allclose(eager.scores, jitted.scores, rtol=1e-6)
