"""Tests of data/interactions.py on small CSV files written into tmp_path."""

import numpy as np
import pytest

from data import amazon, interactions
from data.errors import InputError
from tests.data.conftest import (
    INTERACTIONS,
    ITEMS,
    make_interactions_dir,
    make_raw_dir,
    write_truncated_gzip,
)


def test_histories_ties_first_time_and_items(tmp_path):
    raw = make_interactions_dir(tmp_path, {"interactions.csv": INTERACTIONS, "items.csv": ITEMS})
    ds = interactions.read_raw_dir(raw, five_core=False)
    assert ds.name == "shop"
    assert ds.user_ids.tolist() == ["u1", "u2", "u3"]
    assert ds.catalog.asins.tolist() == ["i1", "i2", "i3", "i4"]
    h = ds.histories
    assert h[0].tolist() == [1, 0, 2] and h.times_of(0).tolist() == [50, 100, 100]
    assert h[1].tolist() == [1, 0] and h.times_of(1).tolist() == [150, 300]
    assert h[2].tolist() == [3, 0]
    assert ds.catalog.first_time.tolist() == [100, 50, 100, 400]
    assert ds.catalog.texts == ['Alpha, "quoted" lipstick', "Beta cream", "i3", "i4"]
    assert ds.catalog.leaf_categories == ["Lips", "", "", ""]
    r = ds.report
    assert r["duplicates_removed"] == 1 and r["item_lines_ignored"] == 1
    assert r["items_without_text"] == 2 and r["interactions"] == 7


def test_same_dataset_as_the_amazon_reader(tmp_path):
    ds = interactions.read_raw_dir(
        make_interactions_dir(tmp_path, {"interactions.csv": INTERACTIONS}), five_core=False
    )
    want = amazon.read_raw_dir(make_raw_dir(tmp_path, "Tiny"), five_core=False)
    for field in ("items", "times", "offsets"):
        a, b = getattr(ds.histories, field), getattr(want.histories, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    assert np.array_equal(ds.catalog.first_time, want.catalog.first_time)
    # No items.csv: every item's text is its id.
    assert ds.catalog.texts == ["i1", "i2", "i3", "i4"] and ds.report["items_without_text"] == 4


@pytest.mark.parametrize(
    "fname, sep",
    [("interactions.tsv", "\t"), ("interactions.csv.gz", ","), ("interactions.tsv.gz", "\t")],
)
def test_tsv_and_gzip_variants(tmp_path, fname, sep):
    # A byte-order mark, columns in another order, spaces around values, a blank line at the end.
    header = sep.join(["\ufefftimestamp ", " item", "user"])
    split = (line.split(",") for line in INTERACTIONS.splitlines()[1:])
    rows = [sep.join([t, f" {i}", u]) for u, i, t, _ in split]
    files = {fname: "\n".join([header, *rows]) + "\n\n", "items.tsv": "item\ttext\ni1\tAlpha\n"}
    raw = make_interactions_dir(tmp_path, files)
    ds = interactions.read_raw_dir(raw, five_core=False)
    assert ds.histories[0].tolist() == [1, 0, 2] and ds.histories.times_of(1).tolist() == [150, 300]
    assert ds.catalog.texts[:2] == ["Alpha", "i2"] and ds.catalog.leaf_categories[0] == ""


def test_five_core(tmp_path):
    grid = [f"u{u},i{i},{10 * u + i}" for u in range(5) for i in range(5)]
    rows = [*grid, "lonely_user,i0,999", "u0,lonely_item,999"]
    raw = make_interactions_dir(
        tmp_path, {"interactions.csv": "user,item,timestamp\n" + "\n".join(rows)}
    )
    ds = interactions.read_raw_dir(raw)
    assert len(ds.user_ids) == 5 and len(ds.catalog) == 5 and ds.histories.items.size == 25
    assert ds.report["five_core_removed"] == 2
    assert len(interactions.read_raw_dir(raw, five_core=False).catalog) == 6


def test_missing_column_names_the_file_and_column(tmp_path):
    raw = make_interactions_dir(tmp_path, {"interactions.csv": "user,item,time\nu1,i1,5\n"})
    with pytest.raises(InputError, match=r"interactions\.csv: missing column timestamp"):
        interactions.read_raw_dir(raw)
    raw = make_interactions_dir(
        tmp_path, {"interactions.csv": INTERACTIONS, "items.csv": "item,title\ni1,A\n"}, "b"
    )
    with pytest.raises(ValueError, match=r"items\.csv: missing column text"):
        interactions.read_raw_dir(raw, five_core=False)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("u1,i2,Infinity,4", "timestamp must be an integer"),
        ("u1,i2,NaN,4", "timestamp must be an integer"),
        ("u1,i2,1e300,4", "timestamp must be an integer"),
        ("u1,i\x002,200,4", "must not contain a NUL byte"),
    ],
)
def test_unusable_values_name_file_and_line(tmp_path, row, message):
    lines = INTERACTIONS.splitlines()
    lines[2] = row  # line 3
    raw = make_interactions_dir(tmp_path, {"interactions.csv": "\n".join(lines)})
    with pytest.raises(ValueError, match=rf"interactions\.csv:3: .*{message}"):
        interactions.read_raw_dir(raw, five_core=False)


def test_bad_rows_name_file_and_line_or_are_skipped(tmp_path):
    lines = INTERACTIONS.splitlines()
    lines[2] = "u1,i2,yesterday,4"  # line 3
    lines[4] = "u2,i2,200"  # line 5: a field short of the header
    raw = make_interactions_dir(tmp_path, {"interactions.csv": "\n".join(lines)})
    with pytest.raises(ValueError, match=r"interactions\.csv:3: timestamp must be an integer"):
        interactions.read_raw_dir(raw, five_core=False)
    ds = interactions.read_raw_dir(raw, five_core=False, skip_bad_lines=True)
    assert ds.report["bad_interaction_lines"] == 2 and ds.histories.items.size == 6
    assert "interactions.csv:3:" in ds.report["first_bad_interaction_line"]
    raw = make_interactions_dir(
        tmp_path, {"interactions.csv": "user,item,timestamp\nu1,i1,1\n,i2,2\n"}, "b"
    )
    with pytest.raises(ValueError, match=r"interactions\.csv:3: user and item must be non-empty"):
        interactions.read_raw_dir(raw, five_core=False)
    raw = make_interactions_dir(
        tmp_path, {"interactions.csv": INTERACTIONS, "items.csv": ITEMS + "i1,again,\n"}, "c"
    )
    with pytest.raises(ValueError, match=r"items\.csv:5: item 'i1' already has a row \(line 2\)"):
        interactions.read_raw_dir(raw, five_core=False)


def test_missing_and_ambiguous_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        interactions.read_raw_dir(tmp_path / "nope")
    raw = make_interactions_dir(tmp_path, {"items.csv": ITEMS})
    with pytest.raises(FileNotFoundError, match=r"shop: expected interactions\.csv"):
        interactions.read_raw_dir(raw)
    (raw / "interactions.csv").write_text(INTERACTIONS)
    (raw / "interactions.tsv").write_text(INTERACTIONS)
    with pytest.raises(ValueError, match="interactions.csv and interactions.tsv are here"):
        interactions.read_raw_dir(raw)


@pytest.mark.parametrize("target", ["interactions.csv.gz", "items.csv.gz"])
def test_truncated_gzip_names_the_file(tmp_path, target):
    raw = make_interactions_dir(
        tmp_path, {"interactions.csv.gz": INTERACTIONS, "items.csv.gz": ITEMS}
    )
    write_truncated_gzip(raw / target, INTERACTIONS if target.startswith("inter") else ITEMS)
    with pytest.raises(ValueError, match=target.replace(".", r"\.") + r": cannot read past line"):
        interactions.read_raw_dir(raw, five_core=False)


def test_non_utf8_names_the_file(tmp_path):
    raw = make_interactions_dir(tmp_path, {"interactions.csv": INTERACTIONS})
    (raw / "items.csv").write_bytes("item,text\ni1,caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"items\.csv: cannot read past line \d+: not UTF-8"):
        interactions.read_raw_dir(raw, five_core=False)
