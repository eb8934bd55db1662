"""Tests of data/amazon.py on hand-written files in the real format."""

import numpy as np
import pytest

from data import amazon
from tests.data.conftest import make_raw_dir


@pytest.mark.parametrize("gz", [False, True])
def test_reads_tiny_plain_and_gzip(tmp_path, gz):
    ds = amazon.read_raw_dir(make_raw_dir(tmp_path, "Tiny", gz=gz), five_core=False)
    assert ds.name == "Tiny"
    assert ds.user_ids.tolist() == ["U1", "U2", "U3"]
    assert ds.catalog.asins.tolist() == ["A", "B", "C", "D"]
    h = ds.histories
    # U1: sorted by time with the tie (A, C at t=100) kept in file order.
    assert h[0].tolist() == [1, 0, 2] and h.times_of(0).tolist() == [50, 100, 100]
    # U2 reviewed B twice: the earliest (t=150) is kept.
    assert h[1].tolist() == [1, 0] and h.times_of(1).tolist() == [150, 300]
    assert h[2].tolist() == [3, 0]
    assert ds.catalog.first_time.tolist() == [100, 50, 100, 400]
    assert h.items.dtype == np.int32 and h.times.dtype == np.int64 and h.offsets.dtype == np.int64
    assert ds.report["duplicates_removed"] == 1
    assert ds.report["items_without_meta"] == 1


def test_item_text_and_leaf_category(tiny_raw):
    ds = amazon.read_raw_dir(tiny_raw, five_core=False)
    texts, leaves = ds.catalog.texts, ds.catalog.leaf_categories
    assert texts[0] == 'Alpha "quoted" lipstick. Acme. Beauty > Makeup > Lips > Gifts'
    assert texts[1] == "Beta's cream. Beauty > Skin Care > Face"  # first meta line for B wins
    assert texts[2] == "charcoal soap bar"  # strict-JSON line, description only
    assert texts[3] == "D"  # no metadata: the asin
    assert leaves == ["Lips", "Face", "", ""]


def test_malformed_review_line_names_file_and_line(tmp_path):
    raw = make_raw_dir(tmp_path, "Bad")
    with pytest.raises(ValueError, match=r"reviews_Bad_5\.json:3: malformed JSON"):
        amazon.read_raw_dir(raw, five_core=False)


def test_skip_bad_lines_counts_them(tmp_path):
    raw = make_raw_dir(tmp_path, "Bad", gz=True)
    ds = amazon.read_raw_dir(raw, five_core=False, skip_bad_lines=True)
    assert ds.report["bad_review_lines"] == 2  # line 3 malformed, line 4 lacks unixReviewTime
    assert ds.report["bad_meta_lines"] == 1
    assert ":3:" in ds.report["first_bad_review_line"]
    assert ds.histories.items.size == 3
    assert ds.catalog.texts == ["Alpha", "B"]  # B's metadata line was the bad one


def test_malformed_meta_line_names_file_and_line(tmp_path):
    raw = make_raw_dir(tmp_path, "Bad")
    (raw / "reviews_Bad_5.json").write_text(
        '{"reviewerID": "U1", "asin": "B", "unixReviewTime": 1}\n'
    )
    with pytest.raises(ValueError, match=r"meta_Bad\.json:2: malformed metadata"):
        amazon.read_raw_dir(raw, five_core=False)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        amazon.read_raw_dir(tmp_path / "nope")
    raw = make_raw_dir(tmp_path, "Tiny")
    (raw / "meta_Tiny.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"meta_\*\.json"):
        amazon.read_raw_dir(raw)
    (raw / "meta_Tiny.json").write_text("")
    with pytest.raises(ValueError, match="meta_Tiny.json: file is empty"):
        amazon.read_raw_dir(raw, five_core=False)


def test_bad_field_types_are_errors(tmp_path):
    raw = make_raw_dir(tmp_path, "Tiny")
    (raw / "reviews_Tiny_5.json").write_text(
        '{"reviewerID": "U1", "asin": "A", "unixReviewTime": "yesterday"}\n'
    )
    with pytest.raises(ValueError, match=r":1: unixReviewTime must be an integer"):
        amazon.read_raw_dir(raw)


def test_k_core_repeats_until_stable():
    user = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    item = np.array([0, 1, 0, 1, 1, 9, 0, 9])
    keep, rounds = amazon.k_core(user, item, k=2)
    assert keep.all() and rounds == 1
    keep, rounds = amazon.k_core(np.array([0, 0, 1, 1, 2]), np.array([0, 1, 0, 1, 1]), k=2)
    assert keep.tolist() == [True, True, True, True, False] and rounds == 2
    keep, rounds = amazon.k_core(np.array([0, 0, 1, 1, 1]), np.array([0, 1, 1, 2, 3]), k=2)
    # Round 1 leaves item 1 only; then each user has one review left, so nothing survives.
    assert not keep.any() and rounds >= 2


def test_five_core_default_filters(tiny_raw):
    with pytest.raises(ValueError, match="no interactions left"):
        amazon.read_raw_dir(tiny_raw)


@pytest.mark.real_data
def test_real_counts(amazon_root):
    expected = {
        "Beauty": (22363, 12101, 198502),
        "Sports_and_Outdoors": (35598, 18357, 296337),
        "Toys_and_Games": (19412, 11924, 167597),
    }
    for cat, (users, items, interactions) in expected.items():
        ds = amazon.read_raw_dir(amazon_root / cat)
        assert (len(ds.user_ids), len(ds.catalog), ds.histories.items.size) == (
            users,
            items,
            interactions,
        ), cat
        assert ds.report["items_without_meta"] == 0
        assert all(np.all(np.diff(ds.histories.times_of(u)) >= 0) for u in range(50))


def test_json_looking_meta_line_with_python_values(tmp_path):
    raw = make_raw_dir(tmp_path, "Tiny")
    (raw / "meta_Tiny.json").write_text('{"asin": "A", "title": "Alpha", "price": None}\n')
    ds = amazon.read_raw_dir(raw, five_core=False)
    assert ds.catalog.texts[0] == "Alpha" and ds.report["items_without_meta"] == 3
