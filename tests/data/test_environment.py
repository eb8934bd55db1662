"""Tests of data/environment.py: what a result records about the software that computed it."""

import importlib.metadata

import jax
import numpy as np

from data.environment import (
    differences,
    environment,
    machine_differences,
    package_differences,
)


def test_environment_names_the_installed_versions():
    env = environment()
    assert env["packages"]["jax"] == jax.__version__
    assert env["packages"]["numpy"] == np.__version__
    assert env["packages"]["genret"] == importlib.metadata.version("genret")
    assert env["cpu_count"] >= 1 and env["cpu"] and env["python"].count(".") == 2


def test_differences_name_each_changed_field_and_nothing_else():
    a = environment()
    assert differences(a, a) == []
    b = {**a, "packages": {**a["packages"], "jaxlib": "9.9", "grain": None}, "cpu_count": 99}
    assert differences(a, b) == [
        f"grain: {a['packages']['grain']} -> None",
        f"jaxlib: {a['packages']['jaxlib']} -> 9.9",
        f"cpu_count: {a['cpu_count']} -> 99",
    ]
    assert differences(None, a) == differences(a, {}) == []
    assert machine_differences(a, b) == [f"cpu_count: {a['cpu_count']} -> 99"]
    assert package_differences(a, b) == differences(a, b)[:2]
    # classified by where each line came from, not by parsing it (a value may hold a colon)
    c = {**a, "platform": "Linux: other"}
    assert machine_differences(a, c) == [f"platform: {a['platform']} -> Linux: other"]
    assert package_differences(a, c) == []


def test_the_vector_extensions_are_a_machine_difference_when_both_records_hold_them():
    a = environment()
    ours = a["cpu_vector_extensions"]  # None where /proc/cpuinfo is not there
    if ours is not None:
        assert all(f.startswith(("avx", "amx")) or f in ("fma", "f16c") for f in ours.split())
    other = "avx avx2 avx512f fma" if ours != "avx avx2 avx512f fma" else "avx avx2 fma"
    b = {**a, "cpu_vector_extensions": other}
    assert machine_differences(a, b) == [f"cpu_vector_extensions: {ours} -> {other}"]
    # A record from before the field existed: the field is not compared, the rest still is.
    old = {k: v for k, v in b.items() if k != "cpu_vector_extensions"}
    assert machine_differences(old, a) == []
    assert machine_differences({**old, "cpu_count": 99}, a) == [
        f"cpu_count: 99 -> {a['cpu_count']}"
    ]
