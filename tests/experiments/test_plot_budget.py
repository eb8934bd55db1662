"""docs/scripts/plot_budget.py: runs of one dataset told apart by a label, and a bad dataset
named in one line before anything is written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "scripts" / "plot_budget.py"
ROOT = SCRIPT.parents[2]


def _pipeline(root: Path, recalls: list[float]) -> str:
    """Budget files k1..k(n-1).json and a work directory whose warm.json holds n retrievers."""
    budget, work = root / "budget", root / "work"
    (work / "results").mkdir(parents=True)
    budget.mkdir()
    for k, r in enumerate(recalls, 1):
        run = {
            "ensemble": [f"r{i}" for i in range(k)],
            "methods": {
                "static_all_items": {
                    "recall@5": r / 2,
                    "ndcg@5": r / 3,
                    "recall@10": r,
                    "ndcg@10": r / 2,
                }
            },
        }
        out = work / "results" / "warm.json" if k == len(recalls) else budget / f"k{k}.json"
        out.write_text(json.dumps(run))
    return f"{budget}:{work}"


def _plot(tmp_path: Path, *specs: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "out.png"), *specs],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_labels_tell_two_pipelines_of_one_dataset_apart(tmp_path):
    pytest.importorskip("matplotlib")
    one = _pipeline(tmp_path / "a", [0.040, 0.044])
    two = _pipeline(tmp_path / "b", [0.042, 0.045, 0.046])
    done = _plot(tmp_path, f"sports/seed 1={one}", f"sports/seed 2={two}")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| sports/seed")]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| sports/seed 1", "1"],
        ["| sports/seed 1", "2"],
        ["| sports/seed 2", "1"],
        ["| sports/seed 2", "2"],
        ["| sports/seed 2", "3"],
    ]
    assert "| 4.60 |" in rows[-1]
    assert (tmp_path / "out.png").stat().st_size > 0


def test_unknown_dataset_is_one_line_and_writes_nothing(tmp_path):
    done = _plot(tmp_path, f"nosuch/seed 1={_pipeline(tmp_path, [0.04])}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "plot_budget: nosuch/seed 1="
        + f"{tmp_path}/budget:{tmp_path}/work: dataset 'nosuch' is not one of "
        + "['beauty', 'sports', 'toys']"
    ]
    assert not (tmp_path / "out.png").exists()


def test_missing_pipeline_result_is_one_line(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "budget").mkdir()
    done = _plot(tmp_path, f"toys={tmp_path / 'budget'}:{tmp_path / 'nowork'}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"plot_budget: {tmp_path / 'nowork' / 'results' / 'warm.json'}: no such file "
        f"(run the pipeline in {tmp_path / 'nowork'} first)"
    ]
    assert not (tmp_path / "out.png").exists()
