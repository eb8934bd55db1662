"""Baselines against STATIC and brute force: same valid sets, same beams where exact."""

import numpy as np
import pytest

from decoding import StaticConstraint, StaticIndex
from decoding.baselines import CpuTrie, HashBitmap, PPVApprox, PPVExact, index_nbytes
from tests.decoding.helpers import random_log_probs, run


def _beams(res):
    tokens, valid = np.asarray(res.tokens).tolist(), np.asarray(res.valid)
    rows = zip(tokens, valid, strict=True)
    return [[tuple(t) for t, v in zip(tb, vb, strict=True) if v] for tb, vb in rows]


@pytest.fixture
def small():
    rng = np.random.default_rng(3)
    V, L = 6, 4
    sids = rng.integers(0, V, (25, L))
    return sids, V, random_log_probs(rng, 3, L, V)


@pytest.mark.parametrize(
    ("make", "unroll"),
    [
        (lambda s, V: CpuTrie.build(s, vocab_size=V), True),
        (lambda s, V: PPVExact.build(s, vocab_size=V), False),
        (lambda s, V: HashBitmap.build(s, vocab_size=V, bits_per_prefix=4096), True),
    ],
    ids=["cpu_trie", "ppv_exact_scan", "hash_bitmap_sparse"],
)
def test_exact_baselines_match_static(small, make, unroll):
    sids, V, lp = small
    K = 7
    want = run(StaticConstraint(StaticIndex.build(sids, vocab_size=V)), lp, K)
    got = run(make(sids, V), lp, K, unroll=unroll)
    assert _beams(got) == _beams(want)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5)


def test_ppv_approx_beams_are_allowed_and_match_when_k_is_v(small):
    sids, V, lp = small
    allowed = set(map(tuple, sids.tolist()))
    approx = run(PPVApprox(sids, vocab_size=V, top_k=2), lp, 5)
    assert all(b in allowed for row in _beams(approx) for b in row)
    full = run(PPVApprox(sids, vocab_size=V, top_k=V), lp, 5)
    want = run(StaticConstraint(StaticIndex.build(sids, vocab_size=V)), lp, 5)
    assert _beams(full) == _beams(want)


def test_hash_bitmap_false_positives_are_possible_but_no_false_negatives():
    rng = np.random.default_rng(0)
    V, L = 8, 3
    sids = rng.integers(0, V, (60, L))
    allowed = set(map(tuple, sids.tolist()))
    lp = random_log_probs(rng, 4, L, V)
    tiny = run(HashBitmap.build(sids, vocab_size=V, bits_per_prefix=1), lp, 30)
    beams = [b for row in _beams(tiny) for b in row]
    assert len(beams) == 4 * 30  # a crowded bitmap claims many beams valid
    assert any(b not in allowed for b in beams)
    exact = run(StaticConstraint(StaticIndex.build(sids, vocab_size=V)), lp, 30)
    for row_h, row_s in zip(_beams(tiny), _beams(exact), strict=True):
        assert set(row_s) - set(row_h) == set() or len(row_h) == 30


def test_index_nbytes_counts_arrays():
    sids = np.array([[0, 1], [1, 0]])
    assert index_nbytes(PPVExact.build(sids, vocab_size=2)) == 2 * 2 * 4 + 4
    assert index_nbytes(CpuTrie.build(sids, vocab_size=2)) > 0
