"""genret eval-warm --validation: every user's second-to-last item, never the test targets."""

import json
from pathlib import Path

from data.prepared import load_prepared
from data.splits import leave_one_out
from experiments import cli
from tests.experiments.test_eval_cold_start import TRAIN_FAST, workdir  # noqa: F401


def test_validation_scores_second_to_last_items(workdir: Path, capsys):  # noqa: F811
    w = str(workdir)
    assert cli.main(["train-retriever", "--workdir", w, "--split", "loo", *TRAIN_FAST]) == 0
    assert cli.main(["eval-warm", "--workdir", w, "--validation"]) == 0
    res = json.loads((workdir / "results" / "validation_warm.json").read_text())
    assert res["split"] == "validation"
    assert not (workdir / "results" / "warm.json").exists()  # the test result is untouched
    split = leave_one_out(load_prepared(workdir / "prepared"))
    assert res["num_test_users"] == len(split.valid_targets)
    assert set(res["methods"]) == {"unconstrained", "static_all_items", "item_cooccurrence"}
    assert 0 <= res["methods"]["static_all_items"]["recall@10"] <= 1
    capsys.readouterr()
    assert cli.main(["eval-warm", "--workdir", w, "--validation", "--decoder", "nezha"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--validation" in err[0]
