import numpy as np
import pytest

from data.types import Histories
from seqmodel.tokens import (
    BOS,
    NUM_SPECIAL,
    PAD,
    TokenizeExample,
    WindowSource,
    encode_histories,
    encode_history,
    sid_tokens,
    training_example,
)

SIDS = np.array([[0, 1, 0], [2, 3, 0], [2, 3, 1], [7, 7, 7]], np.int32)


def test_sid_tokens_offsets_each_level():
    tok = sid_tokens(SIDS, codebook_size=8)
    np.testing.assert_array_equal(tok[1], [NUM_SPECIAL + 2, NUM_SPECIAL + 8 + 3, NUM_SPECIAL + 16])
    assert tok.dtype == np.int32 and tok.max() < NUM_SPECIAL + 3 * 8


def test_sid_tokens_rejects_out_of_range_codes():
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        sid_tokens(SIDS, codebook_size=4)


def test_encode_history_left_pads_and_keeps_most_recent():
    tok = sid_tokens(SIDS, 8)
    out = encode_history(tok, np.array([0, 1, 2]), max_history=2)
    assert out.shape == (7,)
    assert out[0] == BOS
    np.testing.assert_array_equal(out[1:], np.concatenate([tok[1], tok[2]]))
    short = encode_history(tok, np.array([3]), max_history=2)
    np.testing.assert_array_equal(short[:3], [PAD, PAD, PAD])
    assert short[3] == BOS


def test_training_example_weights_cover_items_after_the_first():
    tok = sid_tokens(SIDS, 8)
    inputs, targets, w = training_example(tok, np.array([0, 1, 2]), 4, "causal")
    np.testing.assert_array_equal(targets[w > 0], np.concatenate([tok[1], tok[2]]))
    assert inputs.shape == targets.shape == (12,)
    np.testing.assert_array_equal(inputs[1:], targets[:-1])
    _, targets, w = training_example(tok, np.array([0, 1, 2]), 4, "sliding")
    np.testing.assert_array_equal(targets[w > 0], tok[2])
    _, _, w = training_example(tok, np.array([0]), 4, "causal")
    assert w.sum() == 0


def test_encode_histories_of_chosen_users_matches_rows_of_all():
    tok = sid_tokens(SIDS, 8)
    h = Histories.from_lists([[0], [1, 2], [3, 0, 1]])
    every = encode_histories(tok, h, max_history=2)
    chosen = encode_histories(tok, h, max_history=2, users=np.array([2, 0]))
    np.testing.assert_array_equal(chosen, every[[2, 0]])


def test_window_source_yields_every_prefix_with_a_target():
    h = Histories.from_lists([[0, 1, 2], [3, 1]])
    src = WindowSource(h, max_history=2)
    got = [list(src[i]["items"]) for i in range(len(src))]
    assert got == [[0, 1], [1, 2], [3, 1]]  # windows of at most 2 items, target last
    assert [int(src[i]["user"]) for i in range(len(src))] == [0, 0, 1]


def test_tokenize_example_transform_shapes():
    t = TokenizeExample(sid_tokens(SIDS, 8), max_history=2, layout="causal")
    out = t.map({"items": np.array([3, 0, 1], np.int32)})
    shapes = {k: v.shape for k, v in out.items()}
    assert shapes == {"inputs": (6,), "targets": (6,), "weights": (6,)}
