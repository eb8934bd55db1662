"""The STATIC paper's latency sweeps over N and V, resumable, with their plots."""

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from data import atomic
from experiments.bench.constraints import (
    BenchConfig,
    point_name,
    run_bench,
)


def run_sweep(
    points: list[tuple[str, BenchConfig]],
    out_dir: Path,
    *,
    skip_above: dict[str, int],
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Runs each point once; a point whose JSON (same config) exists in out_dir is reused, so a
    killed sweep resumes at the point it was in."""
    results = []
    for axis, cfg in points:
        keep = tuple(m for m in cfg.methods if cfg.num_items <= skip_above.get(m, cfg.num_items))
        cfg = dataclasses.replace(cfg, methods=keep)
        path = Path(out_dir) / f"{point_name(cfg)}.json"
        saved = json.loads(path.read_text()) if path.exists() else None
        if saved is None or saved["config"] != json.loads(json.dumps(dataclasses.asdict(cfg))):
            if progress:
                progress(f"== {axis}: {point_name(cfg)}")
            saved = run_bench(cfg, progress=progress)
            atomic.write_json(path, saved)
        results.append({"axis": axis, **saved})
    return results
