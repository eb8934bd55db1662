"""Shared test helpers: a step function over a fixed log-prob table, brute-force top-Ks."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from decoding import beam_search


def table_step(tokens, level, cache):
    """Log-probs of level `level` read from cache["lp"] [B, K, L, V]; depends on the prefix too."""
    lp = jnp.take(cache["lp"], level, axis=2)
    return lp + 0.0 * tokens[..., None], cache


def random_log_probs(rng, B, L, V):
    return np.asarray(jax.nn.log_softmax(rng.normal(size=(B, L, V)) * 2, axis=-1), np.float32)


@functools.cache
def jitted_search(K, L, unroll):
    """One jitted beam search per shape config, so tests reuse compilations."""
    return jax.jit(
        functools.partial(beam_search, table_step, beam_size=K, num_levels=L, unroll=unroll)
    )


def run(constraint, lp_BLV, K, unroll=True):
    B, L, V = lp_BLV.shape
    f = jitted_search(K, L, unroll)
    return f(jnp.asarray(lp_BLV[:, 0]), {"lp": jnp.asarray(lp_BLV)}, constraint)


def brute_top(allowed, lp_LV, K):
    """Exact top-K of the allowed SIDs by total log-prob: [(score, sid)]."""
    L = lp_LV.shape[0]
    scored = [(float(sum(lp_LV[j, s[j]] for j in range(L))), tuple(s)) for s in allowed]
    return sorted(scored, key=lambda x: -x[0])[:K]


def all_sids(V, L):
    return np.array(list(itertools.product(range(V), repeat=L)), np.int32)


def exhaustive_top(step_fn, initial_log_probs, cache, sids, K):
    """Exact top-K of `sids` [N, L] per batch row, each SID scored by `step_fn` as its own beam.

    Returns (sids [B, K, L], scores [B, K]); the cache is tiled to [B, N, ...] as beam search does.
    """
    B = initial_log_probs.shape[0]
    N, L = sids.shape
    codes = jnp.broadcast_to(jnp.asarray(sids[:, 0]), (B, N))
    scores = jnp.take_along_axis(initial_log_probs, codes, axis=1)
    cache = jax.tree.map(lambda x: jnp.repeat(x[:, None], N, axis=1), cache)
    for level in range(1, L):
        lp, cache = step_fn(codes, level, cache)
        codes = jnp.broadcast_to(jnp.asarray(sids[:, level]), (B, N))
        scores = scores + jnp.take_along_axis(lp, codes[..., None], axis=2)[..., 0]
    scores = np.asarray(scores)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    return sids[order], np.take_along_axis(scores, order, axis=1)


def distinct_sids(rng, N, V, L):
    """N distinct random SIDs [N, L] in random order."""
    flat = rng.choice(V**L, size=N, replace=False)
    return np.stack([(flat // V ** (L - 1 - j)) % V for j in range(L)], axis=1).astype(np.int32)
