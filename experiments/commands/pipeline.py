"""The whole run: prepare, tokenizer, one retriever per cold-start fraction, the cold-start and
leave-one-out evaluations, then WORKDIR/results/report.md with our numbers beside the papers'.

Stages whose inputs and config are unchanged, and whose outputs still load, are skipped
(WORKDIR/stages.json); a killed run resumes from the last checkpoint of the stage it was in:
rerun the same command. With --jobs 2 (the synthetic preset's setting) stages that do not wait on
each other run side by side, each in a process of its own, with the same numbers.
"""

import argparse
import dataclasses

from data.errors import ArgumentError
from experiments.commands import _common as common
from experiments.pipeline import workflow


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_dataset_args(parser)
    common.add_workdir_arg(parser)
    common.add_config_args(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="stages at once, each in its own process, on a CPU (default: the config's `jobs`: "
        "2 for synthetic, else 1); stages run side by side show no progress bars",
    )


def run(args: argparse.Namespace) -> int:
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout, dataset_args=True)
    if args.jobs is not None:
        if args.jobs < 1:
            raise ArgumentError(f"--jobs {args.jobs}: must be >= 1")
        cfg = dataclasses.replace(cfg, jobs=args.jobs)
    workflow.run_pipeline(cfg, layout, progress=not args.no_progress)
    return 0
