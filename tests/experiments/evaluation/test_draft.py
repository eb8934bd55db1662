"""train-draft, eval-warm/eval-cold-start --decoder, bench-decode and bench-membership."""

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import cli, config
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401

DRAFT_FAST = [
    *("--set", "seqmodel.draft.batch_size=16", "--set", "seqmodel.draft.max_steps=4"),
    *("--set", "seqmodel.draft.eval_every=2"),
]


def test_draft_decoder_without_a_head_names_train_draft(tmp_path, capsys):
    w = tmp_path / "w"
    assert cli.main(["eval-warm", "--workdir", str(w), "--decoder", "nezha"]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as usage:
        cli.main(["eval-warm", "--workdir", str(w), "--decoder", "greedy"])
    assert usage.value.code == 2
    assert cli.main(["train-draft", "--workdir", str(w), "--name", "a/b"]) == 1
    assert "--name" in capsys.readouterr().err


def test_bench_membership_agrees_and_reports(tmp_path, capsys):
    out = tmp_path / "m.json"
    argv = ["bench-membership", "--num-items", "2000", "--vocab", "64", "--levels", "4"]
    assert cli.main([*argv, "--queries", "256", "--reps", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    for name in ("hash_set", "static", "sorted_keys"):
        assert res[name]["median_ms"] > 0 and res[name]["bytes_per_item"] > 0
    assert 0.5 <= res["member_rate"] < 1.0


@pytest.mark.slow
def test_train_draft_then_every_draft_decoder(workdir: Path, capsys):  # noqa: F811
    w = str(workdir)
    train = ["train-retriever", "--workdir", w, "--split", "loo", "--no-progress"]
    assert cli.main([*train, *TRAIN_FAST]) == 0
    # No head yet: one line naming the command that trains it.
    assert cli.main(["eval-warm", "--workdir", w, "--decoder", "nezha"]) == 1
    assert "genret train-draft" in capsys.readouterr().err
    draft = ["train-draft", "--workdir", w, "--split", "loo", "--no-progress"]
    assert cli.main([*draft, *DRAFT_FAST]) == 0
    assert (workdir / "draft_loo" / "draft.json").is_file()
    assert config.load_json(workdir / "config.json").seqmodel.draft.max_steps == 4

    assert cli.main(["eval-warm", "--workdir", w, "--decoder", "nezha"]) == 0
    res = json.loads((workdir / "results" / "nezha_warm.json").read_text())
    assert set(res["methods"]) == {"nezha_unverified", "nezha"} and res["head"] == "draft_loo"
    verified = res["methods"]["nezha"]
    assert verified["valid_rate"] == 1.0 and verified["item_rate"] == 1.0
    assert cli.main(["eval-warm", "--workdir", w, "--decoder", "nezha-static"]) == 0
    res = json.loads((workdir / "results" / "nezha_static_warm.json").read_text())
    assert res["methods"]["nezha_static"]["valid_rate"] == 1.0
    # Beam search's results are elsewhere, and the report only reads those.
    assert not (workdir / "results" / "warm.json").exists()

    bench = ["bench-decode", "--workdir", w, "--users", "8", "--single-users", "2"]
    assert cli.main([*bench, "--beams", "4", "--batch-sizes", "1,4", "--sizes", "1x64"]) == 0
    res = json.loads((workdir / "results" / "bench_decode_loo.json").read_text())
    row = res["beams"]["4"]
    assert set(row) == {"beam", "beam_static", "nezha_unverified", "nezha", "nezha_static"}
    for m in row.values():
        assert m["batch1"]["median_ms"] > 0 and m["batch4"]["p90_ms"] > 0
    assert row["nezha_static"]["valid_of_k"] == 1.0
    assert res["sizes"][0]["layers"] == 1 and res["sizes"][0]["speedup_batch1"] > 0
    table = (workdir / "results" / "bench_decode_loo.md").read_text()
    assert "nezha_static" in table and "speedup" in table


@pytest.mark.slow
def test_cold_start_draft_decoders(workdir: Path):  # noqa: F811
    w = str(workdir)
    train = ["train-retriever", "--workdir", w, "--cold-start", "0.05", "--no-progress"]
    assert cli.main([*train, *TRAIN_FAST]) == 0
    draft = ["train-draft", "--workdir", w, "--split", "cold", "--cold-start", "0.05"]
    assert cli.main([*draft, "--name", "gru", "--set", "seqmodel.draft.cell=gru", *DRAFT_FAST]) == 0
    for decoder in ("nezha", "nezha-static"):
        argv = ["eval-cold-start", "--workdir", w, "--cold-start", "0.05", "--decoder", decoder]
        assert cli.main([*argv, "--draft-name", "gru"]) == 0
    stem = workdir / "results"
    res = json.loads((stem / "nezha_static_gru_cold_start_0.05.json").read_text())
    static = res["methods"]["nezha_static"]
    # STATIC over the cold set masks every draft level: only cold items come back.
    assert static["valid_rate"] == 1.0 and static["cold_rate"] == 1.0
    res = json.loads((stem / "nezha_gru_cold_start_0.05.json").read_text())
    # Verified drafts are cold items only (a barely trained head may find none: both rates 0).
    verified = res["methods"]["nezha"]
    assert verified["cold_rate"] == verified["valid_rate"] in (0.0, 1.0)
    assert np.isfinite(res["methods"]["nezha_unverified"]["recall@10"])
