"""The item-level retriever through the commands: leave-one-out and cold-start training and
evaluation with STATIC, and a one-line refusal of NEZHA draft heads."""

import json
import shutil
from pathlib import Path

import pytest

from experiments import cli
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401

ITEM = ["--set", "seqmodel.arch=item", "--set", "seqmodel.layout=bucketed"]


@pytest.mark.slow
def test_item_arch_trains_and_evaluates_warm_and_cold(workdir: Path, tmp_path, capsys):  # noqa: F811
    w = tmp_path / "w"
    shutil.copytree(workdir, w, ignore=shutil.ignore_patterns("retriever_*", "results"))
    base = ["--workdir", str(w), "--no-progress"]
    assert cli.main(["train-retriever", *base, "--split", "loo", *TRAIN_FAST, *ITEM]) == 0
    assert (
        json.loads((w / "retriever_loo" / "retriever.json").read_text())["seqmodel"]["arch"]
        == "item"
    )
    assert cli.main(["eval-warm", "--workdir", str(w)]) == 0
    warm = json.loads((w / "results" / "warm.json").read_text())
    constrained = warm["methods"]["static_all_items"]
    assert constrained["valid_rate"] == 1.0
    assert 0.0 <= constrained["recall@5"] <= constrained["recall@10"] <= 1.0

    assert cli.main(["train-retriever", *base, "--cold-start", "0.05", *TRAIN_FAST, *ITEM]) == 0
    assert cli.main(["eval-cold-start", "--workdir", str(w), "--cold-start", "0.05"]) == 0
    cold = json.loads((w / "results" / "cold_start_0.05.json").read_text())
    assert cold["methods"]["static"]["valid_rate"] == 1.0
    assert cold["methods"]["static"]["cold_rate"] == 1.0

    capsys.readouterr()
    assert cli.main(["train-draft", "--workdir", str(w), "--split", "loo", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "item-level retriever" in err[0]
