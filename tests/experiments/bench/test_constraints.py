"""genret bench-constraints on tiny random SIDs: JSON fields, sanity of numbers, bad flags."""

import json
import textwrap

import pytest

from experiments import cli
from tests.conftest import run_on_forced_cpu_devices

TINY = ["--num-items", "200", "--vocab", "16", "--levels", "3", "--beam", "4", "--reps", "2"]


@pytest.mark.slow
def test_bench_constraints_writes_json(tmp_path, capsys):
    out = tmp_path / "b.json"
    methods = "static,static_compact,ppv_exact,hash_bitmap"
    assert cli.main(["bench-constraints", *TINY, "--methods", methods, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    assert list(result["methods"]) == methods.split(",")
    for name, m in result["methods"].items():
        assert m["build_s"] >= 0 and m["index_bytes"] > 0, name
        for k in ("step", "unconstrained_step", "search", "unconstrained_search"):
            assert 0 < m[k]["median_ms"] <= m[k]["p90_ms"], (name, k)
        assert 0.0 <= m["valid_rate"] <= 1.0
    # 200 random SIDs of 16**3 leave at least 4 allowed per batch row: exact methods fill K.
    assert result["methods"]["static"]["valid_rate"] == 1.0
    assert result["methods"]["static_compact"]["valid_rate"] == 1.0
    assert result["methods"]["ppv_exact"]["valid_rate"] == 1.0
    assert 0.0 <= result["methods"]["hash_bitmap"]["false_positive_rate"] <= 1.0


def test_unknown_method_is_a_one_line_error(capsys):
    assert cli.main(["bench-constraints", *TINY, "--methods", "static,nope"]) == 1
    err = capsys.readouterr().err
    assert "nope" in err and err.count("\n") == 1


def test_build_only_is_charged_for_a_build_not_a_search(monkeypatch, capsys):
    """The 1e8 x 8 build of docs/BENCHMARKS.md (peak 11.4 GiB) passes the memory guard with
    20 GiB free; the same size searched is refused, naming --num-items."""
    from experiments.bench import constraints as bench
    from experiments.commands import bench_constraints as command

    monkeypatch.setattr(bench, "available_bytes", lambda: 20 * 2**30)
    monkeypatch.setattr(command, "measure_build", lambda cfg: {"num_items": cfg.num_items})
    args = ["bench-constraints", "--num-items", "100000000", "--vocab", "2048", "--levels", "8"]
    assert cli.main([*args, "--build-only"]) == 0
    assert json.loads(capsys.readouterr().out) == {"num_items": 100_000_000}
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--num-items 100,000,000" in err and "GiB" in err


def test_build_only_reports_the_compact_layout_beside_csr(capsys):
    args = ["bench-constraints", *TINY, "--build-only", "--methods", "static,static_compact"]
    assert cli.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    compact = result["compact"]
    assert 0 < compact["index_bytes"]["total"] < result["index_bytes"]["total"]
    assert compact["bytes_per_item"] == compact["index_bytes"]["total"] / 200


_DEVICES_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from experiments import cli
    args = ["bench-constraints", "--num-items", "3000", "--vocab", "64", "--levels", "4",
            "--beam", "4", "--reps", "2", "--devices", "8", "--out", sys.argv[1]]
    assert cli.main(args) == 0
    """
)


@pytest.mark.slow
def test_devices_times_the_split_index_beside_the_replicated_one(tmp_path):
    out = tmp_path / "b.json"
    script = _DEVICES_SCRIPT.replace("sys.argv[1]", repr(str(out)))
    done = run_on_forced_cpu_devices(script, devices=8, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    methods = json.loads(out.read_text())["methods"]
    assert list(methods) == ["static", "static_sharded", "static_sharded_compact"]
    rep, split, packed = (methods[m] for m in methods)
    for m in (rep, split, packed):
        assert m["beams_equal"] == 1 and m["bytes_per_item"] > 0
        assert 0 < m["step"]["median_ms"] and 0 < m["step_interleaved"]["median_ms"]
        assert m["beams_sha1"] == rep["beams_sha1"]
    assert rep["bytes_per_device"] == rep["index_bytes"]  # replicated: all of it on each
    assert split["bytes_per_device"] < rep["bytes_per_device"] / 2
    assert packed["index_bytes"] < split["index_bytes"]
    assert rep["step_vs_static"] == 1.0


def test_more_devices_than_jax_sees_is_a_one_line_error(capsys):
    assert cli.main(["bench-constraints", *TINY, "--devices", "1000"]) == 1
    err = capsys.readouterr().err
    assert "--devices" in err and "xla_force_host_platform_device_count" in err
    assert err.count("\n") == 1
