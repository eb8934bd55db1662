"""The two-pass top-k equals jax.lax.top_k: values, indices and ties, -inf rows included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from decoding.topk import BLOCK, top_k


@pytest.mark.parametrize("n, k", [(16 * BLOCK, 1), (16 * 4 * BLOCK + 77, 4), (70 * 16 * BLOCK, 70)])
def test_two_pass_top_k_equals_lax_top_k(n, k):
    rng = np.random.default_rng(n + k)
    rows = 6
    x = rng.normal(size=(rows, n)).astype(np.float32)
    x[1] = np.round(x[1])  # many ties across blocks
    x[2] = -np.inf  # nothing finite: the lowest indices
    x[3, : n - 2] = -np.inf  # fewer finite entries than k
    x[4, rng.choice(n, 3 * k, replace=False)] = 5.0  # ties at the top, spread over blocks
    x[5] = np.float32(np.finfo(np.float32).min)
    fast = jax.jit(lambda x: top_k(x, k))
    slow = jax.jit(lambda x: jax.lax.top_k(x, k))
    for got, want in zip(fast(jnp.asarray(x)), slow(jnp.asarray(x)), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # A leading batch shape is kept.
    got = fast(jnp.asarray(x).reshape(2, 3, n))
    np.testing.assert_array_equal(np.asarray(got[1]).reshape(rows, k), np.asarray(slow(x)[1]))


def test_narrow_rows_use_lax_top_k():
    x = jnp.arange(10.0)[None]
    np.testing.assert_array_equal(np.asarray(top_k(x, 3)[1]), [[9, 8, 7]])
