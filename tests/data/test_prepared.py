"""Tests of data/prepared.py: TFDS array_record round trip, content-keyed reuse, atomic failure."""

import dataclasses
import json

import numpy as np
import pytest

from data import amazon, interactions, prepared
from data.config import DataConfig, SyntheticConfig
from tests.data.conftest import (
    INTERACTIONS,
    ITEMS,
    make_interactions_dir,
    make_two_category_dir,
)

CFG = DataConfig(dataset="amazon2014", five_core=False)


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


@pytest.mark.parametrize("progress", [True, False])
def test_progress_switch_hides_tfds_bars_and_restores_it(tiny_raw, tmp_path, capfd, progress):
    from tensorflow_datasets.core.utils import tqdm_utils

    before = tqdm_utils._active
    prepared.prepare(CFG, tiny_raw, tmp_path / "prepared", progress=progress)
    out, err = capfd.readouterr()
    assert ("Generating splits" in err) == (progress and before)
    assert tqdm_utils._active == before
    # TFDS's "Downloading and preparing dataset ... to <temporary folder>" would mislead: silenced.
    assert "ownload" not in out + err


@pytest.mark.parametrize("progress", [True, False])
def test_progress_switch_reaches_the_synthetic_generator(tmp_path, capfd, progress):
    synth = SyntheticConfig(num_items=300, num_users=400, num_categories=6)
    cfg = DataConfig(dataset="synthetic", five_core=False, synthetic=synth)
    prepared.prepare(cfg, None, tmp_path / "prepared", progress=progress)
    assert ("synthetic users" in capfd.readouterr().err) == progress


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
        DataConfig(dataset="amazon2014", five_core=False, skip_bad_lines=True), tiny_raw, out
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


# Content keys of the Tiny fixture at FINGERPRINT_VERSION 3: a change of these means every
# prepared folder is rebuilt, which needs a new fingerprint version (CHANGELOG.md).
KEYS = {
    "beauty": "6fa603f40c90d5fc602f88f40a25d06ae75c6c9f0cefc38f0c3e2e567d5d221f",
    "sports_small": "f54e65a3be3e8403dd320ab509d9a6f1351c089f37c7f97a47c2499505f22df4",
    "synthetic": "8ef214718434f03c5a7d329fa3321438713d302601c71ff42edaeaa08ec49aba",
    "toys_nofive_skip": "6bca570805af4072220a00ca0f1a1dd312aaec62a510b92945b3601dcfcec43a",
}
CONFIGS = {
    "beauty": DataConfig(dataset="beauty"),
    "toys_nofive_skip": DataConfig(dataset="toys", five_core=False, skip_bad_lines=True),
    "synthetic": DataConfig(),
    "sports_small": DataConfig(
        dataset="sports", synthetic=SyntheticConfig(num_items=50), seed=3, raw_dir="x"
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_content_keys_are_stable(tiny_raw, name):
    files = list(amazon.find_raw_files(tiny_raw))
    key = prepared.content_key(CONFIGS[name], files)
    assert key == KEYS[name], "the prepared data's key changed: raise FINGERPRINT_VERSION"
    unseeded = dataclasses.replace(CONFIGS[name], seed=CONFIGS[name].seed + 1, raw_dir="elsewhere")
    assert prepared.content_key(unseeded, files) == key, "seed and raw_dir shape no data"


def test_category_enters_key_and_record(tiny_raw, tmp_path):
    prepared.prepare(CFG, tiny_raw, tmp_path / "a")
    assert json.loads((tmp_path / "a" / "prepared.json").read_text())["config"]["category"] == ""
    named = dataclasses.replace(CFG, category="Tiny")
    prepared.prepare(named, tiny_raw, tmp_path / "b")
    record = json.loads((tmp_path / "b" / "prepared.json").read_text())
    assert record["config"]["category"] == "Tiny"
    assert record["key"] != json.loads((tmp_path / "a" / "prepared.json").read_text())["key"]


@pytest.mark.real_data
def test_real_content_keys_unchanged(amazon_root):
    # These keys change only with data.fingerprint.FINGERPRINT_VERSION or the prepared format.
    want = {
        "beauty": ("Beauty", "9a5e699dd1541b17099a84c41c0673b8a6f0c5278d4fcebfc66794469d7e3b4c"),
        "sports": (
            "Sports_and_Outdoors",
            "8e01b0f0e8e93e2ceae83a4749740a15294b8e4290c3a4c07a48b7488bf05f8d",
        ),
        "toys": (
            "Toys_and_Games",
            "de6d9c62ac03603d93794cb1eccba29284508f5eb3e9cfeb3e52cc54d8b9b0b9",
        ),
    }
    for dataset, (folder, key) in want.items():
        cfg = DataConfig(dataset=dataset)
        assert prepared.content_key(cfg, prepared.raw_files(cfg, amazon_root / folder)) == key


def test_amazon2014_category_in_a_shared_folder(tmp_path):
    both = make_two_category_dir(tmp_path)
    cfg = DataConfig(dataset="amazon2014", category="Tiny", five_core=False)
    got = prepared.load_prepared(prepared.prepare(cfg, both, tmp_path / "prepared"))
    assert got.name == "Tiny" and got.catalog.asins.tolist() == ["A", "B", "C", "D"]
    with pytest.raises(FileNotFoundError, match=r"meta_Toys\.json\[\.gz\]"):
        prepared.prepare(dataclasses.replace(cfg, category="Toys"), both, tmp_path / "p2")
    with pytest.raises(ValueError, match="contradicts"):
        prepared.prepare(DataConfig(dataset="toys", category="Tiny"), both, tmp_path / "p3")


def test_interactions_dataset_round_trip(tmp_path):
    raw = make_interactions_dir(tmp_path, {"interactions.csv": INTERACTIONS})
    cfg = DataConfig(dataset="interactions", five_core=False)
    out = prepared.prepare(cfg, raw, tmp_path / "prepared")
    key = json.loads((out / "prepared.json").read_text())["key"]
    (raw / "items.csv").write_text(ITEMS)
    got = prepared.load_prepared(prepared.prepare(cfg, raw, out))
    want = interactions.read_raw_dir(raw, five_core=False)
    assert json.loads((out / "prepared.json").read_text())["key"] != key
    assert got.name == "shop" and got.catalog.texts == want.catalog.texts
    assert np.array_equal(got.histories.items, want.histories.items)
    assert got.report == want.report
    with pytest.raises(ValueError, match="applies to dataset amazon2014"):
        prepared.prepare(dataclasses.replace(cfg, category="Beauty"), raw, tmp_path / "p2")
