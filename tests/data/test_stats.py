"""Tests of data/stats.py."""

import json

from data import amazon, stats


def test_stats_of_tiny(tiny_raw):
    ds = amazon.read_raw_dir(tiny_raw, five_core=False)
    s = stats.dataset_stats(ds, (0.25, 0.5))
    assert (s["users"], s["items"], s["interactions"]) == (3, 4, 7)
    assert s["time_range"]["first_unix"] == 50 and s["time_range"]["last"] == "1970-01-01"
    # 25% of 4 items -> the newest one (D, t=400), reviewed by U3 right at the start: no test user.
    assert s["cold_start"]["0.25"]["cold_items"] == 1
    assert s["cold_start"]["0.25"]["test_users"] == 0
    # 50% -> k = 2: D, then A and C tied at t=100 -> 3 items; U1 and U2 have B before A.
    assert s["cold_start"]["0.5"]["cold_items"] == 3
    assert s["cold_start"]["0.5"]["test_users"] == 2
    json.dumps(s)
