"""Train the decoder retriever on the cold-start split (no cold item in any training history) or,
with --split loo, on TIGER's leave-one-out split (all but each user's last two items).

Reads W/prepared (`genret prepare`) and W/tokenizer (`genret train-tokenizer`); writes
W/retriever_cold_<p>/ or W/retriever_loo/: checkpoints (best + latest), metrics.jsonl, loss.png,
train_summary.json. Validation: next-item Recall@K by beam search on held-out training items (no
test target is used). Rerunning the same command resumes from the latest checkpoint.
With seqmodel.self_distill > 0 it first trains (or resumes) the teacher, the same config without
it, in W/teacher_<split>/ (with seqmodel.distill_teachers=k: k of them, at seeds seed..seed+k-1,
the others in W/teacher_<split>_<j>/), then distils it (their mean) into W/retriever_<split>/.
With --parallel (cold or cold-val): the parallel-codes retriever of that split instead (the
`parallel` section, on the same histories; W/parallel_cold_<p>/), whose cold-set ranking
eval-cold-start reports as `parallel` under eval.cold_parallel=true.
"""

import argparse
import json

import jax

from experiments.commands import _common as common
from experiments.pipeline import stages
from experiments.pipeline.layout import SPLIT_KINDS, Split


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument(
        "--split",
        choices=SPLIT_KINDS,
        default="cold",
        help="cold: cold-start training; cold-val: the same protocol inside the training period, "
        "for tuning (no test target seen); loo: leave-one-out",
    )
    parser.add_argument(
        "--cold-start",
        type=float,
        default=None,
        metavar="P",
        help="with --split cold or cold-val (required): fraction of newest items held out, in "
        "(0, 0.5], e.g. 0.02",
    )
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="train the split's parallel-codes retriever (needs --cold-start) instead",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() first (several hosts; see README)",
    )
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    split = Split(args.split, args.cold_start)
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    if args.distributed:
        jax.distributed.initialize()
    train = stages.train_parallel_cold if args.parallel else stages.train_retriever
    written = train(cfg, layout, split, progress=not args.no_progress)
    stages.save_config(cfg, layout)
    print(json.dumps(written.summary, indent=2))
    return 0
