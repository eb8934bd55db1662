"""docs/scripts/budget_evals.sh: which retrievers each k-ensemble names, for any pipeline seed."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "scripts" / "budget_evals.sh"

# Stands in for `genret eval-warm`: writes the --set it was given as results/warm.json.
FAKE_GENRET = """#!/usr/bin/env bash
set -e
while [ $# -gt 0 ]; do
  case "$1" in
    --workdir) wd=$2; shift 2 ;;
    --set) s=$2; shift 2 ;;
    *) shift ;;
  esac
done
mkdir -p "$wd/results"
printf '{"set": "%s"}' "$s" > "$wd/results/warm.json"
"""


def _workdir(root: Path, seeds: list[int]) -> Path:
    src = root / "src"
    names = ["prepared", "tokenizer", "retriever_loo"] + [f"retriever_loo_seed{s}" for s in seeds]
    for name in names:
        (src / name).mkdir(parents=True)
    (src / "config.json").write_text("{}")
    return src


def _run(tmp_path: Path, src: Path, ks: str | None = None) -> subprocess.CompletedProcess:
    fake = tmp_path / "genret"
    fake.write_text(FAKE_GENRET)
    fake.chmod(0o755)
    env = {**os.environ, "GENRET": str(fake)}
    if ks is not None:
        env["KS"] = ks
    return subprocess.run(
        ["bash", str(SCRIPT), str(src), str(tmp_path / "dst")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.mark.parametrize(
    ("seeds", "expected"),
    [
        ([1, 2, 3], ["", "1", "1,2"]),  # pipeline seed 0
        ([9, 10, 11], ["", "9", "9,10"]),  # pipeline seed 2: numeric order, not 10 < 9
    ],
)
def test_each_k_names_the_first_k_retrievers(tmp_path, seeds, expected):
    src = _workdir(tmp_path, seeds)
    done = _run(tmp_path, src)
    assert done.returncode == 0, done.stderr
    got = [json.loads((tmp_path / "dst" / f"k{k}.json").read_text())["set"] for k in (1, 2, 3)]
    assert got == [f"eval.warm_ensemble_seeds={s}" for s in expected]
    for s in seeds:
        assert (tmp_path / "dst" / f"retriever_loo_seed{s}").resolve() == (
            src / f"retriever_loo_seed{s}"
        ).resolve()


def test_a_k_past_the_retrievers_is_refused_before_anything_is_written(tmp_path):
    src = _workdir(tmp_path, [5, 6, 7])
    done = _run(tmp_path, src, ks="4")
    assert done.returncode == 2
    assert "k=4 is not in 1..3" in done.stderr
    assert not (tmp_path / "dst").exists()


def test_a_directory_without_seeds_is_refused(tmp_path):
    src = _workdir(tmp_path, [])
    done = _run(tmp_path, src)
    assert done.returncode == 2
    assert "no retriever_loo" in done.stderr
