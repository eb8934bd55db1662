"""Leave-one-out retrieval (the TIGER benchmark): Recall@5/10 and NDCG@5/10 of the retriever
trained on the leave-one-out split, unconstrained and constrained to the catalog.

Writes WORKDIR/results/warm.json and prints a table.
"""

import argparse

from experiments import common, report, stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--batch-size", type=int, default=64, help="users decoded per call")
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    common.positive("--batch-size", args.batch_size)
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    written = stages.evaluate_warm(cfg, layout, batch_size=args.batch_size)
    stages.save_config(cfg, layout)
    print(report.warm_table(written.summary))
    return 0
