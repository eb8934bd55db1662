"""Hypothesis properties against a brute-force set on small random (N, L, V)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from decoding import Capacity, StaticConstraint, StaticIndex
from decoding.baselines import CpuTrie, PPVExact
from tests.decoding.helpers import brute_top, random_log_probs, run

K = 12  # >= the number of distinct SIDs drawn, hence >= the prefixes at every level


@st.composite
def problems(draw):
    V = draw(st.sampled_from([2, 5]))
    L = draw(st.sampled_from([1, 3]))
    d = draw(st.sampled_from([0, 2]))
    N = draw(st.integers(1, K))
    sids = np.array(
        draw(
            st.lists(
                st.lists(st.integers(0, V - 1), min_size=L, max_size=L), min_size=N, max_size=N
            )
        )
    )
    seed = draw(st.integers(0, 2**16))
    return sids, V, L, d, seed


def _static(sids, V, L, d):
    # One capacity per (V, L, d), so every example reuses one compiled program; d is capped at
    # L because build refuses more dense levels than SID levels.
    d = min(d, L)
    widths = (V,) * (L - d)
    return StaticIndex.build(
        sids, vocab_size=V, dense_levels=d, capacity=Capacity(nodes=64, edges=64, widths=widths)
    )


def _valid_beams(res, b):
    return [
        tuple(t)
        for t, v in zip(
            np.asarray(res.tokens[b]).tolist(), np.asarray(res.valid[b]).tolist(), strict=True
        )
        if v
    ]


@settings(max_examples=25, deadline=None)
@given(problems())
def test_static_is_exact_valid_and_complete(problem):
    sids, V, L, d, seed = problem
    allowed = set(map(tuple, sids.tolist()))
    lp = random_log_probs(np.random.default_rng(seed), 2, L, V)
    res = run(StaticConstraint(_static(sids, V, L, d)), lp, K)
    for b in range(2):
        beams = _valid_beams(res, b)
        assert set(beams) <= allowed, "a beam marked valid is not an allowed SID"
        assert set(beams) == allowed, "an allowed SID was not reachable"
        want = brute_top(allowed, lp[b], K)
        assert beams == [s for _, s in want]
        np.testing.assert_allclose(
            np.asarray(res.scores[b, : len(want)]), [s for s, _ in want], rtol=1e-5
        )
        assert np.isneginf(np.asarray(res.scores[b, len(want) :])).all()


@settings(max_examples=10, deadline=None)
@given(problems())
def test_exact_baselines_return_the_static_valid_sets(problem):
    sids, V, L, d, seed = problem
    lp = random_log_probs(np.random.default_rng(seed), 2, L, V)
    Kb = 4  # narrower than the set: the beams themselves must agree, not only the sets
    want = run(StaticConstraint(_static(sids, V, L, d)), lp, Kb)
    for c in (CpuTrie.build(sids, vocab_size=V), PPVExact.build(sids, vocab_size=V, capacity=K)):
        got = run(c, lp, Kb)
        for b in range(2):
            assert _valid_beams(got, b) == _valid_beams(want, b), type(c).__name__
