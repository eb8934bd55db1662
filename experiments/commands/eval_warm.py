"""Leave-one-out retrieval (the TIGER benchmark): Recall@5/10 and NDCG@5/10 of the retriever
trained on the leave-one-out split, unconstrained and constrained to the catalog.

Writes WORKDIR/results/warm.json and prints a table. `--decoder nezha` (drafts before and after
hash-set verification) or `nezha-static` (STATIC masks every draft level) decodes with a draft
head instead (`genret train-draft`, or the retriever's own joint head) and writes
WORKDIR/results/nezha[_static]_warm.json.
"""

import argparse

from data.errors import ArgumentError
from experiments.commands import _common as common
from experiments.evaluation import draft as draft_eval
from experiments.evaluation import report
from experiments.pipeline import stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--batch-size", type=int, default=64, help="users decoded per call")
    parser.add_argument(
        "--decoder", choices=draft_eval.DECODERS, default="beam", help="beam search or a draft head"
    )
    parser.add_argument("--draft-name", default="", help="the head of `train-draft --name`")
    parser.add_argument(
        "--validation",
        action="store_true",
        help="score every user's second-to-last item instead of the last (the tuning protocol; "
        "beam search only); writes results/validation_warm.json",
    )
    parser.add_argument(
        "--ensemble",
        action="append",
        default=[],
        metavar="DIR",
        help="another leave-one-out retriever directory trained on the same SIDs (another "
        "seed: a work directory holding a copy of this one's prepared data and tokenizer, "
        "trained with --set seqmodel.seed=N); the retrievers' beams are ranked as one ensemble "
        "(eval.warm_ensemble_rule; repeatable; beam search only)",
    )
    common.add_holdout_of_arg(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    common.positive("--batch-size", args.batch_size)
    draft_eval.check_name("--draft-name", args.draft_name)
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    common.check_eval_beam_size(
        "eval.beam_size", cfg.eval.beam_size, cfg, layout, batch_size=args.batch_size
    )
    if args.validation and args.decoder != "beam":
        raise ArgumentError("--validation: only with --decoder beam")
    if args.ensemble and args.decoder != "beam":
        raise ArgumentError("--ensemble: only with --decoder beam")
    if args.decoder == "beam":
        written = stages.evaluate_warm(
            cfg,
            layout,
            batch_size=args.batch_size,
            validation=args.validation,
            ensemble=args.ensemble,
            holdout_of=args.holdout_of,
            progress=not args.no_progress,
        )
    else:
        written = draft_eval.evaluate_warm(
            cfg,
            layout,
            args.decoder,
            batch_size=args.batch_size,
            name=args.draft_name,
            progress=not args.no_progress,
        )
    stages.save_config(cfg, layout)
    if args.decoder == "beam":
        print(report.warm_table(written.summary))
    else:
        print(draft_eval.methods_table(written.summary, draft_eval.WARM_KEYS))
    return 0
