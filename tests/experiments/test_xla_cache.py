"""experiments.xla_cache: where `genret` keeps compiled programs, and that a second process reads
them back instead of compiling."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import cli, xla_cache

ROOT = Path(__file__).resolve().parents[2]


def test_cache_dir_follows_the_environment(tmp_path):
    assert xla_cache.cache_dir({"GENRET_COMPILE_CACHE": str(tmp_path)}) == tmp_path
    for off in ("off", "OFF", "0", "false", "no", "", "  "):
        assert xla_cache.cache_dir({"GENRET_COMPILE_CACHE": off}) is None, off
    assert xla_cache.cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/genret/xla")
    assert xla_cache.cache_dir({}) == Path("~/.cache/genret/xla").expanduser()


def test_enable_sets_jax_variables_and_keeps_the_users_own(tmp_path):
    env = {"GENRET_COMPILE_CACHE": str(tmp_path / "c")}
    assert xla_cache.enable(env) == tmp_path / "c"
    assert (tmp_path / "c").is_dir()
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "c")
    assert int(env["JAX_COMPILATION_CACHE_MAX_SIZE"]) == xla_cache.MAX_BYTES

    mine = str(tmp_path / "mine")
    own = {"GENRET_COMPILE_CACHE": str(tmp_path / "unused"), "JAX_COMPILATION_CACHE_DIR": mine}
    assert xla_cache.enable(own) == Path(mine)
    assert own == {
        "GENRET_COMPILE_CACHE": str(tmp_path / "unused"),
        "JAX_COMPILATION_CACHE_DIR": mine,
    }
    assert not (tmp_path / "unused").exists()

    off = {"GENRET_COMPILE_CACHE": "off"}
    assert xla_cache.enable(off) is None and "JAX_COMPILATION_CACHE_DIR" not in off


def test_a_folder_that_cannot_be_made_turns_the_cache_off(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    env = {"GENRET_COMPILE_CACHE": str(tmp_path / "file" / "xla")}
    assert xla_cache.enable(env) is None
    assert "JAX_COMPILATION_CACHE_DIR" not in env


def test_console_turns_it_on_before_running_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("GENRET_COMPILE_CACHE", str(tmp_path))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv("JAX_COMPILATION_CACHE_MAX_SIZE", raising=False)
    seen = {}

    def command() -> int:  # stands in for the command: what JAX would read when imported
        seen["dir"] = os.environ.get("JAX_COMPILATION_CACHE_DIR")
        return 0

    monkeypatch.setattr(cli, "main", command)
    with pytest.raises(SystemExit) as e:
        cli.console()
    assert e.value.code == 0
    assert seen["dir"] == str(tmp_path)


def test_a_second_process_reads_the_program_back(tmp_path):
    script = (
        "from experiments import xla_cache\n"
        "xla_cache.enable()\n"
        "import jax, jax.numpy as jnp\n"
        "print(jax.jit(lambda x: jnp.cumsum(x * 2.0 + 1.0))(jnp.arange(4.0)).tolist())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(
        GENRET_COMPILE_CACHE=str(tmp_path / "xla"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",  # this program compiles in milliseconds
        JAX_LOG_COMPILES="1",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(ROOT),
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "[1.0, 4.0, 9.0, 16.0]"
    assert any(p.name.endswith("-cache") for p in (tmp_path / "xla").iterdir())
    assert "cache hit" not in runs[0].stderr
    assert "cache hit" in runs[1].stderr
