"""genret parallel and the pipeline's `parallel` stage on the tiny preset: the results file, the
validation split, the report row, a pipeline of that stage alone, and the `*_parallel` presets."""

import json
from pathlib import Path

import numpy as np
import pytest

from data.prepared import load_prepared
from data.splits import leave_one_out
from experiments import cli
from experiments import config as config_lib
from experiments.pipeline.workflow import build_stages
from tests.experiments.helpers import keyed_layout

FAST = [
    *("--set", "parallel.num_layers=1", "--set", "parallel.d_model=16"),
    *("--set", "parallel.num_heads=2", "--set", "parallel.mlp_dim=32"),
    *("--set", "parallel.batch_size=16", "--set", "parallel.max_steps=4"),
    *("--set", "parallel.eval_every=2", "--set", "parallel.eval_users=20"),
    *("--set", "parallel.num_codes=4", "--set", "parallel.codebook_size=16"),
    *("--set", "parallel.pca_dim=16"),
]
METRICS = {"recall@5", "recall@10", "ndcg@5", "ndcg@10"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("parallel")
    assert cli.main(["prepare", "--workdir", str(w), "--config", "tiny"]) == 0
    return w


def test_validation_then_test_ranking_of_one_trained_model(workdir: Path, capsys):
    w = str(workdir)
    argv = ["parallel", "--workdir", w, "--no-progress", *FAST]
    assert cli.main([*argv, "--validation"]) == 0
    res = json.loads((workdir / "results" / "validation_parallel.json").read_text())
    assert not (workdir / "results" / "parallel.json").exists()  # the test result is untouched
    split = leave_one_out(load_prepared(workdir / "prepared"))
    assert res["split"] == "validation" and res["num_test_users"] == len(split.valid_targets)
    assert set(res) >= {"methods", "history_excluded", "train", "codes", "seed", "environment"}
    m = res["methods"]["parallel_codes"]
    assert METRICS <= set(m) and all(0 <= m[k] <= 1 for k in METRICS)
    for k in METRICS:
        assert res["history_excluded"]["parallel_codes"][k] >= m[k], k
    assert res["train"]["steps"] == 4
    assert res["outside_holdout"]["num_users"] == len(split.valid_targets) - 20
    assert res["codes"]["num_items"] == len(load_prepared(workdir / "prepared").catalog.asins)
    codes = np.load(workdir / "parallel_loo" / "pq_codes.npy")
    assert codes.shape == (res["codes"]["num_items"], 4) and codes.max() < 16
    # The same trained model then ranks the test targets (restored, not retrained).
    capsys.readouterr()
    assert cli.main(argv) == 0
    test = json.loads((workdir / "results" / "parallel.json").read_text())
    assert test["split"] == "test" and test["train"]["train_seconds_this_run"] == 0.0
    assert test["train"]["train_seconds"] > 0  # the whole run's, kept on re-entry
    assert test["num_test_users"] == len(split.test_targets) and "outside_holdout" not in test
    assert json.loads(capsys.readouterr().out) == test["methods"]["parallel_codes"]
    # The report shows it in the leave-one-out table, with no generative retriever's result.
    assert cli.main(["report", "--workdir", w]) == 0
    report = (workdir / "results" / "report.md").read_text()
    assert "## Leave-one-out" in report and "| parallel_codes |" in report


def test_a_pipeline_of_the_parallel_stage_alone_then_skips(tmp_path, capsys):
    argv = ["pipeline", "--dataset", "synthetic", "--workdir", str(tmp_path), "--config", "tiny"]
    argv += ["--no-progress", *FAST]
    argv += ["--set", "eval.cold=false", "--set", "eval.warm=false", "--set", "eval.parallel=true"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "[parallel] done" in out and "[tokenizer]" not in out
    assert not (tmp_path / "tokenizer").exists()
    assert (tmp_path / "results" / "parallel.json").exists()
    assert "| parallel_codes |" in (tmp_path / "results" / "report.md").read_text()
    assert cli.main(argv) == 0
    assert "[parallel] up to date, skipped" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["beauty_parallel", "toys_parallel", "sports_parallel"])
def test_parallel_presets_run_the_parallel_stage_alone(tmp_path, name):
    cfg = config_lib.validate(config_lib.load_preset(name))
    assert cfg.name == name and cfg.data.dataset == name.removesuffix("_parallel")
    layout = keyed_layout(tmp_path)
    stages = build_stages(cfg, layout, progress=False)
    assert [s.name for s in stages] == ["parallel"]
    # Its key follows the embedder and the parallel section, not the RQ-VAE's training.
    other = config_lib.apply_overrides(cfg, ["rqvae.num_steps=7"])
    assert build_stages(other, layout, progress=False)[0].key_parts == stages[0].key_parts
    other = config_lib.apply_overrides(cfg, ["parallel.temperature=0.05"])
    assert build_stages(other, layout, progress=False)[0].key_parts != stages[0].key_parts
    # The co-occurrence part enters it once the codes read one.
    other = config_lib.apply_overrides(cfg, ["rqvae.cf_weight=0.3"])
    assert build_stages(other, layout, progress=False)[0].key_parts == stages[0].key_parts
    with_cf = config_lib.apply_overrides(cfg, ["rqvae.cf_dim=8"])
    keys = build_stages(with_cf, layout, progress=False)[0].key_parts
    assert keys != stages[0].key_parts
    other = config_lib.apply_overrides(with_cf, ["rqvae.cf_weight=0.3"])
    assert build_stages(other, layout, progress=False)[0].key_parts != keys


def test_codes_with_the_cooccurrence_part_read_no_held_out_item(workdir: Path, monkeypatch):
    """rqvae.cf_dim > 0: the codes quantize [text, co-occurrence], the co-occurrence counted on
    the training part only (each user's last two items left out)."""
    from rqvae import cooc

    seen = {}
    real = cooc.cooccurrence_vectors

    def spy(histories, text, excluded, **kw):
        seen["histories"], seen["excluded"] = histories, excluded
        return real(histories, text, excluded, **kw)

    monkeypatch.setattr(cooc, "cooccurrence_vectors", spy)
    w = str(workdir)
    argv = ["parallel", "--workdir", w, "--no-progress", "--validation", *FAST]
    assert cli.main([*argv, "--set", "rqvae.cf_dim=4"]) == 0
    split = leave_one_out(load_prepared(workdir / "prepared"))
    h = seen["histories"]
    assert len(h.items) == len(split.train.items) and not seen["excluded"].any()
    np.testing.assert_array_equal(h.items, split.train.items)
    res = json.loads((workdir / "results" / "validation_parallel.json").read_text())
    assert res["codes"]["cf_dim"] == 4


def test_a_config_json_without_the_parallel_section_loads(tmp_path):
    cfg = config_lib.load_preset("tiny")
    saved = config_lib.to_dict(cfg)
    del saved["parallel"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert config_lib.load_json(tmp_path / "config.json") == cfg
