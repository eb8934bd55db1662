"""The tokenizer's collaborative part (rqvae/cooc.py): pair counts and PPMI against brute force,
no evaluation target read, and cold items' vectors predicted from their text."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.types import Histories
from rqvae import load_sids
from rqvae.config import RQVAEConfig, identity_fields
from rqvae.cooc import (
    cooccurrence_counts,
    cooccurrence_vectors,
    ppmi,
    training_sequences,
    with_cooccurrence,
)
from rqvae.pipeline import tokenize_catalog
from tests.rqvae.test_pipeline import CFG, _catalog


def test_training_sequences_drop_the_last_two_items_and_excluded_items():
    h = Histories.from_lists([[0, 1, 2, 3, 4], [5, 6], [7, 1, 8, 9]])
    excluded = np.zeros(10, bool)
    excluded[1] = True
    seqs = training_sequences(h, excluded)
    assert [list(seqs[u]) for u in range(3)] == [[0, 2], [], [7]]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 7), min_size=0, max_size=8), min_size=1, max_size=6),
    st.integers(1, 4),
)
def test_counts_equal_brute_force(lists, window):
    h = Histories.from_lists(lists)
    got = cooccurrence_counts(h, 8, window).toarray()
    want = np.zeros((8, 8))
    for seq in lists:
        for i, a in enumerate(seq):
            for j in range(i + 1, min(i + window + 1, len(seq))):
                want[a, seq[j]] += 1
                want[seq[j], a] += 1
    np.fill_diagonal(want, 0)
    np.testing.assert_array_equal(got, want)


def test_ppmi_by_hand():
    counts = cooccurrence_counts(Histories.from_lists([[0, 1], [0, 1], [0, 2]]), 3, 1)
    # c01 = 2 (both ways), c02 = 1; marginals 0: 3, 1: 2, 2: 1; total 6.
    got = ppmi(counts).toarray()
    assert got[0, 1] == pytest.approx(math.log(2 * 6 / (3 * 2)))
    assert got[0, 2] == pytest.approx(math.log(1 * 6 / (3 * 1)))
    assert got[1, 2] == 0.0 and got[0, 0] == 0.0


def _random_data(seed=0, n=30, users=60):
    rng = np.random.default_rng(seed)
    lists = [list(rng.choice(n - 3, rng.integers(3, 9), replace=False)) for _ in range(users)]
    text = rng.normal(size=(n, 6)).astype(np.float32)
    excluded = np.zeros(n, bool)
    excluded[-3:] = True  # the "cold" items: in no history, so predicted from text
    return lists, text, excluded


def test_vectors_read_the_given_histories_and_predict_cold_items_from_text():
    lists, text, excluded = _random_data()
    cf, has = cooccurrence_vectors(
        Histories.from_lists(lists), text, excluded, dim=4, window=2, seed=0
    )
    assert cf.shape == (30, 4) and not has[-3:].any() and has[:5].any()
    np.testing.assert_allclose(np.linalg.norm(cf, axis=1), 1.0, atol=1e-5)
    # An excluded item in a history is not read: it gains no vector of its own.
    with_cold = [seq + [29] for seq in lists]
    cf2, has2 = cooccurrence_vectors(
        Histories.from_lists(with_cold), text, excluded, dim=4, window=2, seed=0
    )
    np.testing.assert_allclose(cf2, cf, atol=1e-5)
    assert not has2[-1]
    # A cold item's vector follows its text (a ridge fit on the others): two cold items with
    # the same text get the same vector.
    text2 = text.copy()
    text2[-1] = text2[-2]
    cf3, _ = cooccurrence_vectors(
        Histories.from_lists(lists), text2, excluded, dim=4, window=2, seed=0
    )
    np.testing.assert_allclose(cf3[-1], cf3[-2], atol=1e-6)


def test_too_few_pairs_is_one_clear_error():
    with pytest.raises(ValueError, match="cf_dim"):
        cooccurrence_vectors(
            Histories.from_lists([[0], [1, 1]]),
            np.eye(4, dtype=np.float32),
            np.zeros(4, bool),
            dim=2,
            window=1,
            seed=0,
        )


def test_with_cooccurrence_splits_the_norm():
    x = with_cooccurrence(np.full((2, 3), 2.0, np.float32), np.eye(2, dtype=np.float32), 0.25)
    np.testing.assert_allclose(np.linalg.norm(x[:, :3], axis=1) ** 2, 0.75, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-6)


def test_config_checks_and_identity():
    assert identity_fields(RQVAEConfig())["cf_dim"] == 0
    assert identity_fields(RQVAEConfig(cf_dim=8))["cf_dim"] == 8
    for bad in ({"cf_dim": -1}, {"cf_weight": 1.0}, {"cf_window": 0}):
        with pytest.raises(ValueError, match="cf_"):
            RQVAEConfig(**bad)


@pytest.mark.slow
def test_tokenize_catalog_with_cooccurrence(tmp_path):
    lists, _, _ = _random_data(n=40, users=80)
    kwargs = dict(cache_dir=None, cold_fraction=0.1, progress=False)
    cfg = dataclasses.replace(CFG, cf_dim=4)
    m = tokenize_catalog(
        cfg, _catalog(), tmp_path / "b", histories=Histories.from_lists(lists), **kwargs
    )
    sids, _ = load_sids(tmp_path / "b")
    assert m["num_items"] == 40 and len(np.unique(sids, axis=0)) == 40
