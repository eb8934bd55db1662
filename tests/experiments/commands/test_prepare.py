"""Tests of `genret prepare` and `genret data-stats` on the tiny synthetic preset and fixtures."""

import json

import pytest

from experiments import cli
from tests.data.conftest import make_raw_dir


@pytest.mark.slow
def test_prepare_then_data_stats_on_tiny_synthetic(tmp_path, capsys):
    w = tmp_path / "w"
    assert cli.main(["prepare", "--config", "tiny", "--workdir", str(w)]) == 0
    assert (w / "raw" / "reviews_Synthetic_5.json.gz").is_file()
    assert (w / "prepared" / "prepared.json").is_file()
    assert json.loads((w / "config.json").read_text())["name"] == "tiny"
    prepared_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert cli.main(["data-stats", "--workdir", str(w)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["users"] == json.loads(prepared_line)["users"] > 0
    assert set(stats["cold_start"]) == {"0.02", "0.05"}
    cold = stats["cold_start"]["0.05"]
    assert cold["cold_items"] >= 1 and cold["test_users"] >= 1
    assert stats["time_range"]["first"] <= stats["time_range"]["last"]


def test_bad_line_is_a_one_line_error_then_skippable(tmp_path, capsys):
    raw = make_raw_dir(tmp_path, "Bad")
    args = [
        "prepare",
        "--dataset",
        "beauty",
        "--raw-dir",
        str(raw),
        "--workdir",
        str(tmp_path / "w"),
        "--set",
        "data.five_core=false",
    ]
    assert cli.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "reviews_Bad_5.json:3: malformed JSON" in err
    assert not (tmp_path / "w" / "prepared").exists()
    assert cli.main([*args, "--skip-bad-lines"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["bad_review_lines"] == 2 and report["interactions"] == 3


def test_missing_raw_dir_and_unprepared_workdir(tmp_path, capsys):
    w = str(tmp_path / "w")
    assert (
        cli.main(["prepare", "--dataset", "toys", "--raw-dir", str(tmp_path / "x"), "--workdir", w])
        == 1
    )
    assert "no such directory" in capsys.readouterr().err
    assert cli.main(["data-stats", "--workdir", str(tmp_path / "empty")]) == 1
    assert "genret prepare" in capsys.readouterr().err


def test_help_mentions_the_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["prepare", "--help"])
    out = capsys.readouterr().out
    assert "--raw-dir" in out and "--skip-bad-lines" in out and "synthetic" in out


@pytest.mark.real_data
def test_real_data_stats_acceptance(amazon_root, tmp_path, capsys):
    w = str(tmp_path / "beauty")
    assert (
        cli.main(
            [
                "prepare",
                "--dataset",
                "beauty",
                "--raw-dir",
                str(amazon_root / "Beauty"),
                "--workdir",
                w,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert cli.main(["data-stats", "--workdir", w]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["users"], s["items"], s["interactions"]) == (22363, 12101, 198502)
    assert s["cold_start"]["0.02"]["cold_items"] == 243
    assert s["cold_start"]["0.02"]["test_users"] == 1548
    assert s["cold_start"]["0.05"]["cold_items"] == 606
    assert s["cold_start"]["0.05"]["test_users"] == 3493


def test_tiny_preset_on_any_amazon_category_and_on_your_own_table(tmp_path, capsys):
    from tests.data.conftest import INTERACTIONS, ITEMS, make_two_category_dir

    both = make_two_category_dir(tmp_path)
    w = tmp_path / "w"
    argv = ["prepare", "--dataset", "amazon2014", "--category", "Tiny", "--raw-dir", str(both)]
    argv += ["--config", "tiny", "--workdir", str(w), "--set", "data.five_core=false"]
    assert cli.main(argv) == 0
    saved = json.loads((w / "config.json").read_text())
    assert saved["name"] == "tiny" and saved["data"]["dataset"] == "amazon2014"
    assert saved["data"]["category"] == "Tiny" and saved["data"]["raw_dir"] == str(both)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "interactions.csv").write_text(INTERACTIONS)
    (mine / "items.csv").write_text(ITEMS)
    w2 = tmp_path / "w2"
    argv = ["prepare", "--dataset", "interactions", "--raw-dir", str(mine), "--config", "tiny"]
    assert cli.main([*argv, "--workdir", str(w2), "--set", "data.five_core=false"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["prepared"] == str(w2 / "prepared")
    # A later command on the same work directory takes the saved dataset, not a preset's.
    assert cli.main(["data-stats", "--workdir", str(w2)]) == 0
    assert json.loads(capsys.readouterr().out)["users"] == 3
