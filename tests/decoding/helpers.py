"""Shared test helpers: a step function over a fixed log-prob table and a brute-force top-K."""

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
