"""`genret train-tokenizer`: SIDs from a prepared dataset, bad input, kill and resume."""

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments import cli
from rqvae import load_sids
from tests.experiments.helpers import wait_for_checkpoint

FAST = ["--config", "tiny", "--set", "rqvae.num_steps=30", "--no-progress"]


@pytest.fixture(scope="module")
def prepared_workdir(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("w")
    assert (
        cli.main(["prepare", "--dataset", "synthetic", "--workdir", str(w), "--config", "tiny"])
        == 0
    )
    return w


def _fresh(prepared_workdir: Path, tmp_path: Path, name: str) -> Path:
    w = tmp_path / name
    w.mkdir()
    shutil.copytree(prepared_workdir / "prepared", w / "prepared")
    return w


@pytest.mark.slow
def test_writes_unique_sids_for_every_item(prepared_workdir, tmp_path, capsys):
    w = _fresh(prepared_workdir, tmp_path, "a")
    assert cli.main(["train-tokenizer", "--workdir", str(w), *FAST]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    sids, asins = load_sids(w / "tokenizer")
    assert len(sids) == len(asins) == summary["num_items"]
    assert len(np.unique(sids, axis=0)) == len(sids)
    assert sids.shape[1] == 4 and sids.max() < 16
    assert (w / "tokenizer" / "metrics.json").exists()
    assert json.loads((w / "config.json").read_text())["rqvae"]["num_steps"] == 30


@pytest.mark.slow
def test_fit_on_warm(prepared_workdir, tmp_path, capsys):
    w = _fresh(prepared_workdir, tmp_path, "a")
    assert cli.main(["train-tokenizer", "--workdir", str(w), *FAST, "--fit-on", "warm"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_fit_items"] < summary["num_items"]


def test_missing_prepared_dataset_is_one_line_error(tmp_path, capsys):
    assert cli.main(["train-tokenizer", "--workdir", str(tmp_path), *FAST]) == 1
    err = capsys.readouterr().err
    assert "genret prepare" in err and "Traceback" not in err


@pytest.mark.slow
def test_codebook_larger_than_catalog_is_one_line_error(prepared_workdir, tmp_path, capsys):
    w = _fresh(prepared_workdir, tmp_path, "a")
    rc = cli.main(
        ["train-tokenizer", "--workdir", str(w), *FAST, "--set", "rqvae.codebook_size=4096"]
    )
    assert rc == 1
    assert "rqvae.codebook_size=4096" in capsys.readouterr().err


@pytest.mark.slow
def test_killed_process_resumes_to_the_same_sids(prepared_workdir, tmp_path):
    args = [*FAST[:2], "--set", "rqvae.num_steps=400", "--set", "rqvae.checkpoint_every=20"]
    ref = _fresh(prepared_workdir, tmp_path, "ref")
    assert cli.main(["train-tokenizer", "--workdir", str(ref), *args, "--no-progress"]) == 0
    w = _fresh(prepared_workdir, tmp_path, "killed")
    cmd = [sys.executable, "-m", "experiments.cli", "train-tokenizer", "--workdir", str(w), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpts = w / "tokenizer" / "checkpoints"

    def running():
        assert proc.poll() is None, "ended before its first checkpoint: no resume to test"

    try:
        wait_for_checkpoint(ckpts, running, limit_s=120)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (w / "tokenizer" / "sids.npy").exists(), "killed too late to test a resume"
    assert cli.main(["train-tokenizer", "--workdir", str(w), *args, "--no-progress"]) == 0
    metrics = json.loads((w / "tokenizer" / "metrics.json").read_text())
    assert metrics["resumed_from_step"] > 0
    np.testing.assert_array_equal(load_sids(w / "tokenizer")[0], load_sids(ref / "tokenizer")[0])
