"""Cold-start retrieval (STATIC section 6): unconstrained beam search, constrained random
guessing and STATIC-constrained beam search over the cold-start items, for the retriever trained on
that split.

Writes WORKDIR/results/cold_start_<p>.json (Recall@1/5/10, NDCG@10, valid and cold rates, latency
per user, STATIC's overhead over unconstrained decoding measured in the same run), prints a table.
With eval.cold_parallel=true it also ranks the cold set with the split's parallel-codes retriever
(method `parallel`; trained by `genret train-retriever --cold-start P --parallel`).
`--decoder nezha` (drafts verified against the cold set) or `nezha-static` (STATIC over the cold
set masks every draft level) decodes with a draft head instead and writes
WORKDIR/results/nezha[_static]_cold_start_<p>.json.
"""

import argparse

from data.splits import check_fraction
from experiments.commands import _common as common
from experiments.evaluation import draft as draft_eval
from experiments.evaluation import report
from experiments.pipeline import stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument(
        "--cold-start",
        type=float,
        required=True,
        metavar="P",
        help="cold-start fraction, in (0, 0.5]",
    )
    parser.add_argument("--beam-size", type=int, default=None, help="K (default: eval.beam_size)")
    parser.add_argument("--batch-size", type=int, default=64, help="users decoded per call")
    parser.add_argument(
        "--validation",
        action="store_true",
        help="the tuning protocol inside the training period (needs train-retriever --split "
        "cold-val); writes results/validation_cold_start_<p>.json",
    )
    parser.add_argument(
        "--decoder", choices=draft_eval.DECODERS, default="beam", help="beam search or a draft head"
    )
    parser.add_argument("--draft-name", default="", help="the head of `train-draft --name`")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    fraction = check_fraction(args.cold_start)
    common.positive("--beam-size", args.beam_size)
    common.positive("--batch-size", args.batch_size)
    if args.beam_size is not None:
        args.overrides = [*args.overrides, f"eval.beam_size={args.beam_size}"]
    draft_eval.check_name("--draft-name", args.draft_name)
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    beam_flag = "eval.beam_size" if args.beam_size is None else "--beam-size"
    common.check_eval_beam_size(
        beam_flag, cfg.eval.beam_size, cfg, layout, batch_size=args.batch_size
    )
    if args.decoder != "beam":
        written = draft_eval.evaluate_cold_start(
            cfg,
            layout,
            args.decoder,
            fraction,
            batch_size=args.batch_size,
            validation=args.validation,
            name=args.draft_name,
            progress=not args.no_progress,
        )
        stages.save_config(cfg, layout)
        print(draft_eval.methods_table(written.summary, draft_eval.COLD_KEYS))
        return 0
    written = stages.evaluate_cold_start(
        cfg,
        layout,
        fraction,
        batch_size=args.batch_size,
        validation=args.validation,
        progress=not args.no_progress,
    )
    stages.save_config(cfg, layout)
    result = written.summary
    print(report.cold_start_table([result]))
    print(f"STATIC / unconstrained latency (median): {result['static_overhead_ratio_median']:.2f}x")
    return 0
