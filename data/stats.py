"""Dataset statistics: sizes, time range, history lengths and cold-start set sizes."""

import datetime

import numpy as np

from data import splits
from data.types import InteractionData


def _day(unix: int) -> str:
    return datetime.datetime.fromtimestamp(int(unix), datetime.UTC).strftime("%Y-%m-%d")


def dataset_stats(ds: InteractionData, fractions: tuple[float, ...] = (0.02, 0.05)) -> dict:
    """A JSON-ready summary; cold_start[str(p)] holds the cold set and test users of fraction p."""
    h = ds.histories
    lengths = h.lengths()
    first, last = int(h.times.min()), int(h.times.max())
    out = {
        "dataset": ds.name,
        "users": len(h),
        "items": len(ds.catalog),
        "interactions": int(h.items.size),
        "time_range": {
            "first": _day(first),
            "last": _day(last),
            "first_unix": first,
            "last_unix": last,
        },
        "history_length": {
            "mean": round(float(lengths.mean()), 3),
            "median": float(np.median(lengths)),
            "max": int(lengths.max()),
        },
        "cold_start": {},
    }
    for p in fractions:
        s = splits.cold_start_split(ds, p)
        out["cold_start"][str(p)] = {
            "cold_items": int(len(s.cold_items)),
            "test_users": int(len(s.test_users)),
            "train_interactions": int(s.train.items.size),
        }
    out["load_report"] = dict(ds.report)
    return out
