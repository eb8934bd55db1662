"""The content neighbour's TF-IDF rows (eval.cold_content_vectors=tfidf) per cold-start stage:
fitted (`rqvae.embed.tfidf_rows` with no cache) against read back from the work directory's cache,
median of 5 calls each, both in the same process; the cached rows are checked equal to the fit.

Usage: python docs/scripts/bench_tfidf_rows.py WORKDIR [WORKDIR ...]   (prepared work dirs)
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

from experiments.config import load_json
from experiments.pipeline.layout import RunLayout
from experiments.evaluation.retrieval import load_inputs
from rqvae.embed import tfidf_rows


def _median_s(repeats: int, *args) -> tuple[float, object]:
    """(median seconds of `tfidf_rows(*args)`, its last output)."""
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = tfidf_rows(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(workdirs: list[str], repeats: int = 5) -> None:
    print("| run | items | TF-IDF columns | cache MB | fit (s) | read back (s) |")
    print("|---|---|---|---|---|---|")
    for wd in workdirs:
        cfg = load_json(Path(wd) / "config.json")
        ds, _ = load_inputs(cfg, RunLayout(Path(wd)))
        texts = ds.catalog.texts
        with tempfile.TemporaryDirectory() as cache:
            fit, x = _median_s(repeats, texts, cfg.rqvae)
            tfidf_rows(texts, cfg.rqvae, cache)
            read, y = _median_s(repeats, texts, cfg.rqvae, cache)
            assert (x != y).nnz == 0
            mb = sum(f.stat().st_size for f in Path(cache).iterdir()) / 1e6
        print(f"| {wd} | {x.shape[0]:,} | {x.shape[1]:,} | {mb:.1f} | {fit:.2f} | {read:.3f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
