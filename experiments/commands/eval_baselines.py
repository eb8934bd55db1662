"""The model-free cold-start baselines alone: constrained random guessing and the content nearest
neighbour (the cold item closest, by item-text embedding, to the user's last 3 items), on the same
users as `genret eval-cold-start`. Needs only the prepared dataset (the tokenizer stage's cached
embeddings are reused). Writes WORKDIR/results/[validation_]baselines_cold_start_<p>.json.
"""

import argparse

from data.splits import check_fraction
from experiments.commands import _common as common
from experiments.evaluation import report
from experiments.evaluation import retrieval as retrieval_eval


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--cold-start", type=float, required=True, metavar="P", help="in (0, 0.5]")
    parser.add_argument(
        "--validation", action="store_true", help="the tuning protocol inside the training period"
    )
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    fraction = check_fraction(args.cold_start)
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    result = retrieval_eval.evaluate_cold_baselines(
        cfg, layout, fraction, validation=args.validation
    )
    print(report.baselines_table(result))
    return 0
