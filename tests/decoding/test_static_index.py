"""STATIC index build: layout, compact dtypes, bucketing, save/load and input errors."""

import numpy as np
import pytest

from decoding import Capacity, StaticIndex


def test_build_layout_on_a_known_trie():
    sids = np.array([[1, 0, 2], [0, 1, 1], [1, 0, 1], [0, 1, 1], [1, 1, 0]])  # unsorted, one dup
    idx = StaticIndex.build(sids, vocab_size=3, dense_levels=1)
    assert int(idx.num_items) == 4
    assert int(idx.num_dense_nodes) == 2  # depth-1 prefixes (0) and (1)
    # Nodes: depth1 [0, 1], depth2 [01, 10, 11]; edges sorted per node.
    assert idx.row_ptr[:6].tolist() == [0, 1, 3, 4, 6, 7]
    assert idx.tokens[:7].tolist() == [1, 0, 1, 1, 1, 2, 0]
    assert idx.tokens.dtype == np.uint16 and idx.row_ptr.dtype == np.int32
    assert idx.capacity.widths == (2, 2)
    bits = np.unpackbits(idx.dense_words.view(np.uint8), bitorder="little")[:3]
    assert bits.tolist() == [1, 1, 0]


def test_order_and_duplicates_do_not_matter():
    rng = np.random.default_rng(0)
    sids = rng.integers(0, 5, (50, 4))
    a = StaticIndex.build(sids, vocab_size=5)
    b = StaticIndex.build(np.concatenate([sids[::-1], sids[:7]]), vocab_size=5)
    for f in ("dense_words", "rank", "row_ptr", "tokens"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


def test_large_vocab_packs_into_several_words():
    rng = np.random.default_rng(0)
    sids = rng.integers(0, 2048, (300, 8))
    idx = StaticIndex.build(sids, vocab_size=2048)
    assert int(idx.num_items) == 300
    assert idx.dense_levels == 2
    parts = idx.nbytes()
    assert parts["total"] == sum(v for k, v in parts.items() if k != "total")


def test_dense_levels_lowered_when_mask_too_big():
    idx = StaticIndex.build(np.array([[70000, 1, 2]]), vocab_size=70001)
    assert idx.dense_levels == 1 and idx.tokens.dtype == np.int32


def test_save_load_round_trip(tmp_path):
    sids = np.random.default_rng(0).integers(0, 7, (40, 3))
    idx = StaticIndex.build(sids, vocab_size=7)
    idx.save(tmp_path / "idx.npz")
    back = StaticIndex.load(tmp_path / "idx.npz")
    assert back.capacity == idx.capacity and back.dense_levels == idx.dense_levels
    for f in ("dense_words", "rank", "row_ptr", "tokens", "num_items"):
        np.testing.assert_array_equal(getattr(back, f), getattr(idx, f))
    assert not list(tmp_path.glob("*.tmp"))


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        StaticIndex.load(tmp_path / "nope.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="not a STATIC index"):
        StaticIndex.load(tmp_path / "other.npz")


def test_explicit_capacity_pads_or_refuses():
    sids = np.array([[0, 1], [1, 1]])
    cap = Capacity(nodes=10, edges=20, widths=(4,))
    idx = StaticIndex.build(sids, vocab_size=2, dense_levels=1, capacity=cap)
    assert idx.row_ptr.shape == (11,) and idx.tokens.shape == (20,)
    with pytest.raises(ValueError, match="capacity"):
        StaticIndex.build(
            sids, vocab_size=2, dense_levels=1, capacity=Capacity(nodes=1, edges=1, widths=(1,))
        )


@pytest.mark.parametrize(
    ("sids", "match"),
    [
        (np.zeros((0, 3), np.int32), "empty"),
        (np.zeros((3, 0), np.int32), "empty"),
        (np.array([[0, 1], [2, 4]]), r"sids\[1, 1\] = 4 is outside"),
        (np.array([[0, -1]]), r"sids\[0, 1\] = -1"),
        (np.zeros((2, 2), np.float32), "integer"),
        (np.zeros((2, 2), bool), "integer"),
        (np.zeros(3, np.int32), "rank 2"),
    ],
)
def test_bad_input_errors(sids, match):
    with pytest.raises(ValueError, match=match):
        StaticIndex.build(sids, vocab_size=4)


@pytest.mark.parametrize("dense_levels", [0, 1, 2, 3])
def test_contains_matches_a_python_set(dense_levels):
    from decoding.constraints import contains

    rng = np.random.default_rng(4)
    sids = rng.integers(0, 4, (20, 3))
    idx = StaticIndex.build(sids, vocab_size=4, dense_levels=dense_levels)
    queries = np.concatenate([sids, rng.integers(0, 4, (40, 3)), [[4, 0, 0], [-1, 0, 0]]])
    allowed = set(map(tuple, sids.tolist()))
    want = [tuple(q) in allowed for q in queries.tolist()]
    assert np.asarray(contains(idx, queries)).tolist() == want


@pytest.mark.parametrize("dense_levels", [-1, 4, 10, True])
def test_dense_levels_out_of_range_is_an_error(dense_levels):
    sids = np.array([[0, 1, 2], [2, 1, 0]])  # L = 3: d must be in [0, 3]
    with pytest.raises(ValueError, match="dense_levels"):
        StaticIndex.build(sids, vocab_size=3, dense_levels=dense_levels)


def test_dense_levels_default_and_bounds():
    sids = np.array([[0, 1, 2], [2, 1, 0]])
    assert StaticIndex.build(sids, vocab_size=3).dense_levels == 2
    assert StaticIndex.build(sids, vocab_size=3, dense_levels=3).dense_levels == 3
    assert StaticIndex.build(sids, vocab_size=3, dense_levels=0).dense_levels == 0
    # The default is capped at the SID length (one-level SIDs: one dense level).
    assert StaticIndex.build(np.array([[1], [0]]), vocab_size=3).dense_levels == 1
