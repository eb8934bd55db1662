"""genret pipeline on the tiny preset: every artifact and the report; a rerun skips every stage."""

import json
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
