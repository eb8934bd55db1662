"""Tests of data/amazon.py on hand-written files in the real format."""

import re

import numpy as np
import pytest

from data import amazon
from tests.data.conftest import (
    FIXTURES,
    make_raw_dir,
    make_two_category_dir,
    write_truncated_gzip,
)


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


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Infinity", "unixReviewTime must be an integer"),
        ("NaN", "unixReviewTime must be an integer"),
        ("1e300", "unixReviewTime 1e\\+300 is out of the int64 range"),
    ],
)
def test_review_times_that_are_not_int64_name_the_line(tmp_path, value, message):
    raw = make_raw_dir(tmp_path, "Tiny")
    (raw / "reviews_Tiny_5.json").write_text(
        '{"reviewerID": "U1", "asin": "A", "unixReviewTime": 1}\n'
        f'{{"reviewerID": "U1", "asin": "B", "unixReviewTime": {value}}}\n'
    )
    with pytest.raises(ValueError, match=rf"reviews_Tiny_5\.json:2: {message}"):
        amazon.read_raw_dir(raw, five_core=False)


def test_a_nul_byte_in_an_id_names_the_line(tmp_path):
    raw = make_raw_dir(tmp_path, "Tiny")
    (raw / "reviews_Tiny_5.json").write_text(
        '{"reviewerID": "U\\u0000 1", "asin": "A", "unixReviewTime": 1}\n'
    )
    with pytest.raises(ValueError, match=r":1: reviewerID and asin must not contain a NUL byte"):
        amazon.read_raw_dir(raw, five_core=False)


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


def test_category_picks_its_files_in_a_shared_folder(tmp_path):
    both = make_two_category_dir(tmp_path)
    reviews, meta = amazon.find_raw_files(both, "Tiny")
    assert (reviews.name, meta.name) == ("reviews_Tiny_5.json.gz", "meta_Tiny.json.gz")
    reviews, meta = amazon.find_raw_files(both, "Bad")
    assert (reviews.name, meta.name) == ("reviews_Bad_5.json", "meta_Bad.json")
    ds = amazon.read_raw_dir(both, category="Tiny", five_core=False)
    want = amazon.read_raw_dir(make_raw_dir(tmp_path, "Tiny"), five_core=False)
    assert ds.name == "Tiny" and ds.catalog.texts == want.catalog.texts
    assert np.array_equal(ds.histories.items, want.histories.items)
    with pytest.raises(FileNotFoundError, match="found 2; set data.category"):
        amazon.find_raw_files(both)


def test_missing_category_files_are_a_one_line_error(tmp_path):
    both = make_two_category_dir(tmp_path)
    with pytest.raises(FileNotFoundError) as e:
        amazon.find_raw_files(both, "Cell_Phones_and_Accessories")
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and str(both) in msg
    assert "reviews_Cell_Phones_and_Accessories_5.json[.gz]" in msg
    assert "meta_Cell_Phones_and_Accessories.json[.gz]" in msg
    assert "categories here: Bad, Tiny" in msg
    (both / "meta_Tiny.json.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"missing meta_Tiny\.json\[\.gz\] \("):
        amazon.find_raw_files(both, "Tiny")
    (both / "meta_Bad.json.gz").write_bytes(b"")
    with pytest.raises(ValueError, match="both meta_Bad.json and meta_Bad.json.gz"):
        amazon.find_raw_files(both, "Bad")
    with pytest.raises(ValueError, match="expected a name like Beauty"):
        amazon.find_raw_files(both, "../Tiny")


@pytest.mark.parametrize("kind", ["reviews", "meta"])
def test_truncated_gzip_names_the_file(tmp_path, kind):
    raw = make_raw_dir(tmp_path, "Tiny", gz=True)
    name = "reviews_Tiny_5.json.gz" if kind == "reviews" else "meta_Tiny.json.gz"
    write_truncated_gzip(raw / name, (FIXTURES / f"Tiny.{kind}.txt").read_text())
    with pytest.raises(ValueError, match=re.escape(name) + r": cannot read past line \d+"):
        amazon.read_raw_dir(raw, five_core=False)


def test_non_utf8_file_names_the_file(tmp_path):
    raw = make_raw_dir(tmp_path, "Tiny")
    with open(raw / "meta_Tiny.json", "ab") as f:
        f.write("{'asin': 'D', 'title': 'caf\xe9'}\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"meta_Tiny\.json: cannot read past line \d+: not UTF-8"):
        amazon.read_raw_dir(raw, five_core=False)
