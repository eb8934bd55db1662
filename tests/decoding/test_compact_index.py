"""The compact STATIC layout: same CSR, same beams and scores as the csr layout, fewer bytes."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoding import Capacity, StaticConstraint, StaticIndex, beam_search, contains
from decoding.constraints import _edge_tokens, _row_range
from tests.decoding.helpers import random_log_probs, run, table_step


@pytest.mark.parametrize(("V", "L", "d"), [(2, 4, 0), (5, 4, 1), (2048, 5, 2), (70001, 3, 1)])
def test_compact_decodes_to_the_csr_arrays(V, L, d):
    sids = np.random.default_rng(0).integers(0, V, (3000, L))
    csr = StaticIndex.build(sids, vocab_size=V, dense_levels=d)
    com = StaticIndex.build(sids, vocab_size=V, dense_levels=d, layout="compact")
    assert com.layout == "compact" and csr.layout == "csr"
    assert com.capacity.delta_bits == 8 and com.row_ptr.dtype == np.uint8
    start, end = _row_range(com, jnp.arange(csr.capacity.nodes))
    np.testing.assert_array_equal(start, csr.row_ptr[:-1], err_msg="row starts")
    np.testing.assert_array_equal(end, csr.row_ptr[1:], err_msg="row ends")
    edges = jnp.arange(csr.capacity.edges)
    np.testing.assert_array_equal(_edge_tokens(com, edges), csr.tokens, err_msg="tokens")
    # Slots past the capacity (invalid candidates) still read a token in [0, V).
    past = np.asarray(_edge_tokens(com, csr.capacity.edges + jnp.arange(64)))
    assert ((past >= 0) & (past < V)).all()
    assert com.nbytes()["total"] < csr.nbytes()["total"]


def test_compact_known_trie():
    sids = np.array([[1, 0, 2], [0, 1, 1], [1, 0, 1], [0, 1, 1], [1, 1, 0]])
    idx = StaticIndex.build(sids, vocab_size=3, dense_levels=1, layout="compact")
    # csr row_ptr [0, 1, 3, 4, 6, 7, ...] is one block: base 0, offsets as is.
    assert idx.row_base.tolist() == [0, 7] and idx.row_ptr[:6].tolist() == [0, 1, 3, 4, 6, 7]
    # Tokens [1, 0, 1, 1, 1, 2, 0] at 2 bits each, little-endian in one word.
    assert int(idx.tokens[0]) == sum(t << (2 * i) for i, t in enumerate([1, 0, 1, 1, 1, 2, 0]))
    assert idx.tokens.shape == (2 * -(-idx.capacity.edges // 32) + 1,)


def test_wide_rows_take_wider_offsets():
    # 64 depth-1 nodes with 64 children each: 31 rows of a block hold 1984 edges > 255.
    V = 64
    sids = np.stack(np.meshgrid(np.arange(V), np.arange(V), indexing="ij"), -1).reshape(-1, 2)
    idx = StaticIndex.build(sids, vocab_size=V, dense_levels=1, layout="compact")
    assert idx.capacity.delta_bits == 16 and idx.row_ptr.dtype == np.uint16
    csr = StaticIndex.build(sids, vocab_size=V, dense_levels=1)
    start, end = _row_range(idx, jnp.arange(len(csr.row_ptr) - 1))
    np.testing.assert_array_equal(start, csr.row_ptr[:-1])
    np.testing.assert_array_equal(end, csr.row_ptr[1:])
    with pytest.raises(ValueError, match="delta_bits=16"):
        StaticIndex.build(
            sids,
            vocab_size=V,
            dense_levels=1,
            layout="compact",
            capacity=Capacity(nodes=64, edges=4096, widths=(64,), delta_bits=8),
        )


def test_layout_and_capacity_errors():
    sids = np.array([[0, 1], [1, 1]])
    with pytest.raises(ValueError, match="layout must be"):
        StaticIndex.build(sids, vocab_size=2, layout="succinct")
    csr_cap = StaticIndex.build(sids, vocab_size=2, dense_levels=1).capacity
    with pytest.raises(ValueError, match="does not fit layout 'compact'"):
        StaticIndex.build(sids, vocab_size=2, dense_levels=1, layout="compact", capacity=csr_cap)
    com_cap = StaticIndex.build(sids, vocab_size=2, dense_levels=1, layout="compact").capacity
    with pytest.raises(ValueError, match="does not fit layout 'csr'"):
        StaticIndex.build(sids, vocab_size=2, dense_levels=1, capacity=com_cap)


def test_compact_save_load_round_trip(tmp_path):
    sids = np.random.default_rng(0).integers(0, 300, (500, 4))
    idx = StaticIndex.build(sids, vocab_size=300, layout="compact")
    idx.save(tmp_path / "idx.npz")
    back = StaticIndex.load(tmp_path / "idx.npz")
    assert back.capacity == idx.capacity and back.layout == "compact"
    for f in ("dense_words", "rank", "row_ptr", "row_base", "tokens", "num_items"):
        np.testing.assert_array_equal(getattr(back, f), getattr(idx, f), err_msg=f)


@pytest.mark.slow
def test_same_beams_scores_and_membership_at_v2048():
    rng = np.random.default_rng(3)
    V, L, K = 2048, 4, 20
    sids = rng.integers(0, V, (4000, L))
    sids[2000:, :3] = sids[:2000, :3]  # shared prefixes: nodes with several children
    lp = random_log_probs(rng, 2, L, V)
    csr = StaticIndex.build(sids, vocab_size=V)
    com = StaticIndex.build(sids, vocab_size=V, layout="compact")
    for unroll in (True, False):
        want = run(StaticConstraint(csr), lp, K, unroll=unroll)
        got = run(StaticConstraint(com), lp, K, unroll=unroll)
        for f in ("tokens", "scores", "valid"):
            np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)
    queries = np.concatenate([sids[::97], rng.integers(0, V, (200, L))])
    np.testing.assert_array_equal(contains(com, queries), contains(csr, queries))


def test_compact_sets_of_one_capacity_compile_once():
    rng = np.random.default_rng(0)
    V, L, K = 16, 4, 5
    lp = random_log_probs(rng, 2, L, V)
    args = (jnp.asarray(lp[:, 0]), {"lp": jnp.asarray(lp)})
    a = StaticIndex.build(rng.integers(0, V, (1000, L)), vocab_size=V, layout="compact")
    b = StaticIndex.build(
        rng.integers(0, V, (300, L)), vocab_size=V, layout="compact", capacity=a.capacity
    )
    search = jax.jit(functools.partial(beam_search, table_step, beam_size=K, num_levels=L))
    for i in (a, b):
        search(*args, StaticConstraint(i))
    assert search._cache_size() == 1


@st.composite
def problems(draw):
    V = draw(st.sampled_from([2, 5]))
    L = draw(st.sampled_from([1, 3]))
    d = draw(st.sampled_from([0, 2]))
    N = draw(st.integers(1, 12))
    sids = draw(
        st.lists(st.lists(st.integers(0, V - 1), min_size=L, max_size=L), min_size=N, max_size=N)
    )
    return np.array(sids), V, L, min(d, L), draw(st.integers(0, 2**16))


def _pair(sids, V, L, d):
    # One capacity per (V, L, d) and layout, so the examples share compiled programs.
    cap = Capacity(nodes=64, edges=64, widths=(V,) * (L - d))
    return [
        StaticIndex.build(sids, vocab_size=V, dense_levels=d, capacity=c, layout=layout)
        for c, layout in ((cap, "csr"), (dataclasses.replace(cap, delta_bits=8), "compact"))
    ]


@settings(max_examples=25, deadline=None)
@given(problems())
def test_compact_gives_the_csr_beams(problem):
    sids, V, L, d, seed = problem
    lp = random_log_probs(np.random.default_rng(seed), 2, L, V)
    csr, com = _pair(sids, V, L, d)
    want, got = run(StaticConstraint(csr), lp, 7), run(StaticConstraint(com), lp, 7)
    for f in ("tokens", "scores", "valid"):
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)
