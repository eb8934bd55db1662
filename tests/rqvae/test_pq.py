"""Product quantization into long Semantic IDs: deterministic, better than chance, checked."""

import numpy as np
import pytest

from rqvae.pq import code_stats, fit_product_quantizer

KW = dict(num_codes=4, codebook_size=8, pca_dim=8, seed=0)


def _embeddings(n=200, e=12, seed=0):
    rng = np.random.default_rng(seed)
    # Clustered, with unequal variances across directions, as text embeddings are.
    centers = rng.normal(size=(10, e)) * np.linspace(3, 0.3, e)
    return (centers[rng.integers(0, 10, n)] + 0.3 * rng.normal(size=(n, e))).astype(np.float32)


def test_codes_are_deterministic_for_a_seed_and_in_range():
    x = _embeddings()
    a = fit_product_quantizer(x, **KW).encode(x)
    b = fit_product_quantizer(x, **KW).encode(x)
    assert a.shape == (200, 4) and a.dtype == np.int32
    np.testing.assert_array_equal(a, b)
    assert a.min() >= 0 and a.max() < 8
    other = fit_product_quantizer(x, **{**KW, "seed": 1}).encode(x)
    assert not np.array_equal(a, other), "the seed changes nothing"


def test_projection_is_whitened_pca():
    x = _embeddings()
    z = fit_product_quantizer(x, **KW).project(x)
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(np.cov(z.T, ddof=1), np.eye(8), atol=1e-3)


def test_codes_reconstruct_better_than_random_codes():
    x = _embeddings()
    pq = fit_product_quantizer(x, **KW)
    z, codes = pq.project(x), pq.encode(x)
    err = ((pq.decode(codes) - z) ** 2).sum(1).mean()
    rand = np.random.default_rng(0).integers(0, 8, codes.shape)
    err_random = ((pq.decode(rand) - z) ** 2).sum(1).mean()
    assert err < 0.5 * err_random, (err, err_random)
    # Each code is its subspace's nearest centroid: no other code reconstructs an item better.
    for j in range(4):
        sub = z[:, 2 * j : 2 * j + 2]
        dist = ((sub[:, None, :] - pq.centroids[j][None]) ** 2).sum(-1)
        np.testing.assert_array_equal(codes[:, j], dist.argmin(1))


@pytest.mark.parametrize(
    "kw, n, message",
    [
        ({"num_codes": 3}, 200, "multiple of num_codes=3"),
        ({"pca_dim": 16, "num_codes": 4}, 200, "exceeds"),
        ({"codebook_size": 256}, 200, "fewer than codebook_size=256"),
        ({"codebook_size": 1}, 200, "codebook_size >= 2"),
    ],
)
def test_bad_settings_are_one_line_errors(kw, n, message):
    with pytest.raises(ValueError, match=message) as e:
        fit_product_quantizer(_embeddings(n), **{**KW, **kw})
    assert "\n" not in str(e.value)


def test_nan_embeddings_are_refused():
    x = _embeddings()
    x[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fit_product_quantizer(x, **KW)


def test_code_stats_count_shared_tuples():
    codes = np.array([[0, 1], [0, 1], [2, 3], [4, 1]], np.int32)
    stats = code_stats(codes)
    assert stats["distinct_sids"] == 3 and stats["shared_sid_item_fraction"] == 0.5
    assert stats["codes_used_min"] == 2
