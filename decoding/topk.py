"""Exact top-k along the last axis in two passes, for the wide rows of beam search on a CPU.

XLA's CPU top-k reads a [rows, n] array row by row in one kernel; over n of 1e5 and more it takes
tens of milliseconds. The k largest entries of a row lie in the k blocks (of `block` entries) with
the largest maxima, so the maxima of all blocks, a top-k over them, and a top-k over the chosen
blocks' entries give the same values and indices, ties to the lower index included: the chosen
blocks are read in index order, and a block whose maximum ties another's ranks by its index, as
its maximum's entry does.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

BLOCK = 128


def top_k(x: Float[Array, "*R N"], k: int) -> tuple[Float[Array, "*R k"], Int[Array, "*R k"]]:
    """`jax.lax.top_k(x, k)`, exactly (values, indices, ties to the lower index), in two passes
    where the last axis is wide and the backend is a CPU."""
    n = x.shape[-1]
    if jax.default_backend() != "cpu" or n < 16 * k * BLOCK:
        return tuple(jax.lax.top_k(x, k))
    blocks = -(-n // BLOCK)
    # Padding past the end never outranks a real entry: -inf ties go to the lower index.
    pad = jnp.full((*x.shape[:-1], blocks * BLOCK - n), -jnp.inf, x.dtype)
    xb = jnp.concatenate([x, pad], -1).reshape(*x.shape[:-1], blocks, BLOCK)
    _, best = jax.lax.top_k(xb.max(-1), k)
    best = jnp.sort(best, axis=-1)  # index order, so that ties keep going to the lower index
    cand = jnp.take_along_axis(xb, best[..., None], axis=-2).reshape(*x.shape[:-1], k * BLOCK)
    values, j = jax.lax.top_k(cand, k)
    return values, jnp.take_along_axis(best, j // BLOCK, axis=-1) * BLOCK + j % BLOCK
