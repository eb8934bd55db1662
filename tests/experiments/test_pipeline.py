"""genret pipeline on the tiny preset: every artifact and the report; a rerun skips every stage."""

import json
import shutil
from pathlib import Path

import pytest

from data import atomic, prepared
from experiments import cli, config


def _count_calls(monkeypatch, module, name: str, calls: list, only=lambda *a, **k: True):
    real = getattr(module, name)

    def counted(*args, **kwargs):
        if only(*args, **kwargs):
            calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


@pytest.mark.slow
def test_pipeline_end_to_end_then_skips(tmp_path, capsys, monkeypatch):
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(tmp_path), "--config", "tiny"]
    argv += ["--set", "eval.cold_start_fractions=0.05", "--set", "seqmodel.num_epochs=1"]
    calls = []
    _count_calls(monkeypatch, config, "validate", calls)
    _count_calls(monkeypatch, prepared, "load_prepared", calls)
    config_file = tmp_path / "config.json"
    _count_calls(
        monkeypatch, atomic, "write_text", calls, lambda path, _: Path(path) == config_file
    )
    assert cli.main(argv) == 0
    # One run: the config resolved (and validated) once, written once, the dataset loaded once.
    assert sorted(calls) == ["load_prepared", "validate", "write_text"], calls
    results = tmp_path / "results"
    cold = json.loads((results / "cold_start_0.05.json").read_text())
    assert set(cold["methods"]) == {"unconstrained", "random", "content", "static"}
    warm = json.loads((results / "warm.json").read_text())
    assert set(warm["methods"]) == {"unconstrained", "static_all_items", "item_cooccurrence"}
    report = (results / "report.md").read_text()
    assert "Cold-start retrieval" in report and "Leave-one-out" in report
    assert (results / "recall_at_1.png").stat().st_size > 1000
    ledger = json.loads((tmp_path / "stages.json").read_text())
    assert set(ledger) == {
        "tokenizer",
        "retriever_cold_0.05",
        "eval_cold_0.05",
        "retriever_loo",
        "eval_warm",
    }
    capsys.readouterr()
    # Same config: nothing reruns.
    assert cli.main(["pipeline", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("up to date, skipped") == 5, out


def test_bad_fraction_fails_before_any_stage(tmp_path, capsys):
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(tmp_path), "--config", "tiny"]
    assert cli.main([*argv, "--set", "eval.cold_start_fractions=0.02,0.7"]) == 1
    assert "(0, 0.5]" in capsys.readouterr().err
    assert not (tmp_path / "prepared").exists() and not (tmp_path / "stages.json").exists()


def _quality(result: dict) -> dict:
    """Every method's Recall/NDCG (not its timings)."""
    return {
        name: {k: v for k, v in m.items() if k.startswith(("recall@", "ndcg@"))}
        for name, m in result["methods"].items()
    }


@pytest.mark.slow
def test_pipeline_ensemble_of_seeds_without_cold_start(tmp_path, capsys):
    w = str(tmp_path)
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", w, "--config", "tiny"]
    argv += ["--set", "seqmodel.num_epochs=1", "--set", "eval.cold=false"]
    argv += ["--set", "eval.warm_ensemble_seeds=3", "--no-progress"]
    assert cli.main(argv) == 0
    assert "leave-one-out:" not in capsys.readouterr().err  # --no-progress: no evaluation bar
    ledger = json.loads((tmp_path / "stages.json").read_text())
    assert set(ledger) == {"tokenizer", "retriever_loo", "retriever_loo_seed3", "eval_warm"}
    assert not list((tmp_path / "results").glob("cold_start_*.json"))
    member = json.loads((tmp_path / "retriever_loo_seed3" / "retriever.json").read_text())
    main = json.loads((tmp_path / "retriever_loo" / "retriever.json").read_text())
    assert (main["seqmodel"]["seed"], member["seqmodel"]["seed"]) == (0, 3)
    warm = json.loads((tmp_path / "results" / "warm.json").read_text())
    assert [Path(p).name for p in warm["ensemble"]] == ["retriever_loo", "retriever_loo_seed3"]
    # The same ensemble by hand (`eval-warm --ensemble DIR`, no configured seeds): same numbers.
    shutil.copytree(tmp_path / "results", tmp_path / "pipeline_results")
    by_hand = ["--ensemble", str(tmp_path / "retriever_loo_seed3")]
    by_hand += ["--set", "eval.warm_ensemble_seeds="]
    assert cli.main(["eval-warm", "--workdir", w, *by_hand]) == 0
    again = json.loads((tmp_path / "results" / "warm.json").read_text())
    assert _quality(again) == _quality(warm)
    # Alone, the main retriever ranks differently: the member counted.
    assert cli.main(["eval-warm", "--workdir", w]) == 0
    alone = json.loads((tmp_path / "results" / "warm.json").read_text())
    assert "ensemble" not in alone and _quality(alone) != _quality(warm)
    # A missing member: one line naming it and the command that trains it.
    shutil.rmtree(tmp_path / "retriever_loo_seed3")
    capsys.readouterr()
    assert cli.main(["eval-warm", "--workdir", w, "--set", "eval.warm_ensemble_seeds=3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "retriever_loo_seed3" in err[0] and "genret pipeline" in err[0]


@pytest.mark.parametrize(
    "sets, key",
    [
        (["eval.warm_ensemble_seeds=0"], "eval.warm_ensemble_seeds"),  # the main retriever's
        (["eval.warm_ensemble_seeds=2,2"], "eval.warm_ensemble_seeds"),
        (["eval.warm_ensemble_seeds=-1"], "eval.warm_ensemble_seeds"),
        (["eval.warm_ensemble_seeds=1", "eval.warm=false"], "eval.warm_ensemble_seeds"),
        (["eval.cold=false", "eval.warm=false"], "eval.cold"),
    ],
)
def test_bad_ensemble_or_empty_pipeline_fails_before_any_stage(tmp_path, capsys, sets, key):
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(tmp_path), "--config", "tiny"]
    for s in sets:
        argv += ["--set", s]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0], err
    assert not (tmp_path / "prepared").exists() and not (tmp_path / "stages.json").exists()
