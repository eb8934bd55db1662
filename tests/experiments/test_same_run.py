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
        ({"sid": 4}, "tokenizer SIDs differ"),
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


def test_a_fingerprint_stands_for_its_work_directory(tmp_path):
    a = _work(tmp_path / "a")
    fp = tmp_path / "records" / "a.json"
    out = _run(a, "--write", fp)
    assert out.returncode == 0, out.stderr
    assert fp.stat().st_size < 20_000
    assert fp.stat().st_mode & 0o044  # readable by others, as any written file
    assert not [p for p in fp.parent.iterdir() if p.name.startswith(".")]  # no temporary left
    same = _run(fp, _work(tmp_path / "b", latency=2.5, seconds=990.0))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "retriever_loo/metrics.jsonl: 4 numbers, digest equal" in same.stdout


@pytest.mark.parametrize(
    "change, named",
    [
        ({"recall": 0.0797}, "results/warm.json /methods/static_all_items/recall@10"),
        ({"loss": 0.78}, "retriever_loo/metrics.jsonl: 4 vs 4 numbers, digest differs"),
        ({"sid": 4}, "tokenizer SIDs differ"),
    ],
)
def test_a_fingerprint_names_a_changed_number(tmp_path, change, named):
    fp = tmp_path / "a.json"
    assert _run(_work(tmp_path / "a"), "--write", fp).returncode == 0
    out = _run(fp, _work(tmp_path / "b", **change))
    assert out.returncode == 1
    assert named in out.stdout


def test_against_a_fingerprint_the_run_is_named_by_its_path(tmp_path):
    fp = tmp_path / "a.json"
    assert _run(_work(tmp_path / "a"), "--write", fp).returncode == 0
    b = _work(tmp_path / "b")
    (b / "tokenizer" / "sids.npy").unlink()
    out = _run(fp, b)
    assert out.returncode == 1
    assert f"tokenizer SIDs missing in {b}" in out.stdout


def test_missing_sids_or_retriever_in_the_run_are_differences(tmp_path):
    a, b = _work(tmp_path / "a"), _work(tmp_path / "b")
    (b / "tokenizer" / "sids.npy").unlink()
    out = _run(a, b)
    assert out.returncode == 1
    assert f"tokenizer SIDs missing in {b}" in out.stdout
    c = _work(tmp_path / "c")
    for f in (c / "retriever_loo").iterdir():
        f.unlink()
    out = _run(a, c)
    assert out.returncode == 1
    assert f"retriever_loo/metrics.jsonl missing in {c}" in out.stdout


def test_a_nan_reproduced_is_equal(tmp_path):
    out = _run(_work(tmp_path / "a", loss=float("nan")), _work(tmp_path / "b", loss=float("nan")))
    assert out.returncode == 0, out.stdout


def test_a_file_that_is_not_a_fingerprint_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": 99}')
    out = _run(bad, _work(tmp_path / "b"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "bad.json: not a fingerprint of format 1" in out.stderr
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{")
    out = _run(garbled, _work(tmp_path / "c"))
    assert out.returncode == 2 and "garbled.json: not a fingerprint" in out.stderr
    usage = _run(_work(tmp_path / "d"))
    assert usage.returncode == 2 and "give RUN" in usage.stderr
