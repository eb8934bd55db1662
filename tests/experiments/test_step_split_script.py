"""docs/scripts/step_split.py: the pinned compile has no split operation and the same results."""

import os

import pytest

from tests.experiments.helpers import run_docs_script


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="the script needs at least two CPUs to pin a thread to one",
)
def test_pinned_compile_drops_the_split_and_keeps_the_results():
    out = run_docs_script("step_split.py", "--num-items", "100000", "--reps", "3")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("| 1e+05"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    default, pinned = (int(x) for x in cells[1].split(" / "))
    assert default >= 1 and pinned == 0  # XLA splits the step's gathers unless pinned
    assert cells[2] == "True"  # the same tokens, scores and flags both ways
    assert all("x)" in c for c in cells[3:])  # three timings with their ratios
