"""Plots: a PNG when matplotlib is there; None and no file without it."""

import builtins

import numpy as np

from experiments.evaluation import plots

PNG = b"\x89PNG\r\n\x1a\n"


def test_code_usage_writes_png(tmp_path):
    codes = np.random.default_rng(0).integers(0, 8, size=(50, 3))
    assert plots.code_usage(codes, 8, tmp_path / "u.png") == tmp_path / "u.png"
    assert (tmp_path / "u.png").read_bytes()[:8] == PNG


def test_loss_curve_writes_png(tmp_path):
    rows = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 2, "valid_recall@4": 0.1}]
    assert plots.loss_curve(rows, tmp_path / "l.png").read_bytes()[:8] == PNG


def test_every_plot_is_skipped_without_matplotlib(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    assert plots.pyplot() is None
    assert plots.code_usage(np.zeros((2, 3), int), 8, tmp_path / "u.png") is None
    assert plots.loss_curve([{"step": 1, "loss": 1.0}], tmp_path / "l.png") is None
    assert plots.latency_sweep({"static": ([1], [2.0])}, "items", tmp_path / "s.png") is None
    assert list(tmp_path.iterdir()) == []
