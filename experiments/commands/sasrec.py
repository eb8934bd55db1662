"""The SASRec baseline in the same harness: train on TIGER's leave-one-out split (all but each
user's last two items; early-stopped on second-to-last items), rank the full catalog for every
test user, write WORKDIR/results/sasrec.json (Recall/NDCG@5/10); the report shows it beside the
generative retriever. Config: the `sasrec` section (--set sasrec.num_layers=2 ...).
"""

import argparse

from experiments.commands import _common as common
from experiments.pipeline import stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_loo_model_args(parser, "sasrec")


def run(args: argparse.Namespace) -> int:
    return common.run_loo_model(args, stages.sasrec, "sasrec")
