"""Swapping the constraint set within one capacity bucket reuses the compiled beam search."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from decoding import StaticConstraint, StaticIndex, beam_search
from decoding.baselines import CpuTrie, PPVExact
from tests.decoding.helpers import random_log_probs, table_step


def _fresh_search(K, L):
    return jax.jit(functools.partial(beam_search, table_step, beam_size=K, num_levels=L))


def test_same_bucket_sets_compile_once():
    rng = np.random.default_rng(0)
    V, L, K, B = 16, 4, 5, 2
    lp = random_log_probs(rng, B, L, V)
    args = (jnp.asarray(lp[:, 0]), {"lp": jnp.asarray(lp)})
    sids = rng.integers(0, V, (1000, L))
    a = StaticIndex.build(sids, vocab_size=V)
    b = StaticIndex.build(np.concatenate([sids, [[15, 15, 15, 15]]]), vocab_size=V)
    assert a.capacity == b.capacity, "default bucketing should absorb one more item"
    c = StaticIndex.build(rng.integers(0, V, (300, L)), vocab_size=V, capacity=a.capacity)
    search = _fresh_search(K, L)
    results = [search(*args, StaticConstraint(i)) for i in (a, b, c)]
    assert search._cache_size() == 1
    # Different sets really were used: the beams differ.
    assert not np.array_equal(results[0].tokens, results[2].tokens)


def test_baseline_sets_swap_without_recompiling():
    rng = np.random.default_rng(1)
    V, L, K = 8, 3, 4
    lp = random_log_probs(rng, 2, L, V)
    args = (jnp.asarray(lp[:, 0]), {"lp": jnp.asarray(lp)})
    search = _fresh_search(K, L)
    for n in (20, 21):
        search(*args, PPVExact.build(rng.integers(0, V, (n, L)), vocab_size=V, capacity=32))
    assert search._cache_size() == 1
    search = _fresh_search(K, L)
    for n in (20, 21):
        search(*args, CpuTrie.build(rng.integers(0, V, (n, L)), vocab_size=V))
    assert search._cache_size() == 1
