"""V a multiple of 32, as in every real preset: the dense masks are read a whole word at a time."""

import jax.numpy as jnp
import numpy as np
import pytest

from decoding import StaticConstraint, StaticIndex, contains
from tests.decoding.helpers import brute_top, distinct_sids, random_log_probs, run

L = 3
N = 16  # distinct SIDs; also K, so that the beam holds every allowed prefix (exact search)


def _problem(V, dense_levels):
    rng = np.random.default_rng(V + dense_levels)
    sids = distinct_sids(rng, N, V, L)
    return rng, sids, StaticIndex.build(sids, vocab_size=V, dense_levels=dense_levels)


@pytest.mark.parametrize("V", [32, 64])
@pytest.mark.parametrize("dense_levels", [1, 2])
def test_dense_candidates_are_exactly_the_allowed_children(V, dense_levels):
    _, sids, idx = _problem(V, dense_levels)
    c = StaticConstraint(idx)
    root = jnp.zeros((1, 1), jnp.int32)
    got = np.asarray(c.candidates(0, root, jnp.zeros((1, 1, V))).valid[0, 0])
    want = np.zeros(V, bool)
    want[sids[:, 0]] = True
    np.testing.assert_array_equal(got, want, err_msg="level 0: mask bits read in the wrong order")
    if dense_levels == 2:
        # One beam per first code c0; at level 1 a beam's state is its prefix code, i.e. c0.
        state = jnp.arange(V, dtype=jnp.int32)[None]
        got = np.asarray(c.candidates(1, state, jnp.zeros((1, V, V))).valid[0])
        want = np.zeros((V, V), bool)
        want[sids[:, 0], sids[:, 1]] = True
        np.testing.assert_array_equal(got, want, err_msg="level 1: wrong children per prefix")


@pytest.mark.parametrize("V", [32, 64])
@pytest.mark.parametrize("dense_levels", [1, 2])
def test_beam_search_is_exact_top_k(V, dense_levels):
    rng, sids, idx = _problem(V, dense_levels)
    allowed = set(map(tuple, sids.tolist()))
    lp = random_log_probs(rng, 2, L, V)
    res = run(StaticConstraint(idx), lp, N)
    assert bool(res.valid.all()), "fewer beams than allowed SIDs: some allowed child was masked"
    for b in range(2):
        got = [tuple(t) for t in np.asarray(res.tokens[b]).tolist()]
        assert set(got) == allowed, f"row {b}: beams are not the allowed set"
        want = brute_top(allowed, lp[b], N)
        assert got == [s for _, s in want], f"row {b}: beams differ from brute force"
        np.testing.assert_allclose(res.scores[b], [s for s, _ in want], rtol=1e-5)


@pytest.mark.parametrize("V", [32, 64])
@pytest.mark.parametrize("dense_levels", [1, 2])
def test_contains_matches_a_python_set(V, dense_levels):
    rng, sids, idx = _problem(V, dense_levels)
    # Near misses (one code changed) as well as random SIDs and the members themselves.
    near = sids.copy()
    near[:, -1] = (near[:, -1] + 1) % V
    queries = np.concatenate([sids, near, rng.integers(0, V, (32, L))])
    allowed = set(map(tuple, sids.tolist()))
    want = [tuple(q) in allowed for q in queries.tolist()]
    assert np.asarray(contains(idx, queries)).tolist() == want
