"""Train a NEZHA draft head on a trained, frozen retriever: a cheap add-on to a work directory.

Reads W/retriever_<split>/ (`genret train-retriever`); writes W/draft_<split>[_NAME]/: checkpoints
(best + latest), metrics.jsonl, draft.json, train_summary.json. The head is `seqmodel.draft`
(cell, ablations, schedule: --set seqmodel.draft.cell=gru ...); it trains on every (history, next
item) window of the retriever's training split and validates draft Recall@K on the retriever's
holdout. Rerunning the same command resumes. Decode with `genret eval-warm --decoder nezha`.
"""

import argparse
import json

from experiments.commands import _common as common
from experiments.evaluation import draft as draft_eval
from experiments.pipeline import stages
from experiments.pipeline.layout import SPLIT_KINDS, Split


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--split", choices=SPLIT_KINDS, default="loo", help="the retriever's split")
    parser.add_argument(
        "--cold-start", type=float, default=None, metavar="P", help="with --split cold/cold-val"
    )
    parser.add_argument(
        "--name",
        default="",
        help="a name for this head (several heads per retriever, e.g. ablations): "
        "W/draft_<split>_NAME; evaluations pick it with --draft-name",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    split = Split(args.split, args.cold_start)
    draft_eval.check_name("--name", args.name)
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    written = draft_eval.train_draft(
        cfg, layout, split, name=args.name, progress=not args.no_progress
    )
    stages.save_config(cfg, layout)
    print(json.dumps(written.summary, indent=2))
    return 0
