"""experiments.runtime.xla_cache: where `genret` keeps compiled programs, and that a second
process reads them back instead of compiling."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import cli
from experiments.runtime import xla_cache
from tests.conftest import SUITE_MIN_COMPILE_SECONDS

ROOT = Path(__file__).resolve().parents[3]


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


def test_enable_takes_the_bound_and_threshold_it_is_given(tmp_path):
    env = {"GENRET_COMPILE_CACHE": str(tmp_path)}
    assert xla_cache.enable(env, max_bytes=4 << 30, min_compile_seconds=0) == tmp_path
    assert env["JAX_COMPILATION_CACHE_MAX_SIZE"] == str(4 << 30)
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    # A bound the user set already is kept; JAX's own threshold stays unless one is given.
    own = {"GENRET_COMPILE_CACHE": str(tmp_path), "JAX_COMPILATION_CACHE_MAX_SIZE": "123"}
    xla_cache.enable(own, max_bytes=4 << 30)
    assert own["JAX_COMPILATION_CACHE_MAX_SIZE"] == "123"
    assert "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in own


def test_a_folder_that_cannot_be_made_turns_the_cache_off(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    env = {"GENRET_COMPILE_CACHE": str(tmp_path / "file" / "xla")}
    assert xla_cache.enable(env) is None
    assert "JAX_COMPILATION_CACHE_DIR" not in env


def test_console_turns_it_on_before_running_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("GENRET_COMPILE_CACHE", str(tmp_path))
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE"):
        # set, then removed: monkeypatch restores either way what console() will set
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
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
        "from experiments.runtime import xla_cache\n"
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


def test_the_suite_runs_on_its_own_cache():
    # tests/conftest.py: one folder per run (or none with GENRET_TEST_XLA_CACHE=off), never the
    # user's, keeping the programs that take 0.1 s or more to compile.
    import jax

    run = os.environ["GENRET_TEST_XLA_CACHE"]
    if run == "off":
        assert "JAX_COMPILATION_CACHE_DIR" not in os.environ
        assert not jax.config.jax_compilation_cache_dir
        return
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == run
    assert jax.config.jax_compilation_cache_dir == run
    assert jax.config.jax_persistent_cache_min_compile_time_secs == SUITE_MIN_COMPILE_SECONDS
    assert Path(run).is_dir() and xla_cache.cache_dir() == Path(run)
