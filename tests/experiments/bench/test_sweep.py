"""A reduced genret bench-sweep (tiny N and V): per-point JSON, resume, plots, markdown block."""

import json

import pytest

from experiments import cli


@pytest.mark.slow
def test_reduced_sweep_writes_points_plots_and_table(tmp_path, capsys):
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\n## Constrained decoding\n\nhand-written notes\n")
    args = [
        "bench-sweep",
        "--items",
        "100,300",
        "--vocabs",
        "8",
        "--vocab-for-items",
        "8",
        "--items-for-vocab",
        "100",
        "--levels",
        "3",
        "--beam",
        "3",
        "--reps",
        "1",
        "--methods",
        "static",
        "--out-dir",
        str(tmp_path / "pts"),
        "--markdown",
        str(md),
        "--plots-dir",
        str(tmp_path / "img"),
    ]
    assert cli.main(args) == 0
    points = sorted((tmp_path / "pts").glob("*.json"))
    assert len(points) == 2  # (100, 8) is on both axes and runs once
    assert json.loads(points[0].read_text())["methods"]["static"]["valid_rate"] == 1.0
    pngs = sorted(p.name for p in (tmp_path / "img").glob("*.png"))
    assert pngs == ["decoding_latency_vs_items.png", "decoding_latency_vs_vocab.png"]
    text = md.read_text()
    assert "hand-written notes" in text and text.count("| items | 3e+02 | 8 | static |") == 1
    capsys.readouterr()
    assert cli.main(args) == 0  # resumes: no point is measured again, the block is replaced
    assert "==" not in capsys.readouterr().err
    assert md.read_text().count("bench-sweep:begin") == 1
