"""genret bench-train: every layout and size timed; packing and bucketing fill their rows."""

import json
from pathlib import Path

import pytest

from experiments import cli
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401


def test_bench_train_times_each_layout_and_packing_fills_rows(workdir: Path, capsys):  # noqa: F811
    argv = ["bench-train", "--workdir", str(workdir), "--steps", "2", "--sizes", "1x16,1x32"]
    # Rows of 12 items: room for several of the tiny set's short histories (a row of the
    # preset's 5 holds one user at most, so packing could not show).
    wide = ["--set", "seqmodel.max_history=12"]
    assert cli.main([*argv, *TRAIN_FAST, *wide]) == 0
    res = json.loads((workdir / "results" / "bench_train_loo.json").read_text())
    assert set(res["variants"]) == {
        f"{lay} {size}" for lay in ("causal", "bucketed", "packed") for size in ("1x16", "1x32")
    }
    causal, packed = res["variants"]["causal 1x16"], res["variants"]["packed 1x16"]
    bucketed = res["variants"]["bucketed 1x16"]
    for v in (causal, packed, bucketed):
        assert v["ms_per_step_median"] > 0 and v["tokens_per_s"] > 0
    # One user per row as causal, rows cut to their bucket: never wider, never emptier.
    assert max(bucketed["widths"]) <= causal["row_tokens"]
    assert bucketed["non_pad_share"] >= causal["non_pad_share"]
    # Same rows, fewer of them per epoch, fuller: what packing is for.
    assert packed["row_tokens"] == causal["row_tokens"]
    assert packed["non_pad_share"] > causal["non_pad_share"]
    assert packed["steps_per_epoch"] < causal["steps_per_epoch"]
    assert "| packed 1x16 |" in capsys.readouterr().out


def test_bench_train_rejects_an_unknown_layout(workdir: Path, capsys):  # noqa: F811
    with pytest.raises(SystemExit) as usage:
        cli.main(["bench-train", "--workdir", str(workdir), "--layouts", "causal,zigzag"])
    assert usage.value.code == 2
    assert "zigzag" in capsys.readouterr().err


def test_bench_train_times_both_archs_and_skips_packed_item_rows(workdir: Path):  # noqa: F811
    argv = ["bench-train", "--workdir", str(workdir), "--steps", "2", "--sizes", "1x16"]
    assert cli.main([*argv, "--archs", "token,item", *TRAIN_FAST]) == 0
    res = json.loads((workdir / "results" / "bench_train_loo.json").read_text())
    assert set(res["variants"]) == {
        "causal 1x16 token",
        "bucketed 1x16 token",
        "packed 1x16 token",
        "causal 1x16 item",
        "bucketed 1x16 item",
    }
    assert res["variants"]["causal 1x16 item"]["arch"] == "item"


def test_bench_train_times_item_embedding_sizes(workdir: Path, capsys):  # noqa: F811
    argv = ["bench-train", "--workdir", str(workdir), "--steps", "2", "--sizes", "1x16"]
    argv += ["--archs", "token,item", "--layouts", "bucketed", "--item-buckets", "0,97"]
    assert cli.main([*argv, *TRAIN_FAST]) == 0
    res = json.loads((workdir / "results" / "bench_train_loo.json").read_text())
    # The token-level retriever takes no item embedding: timed once, without.
    assert set(res["variants"]) == {
        "bucketed 1x16 token ids 0",
        "bucketed 1x16 item ids 0",
        "bucketed 1x16 item ids 97",
    }
    plain, hashed = (
        res["variants"]["bucketed 1x16 item ids 0"],
        res["variants"]["bucketed 1x16 item ids 97"],
    )
    assert hashed["params"] - plain["params"] == 97 * 16
    assert hashed["item_embed_buckets"] == 97
    with pytest.raises(SystemExit):
        cli.main([*argv[:-1], "0,-4"])
    assert "counts >= 0" in capsys.readouterr().err


def test_bench_train_times_each_ema_decay_and_rejects_one_out_of_range(workdir: Path, capsys):  # noqa: F811
    argv = ["bench-train", "--workdir", str(workdir), "--steps", "2", "--sizes", "1x16"]
    argv += ["--layouts", "bucketed", "--ema-decays", "0,0.999"]
    assert cli.main([*argv, *TRAIN_FAST]) == 0
    res = json.loads((workdir / "results" / "bench_train_loo.json").read_text())
    assert set(res["variants"]) == {"bucketed 1x16 ema 0", "bucketed 1x16 ema 0.999"}
    assert res["variants"]["bucketed 1x16 ema 0.999"]["ema_decay"] == 0.999
    # The average is optimizer state, not parameters: the count is the same.
    v = res["variants"]
    assert v["bucketed 1x16 ema 0"]["params"] == v["bucketed 1x16 ema 0.999"]["params"]
    with pytest.raises(SystemExit) as usage:
        cli.main([*argv[:-1], "0,1"])
    assert usage.value.code == 2
    assert "--ema-decays" in capsys.readouterr().err


def test_bench_train_times_the_teacher_and_its_host_share(workdir: Path):  # noqa: F811
    argv = ["bench-train", "--workdir", str(workdir), "--steps", "2", "--sizes", "1x16"]
    argv += ["--layouts", "causal,packed", "--cooc-distills", "0,0.5"]
    assert cli.main([*argv, *TRAIN_FAST]) == 0
    res = json.loads((workdir / "results" / "bench_train_loo.json").read_text())
    # The teacher takes one user per row: no packed variant with it.
    assert set(res["variants"]) == {
        "causal 1x16 teacher 0",
        "packed 1x16 teacher 0",
        "causal 1x16 teacher 0.5",
    }
    plain, taught = (
        res["variants"]["causal 1x16 teacher 0"],
        res["variants"]["causal 1x16 teacher 0.5"],
    )
    assert taught["cooc_distill"] == 0.5 and plain["cooc_distill"] == 0.0
    assert plain["params"] == taught["params"]  # a training target, not a layer
    assert plain["host_ms_per_batch"] > 0 and taught["host_ms_per_batch"] > 0
    table = (workdir / "results" / "bench_train_loo.md").read_text()
    assert "host ms/batch" in table and "| causal 1x16 teacher 0.5 |" in table
