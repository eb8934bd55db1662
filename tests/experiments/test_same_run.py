"""docs/scripts/same_run.py: equal runs pass though their timings differ; one changed recall,
loss or SID fails and is named; a folder that is not a finished run is one line, exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "scripts" / "same_run.py"


def _work(root: Path, *, recall=0.0796, latency=1.6, loss=0.77, seconds=850.0, sid=3) -> Path:
    (root / "results").mkdir(parents=True)
    (root / "tokenizer").mkdir()
    (root / "retriever_loo").mkdir()
    warm = {
        "seed": 0,
        "methods": {"static_all_items": {"recall@10": recall, "latency_ms_median": latency}},
        "environment": {"cpu": f"cpu {latency}"},
    }
    (root / "results" / "warm.json").write_text(json.dumps(warm))
    np.save(root / "tokenizer" / "sids.npy", np.array([[1, 2, sid]], np.int32))
    summary = {"best_step": 4275, "train_seconds_this_run": seconds, "tokens_per_s_this_run": 1e4}
    (root / "retriever_loo" / "train_summary.json").write_text(json.dumps(summary))
    rows = [
        {"step": 1, "loss": 3.0, "grad_norm": 0.5},
        {"step": 2, "loss": loss, "tokens_per_s": seconds, "train_seconds": seconds},
        {"step": 2, "valid_recall@10": 0.09},
    ]
    (root / "retriever_loo" / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)))
    return root


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True
    )


def test_equal_runs_pass_though_their_timings_differ(tmp_path):
    a = _work(tmp_path / "a")
    b = _work(tmp_path / "b", latency=2.5, seconds=990.0)
    out = _run(a, b)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "results/warm.json: 2 numbers, 0 differ" in out.stdout
    assert "retriever_loo/metrics.jsonl: 4 numbers, 0 differ" in out.stdout
    assert out.stdout.strip().endswith("all equal")


@pytest.mark.parametrize(
    "change, named",
    [
        ({"recall": 0.0797}, "results/warm.json /methods/static_all_items/recall@10"),
        ({"loss": 0.78}, "retriever_loo/metrics.jsonl step 2/loss: 0.77 vs 0.78"),
        ({"sid": 4}, "tokenizer/sids.npy differ"),
    ],
)
def test_one_changed_number_fails_and_is_named(tmp_path, change, named):
    out = _run(_work(tmp_path / "a"), _work(tmp_path / "b", **change))
    assert out.returncode == 1
    assert named in out.stdout


def test_a_folder_without_results_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    out = _run(_work(tmp_path / "a"), tmp_path / "empty")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "empty: no results/ folder" in out.stderr
