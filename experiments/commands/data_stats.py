"""Print dataset and cold-start statistics of WORKDIR/prepared as JSON on stdout.

Fields: users, items, interactions, time range, history lengths, and for each cold-start fraction
of the config (default 2% and 5%): cold items and test users.
"""

import argparse
import json

from data import stats
from data.splits import check_fraction
from experiments.commands import _common as common
from experiments.pipeline.artifacts import load_dataset


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument(
        "--fractions",
        type=float,
        nargs="+",
        default=None,
        help="cold-start fractions (default: the config's eval.cold_start_fractions)",
    )


def run(args: argparse.Namespace) -> int:
    for p in args.fractions or ():
        check_fraction(p, "--fractions")
    layout = common.layout_of(args)
    fractions = args.fractions
    if fractions is None:
        fractions = common.resolve_config(args, layout).eval.cold_start_fractions
    ds = load_dataset(layout)
    print(json.dumps(stats.dataset_stats(ds, tuple(fractions)), indent=2))
    return 0
