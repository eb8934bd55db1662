"""The co-occurrence prior in the leave-one-out beams (eval.warm_cooc_weight): the prior by hand,
config checks, the ledger keys, and the method in `genret eval-warm`."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from data.errors import ArgumentError
from data.types import Histories
from experiments import cli
from experiments import config as config_lib
from experiments.evaluation.baselines import CooccurrencePrior
from experiments.pipeline.layout import RunLayout
from experiments.pipeline.workflow import build_stages
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401


def test_prior_by_hand():
    # Adjacent pairs, both orders: (0,1) twice, (1,2) once, (3,4) once; item 5 is never in a pair.
    train = Histories.from_lists([[0, 1, 2], [1, 0], [3, 4], [5]])
    prior = CooccurrencePrior.fit(train, 6, smoothing=2.0)
    pop = np.array([2, 2, 1, 1, 1, 1]) + 1.0  # add-one counts of the training items
    pop /= pop.sum()
    lp = prior.log_prob(np.array([1, 5]))
    counts_of_1 = np.array([2, 0, 1, 0, 0, 0])  # 1 is next to 0 twice and to 2 once
    np.testing.assert_allclose(np.exp(lp[0]), (counts_of_1 + 2 * pop) / (3 + 2))
    np.testing.assert_allclose(np.exp(lp[1]), pop)  # no pair: popularity alone
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="smoothing"):
        CooccurrencePrior.fit(train, 6, smoothing=0.0)


@pytest.mark.parametrize(
    "override, message",
    [
        ("eval.warm_cooc_weight=-1", "eval.warm_cooc_weight=-1.0: must be finite and >= 0"),
        ("eval.warm_cooc_weight=inf", "eval.warm_cooc_weight=inf"),
        ("eval.warm_cooc_smoothing=0", "eval.warm_cooc_smoothing=0.0: must be finite and > 0"),
    ],
)
def test_bad_settings_name_the_key(override, message):
    with pytest.raises(ArgumentError, match=message):
        config_lib.validate(config_lib.apply_overrides(config_lib.load_preset("tiny"), [override]))


def test_the_prior_enters_the_leave_one_out_key_alone(tmp_path):
    cfg = config_lib.load_preset("tiny")

    def keys(**kw):
        c = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, **kw))
        return {s.name: s.key_parts for s in build_stages(c, RunLayout(tmp_path), progress=False)}

    off = keys()
    for on in (keys(warm_cooc_weight=0.5), keys(warm_cooc_smoothing=3.0)):
        assert on["eval_warm"] != off["eval_warm"]
        assert all(on[n] == off[n] for n in off if n != "eval_warm")


@pytest.mark.slow
def test_eval_warm_reports_the_prior_beside_the_retriever(workdir: Path, capsys):  # noqa: F811
    w = str(workdir)
    loo = workdir / "retriever_loo"
    if not (loo / "train_summary.json").exists():
        assert cli.main(["train-retriever", "--workdir", w, "--split", "loo", *TRAIN_FAST]) == 0
    path = workdir / "results" / "validation_warm.json"
    on = ["--set", "eval.warm_cooc_weight=2", "--set", "eval.warm_cooc_smoothing=1"]
    assert cli.main(["eval-warm", "--workdir", w, "--validation", *on]) == 0
    res = json.loads(path.read_text())
    assert res["cooccurrence_prior"] == {"weight": 2.0, "smoothing": 1.0}
    keys = ("recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10")
    hybrid = [res["methods"]["static_cooccurrence"][k] for k in keys]
    retriever = [res["methods"]["static_all_items"][k] for k in keys]
    assert all(0 <= x <= 1 for x in hybrid) and hybrid != retriever  # a strong prior reorders
    assert res["methods"]["static_cooccurrence"]["item_rate"] == 1.0  # still only catalog items
    assert "`static_cooccurrence` is `static_all_items` plus 2 x" in capsys.readouterr().out
    # The ensemble path: a retriever averaged with itself decodes as it does alone.
    assert cli.main(["eval-warm", "--workdir", w, "--validation", *on, "--ensemble", str(loo)]) == 0
    twice = json.loads(path.read_text())["methods"]["static_cooccurrence"]
    assert [twice[k] for k in keys] == pytest.approx(hybrid)
    # Off again (a later --set): the method is gone.
    off = ["--set", "eval.warm_cooc_weight=0"]
    assert cli.main(["eval-warm", "--workdir", w, "--validation", *off]) == 0
    assert "static_cooccurrence" not in json.loads(path.read_text())["methods"]
