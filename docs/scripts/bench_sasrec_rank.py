"""SASRec's validation ranking (`seqmodel.sasrec.top_k`, top 10 of the full catalog) of a prepared
work directory's first K validation histories, two ways, timed interleaved, the median over repeats:
- "every position": the model scores every catalog item at all T positions and keeps the last
  (the code before session 37), compiled anew at each call as that code did;
- "last position": the state at the last position alone is scored (`top_k` now).
The untrained model of the `sasrec` section (its 50-item window); timing does not depend on the
weights. Both give the same top 10, which the script checks.

Usage: python docs/scripts/bench_sasrec_rank.py WORKDIR [USERS] [REPEATS]
"""

import sys
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from data.pipeline import padded_batches
from data.prepared import load_prepared
from data.splits import leave_one_out
from experiments.config import SASREC
from seqmodel import sasrec


def every_position(graphdef, params, items: np.ndarray, k: int = 10) -> np.ndarray:
    @jax.jit
    def rank(params, batch):
        return jax.lax.top_k(nnx.merge(graphdef, params)(batch)[:, -1], k)[1]

    batches = padded_batches(items, batch_size=256)
    out = [np.asarray(rank(params, jax.device_put(b))) for b in batches]
    return np.concatenate(out)[: len(items)]


def main(workdir: str, users: int = 10_000, repeats: int = 3) -> None:
    ds = load_prepared(Path(workdir) / "prepared")
    split = leave_one_out(ds)
    items = sasrec.encode_items(split.valid_histories, SASREC.max_history)[:users]
    graphdef, _, state = sasrec.new_state(SASREC, len(ds.catalog), 1_000)
    ways = {
        "every position": lambda: every_position(graphdef, state.params, items),
        "last position": lambda: sasrec.top_k(graphdef, state.params, items, k=10, batch_size=256),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    got = {}
    for rep in range(repeats + 1):  # round 0 compiles "last position" once, as a run does
        for name, fn in ways.items():
            start = time.perf_counter()
            got[name] = fn()
            if rep:
                times[name].append(time.perf_counter() - start)
    same = (got["every position"] == got["last position"]).all(1).mean()
    print(f"{workdir}: {len(items):,} users, {len(ds.catalog):,} items, same top 10: {same:.2%}")
    for name, t in times.items():
        all_t = np.round(t, 2).tolist()
        print(f"  {name}: median {np.median(t):.2f} s per validation, all {all_t}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
