"""Beam scores: level weights and prefix biases against brute force, the prior, bad shapes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from decoding import (
    LevelScoring,
    StaticConstraint,
    StaticIndex,
    beam_search,
    prefix_log_prior,
    prior_correction,
)
from tests.decoding.helpers import random_log_probs, table_step


def _run(constraint, lp_BLV, K, scoring, unroll=True):
    B, L, V = lp_BLV.shape
    f = jax.jit(
        functools.partial(beam_search, table_step, beam_size=K, num_levels=L, unroll=unroll)
    )
    return f(jnp.asarray(lp_BLV[:, 0]), {"lp": jnp.asarray(lp_BLV)}, constraint, scoring=scoring)


def _brute(allowed, lp_LV, w, b0, b):
    def score(s):
        total = w[0] * lp_LV[0, s[0]] + b0[s[0]]
        for j in range(1, len(s)):
            total += w[j] * lp_LV[j, s[j]] + b[j - 1, s[j - 1], s[j]]
        return float(total)

    return sorted(((score(s), s) for s in allowed), key=lambda x: -x[0])


@pytest.mark.parametrize("unroll", [True, False])
def test_weighted_and_biased_scores_match_brute_force(unroll):
    rng = np.random.default_rng(0)
    V, L, N, B = 5, 3, 12, 3
    sids = rng.integers(0, V, (N, L))
    allowed = sorted(set(map(tuple, sids.tolist())))
    K = len(allowed)  # covers every prefix: beam search is exact
    lp = random_log_probs(rng, B, L, V)
    w = np.array([1.0, 0.5, 0.2], np.float32)
    b0 = rng.normal(size=V).astype(np.float32)
    b = rng.normal(size=(L - 1, V, V)).astype(np.float32)
    res = _run(
        StaticConstraint(StaticIndex.build(sids, vocab_size=V)),
        lp,
        K,
        LevelScoring.build(w, b0, b),
        unroll,
    )
    for row in range(B):
        want = _brute(allowed, lp[row], w, b0, b)
        assert [tuple(t) for t in np.asarray(res.tokens[row]).tolist()] == [s for _, s in want]
        np.testing.assert_allclose(res.scores[row], [s for s, _ in want], rtol=1e-5, atol=1e-5)


def test_identity_scoring_equals_no_scoring_and_weights_change_the_ranking():
    # Level 0 prefers code 0 a little, level 1 prefers (1, 1) a lot: the joint picks (1, 1);
    # with level 1 weighted 0, level 0 alone decides and (0, 0) wins.
    lp = np.log(np.array([[[0.55, 0.45], [0.02, 0.98]]], np.float32))  # B=1, L=2, V=2
    lp_B = np.repeat(lp, 1, axis=0)
    idx = StaticIndex.build(np.array([[0, 0], [1, 1]]), vocab_size=2)
    plain = _run(StaticConstraint(idx), lp_B, 2, None)
    same = _run(StaticConstraint(idx), lp_B, 2, LevelScoring.identity(2, 2))
    np.testing.assert_array_equal(plain.tokens, same.tokens)
    np.testing.assert_allclose(plain.scores, same.scores)
    assert np.asarray(plain.tokens[0, 0]).tolist() == [1, 1]
    first_only = _run(StaticConstraint(idx), lp_B, 2, LevelScoring.build([1.0, 0.0], [0.0, 0.0]))
    assert np.asarray(first_only.tokens[0, 0]).tolist() == [0, 0]


def test_prefix_log_prior_counts_with_add_one_smoothing():
    V = 3
    events = np.array([[0, 1, 2], [0, 1, 0], [0, 2, 0], [2, 0, 1]])
    first, bias = prefix_log_prior(events, V, levels=2)
    np.testing.assert_allclose(np.exp(first), np.array([4, 1, 2]) / 7, rtol=1e-6)
    # p(c1 | c0 = 0): counts [0, 2, 1] + 1 over 3 + 3
    np.testing.assert_allclose(np.exp(bias[0, 0]), np.array([1, 3, 2]) / 6, rtol=1e-6)
    np.testing.assert_allclose(np.exp(bias[0]).sum(1), 1.0, rtol=1e-6)
    assert not bias[1].any(), "levels beyond `levels` carry no prior"


def test_prior_correction_demotes_popular_prefixes():
    # Two allowed items with equal model scores; the training events all went to prefix 0,
    # so the correction must rank item (1, 0) first.
    V, L = 2, 2
    events = np.array([[0, 0]] * 9 + [[1, 0]])
    scoring = prior_correction(events, V, prior_weight=1.0)
    lp = np.log(np.full((1, L, V), 0.5, np.float32))
    idx = StaticIndex.build(np.array([[0, 0], [1, 0]]), vocab_size=V)
    res = _run(StaticConstraint(idx), lp, 2, scoring)
    assert np.asarray(res.tokens[0, 0]).tolist() == [1, 0]
    plain = prior_correction(events, V, prior_weight=0.0, level_weights=(1.0, 0.5))
    np.testing.assert_array_equal(plain.first_bias, 0.0)
    np.testing.assert_allclose(plain.weights, [1.0, 0.5])


def test_bad_shapes_are_clear_errors():
    with pytest.raises(ValueError, match="bias must be"):
        LevelScoring.build([1.0, 1.0], np.zeros(3), np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="finite"):
        LevelScoring.build([1.0, np.nan], np.zeros(3))
    with pytest.raises(ValueError, match="expected 3 values"):
        prior_correction(np.zeros((4, 3), int), 2, prior_weight=0.5, level_weights=(1.0, 1.0))
    with pytest.raises(ValueError, match="levels must be"):
        prefix_log_prior(np.zeros((4, 2), int), 2, levels=3)
    lp = random_log_probs(np.random.default_rng(0), 1, 2, 3)
    idx = StaticIndex.build(np.array([[0, 1]]), vocab_size=3)
    with pytest.raises(ValueError, match="scoring: built for"):
        _run(StaticConstraint(idx), lp, 1, LevelScoring.identity(3, 3))
