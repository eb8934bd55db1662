"""docs/scripts/bench_harness_layouts.py: times both harness layouts on a prepared work
directory and prints one table row per layout."""

import subprocess
import sys
from pathlib import Path

import pytest

from experiments import cli

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "scripts" / "bench_harness_layouts.py"


@pytest.mark.slow
def test_both_layouts_are_timed(tmp_path):
    w = tmp_path / "w"
    assert (
        cli.main(["prepare", "--dataset", "synthetic", "--config", "tiny", "--workdir", str(w)])
        == 0
    )
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(w),
            "sasrec",
            "--steps",
            "2",
            "--set",
            "sasrec.batch_size=8",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
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
