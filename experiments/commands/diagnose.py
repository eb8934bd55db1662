"""Tuning diagnostics on the validation protocol only (it never reads a test target).

For retrievers trained with `genret train-retriever --split cold-val`: STATIC Recall@K of each, of
their ensemble (per-level log-probabilities averaged), and with a training-prior correction of the
first two levels; and where the first retriever loses its Recall@1, level by level (teacher-forced:
is the true code the best among the cold set's codes under the true prefix?). Writes
WORKDIR/results/validation_diagnose_<p>.json.
"""

import argparse
import json

from data.errors import ArgumentError
from data.splits import check_fraction
from experiments.commands import _common as common
from experiments.evaluation.diagnose import diagnose


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(p)
    common.add_config_args(p)
    p.add_argument("--cold-start", type=float, default=0.02, help="cold-start fraction p")
    p.add_argument(
        "--retriever",
        action="append",
        type=common.path_arg,
        default=[],
        help="a cold-val retriever directory (repeatable; same tokenizer); default: "
        "WORKDIR/retriever_coldval_<p>",
    )
    p.add_argument(
        "--prior-weights",
        default="",
        help="comma-separated weights a: also decode with a * log p_train(2-code prefix) "
        "subtracted (first retriever only), e.g. 0.5,1",
    )
    p.add_argument("--beam-size", type=int, default=None, help="unset: the config's eval.beam_size")
    p.add_argument("--batch-size", type=int, default=128)


def run(args: argparse.Namespace) -> int:
    fraction = check_fraction(args.cold_start)
    common.positive("--beam-size", args.beam_size)
    common.positive("--batch-size", args.batch_size)
    try:
        weights = tuple(float(w) for w in args.prior_weights.split(",") if w.strip())
    except ValueError:
        raise ArgumentError(
            f"--prior-weights: expected numbers, got {args.prior_weights!r}"
        ) from None
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    beam_flag = "eval.beam_size" if args.beam_size is None else "--beam-size"
    beam_size = args.beam_size or cfg.eval.beam_size
    common.check_eval_beam_size(beam_flag, beam_size, cfg, layout, batch_size=args.batch_size)
    out = diagnose(
        cfg,
        layout,
        fraction,
        retrievers=args.retriever,
        prior_weights=weights,
        beam_size=args.beam_size,
        batch_size=args.batch_size,
    )
    print(json.dumps(out, indent=1))
    return 0
