"""The parallel-codes retriever (RPG, KDD 2025) in the SASRec harness: give every item
`parallel.num_codes` codes by product quantization of its text embedding, train on TIGER's
leave-one-out split (all but each user's last two items; early-stopped on second-to-last items),
rank the full catalog for every test user, write WORKDIR/results/parallel.json (Recall/NDCG@5/10);
the report shows it beside the other methods. Config: the `parallel` section (--set
parallel.num_codes=16 ...).
Example: genret parallel --workdir runs/beauty_single --validation
"""

import argparse
import json

from experiments.commands import _common as common
from experiments.pipeline import stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    common.add_config_args(parser)
    parser.add_argument(
        "--validation",
        action="store_true",
        help="rank every user's second-to-last item instead of the last (tuning; the test "
        "targets are not read); writes results/validation_parallel.json",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    written = stages.parallel(
        cfg, layout, validation=args.validation, progress=not args.no_progress
    )
    stages.save_config(cfg, layout)
    print(json.dumps(written.summary["methods"]["parallel_codes"], indent=2))
    return 0
