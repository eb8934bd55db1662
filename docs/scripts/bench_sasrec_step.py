"""SASRec's training step with every position scored (slots = B x T) against only the real ones
(slots = `seqmodel.sasrec.capacity`): the same 20 batches of a prepared work directory's
leave-one-out training histories, timed interleaved, the median over repeats after a warm-up.

Usage: python docs/scripts/bench_sasrec_step.py WORKDIR [MAX_HISTORY] [REPEATS]
"""

import dataclasses
import functools
import sys
import time
from pathlib import Path

import jax
import numpy as np

from data.pipeline import HistorySource, batches
from data.prepared import load_prepared
from data.splits import leave_one_out
from experiments.config import SASREC
from seqmodel import sasrec


def main(workdir: str, max_history: int = 20, repeats: int = 5) -> None:
    cfg = dataclasses.replace(SASREC, max_history=max_history)
    ds = load_prepared(Path(workdir) / "prepared")
    source = HistorySource(leave_one_out(ds).train)
    it = iter(batches(source, sasrec.NextItems(max_history), batch_size=cfg.batch_size, seed=0))
    data = [next(it) for _ in range(20)]
    real = np.mean([b["weights"].mean() for b in data])
    graphdef, tx, state = sasrec.new_state(cfg, len(ds.catalog), 10_000)
    step = jax.jit(
        functools.partial(sasrec.train_step, graphdef, tx, 0),
        donate_argnames="state",
        static_argnames="slots",
    )
    slots = {
        "every position": lambda w: w.size,
        "real positions": lambda w: sasrec.capacity(int(w.sum()), w.size),
    }
    times: dict[str, list[float]] = {name: [] for name in slots}
    for rep in range(repeats + 1):  # the first round compiles
        for name, fn in slots.items():
            start = time.perf_counter()
            for b in data:
                state, metrics = step(state, jax.device_put(b), slots=fn(b["weights"]))
            jax.block_until_ready(metrics)
            if rep:
                times[name].append((time.perf_counter() - start) / len(data))
    print(f"{workdir}: window {max_history}, batch {cfg.batch_size}, real positions {real:.1%}")
    for name, t in times.items():
        ms = 1000 * np.asarray(t)
        print(f"  {name}: median {np.median(ms):.1f} ms/step, p90 {np.quantile(ms, 0.9):.1f}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
