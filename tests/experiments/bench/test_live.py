"""genret bench-live on a small random catalog: updates timed, one compiled search per method."""

import json

from experiments import cli


def test_bench_live_small_catalog(tmp_path):
    out = tmp_path / "live.json"
    argv = ["bench-live", "--num-items", "2000", "--vocab", "64", "--levels", "4"]
    assert cli.main([*argv, "--reps", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in ("toggle_1", "toggle_1000", "toggle_1000_donated", "add_1000"):
        assert res["updates"][key]["median_ms"] > 0
    # Every addition found room (the index was built with headroom for them).
    assert res["updates"]["add_1000_status_counts"] == {"1": 1000}  # 1: ADDED
    assert res["compiled_searches"] == 2
    assert 0 < res["per_request_valid_rate"] <= 1
    # Both ratios to STATIC: of the medians, and the median of the per-rep (paired) ratios.
    for key in ("per_request_vs_static", "live_global_vs_static"):
        assert res[key] > 0 and res[key + "_paired"] > 0
