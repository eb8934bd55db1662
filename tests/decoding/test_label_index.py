"""The label trie: golden layout, the build-time proof, bad input, capacity and subsets."""

import numpy as np
import pytest

from decoding.label_index import LabelCapacity, LabelIndex, subset_words

# "Technology" is a prefix of "Technology > AI"; "New York" and "New Jersey" share "New".
LABELS = [[5, 1], [5], [5, 1, 2], [3], [5, 2], [3, 4, 4]]


def test_golden_layout():
    idx = LabelIndex.build(LABELS, vocab_size=8)
    # Trie order: [3] [3 4 4] [5] [5 1] [5 1 2] [5 2] (a label sorts before its extensions).
    assert idx.paths() == [(3,), (3, 4, 4), (5,), (5, 1), (5, 1, 2), (5, 2)]
    n = idx.num_nodes
    assert n == 8
    why = "nodes by depth: root; 3, 5; 3 4, 5 1, 5 2; 3 4 4, 5 1 2"
    np.testing.assert_array_equal(idx.row_ptr[: n + 1], [0, 2, 3, 5, 6, 7, 7, 7, 7], why)
    np.testing.assert_array_equal(idx.tokens[: n - 1], [3, 5, 4, 1, 2, 4, 2], why)
    np.testing.assert_array_equal(idx.lo[:n], [0, 0, 2, 1, 3, 5, 1, 4], "label ranges")
    np.testing.assert_array_equal(idx.hi[:n], [6, 2, 6, 2, 5, 6, 2, 5], "label ranges")
    np.testing.assert_array_equal(idx.end[:n], [0, 1, 1, 0, 1, 1, 1, 1], "label ends")
    np.testing.assert_array_equal(idx.label_order[:6], [3, 5, 1, 0, 2, 4], "trie id -> caller's")
    np.testing.assert_array_equal(idx.first[:6], [3, 3, 5, 5, 5, 5])
    assert idx.root_child[3] == 1 and idx.root_child[5] == 2 and idx.root_child.sum() == 3
    assert idx.capacity.width == 2
    idx.verify(LABELS)


def test_padded_array_input_equals_lists():
    table = np.full((len(LABELS), 3), -1)
    for i, label in enumerate(LABELS):
        table[i, : len(label)] = label
    a, b = LabelIndex.build(LABELS, vocab_size=8), LabelIndex.build(table, vocab_size=8)
    for f in ("row_ptr", "tokens", "lo", "hi", "end", "label_order"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), f)


def test_verify_catches_a_wrong_label_list():
    idx = LabelIndex.build(LABELS, vocab_size=8)
    with pytest.raises(ValueError, match=r"labels\[2\]"):
        idx.verify([[5, 1], [5], [5, 1, 3], [3], [5, 2], [3, 4, 4]])
    with pytest.raises(ValueError, match="labels: 5 labels"):
        idx.verify(LABELS[:5])


def test_verify_catches_a_corrupted_index():
    idx = LabelIndex.build(LABELS, vocab_size=8)
    hi = np.array(idx.hi)
    hi[3] += 1
    bad = LabelIndex(**{**idx.__dict__, "hi": hi})
    with pytest.raises(ValueError, match="tile"):
        bad.verify(LABELS)


def test_random_sets_verify_and_enumerate():
    rng = np.random.default_rng(0)
    for V in (3, 70_000):  # uint16 and int32 edge tokens
        labels = {tuple(rng.integers(0, V, rng.integers(1, 6)).tolist()) for _ in range(300)}
        labels = [list(t) for t in labels]
        rng.shuffle(labels)
        idx = LabelIndex.build(labels, vocab_size=V)
        idx.verify(labels)
        assert sorted(idx.paths()) == sorted(map(tuple, labels))


@pytest.mark.parametrize(
    "labels, match",
    [
        ([], "empty"),
        ([[1], []], r"labels\[1\] is empty"),
        ([[1, 2], [1, 2]], r"labels\[0\] and labels\[1\]"),
        ([[1], [9]], r"labels\[1\] holds token 9"),
        ([[1], [-1]], r"labels\[1\] holds token -1"),
        ("abc", "sequence of token-id sequences"),
        ([[1.5]], "int token ids"),
        (np.array([[1, -1, 2]]), "-1 only after"),
    ],
)
def test_bad_labels_name_the_argument(labels, match):
    # TypeError: under pytest, jaxtyping's runtime check may reject a wrong type first.
    with pytest.raises((ValueError, TypeError), match=match):
        LabelIndex.build(labels, vocab_size=8)


def test_bad_vocab_size():
    with pytest.raises(ValueError, match="vocab_size"):
        LabelIndex.build([[1]], vocab_size=0)


def test_capacity_pads_and_refuses_too_small():
    small = LabelIndex.build(LABELS, vocab_size=8)
    cap = LabelCapacity(nodes=64, edges=64, labels=64, width=4)
    big = LabelIndex.build(LABELS, vocab_size=8, capacity=cap)
    assert big.capacity == cap and big.row_ptr.shape == (65,) and big.words == 3
    big.verify(LABELS)
    assert big.paths() == small.paths()
    with pytest.raises(ValueError, match="capacity"):
        LabelIndex.build(
            LABELS, vocab_size=8, capacity=LabelCapacity(nodes=4, edges=4, labels=32, width=2)
        )


def test_subset_words_are_trie_order_bits():
    idx = LabelIndex.build(LABELS, vocab_size=8)
    allowed = np.zeros((2, 6), bool)
    allowed[0, 3] = True  # caller's label 3 = [3] = trie id 0
    allowed[1, [0, 4]] = True  # [5 1] = trie 3, [5 2] = trie 5
    w = subset_words(idx, allowed)
    assert w.dtype == np.uint32 and w.shape == (2, idx.words)
    np.testing.assert_array_equal(w[:, 0], [1, (1 << 3) | (1 << 5)])
    with pytest.raises(ValueError, match="allowed"):
        subset_words(idx, allowed[:, :5])


def test_narrow_width_covers_most_nodes_and_skips_a_useless_second_width():
    hub = [[1, t] for t in range(2, 200)]  # one node with 198 children
    rest = [[300 + i, 400 + j] for i in range(60) for j in range(2)]  # 60 nodes with 2
    idx = LabelIndex.build(hub + rest, vocab_size=512)
    assert idx.capacity.width == 256 and idx.capacity.narrow_width == 16
    even = LabelIndex.build([[1, t] for t in range(2, 40)] + rest, vocab_size=512)
    assert even.capacity.narrow_width == even.capacity.width == 64, "16 x 4 >= 64: one width"
