"""Per-row prefix priors: the trie table, the conditional chain, and beam scores vs brute force."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from decoding import (
    LevelScoring,
    PrefixPrior,
    PrefixTable,
    StaticConstraint,
    StaticIndex,
    Unconstrained,
    beam_search,
)
from tests.decoding.helpers import random_log_probs, table_step


def _search(constraint, lp_BLV, K, scoring=None, unroll=True):
    B, L, V = lp_BLV.shape
    f = jax.jit(
        functools.partial(beam_search, table_step, beam_size=K, num_levels=L, unroll=unroll)
    )
    return f(jnp.asarray(lp_BLV[:, 0]), {"lp": jnp.asarray(lp_BLV)}, constraint, scoring=scoring)


def _distinct_sids(rng, N, L, V):
    sids = np.unique(rng.integers(0, V, (N, L)), axis=0)
    return sids[rng.permutation(len(sids))]


def test_table_numbers_every_prefix_once_and_links_children():
    sids = np.array([[0, 1], [0, 2], [3, 1]])
    t = PrefixTable.build(sids, vocab_size=4)
    # root, prefixes (0), (3), then (0,1), (0,2), (3,1)
    assert t.num_nodes == 6
    np.testing.assert_array_equal(t.parent, [-1, 0, 0, 1, 1, 2])
    np.testing.assert_array_equal(t.item_nodes, [[1, 3], [1, 4], [2, 5]])
    assert t.child[0].tolist() == [1, -1, -1, 2]
    assert t.child[1].tolist() == [-1, 3, 4, -1]
    assert t.child[2].tolist() == [-1, 5, -1, -1]
    assert (t.child[3:] == -1).all()


def test_conditionals_chain_to_the_normalised_item_prior():
    rng = np.random.default_rng(1)
    sids = _distinct_sids(rng, 40, 3, 4)
    t = PrefixTable.build(sids, vocab_size=4)
    logits = rng.normal(size=(5, len(sids))) * 3
    cond = t.conditional_log_prior(logits)
    assert cond.shape == (5, t.num_nodes) and (cond[:, 0] == 0).all()
    chained = cond[:, t.item_nodes].sum(axis=2)  # [B, N]
    want = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(chained, want, rtol=1e-5, atol=1e-5)
    # Siblings under each node form a distribution.
    p = np.exp(cond)
    for node in range(t.num_nodes):
        kids = t.child[node][t.child[node] >= 0]
        if len(kids):
            np.testing.assert_allclose(p[:, kids].sum(axis=1), 1.0, rtol=1e-5)


def test_an_underflowing_node_gets_the_floor_not_minus_infinity():
    t = PrefixTable.build(np.array([[0, 0], [1, 0]]), vocab_size=2)
    cond = t.conditional_log_prior(np.array([[0.0, -1e6]]), floor=-50.0)
    assert np.isfinite(cond).all() and cond.min() == -50.0


@pytest.mark.parametrize("unroll", [True, False])
@pytest.mark.parametrize("inner", ["static", "unconstrained"])
def test_beam_scores_add_the_weighted_item_prior_exactly(inner, unroll):
    rng = np.random.default_rng(2)
    V, L, B = 5, 3, 3
    sids = _distinct_sids(rng, 30, L, V)
    t = PrefixTable.build(sids, vocab_size=V)
    lp = random_log_probs(rng, B, L, V)
    logits = rng.normal(size=(B, len(sids))) * 2
    weight = 0.7
    base = (
        StaticConstraint(StaticIndex.build(sids, vocab_size=V, dense_levels=1))
        if inner == "static"
        else Unconstrained(V, L)
    )
    c = PrefixPrior.build(base, t, t.conditional_log_prior(logits), weight)
    w = np.array([1.0, 0.5, 0.25], np.float32)
    scoring = LevelScoring.build(w, np.zeros(V))
    K = len(sids)  # at least every prefix at every level: exact
    res = _search(c, lp, K, scoring, unroll)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    for row in range(B):
        model = sum(w[j] * lp[row, j, sids[:, j]] for j in range(L))
        total = model + weight * log_p[row]
        order = np.argsort(-total, kind="stable")
        got = [tuple(s) for s in np.asarray(res.tokens[row]).tolist()]
        assert got == [tuple(s) for s in sids[order].tolist()]  # only the set's SIDs, best first
        np.testing.assert_allclose(res.scores[row], total[order], rtol=1e-4, atol=1e-4)


def test_weight_zero_leaves_the_inner_search_unchanged():
    rng = np.random.default_rng(3)
    V, L, B, K = 6, 3, 4, 7
    sids = _distinct_sids(rng, 50, L, V)
    t = PrefixTable.build(sids, vocab_size=V)
    lp = random_log_probs(rng, B, L, V)
    static = StaticConstraint(StaticIndex.build(sids, vocab_size=V))
    bias = t.conditional_log_prior(rng.normal(size=(B, len(sids))))
    a = _search(static, lp, K)
    b = _search(PrefixPrior.build(static, t, bias, 0.0), lp, K)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_allclose(np.asarray(a.scores), np.asarray(b.scores))


def test_a_strong_prior_picks_the_prior_best_item_whatever_the_model():
    rng = np.random.default_rng(4)
    V, L, B = 8, 3, 6
    sids = _distinct_sids(rng, 60, L, V)
    t = PrefixTable.build(sids, vocab_size=V)
    logits = rng.normal(size=(B, len(sids))) * 5
    c = PrefixPrior.build(Unconstrained(V, L), t, t.conditional_log_prior(logits), 1e3)
    res = _search(c, random_log_probs(rng, B, L, V), 4)
    np.testing.assert_array_equal(np.asarray(res.tokens[:, 0]), sids[logits.argmax(axis=1)])


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="distinct"):
        PrefixTable.build(np.array([[0, 1], [0, 1]]), vocab_size=2)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        PrefixTable.build(np.array([[0, 2]]), vocab_size=2)
    t = PrefixTable.build(np.array([[0, 1], [1, 1]]), vocab_size=2)
    with pytest.raises(ValueError, match="expected 2 items"):
        t.conditional_log_prior(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="bias: expected"):
        PrefixPrior.build(Unconstrained(2, 2), t, np.zeros((1, 2)), 1.0)
    with pytest.raises(ValueError, match="built for V=2"):
        PrefixPrior.build(Unconstrained(3, 2), t, np.zeros((1, t.num_nodes)), 1.0)
