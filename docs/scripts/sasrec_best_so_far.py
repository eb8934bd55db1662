"""Ranks the full leave-one-out validation split (with --test, the test split) with the best
checkpoint a SASRec run has saved so far: `genret sasrec` ranks only once training ends; this reads
a run that was stopped, or is still training, without changing it. Prints Recall/NDCG@5/10
in percent and the checkpoint's step. With --outside K (validation only), also the same numbers
over the users outside the first K of the early stop's seeded sample (data.splits.holdout_rows):
two runs whose holdouts differ (K1 < K2, one seed: the samples are nested) compare without the
bias of either's choice of checkpoint on the users outside K2.

Usage: python docs/scripts/sasrec_best_so_far.py --workdir W [--test | --outside K]
[--config P] [--set K=V ...] (the same --config/--set as the `genret sasrec` run, so that the
model's shapes match)
"""

import argparse

import jax
import numpy as np

from data.splits import holdout_rows, leave_one_out, outside_holdouts
from experiments.commands import _common as common
from experiments.evaluation import metrics
from experiments.pipeline.artifacts import load_dataset
from seqmodel import sasrec
from seqmodel.checkpoint import Checkpoints
from seqmodel.files import CHECKPOINTS_DIR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_workdir_arg(parser)
    common.add_config_args(parser)
    parser.add_argument("--test", action="store_true", help="rank the test split instead")
    parser.add_argument(
        "--outside", type=int, default=0, metavar="K", help="also score the users outside K"
    )
    args = parser.parse_args()
    if args.test and args.outside:
        parser.error("--outside K scores validation users; it cannot go with --test")
    layout = common.layout_of(args)
    seq = common.resolve_config(args, layout).sasrec
    ds = load_dataset(layout)
    split = leave_one_out(ds)
    graphdef, _, state = sasrec.new_state(seq, len(ds.catalog), 1)
    ckpts = Checkpoints(layout.sasrec / CHECKPOINTS_DIR)
    best = ckpts.restore_best_params(jax.eval_shape(lambda: state))
    ckpts.close()
    histories, targets = split.valid_histories, split.valid_targets
    if args.test:
        histories, targets = split.test_histories, split.test_targets
    items = sasrec.encode_items(histories, seq.max_history)
    pred = sasrec.top_k(graphdef, best.params, items, k=10, batch_size=256)
    step = int(np.asarray(best.step))
    which = "test" if args.test else "validation"
    print(f"{layout.root}: best checkpoint at step {step}, {len(pred)} {which} users")
    _print_metrics(pred, targets)
    if args.outside:
        rest = outside_holdouts(
            np.arange(len(targets)), holdout_rows(len(targets), args.outside, seq.seed)
        )
        print(f"outside the first {args.outside} of the holdout sample: {len(rest)} users")
        _print_metrics(pred[rest], targets[rest])


def _print_metrics(pred: np.ndarray, targets: np.ndarray) -> None:
    m = metrics.ranking_metrics(pred, targets, ks=(5, 10), ndcg_ks=(5, 10))
    keys = ("recall@5", "ndcg@5", "recall@10", "ndcg@10")
    print(" / ".join(f"{k} {100 * m[k]:.2f}" for k in keys))


if __name__ == "__main__":
    main()
