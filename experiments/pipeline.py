"""The whole run: prepare, tokenizer, one retriever per cold-start fraction, the cold-start and
leave-one-out evaluations, then WORKDIR/results/report.md with our numbers beside the papers'.

Stages whose inputs and config are unchanged are skipped (WORKDIR/stages.json); a killed run resumes
from the last checkpoint of the stage it was in: rerun the same command.
"""

import argparse
from pathlib import Path

from experiments import common, workflow


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", choices=common.DATASETS, default=None, help="which dataset")
    parser.add_argument("--raw-dir", type=Path, default=None, help="folder of the raw files")
    common.add_workdir_arg(parser)
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    cfg = common.resolve_config(args, dataset=args.dataset)
    workflow.run_pipeline(cfg, args.workdir, args.raw_dir)
    return 0
