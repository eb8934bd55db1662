"""Step time of the next-item harness (seqmodel.sasrec: gradient and AdamW update) in its two row
layouts, `causal` and `bucketed`, on a work directory's leave-one-out training part: the same
number of batches of each, every shape compiled first, then the layouts' steps timed in turns
(two passes), so a shared machine slows both alike. Prints a markdown table. With `--vary
FIELD=V1,V2,...` the variants are those values of one field of the model's section, in its
configured layout (`--vary sampled_negatives=0,2048`: the full softmax against a sampled one).

Usage: python docs/scripts/bench_harness_layouts.py WORKDIR {sasrec,parallel} [--steps 30]
    [--set sasrec.d_model=256 ...] [--vary FIELD=V1,V2]
WORKDIR needs `genret prepare`; `parallel` also needs WORKDIR/parallel_loo/pq_codes.npy (from
`genret parallel`).
"""

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from data.splits import leave_one_out
from experiments import config as config_lib
from experiments.pipeline.layout import RunLayout
from experiments.pipeline.stages import load_dataset
from seqmodel import sasrec
from seqmodel.config import HARNESS_LAYOUTS
from seqmodel.parallel import parallel_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("model", choices=("sasrec", "parallel"))
    parser.add_argument("--steps", type=int, default=30, help="batches per layout (default 30)")
    parser.add_argument("--set", action="append", default=[], help="a config override")
    parser.add_argument(
        "--vary",
        metavar="FIELD=V1,V2",
        help="time these values of one field of the model's section instead of the two layouts",
    )
    args = parser.parse_args()
    layout = RunLayout(args.workdir)
    cfg = config_lib.apply_overrides(config_lib.load_preset("beauty"), args.set)
    base = getattr(cfg, args.model)
    ds = load_dataset(layout)
    train, num_items = leave_one_out(ds).train, len(ds.catalog)
    codes = np.load(layout.parallel_codes) if args.model == "parallel" else None
    if args.vary:
        field, _, values = args.vary.partition("=")
        variants = {
            f"{field}={v}": config_lib.apply_overrides(cfg, [f"{args.model}.{field}={v}"])
            for v in values.split(",")
        }
        variants = {name: getattr(c, args.model) for name, c in variants.items()}
    else:
        variants = {name: dataclasses.replace(base, layout=name) for name in HARNESS_LAYOUTS}
    runs = {}
    for name, seq in variants.items():
        if codes is not None:
            spec = parallel_spec(seq, codes)
        else:
            spec = sasrec.sasrec_spec(seq, num_items)
        batches, per_epoch = sasrec.training_batches(seq, train, args.model)
        graphdef, tx, state, consts = sasrec.new_state(seq, num_items, 10_000, spec)
        step = jax.jit(
            lambda s, b, slots, g=graphdef, t=tx, c=consts: sasrec.train_step(
                g, t, 0, s, b, c, slots
            ),
            static_argnums=2,
        )
        drawn = []
        for _ in range(args.steps):
            b = next(batches)  # each batch's scored positions, counted once outside the timing
            drawn.append(({k: jnp.asarray(v) for k, v in b.items()}, sasrec.batch_slots(b)))
        for b, slots in drawn:  # every shape compiles before any step is timed
            state, _ = step(state, b, slots)
        jax.block_until_ready(state)
        runs[name] = [step, state, drawn, per_epoch, []]
    for _ in range(2):
        for run in runs.values():
            step, state, drawn, _, times = run
            for b, slots in drawn:
                start = time.perf_counter()
                state, m = step(state, b, slots)
                jax.block_until_ready(m["loss"])
                times.append(time.perf_counter() - start)
            run[1] = state
    what = "variant" if args.vary else "layout"
    print(f"| {args.model} {what} | steps per epoch | median ms | mean ms | epoch s |")
    print("|---|---|---|---|---|")
    for name, (_, _, _, per_epoch, times) in runs.items():
        print(
            f"| {name} | {per_epoch} | {1000 * np.median(times):.0f} | "
            f"{1000 * np.mean(times):.0f} | {np.mean(times) * per_epoch:.0f} |"
        )


if __name__ == "__main__":
    main()
