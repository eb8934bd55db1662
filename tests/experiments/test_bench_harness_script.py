"""docs/scripts/bench_harness_layouts.py: times both harness layouts (or the values of one
field) on a prepared work directory and prints one table row per variant."""

import pytest

from tests.experiments.helpers import prepare_tiny, run_docs_script


@pytest.mark.slow
def test_both_layouts_are_timed(tmp_path):
    w = prepare_tiny(tmp_path / "w")
    out = run_docs_script(
        "bench_harness_layouts.py", str(w), "sasrec", "--steps", "2", "--set", "sasrec.batch_size=8"
    )
    assert out.returncode == 0, out.stderr
    rows = [
        line
        for line in out.stdout.splitlines()
        if line.startswith("| causal") or line.startswith("| bucketed")
    ]
    assert len(rows) == 2, out.stdout
    for row in rows:
        per_epoch, median, mean, epoch = (float(c) for c in row.strip("|").split("|")[1:])
        assert per_epoch >= 1 and 0 < median <= 1e5 and mean > 0 and epoch >= 0


@pytest.mark.slow
def test_the_values_of_one_field_are_timed(tmp_path):
    w = prepare_tiny(tmp_path / "w")
    args = ("--steps", "2", "--set", "sasrec.batch_size=8", "--vary", "sampled_negatives=0,4")
    out = run_docs_script("bench_harness_layouts.py", str(w), "sasrec", *args)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| sampled_negatives=")]
    assert [r.split("|")[1].strip() for r in rows] == ["sampled_negatives=0", "sampled_negatives=4"]
