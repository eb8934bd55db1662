"""The parallel-codes retriever (RPG, KDD 2025) in the SASRec harness: give every item
`parallel.num_codes` codes by product quantization of its text embedding, train on TIGER's
leave-one-out split (all but each user's last two items; early-stopped on second-to-last items),
rank the full catalog for every test user, write WORKDIR/results/parallel.json (Recall/NDCG@5/10);
the report shows it beside the other methods. Config: the `parallel` section (--set
parallel.num_codes=16 ...).
Example: genret parallel --workdir runs/beauty_parallel --validation
"""

import argparse

from experiments.commands import _common as common
from experiments.pipeline import stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_loo_model_args(parser, "parallel")


def run(args: argparse.Namespace) -> int:
    return common.run_loo_model(args, stages.parallel, "parallel_codes")
