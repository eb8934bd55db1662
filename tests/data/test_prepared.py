"""Tests of data/prepared.py: TFDS array_record round trip, content-keyed reuse, atomic failure."""

import numpy as np
import pytest

from data import amazon, prepared
from data.config import DataConfig

CFG = DataConfig(dataset="tiny", five_core=False)


def test_round_trip_matches_reader(tiny_raw, tmp_path):
    out = prepared.prepare(CFG, tiny_raw, tmp_path / "prepared")
    assert list((out / "tfds").rglob("*.array_record-*"))
    got = prepared.load_prepared(out)
    want = amazon.read_raw_dir(tiny_raw, five_core=False)
    assert got.name == "Tiny"
    assert got.user_ids.tolist() == want.user_ids.tolist()
    for field in ("items", "times", "offsets"):
        a, b = getattr(got.histories, field), getattr(want.histories, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    assert got.catalog.asins.tolist() == want.catalog.asins.tolist()
    assert got.catalog.texts == want.catalog.texts
    assert got.catalog.leaf_categories == want.catalog.leaf_categories
    assert np.array_equal(got.catalog.first_time, want.catalog.first_time)
    assert got.report["duplicates_removed"] == 1


def test_reused_until_raw_content_or_config_changes(tiny_raw, tmp_path):
    out = tmp_path / "prepared"
    prepared.prepare(CFG, tiny_raw, out)
    stamp = (out / "prepared.json").stat().st_mtime_ns
    prepared.prepare(CFG, tiny_raw, out)
    assert (out / "prepared.json").stat().st_mtime_ns == stamp
    with open(tiny_raw / "reviews_Tiny_5.json", "a") as f:
        f.write('{"reviewerID": "U4", "asin": "C", "unixReviewTime": 500}\n')
    prepared.prepare(CFG, tiny_raw, out)
    assert len(prepared.load_prepared(out).user_ids) == 4
    key = (out / "prepared.json").read_text()
    prepared.prepare(
        DataConfig(dataset="tiny", five_core=False, skip_bad_lines=True), tiny_raw, out
    )
    assert (out / "prepared.json").read_text() != key


def test_failure_leaves_nothing_half_written(tmp_path):
    from tests.data.conftest import make_raw_dir

    raw = make_raw_dir(tmp_path, "Bad")
    with pytest.raises(ValueError, match=":3: malformed JSON"):
        prepared.prepare(CFG, raw, tmp_path / "prepared")
    assert not (tmp_path / "prepared").exists()
    assert [p.name for p in tmp_path.iterdir()] == [raw.name]


def test_load_missing_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="genret prepare"):
        prepared.load_prepared(tmp_path)


def test_real_dataset_needs_a_raw_dir(tmp_path):
    with pytest.raises(ValueError, match="--raw-dir"):
        prepared.prepare(DataConfig(dataset="beauty"), None, tmp_path / "prepared")
