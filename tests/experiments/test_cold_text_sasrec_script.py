"""docs/scripts/cold_text_sasrec.py: a text-only sequential model on a cold-start split. Its
softmax never holds a cold item, its batches cover every row once, its windows are each history's
last items, and its content-neighbour line is the harness's neighbour on the same split."""

import importlib.util
import sys

import numpy as np
import pytest

from data.splits import validation_split
from data.types import Histories
from experiments.evaluation.baselines import content_queries, cosines
from experiments.evaluation.profile import ContentProfile
from experiments.pipeline.artifacts import load_dataset
from experiments.pipeline.layout import RunLayout
from tests.experiments.helpers import ROOT, cold_val_neighbour, prepare_tiny, run_docs_script

# The script imports its sibling cold_text_views, as it does when run from docs/scripts.
sys.path.insert(0, str(ROOT / "docs" / "scripts"))
_spec = importlib.util.spec_from_file_location(
    "cold_text_sasrec", ROOT / "docs" / "scripts" / "cold_text_sasrec.py"
)
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)
standardized = script.standardized


def test_windows_are_each_history_s_last_items_left_padded():
    h = Histories.from_lists([[5, 6, 7, 8], [3], []])
    items, valid = script.windows(h, 2)
    np.testing.assert_array_equal(items, [[6, 7, 8], [0, 0, 3], [0, 0, 0]])
    np.testing.assert_array_equal(valid, [[1, 1, 1], [0, 0, 1], [0, 0, 0]])


def test_length_batches_cover_every_row_once_in_runs_of_similar_length():
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 40, size=203)
    batches = script.length_batches(lengths, 16, rng)
    flat = np.concatenate(batches)
    np.testing.assert_array_equal(np.sort(flat), np.arange(len(lengths)))
    assert sorted(len(b) for b in batches) == [11] + [16] * 12
    # Each batch's lengths are one run of the sorted lengths: no other row lies strictly inside.
    for b in batches:
        lo, hi = lengths[b].min(), lengths[b].max()
        assert set(np.flatnonzero((lengths > lo) & (lengths < hi))) <= set(b)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [(), ("--id-inputs",), ("--residual",)], ids=["text", "id_inputs", "residual"]
)
def test_script_runs_and_its_neighbour_is_the_harness_s(tmp_path, extra):
    w = prepare_tiny(tmp_path / "w")
    ds = load_dataset(RunLayout(w))
    split = validation_split(ds, 0.1)
    warm, col = script.softmax_columns(split.train, len(ds.catalog.texts))
    assert (col[split.cold_items] == -1).all()
    assert (col[split.train.items] >= 0).all() and len(warm) == (col >= 0).sum()

    out = run_docs_script(
        "cold_text_sasrec.py",
        str(w),
        "0.1",
        "--epochs",
        "2",
        "--every",
        "1",
        "--svd",
        "8",
        "--d-model",
        "16",
        *extra,
    )
    assert out.returncode == 0, out.stderr
    head = out.stdout.splitlines()[0]
    assert head.endswith(f"content neighbour {cold_val_neighbour(w, 0.1)}")
    rows = [
        line for line in out.stdout.splitlines() if line.startswith("| ") and "epoch" not in line
    ]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "2"]
    for row in rows:
        for cell in row.strip("|").split("|")[1:]:
            r1, r10 = (float(x) for x in cell.split(" / "))
            assert 0 <= r1 <= r10 <= 100, row


def test_bad_input_is_one_line(tmp_path):
    out = run_docs_script("cold_text_sasrec.py", str(tmp_path / "missing"), "0.02")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"cold_text_sasrec: {tmp_path / 'missing' / 'config.json'} is missing; make it with "
        f"`genret prepare --workdir {tmp_path / 'missing'}`"
    ]


def test_profile_band_gives_the_neighbour_at_every_position():
    """--residual's neighbour at position t, from the band over the rows' cosines, is the content
    neighbour's cosines for the history up to t."""
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(12, 5))
    profile = ContentProfile(recent=3, decay=0.8)
    seqs = [list(rng.choice(12, size=n, replace=False)) for n in (1, 4, 6)]
    items, valid = script.windows(Histories.from_lists(seqs), 6)
    unit, _ = content_queries(emb, Histories.from_lists(seqs), profile)
    to_all = cosines(unit, unit.T)
    band = script.profile_band(items.shape[1], profile.recent, profile.decay)[None] * valid[:, None]
    band = band / np.maximum(band.sum(-1, keepdims=True), 1e-12)  # as the script's step
    near = np.einsum("btu,bun->btn", band, to_all[items])
    for b, seq in enumerate(seqs):
        for t in range(len(seq)):
            prefix = Histories.from_lists([seq[: t + 1]])
            _, q = content_queries(emb, prefix, profile)
            want = cosines(q, unit.T)[0]
            col = items.shape[1] - len(seq) + t
            np.testing.assert_allclose(near[b, col], want, atol=1e-9)
