"""The wheel: `pip wheel --no-deps .` builds, and the package it holds runs `genret --help`,
`--version` and a preset lookup from outside the checkout (presets are package modules)."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_builds_and_runs_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = dist.glob("genret-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(site)
    assert "experiments/configs/tiny.py" in names and not any(n.startswith("tests/") for n in names)
    # The unpacked wheel first on the path, run from a folder that is not the checkout.
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    script = (
        "import sys, experiments, experiments.cli as cli;"
        f"assert experiments.__file__.startswith({str(site)!r}), experiments.__file__;"
        "from experiments import config;"
        "print(config.load_preset('tiny').name);"
        "sys.argv = ['genret'] + sys.argv[1:]; cli.console()"
    )
    for args, expect in ((["--help"], "pipeline"), (["--version"], "genret ")):
        out = subprocess.run(
            [sys.executable, "-c", script, *args],
            cwd=run_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.startswith("tiny\n") and expect in out.stdout, out.stdout[:500]
