"""The co-occurrence prior's host-side work per batch of leave-one-out users
(eval.warm_cooc_weight): its prefix table over the whole catalog, and the median time of one
batch's prior (the dense rows of p(item | last item), then their prefix conditionals), median of 7
calls after a warm-up.

Usage: python docs/scripts/bench_cooc_prior.py WORKDIR [WORKDIR ...]   (leave-one-out work dirs)
"""

import sys
import time
from pathlib import Path

import numpy as np

from data.splits import leave_one_out
from decoding import PrefixTable
from experiments.pipeline.artifacts import load_dataset
from experiments.evaluation.baselines import CooccurrencePrior, loo_training
from experiments.config import load_json
from experiments.pipeline.layout import RunLayout
from experiments.evaluation.retrieval import load_inputs


def main(workdirs: list[str], batch: int = 64, repeats: int = 7) -> None:
    print("| run | items | V | prefix nodes | table MB | prior per batch of 64 (ms) |")
    print("|---|---|---|---|---|---|")
    for wd in workdirs:
        layout = RunLayout(Path(wd))
        cfg = load_json(Path(wd) / "config.json")
        ds, sids = load_inputs(cfg, layout)
        V = cfg.rqvae.codebook_size
        table = PrefixTable.build(sids, V)
        prior = CooccurrencePrior.fit(loo_training(ds.histories, len(sids)), len(sids), 100.0)
        h = leave_one_out(load_dataset(layout)).test_histories
        last = h.items[h.offsets[1:] - 1][:batch]
        table.conditional_log_prior(prior.log_prob(last))  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            table.conditional_log_prior(prior.log_prob(last))
            times.append(time.perf_counter() - start)
        print(
            f"| {wd} | {len(sids):,} | {V} | {table.num_nodes:,} | "
            f"{table.child.nbytes / 2**20:.1f} | {1000 * np.median(times):.1f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
