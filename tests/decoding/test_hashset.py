"""The hash set of drafted-SID verification: exact membership (property-tested against a Python
set, with the sorted-key baseline), key words, capacities that keep one compiled program, and
`HashVerify` inside the one beam search."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoding import (
    HashSet,
    HashVerify,
    SortedKeys,
    StaticIndex,
    beam_search,
    contains,
    hash_contains,
    sid_words,
    sorted_contains,
)
from decoding.hashset import levels_per_word
from tests.decoding.helpers import brute_top, distinct_sids, random_log_probs, run, table_step

# (V, L): one uint32 word; two words (2048**3 > 2**32); V above uint16 (one level per word).
SHAPES = [(5, 3), (2048, 4), (70_000, 2)]
Q = 64  # queries per call: one compiled shape per (V, L)
CAPACITY = 256  # home slots for the property test: >= 2 x the 60 SIDs drawn at most


@functools.cache
def _query(kind: str):
    return jax.jit(hash_contains if kind == "hash" else sorted_contains)


@st.composite
def sets_and_queries(draw):
    V, L = draw(st.sampled_from(SHAPES))
    codes = st.lists(st.integers(0, V - 1), min_size=L, max_size=L)
    stored = draw(st.lists(codes, min_size=1, max_size=60))
    others = draw(st.lists(codes, min_size=Q, max_size=Q))
    # Half the queries are stored SIDs (when there are any to ask about), half arbitrary.
    picks = draw(st.lists(st.integers(0, len(stored) - 1), min_size=Q // 2, max_size=Q // 2))
    queries = np.array([stored[i] for i in picks] + others[: Q - Q // 2], np.int32)
    return np.array(stored, np.int32), queries, V, L


@settings(max_examples=60, deadline=None)
@given(sets_and_queries())
def test_no_false_negatives_or_positives(problem):
    stored, queries, V, L = problem
    truth = np.array([tuple(q) in set(map(tuple, stored.tolist())) for q in queries.tolist()])
    hs = HashSet.build(stored, vocab_size=V, capacity=CAPACITY)
    np.testing.assert_array_equal(np.asarray(_query("hash")(hs, queries)), truth)
    sk = SortedKeys.build(stored, vocab_size=V)
    np.testing.assert_array_equal(np.asarray(_query("sorted")(sk, queries)), truth)


def test_agrees_with_static_on_random_sids_and_rejects_out_of_range_codes():
    rng = np.random.default_rng(0)
    V, L = 64, 4
    sids = rng.integers(0, V, (3000, L))
    queries = np.concatenate([sids[:500], rng.integers(0, V, (500, L)), [[0, 0, 0, V]]])
    hs = HashSet.build(sids, vocab_size=V)
    want = np.asarray(contains(StaticIndex.build(sids, vocab_size=V), queries))
    np.testing.assert_array_equal(np.asarray(hash_contains(hs, queries)), want)
    assert want[:500].all() and not want[-1]
    assert int(hs.num_items) == len(np.unique(sids, axis=0))


def test_one_word_keys_are_the_mixed_radix_integers():
    V, L = 7, 5
    sids = distinct_sids(np.random.default_rng(1), 50, V, L)
    words = sid_words(sids, V, np)
    assert words.shape == (50, 1)
    want = sum(sids[:, j].astype(np.int64) * V**j for j in range(L))
    np.testing.assert_array_equal(words[:, 0], want)
    np.testing.assert_array_equal(np.asarray(sid_words(jnp.asarray(sids), V)), words)


def test_words_split_levels_so_no_word_overflows():
    assert levels_per_word(2) == 32 and levels_per_word(256) == 4 and levels_per_word(2048) == 2
    assert levels_per_word(65536) == 2 and levels_per_word(65537) == 1
    sids = np.array([[2047, 2047, 2047], [2047, 2047, 0]])
    words = sid_words(sids, 2048, np)
    assert words.shape == (2, 2) and words[0, 0] == 2048**2 - 1 and words[1, 1] == 0


def test_sets_within_capacity_share_one_compiled_query():
    rng = np.random.default_rng(2)
    V, L = 16, 4
    # A caller who swaps sets fixes P as well as the capacity (the fewest probes of one set may
    # be too few for the next).
    a = HashSet.build(rng.integers(0, V, (500, L)), vocab_size=V, probes=16)
    same = {"capacity": a.capacity, "probes": a.probes}
    b = HashSet.build(rng.integers(0, V, (700, L)), vocab_size=V, **same)
    c = HashSet.build(rng.integers(0, V, (10, L)), vocab_size=V, **same)
    # A fresh function: jit's compilation cache is per function, shared by its wrappers.
    query = jax.jit(lambda s, q: hash_contains(s, q))
    q = jnp.asarray(rng.integers(0, V, (128, L)))
    answers = [np.asarray(query(s, q)) for s in (a, b, c)]
    assert query._cache_size() == 1
    assert not np.array_equal(answers[0], answers[1])


def test_too_small_a_capacity_is_refused():
    sids = np.random.default_rng(3).integers(0, 100, (300, 3))
    with pytest.raises(ValueError, match="capacity=256"):
        HashSet.build(sids, vocab_size=100, capacity=256, probes=1)
    with pytest.raises(ValueError, match="power of two"):
        HashSet.build(sids, vocab_size=100, capacity=1000)
    with pytest.raises(ValueError, match="outside"):
        HashSet.build(sids, vocab_size=50)
    # Unsized, the table grows until every key is in its window, even with one probe.
    hs = HashSet.build(sids, vocab_size=100, probes=1)
    assert np.asarray(hash_contains(hs, sids)).all()
    # Unsized and unprobed: the fewest probes of 4, 8, 16 at load <= 0.5.
    hs = HashSet.build(sids, vocab_size=100)
    assert hs.probes in (4, 8, 16) and hs.capacity == 1024


def test_verification_drops_non_items_before_the_last_top_k():
    rng = np.random.default_rng(4)
    V, L, B = 4, 3, 2
    allowed = distinct_sids(rng, 12, V, L)
    lp = random_log_probs(rng, B, L, V)
    verify = HashVerify(HashSet.build(allowed, vocab_size=V))
    # K = V**(L-1): every prefix survives, so the search is exact over the allowed SIDs.
    K = V ** (L - 1)
    res = run(verify, lp, K)
    for b in range(B):
        want = brute_top(allowed, lp[b], K)
        got = [
            (float(s), tuple(t))
            for s, t, ok in zip(res.scores[b], res.tokens[b].tolist(), res.valid[b], strict=True)
            if ok
        ]
        assert [t for _, t in got] == [t for _, t in want]
        np.testing.assert_allclose([s for s, _ in got], [s for s, _ in want], rtol=1e-5)
        # Fewer allowed SIDs than beams: the rest are flagged, never returned as items.
        assert not res.valid[b, len(allowed) :].any()
        assert np.all(res.scores[b, len(allowed) :] == -np.inf)


def test_narrow_beams_verify_only_their_own_prefixes():
    rng = np.random.default_rng(5)
    V, L, B, K = 8, 3, 2, 3
    allowed = distinct_sids(rng, 40, V, L)
    lp = random_log_probs(rng, B, L, V)
    res = run(HashVerify(HashSet.build(allowed, vocab_size=V)), lp, K)
    stored = set(map(tuple, allowed.tolist()))
    for b in range(B):
        for t, ok in zip(res.tokens[b].tolist(), res.valid[b], strict=True):
            assert not ok or tuple(t) in stored


def test_verified_search_does_not_recompile_for_a_new_item_set():
    rng = np.random.default_rng(6)
    V, L, K, B = 8, 3, 4, 2
    lp = random_log_probs(rng, B, L, V)
    args = (jnp.asarray(lp[:, 0]), {"lp": jnp.asarray(lp)})
    search = jax.jit(functools.partial(beam_search, table_step, beam_size=K, num_levels=L))
    first = HashSet.build(rng.integers(0, V, (100, L)), vocab_size=V, probes=16)
    for n in (100, 130, 5):
        hs = HashSet.build(
            rng.integers(0, V, (n, L)), vocab_size=V, capacity=first.capacity, probes=first.probes
        )
        search(*args, HashVerify(hs))
    assert search._cache_size() == 1


@pytest.mark.parametrize(("V", "L"), [(5, 3), (2048, 4), (2048, 8)])  # W = 1, 2, 4 key words
def test_sorted_search_equals_a_set_lookup_at_every_size(V, L):
    rng = np.random.default_rng(7)
    # Sizes where the step count changes (bit_length) and a large one (duplicates are stored
    # once: at V=5, L=3 it leaves at most 125 keys).
    for n in (1, 7, 8, 1500):
        stored = rng.integers(0, V, (n, L), dtype=np.int32)
        # Stored SIDs, the same with the first or last level moved by one (neighbours in key
        # order, and keys that share all but the most significant word), arbitrary SIDs, the
        # extremes, and a code outside [0, V).
        near = stored[rng.integers(0, n, 40)].copy()
        near[:20, 0] = (near[:20, 0] + 1) % V
        near[20:, -1] = (near[20:, -1] + V - 1) % V
        queries = np.concatenate(
            [
                stored[rng.integers(0, n, 40)],
                near,
                rng.integers(0, V, (40, L), dtype=np.int32),
                np.full((1, L), 0, np.int32),
                np.full((1, L), V - 1, np.int32),
                np.array([[V] + [0] * (L - 1)], np.int32),
            ]
        )
        truth = set(map(tuple, stored.tolist()))
        want = np.array([tuple(q) in truth for q in queries.tolist()])
        got = np.asarray(_query("sorted")(SortedKeys.build(stored, vocab_size=V), queries))
        np.testing.assert_array_equal(got, want, err_msg=f"N={n}, V={V}, L={L}")


def test_sorted_search_is_one_loop_whatever_the_catalog_size():
    # Steps unrolled in the program made XLA:CPU double the call's time with each step once a
    # key spans two words: linear in N (4,096 queries: 1.1 s at N=16,000, 80 s at 1e6). In a
    # loop, the program is the same for every N but for the trip count.
    V, L = 2048, 8
    q = jnp.zeros((4, L), jnp.int32)

    def size_of_program(n):
        table = SortedKeys.build(np.random.default_rng(8).integers(0, V, (n, L)), vocab_size=V)
        return len(jax.make_jaxpr(sorted_contains)(table, q).eqns)

    small, large = size_of_program(10), size_of_program(100_000)
    assert small == large, f"{small} vs {large} operations: are the search steps unrolled again?"
