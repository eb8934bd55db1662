import json
from pathlib import Path

import numpy as np
import pytest

from data import atomic
from data.prepared import load_prepared
from experiments import cli
from experiments.config import load_preset

FAST = [
    "--set",
    "seqmodel.num_layers=1",
    "--set",
    "seqmodel.d_model=16",
    "--set",
    "seqmodel.num_heads=2",
    "--set",
    "seqmodel.mlp_dim=32",
    "--set",
    "seqmodel.max_history=5",
    "--set",
    "seqmodel.batch_size=16",
    "--set",
    "seqmodel.max_steps=4",
    "--set",
    "seqmodel.eval_every=2",
    "--set",
    "seqmodel.eval_users=20",
    "--set",
    "seqmodel.eval_beam_size=4",
]


def _write_tokenizer(workdir: Path, *, reverse: bool = False) -> None:
    asins = [str(a) for a in load_prepared(workdir / "prepared").catalog.asins]
    n = len(asins)
    V = load_preset("tiny").rqvae.codebook_size
    rng = np.random.default_rng(0)
    flat = rng.choice(V**3, size=n, replace=False)
    codes = np.stack([(flat // V**i) % V for i in (2, 1, 0)] + [np.zeros(n, int)], 1)
    atomic.save_npy(workdir / "tokenizer" / "sids.npy", codes.astype(np.int32))
    atomic.write_text(
        workdir / "tokenizer" / "asins.txt", "\n".join(asins[::-1] if reverse else asins) + "\n"
    )


@pytest.fixture(scope="module")
def prepared_workdir(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("w")
    assert cli.main(["prepare", "--workdir", str(w), "--config", "tiny"]) == 0
    return w


def test_tokenizer_that_does_not_match_prepared_catalog_is_one_line_error(prepared_workdir, capsys):
    _write_tokenizer(prepared_workdir, reverse=True)
    rc = cli.main(["train-retriever", "--workdir", str(prepared_workdir), "--cold-start", "0.05"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "asins.txt line 1" in err and "retrain the tokenizer" in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_config_key_is_one_line_error(prepared_workdir, capsys):
    argv = ["train-retriever", "--workdir", str(prepared_workdir), "--cold-start", "0.05"]
    assert cli.main([*argv, "--set", "seqmodel.num_layer=2"]) == 1
    assert "seqmodel.num_layer: unknown config key" in capsys.readouterr().err
    assert cli.main([*argv, "--set", "seqmodel.layout=windows"]) == 1
    assert "seqmodel.layout" in capsys.readouterr().err


def test_cold_start_fraction_out_of_range_or_misplaced_is_an_error(prepared_workdir, capsys):
    argv = ["train-retriever", "--workdir", str(prepared_workdir)]
    assert cli.main([*argv, "--cold-start", "2"]) == 1
    assert "--cold-start: expected a fraction in (0, 0.5]" in capsys.readouterr().err
    # The one fraction rule: 0.7 trains nothing, since no evaluation could accept it.
    assert cli.main([*argv, "--cold-start", "0.7"]) == 1
    assert "--cold-start: expected a fraction in (0, 0.5], got 0.7" in capsys.readouterr().err
    assert not (prepared_workdir / "retriever_cold_0.7").exists()
    assert cli.main(argv) == 1
    assert "--cold-start: required with --split cold" in capsys.readouterr().err
    assert cli.main([*argv, "--split", "loo", "--cold-start", "0.02"]) == 1
    assert "not used with --split loo" in capsys.readouterr().err


@pytest.mark.slow
def test_train_retriever_end_to_end_then_resume_is_a_no_op(prepared_workdir, capsys):
    _write_tokenizer(prepared_workdir)
    argv = ["train-retriever", "--workdir", str(prepared_workdir), "--cold-start", "0.05"]
    assert cli.main([*argv, "--no-progress", *FAST]) == 0
    out = prepared_workdir / "retriever_cold_0.05"
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 4 and 0.0 <= summary["best_valid_recall@4"] <= 1.0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
    assert (out / "loss.png").stat().st_size > 1000
    capsys.readouterr()
    assert cli.main([*argv, "--no-progress"]) == 0  # resumes from config.json: nothing left
    assert json.loads(capsys.readouterr().out)["steps"] == 4

    from seqmodel.inference import load_retriever

    model = load_retriever(out)
    assert model.cfg.d_model == 16


@pytest.mark.slow
def test_train_retriever_leave_one_out_split(prepared_workdir, capsys):
    _write_tokenizer(prepared_workdir)
    argv = ["train-retriever", "--workdir", str(prepared_workdir), "--split", "loo"]
    assert cli.main([*argv, "--no-progress", *FAST]) == 0
    summary = json.loads((prepared_workdir / "retriever_loo" / "train_summary.json").read_text())
    assert summary["steps"] == 4


@pytest.mark.slow
def test_collision_level_past_the_codebook_widens_the_retriever_vocabulary(prepared_workdir):
    # Toys and Sports at 64 codes: more items share all three codes than the codebook has values.
    _write_tokenizer(prepared_workdir)
    sids = np.load(prepared_workdir / "tokenizer" / "sids.npy")
    V = load_preset("tiny").rqvae.codebook_size
    crowd = V + 5
    sids[:crowd, :3] = 0
    sids[:crowd, 3] = np.arange(crowd)
    atomic.save_npy(prepared_workdir / "tokenizer" / "sids.npy", sids)
    argv = ["train-retriever", "--workdir", str(prepared_workdir), "--split", "loo"]
    assert cli.main([*argv, "--no-progress", *FAST, "--set", "seqmodel.max_steps=6"]) == 0
    info = json.loads((prepared_workdir / "retriever_loo" / "retriever.json").read_text())
    assert info["codebook_size"] == crowd
