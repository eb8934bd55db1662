"""experiments/pipeline/artifacts.py: every consumer of a trained retriever checks the inputs
fingerprint it was trained under and refuses one of other SIDs in one line that names it and the
command that retrains it."""

import shutil

import numpy as np
import pytest

from data import atomic
from experiments import cli
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401


@pytest.fixture(scope="module")
def stale(workdir, tmp_path_factory):  # noqa: F811
    """A work directory whose retrievers were trained before its SIDs changed (items swapped)."""
    w = tmp_path_factory.mktemp("stale") / "w"
    shutil.copytree(workdir, w)
    for split in (["--split", "loo"], ["--cold-start", "0.02"]):
        assert cli.main(["train-retriever", "--workdir", str(w), *split, *TRAIN_FAST]) == 0
    assert cli.main(["eval-warm", "--workdir", str(w)]) == 0  # up to date: accepted
    sids = np.load(w / "tokenizer" / "sids.npy")
    atomic.save_npy(w / "tokenizer" / "sids.npy", np.ascontiguousarray(sids[::-1]))
    return w


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["eval-warm"], "retriever_loo"),
        (["eval-cold-start", "--cold-start", "0.02"], "retriever_cold_0.02"),
        (["train-draft", "--split", "loo"], "retriever_loo"),
        (["bench-decode"], "retriever_loo"),
    ],
    ids=lambda x: x[0] if isinstance(x, list) else x,
)
def test_a_retriever_of_other_sids_is_refused_in_one_line(stale, argv, name, capsys):
    capsys.readouterr()
    code = cli.main([argv[0], "--workdir", str(stale), *argv[1:]])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, lines
    assert name in lines[0] and "inputs fingerprint differs" in lines[0], lines[0]
    assert "genret train-retriever" in lines[0], lines[0]
