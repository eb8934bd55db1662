"""The code-usage plot: a PNG when matplotlib is there, None otherwise."""

import builtins

import numpy as np

from rqvae import report


def test_plot_writes_png(tmp_path):
    codes = np.random.default_rng(0).integers(0, 8, size=(50, 3))
    assert report.plot_code_usage(codes, 8, tmp_path / "u.png") == "u.png"
    assert (tmp_path / "u.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    assert report.plot_code_usage(np.zeros((2, 3), int), 8, tmp_path / "u.png") is None
    assert not (tmp_path / "u.png").exists()
