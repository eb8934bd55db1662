"""SIDs: collision level, uniqueness, usage metrics, the semantic check, loading."""

import numpy as np
import pytest

from rqvae import sids


def test_collision_level_golden():
    codes = np.array([[1, 2], [0, 0], [1, 2], [1, 2], [0, 1]], np.int32)
    out = sids.add_collision_level(codes)
    assert out.dtype == np.int32 and out.shape == (5, 3)
    np.testing.assert_array_equal(out[:, -1], [0, 0, 1, 2, 0])
    np.testing.assert_array_equal(out[:, :2], codes)
    sids.check_unique(out)


def test_collision_level_random_rows_unique():
    codes = np.random.default_rng(0).integers(0, 3, size=(500, 3)).astype(np.int32)
    out = sids.add_collision_level(codes)
    assert len(np.unique(out, axis=0)) == 500
    assert out[:, -1].max() < 64


def test_collision_group_larger_than_codebook_widens_the_token_block():
    # 5 items share every code: the collision level counts to 4, past a codebook of 4 values.
    codes = np.zeros((5, 3), np.int32)
    out = sids.add_collision_level(codes)
    np.testing.assert_array_equal(out[:, -1], np.arange(5))
    assert sids.token_vocab_size(out, codebook_size=4) == 5
    assert sids.token_vocab_size(out, codebook_size=8) == 8


def test_check_unique_rejects_duplicates():
    with pytest.raises(ValueError, match="1 duplicate"):
        sids.check_unique(np.array([[0, 1], [0, 1], [1, 1]]))


def test_code_metrics_golden():
    codes = np.array([[0, 1], [0, 1], [1, 1], [2, 0]])
    m = sids.code_metrics(codes, vocab_size=4)
    assert [lv["codes_used"] for lv in m["levels"]] == [3, 2]
    np.testing.assert_allclose(m["levels"][0]["codes_used_fraction"], 0.75)
    p = np.array([0.5, 0.25, 0.25])
    np.testing.assert_allclose(m["levels"][0]["perplexity"], np.exp(-(p * np.log(p)).sum()))
    assert m["collision_item_fraction"] == 0.5
    assert m["largest_collision_group"] == 2


def test_semantic_check_golden():
    level1 = np.array([0, 0, 1, 1, 1])
    cats = ["a", "a", "b", "b", "a"]
    m = sids.semantic_check(level1, cats, seed=0)
    # Same-code pairs: (0,1) same; (2,3) same, (2,4), (3,4) differ -> 2/4.
    assert m["same_code_same_category"] == pytest.approx(0.5)
    # All pairs: C(3,2) + C(2,2) = 4 of 10 share a category.
    assert m["random_expected"] == pytest.approx(0.4)


def test_semantic_check_skips_unknown_categories():
    m = sids.semantic_check(np.array([0, 0, 0]), ["a", "", "a"])
    assert m["items_with_category"] == 2 and m["same_code_same_category"] == 1.0
    # Fewer than two items with a category: nothing to compare.
    assert sids.semantic_check(np.array([0, 1]), ["", "a"]) is None


def test_load_sids_round_trip_and_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-tokenizer"):
        sids.load_sids(tmp_path)
    arr = np.array([[1, 2, 0], [1, 2, 1]], np.int32)
    np.save(tmp_path / "sids.npy", arr)
    (tmp_path / "asins.txt").write_text("A\nB\n")
    got, asins = sids.load_sids(tmp_path)
    np.testing.assert_array_equal(got, arr)
    assert asins == ["A", "B"]
    (tmp_path / "asins.txt").write_text("A\n")
    with pytest.raises(ValueError, match="1 asins for 2"):
        sids.load_sids(tmp_path)


def test_dedup_last_level_moves_all_but_the_nearest_to_the_nearest_free_code():
    codebook = np.array([[0.0], [1.0], [2.0], [3.0]])
    codes = np.array([[0, 1], [0, 1], [0, 1], [0, 2], [1, 1]], np.int32)
    residual = np.array([[1.2], [0.9], [1.6], [2.0], [1.0]])
    out = sids.dedup_last_level(codes, residual, codebook)
    # Item 1 (0.9) is nearest to code 1 and stays; item 0 (1.2) goes to code 0 (2 is taken by
    # item 3); item 2 (1.6) then finds 1, 2 taken and 0 taken -> 3. Item 4 has its own prefix.
    np.testing.assert_array_equal(out[:, -1], [0, 1, 3, 2, 1])
    np.testing.assert_array_equal(out[:, 0], codes[:, 0])
    sids.check_unique(out)


def test_dedup_last_level_keeps_collisions_when_a_prefix_is_full():
    codes = np.zeros((3, 2), np.int32)
    out = sids.dedup_last_level(codes, np.zeros((3, 1)), np.array([[0.0], [1.0]]))
    assert len(np.unique(out, axis=0)) == 2  # only V=2 last codes exist under prefix 0
