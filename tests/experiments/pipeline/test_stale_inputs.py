"""Every command that reads a trained retriever, or results computed from one, refuses in one
line one whose tokenizer was trained again under another config since (the producing stage's
config changed): parametrized over the commands, each naming the stale retriever and the command
that retrains it. The report also refuses results of a retriever trained again after them."""

import shutil
import subprocess
import sys

import numpy as np
import pytest

from experiments import cli
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST

TOKENIZER_FAST = ["--set", "rqvae.num_steps=20"]


@pytest.fixture(scope="module")
def retrained(tmp_path_factory):
    """A tiny work directory with trained retrievers, whose tokenizer was then trained again
    under another seed (`--set rqvae.seed=...`), so that its Semantic IDs changed."""
    w = tmp_path_factory.mktemp("stale_inputs") / "w"
    assert cli.main(["prepare", "--workdir", str(w), "--config", "tiny"]) == 0
    assert cli.main(["train-tokenizer", "--workdir", str(w), *TOKENIZER_FAST]) == 0
    for split in (["--split", "loo"], ["--cold-start", "0.02"], ["--split", "cold-val"]):
        extra = ["--cold-start", "0.02"] if split[-1] == "cold-val" else []
        assert cli.main(["train-retriever", "--workdir", str(w), *split, *extra, *TRAIN_FAST]) == 0
    assert cli.main(["eval-warm", "--workdir", str(w)]) == 0  # up to date: accepted
    before = np.load(w / "tokenizer" / "sids.npy")
    shutil.rmtree(w / "tokenizer")
    argv = ["train-tokenizer", "--workdir", str(w), *TOKENIZER_FAST, "--set", "rqvae.seed=7"]
    assert cli.main(argv) == 0
    assert not np.array_equal(np.load(w / "tokenizer" / "sids.npy"), before)
    return w


CONSUMERS = [
    (["eval-warm"], "retriever_loo"),
    (["eval-cold-start", "--cold-start", "0.02"], "retriever_cold_0.02"),
    (["diagnose", "--cold-start", "0.02"], "retriever_coldval_0.02"),
    (["train-draft", "--split", "loo"], "retriever_loo"),
    (["bench-decode"], "retriever_loo"),
    (["report"], "retriever_loo"),  # results/warm.json evaluated it
]


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "name"), CONSUMERS, ids=[c[0][0] for c in CONSUMERS])
def test_a_retriever_older_than_its_tokenizer_is_refused(retrained, argv, name, capsys):
    capsys.readouterr()
    code = cli.main([argv[0], "--workdir", str(retrained), *argv[1:]])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, lines
    assert name in lines[0] and "genret train-retriever" in lines[0], lines[0]


@pytest.mark.slow
def test_serve_refuses_it_before_listening(retrained):
    out = subprocess.run(
        [sys.executable, "-c", "from experiments.cli import console; console()", "serve"]
        + ["--workdir", str(retrained), "--split", "loo", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 1 and len(lines) == 1, out.stderr[-2000:]
    assert "retriever_loo" in lines[0] and "genret train-retriever" in lines[0], lines[0]


@pytest.mark.slow
def test_the_report_refuses_results_of_a_retriever_trained_again(retrained, tmp_path, capsys):
    w = tmp_path / "w"
    shutil.copytree(retrained, w)
    # Trained again (on the new SIDs): results/warm.json describes the weights it replaced.
    argv = ["train-retriever", "--workdir", str(w), "--split", "loo", *TRAIN_FAST]
    assert cli.main([*argv, "--set", "seqmodel.seed=3"]) == 0
    capsys.readouterr()
    assert cli.main(["report", "--workdir", str(w)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "warm.json" in lines[0] and "trained again" in lines[0], lines
