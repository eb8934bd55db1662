"""--cpu-cores: the process is pinned and JAX's CPU calls run inline, or the flag is refused."""

import json
import os

import pytest

from experiments import cli
from tests.conftest import run_on_forced_cpu_devices

_PROBE = """
import json, os, jax, jax.numpy as jnp
from experiments.runtime.latency import cpu_latency_mode
kept = cpu_latency_mode(1)
x = float(jax.jit(lambda a: a * 2)(jnp.ones(3)).sum())
from data.errors import ArgumentError
try:
    cpu_latency_mode(1)
    late = "accepted"
except ArgumentError as e:
    late = str(e)
print(json.dumps({
    "kept": kept,
    "affinity": sorted(os.sched_getaffinity(0)),
    "async": jax.config.values["jax_cpu_enable_async_dispatch"],
    "value": x,
    "late": late,
}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_pins_the_process_and_runs_calls_inline():
    # The settings are read when JAX starts its backend: a fresh process.
    out = run_on_forced_cpu_devices(_PROBE, devices=1, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["affinity"] == got["kept"] and len(got["kept"]) == 1
    assert got["async"] is False
    assert got["value"] == 6.0
    # Once JAX has started, the settings would not take: refused, not ignored.
    assert "JAX has started already" in got["late"]


def test_cli_refuses_fewer_than_one_core(capsys):
    assert cli.main(["bench-constraints", "--num-items", "100", "--cpu-cores", "0"]) == 1
    assert "--cpu-cores must be >= 1" in capsys.readouterr().err


def test_serve_and_bench_commands_take_the_flag():
    for argv in (
        ["bench-constraints", "--cpu-cores", "1"],
        ["bench-sweep", "--cpu-cores", "1"],
        ["serve", "--workdir", "w", "--cpu-cores", "1"],
    ):
        assert cli.parse(argv).cpu_cores == 1
