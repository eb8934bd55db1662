"""Metrics: SID lookup, Recall/NDCG by hand, the random baseline against its expectation."""

import numpy as np
import pytest

from experiments.evaluation import metrics


def test_sid_lookup_finds_items_and_rejects_unknown():
    sids = np.array([[0, 1, 2], [3, 0, 1], [0, 1, 3]])
    lookup = metrics.SIDLookup(sids, vocab_size=4)
    got = lookup(np.array([[[3, 0, 1], [0, 1, 3]], [[1, 1, 1], [0, 1, 2]]]))
    np.testing.assert_array_equal(got, [[1, 2], [-1, 0]])
    assert lookup(np.array([[9, 0, 0]]))[0] == -1


def test_sid_lookup_rejects_duplicates():
    with pytest.raises(ValueError, match="share a SID"):
        metrics.SIDLookup(np.array([[0, 1], [0, 1]]), vocab_size=2)


def test_ranking_metrics_hand_computed():
    predicted = np.array([[5, 7, 9], [1, 2, 3], [-1, -1, -1]])
    targets = np.array([7, 4, -1])
    m = metrics.ranking_metrics(predicted, targets, ks=(1, 3), ndcg_ks=(3,))
    assert m["recall@1"] == 0.0
    assert m["recall@3"] == pytest.approx(1 / 3)
    # Hit at rank 2 for user 0: 1/log2(3); padded -1 never matches a -1 target.
    assert m["ndcg@3"] == pytest.approx((1 / np.log2(3)) / 3)


def test_random_sample_agrees_with_expectation():
    allowed = np.arange(100, 140)
    targets = np.random.default_rng(1).choice(allowed, size=20000)
    pred = metrics.sample_random_predictions(allowed, len(targets), k=10, seed=0)
    assert all(len(set(row)) == 10 for row in pred[:50]), "guesses for one user must be distinct"
    got = metrics.ranking_metrics(pred, targets)
    want = metrics.expected_random_metrics(len(allowed))
    for key, value in want.items():
        se = np.sqrt(value * (1 - value) / len(targets)) + 1e-3
        assert abs(got[key] - value) < 5 * se, (key, got[key], value)


def test_random_with_fewer_allowed_than_k_pads_invalid():
    pred = metrics.sample_random_predictions(np.array([3, 4]), 5, k=4, seed=0)
    assert (pred[:, 2:] == -1).all() and set(pred[:, :2].ravel()) == {3, 4}
    assert metrics.expected_random_metrics(2)["recall@1"] == 0.5


def test_valid_rates():
    pred = np.array([[0, 1, -1], [2, -1, -1]])
    valid = np.array([[True, True, True], [True, True, False]])
    allowed = np.array([False, True, True])
    r = metrics.valid_rates(pred, valid, allowed)
    assert r["valid_rate"] == pytest.approx(3 / 5)
    assert r["allowed_rate"] == pytest.approx(2 / 5)


def test_cutoff_beyond_beam_width_counts_no_misses():
    m = metrics.ranking_metrics(np.array([[1, 2], [3, 4]]), np.array([2, 9]), ks=(1, 5))
    assert m["recall@5"] == 0.5 and m["recall@1"] == 0.0


def test_drop_seen_removes_history_items_and_moves_the_rest_up():
    from data.types import Histories

    h = Histories.from_lists([[3, 5], [1], [], [0, 2, 4, 6]])
    pred = np.array([[5, 7, 3, 9], [2, 1, -1, 4], [0, 1, 2, 3], [6, 4, 2, 0]])
    np.testing.assert_array_equal(
        metrics.drop_seen(pred, h),
        [[7, 9, -1, -1], [2, 4, -1, -1], [0, 1, 2, 3], [-1, -1, -1, -1]],
    )
    np.testing.assert_array_equal(metrics.drop_seen(pred, h, 2), [[7, 9], [2, 4], [0, 1], [-1, -1]])
    assert metrics.drop_seen(pred, h, 6).shape == (4, 6)
    # A hit behind a history item moves up: Recall@1 0 -> 1 for user 0 (target 7).
    targets = np.array([7, 4, 3, 8])
    assert metrics.ranking_metrics(pred, targets, ks=(1,))["recall@1"] == 0.0
    assert metrics.ranking_metrics(metrics.drop_seen(pred, h), targets, ks=(1,))["recall@1"] == 0.25
    with pytest.raises(ValueError, match="does not align"):
        metrics.drop_seen(pred[:3], h)


def test_drop_seen_of_a_wide_ranking_is_the_masked_ranking():
    """Top 10 + len(history) with the history dropped = the top 10 of the scores with the history
    masked out (what SASRec's history-excluded numbers rely on)."""
    from data.types import Histories

    rng = np.random.default_rng(0)
    n = 40
    lists = [list(rng.choice(n, rng.integers(0, 12), replace=False)) for _ in range(30)]
    h = Histories.from_lists(lists)
    scores = rng.normal(size=(30, n))
    depth = metrics.unseen_depth(h, 10)
    assert depth == 10 + max(map(len, lists))
    wide = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    masked = scores.copy()
    for u, items in enumerate(lists):
        masked[u, items] = -np.inf
    want = np.argsort(-masked, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(metrics.drop_seen(wide, h, 10), want)
