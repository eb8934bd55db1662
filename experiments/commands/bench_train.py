"""Retriever training throughput: milliseconds per step, non-PAD tokens per second and the time of
one epoch, for several example layouts and model sizes on a work directory's data, all timed in
one process with their steps interleaved (a shared machine slows every variant alike).

Reads the dataset and SIDs of WORKDIR (`genret prepare`, `genret train-tokenizer`); trains
nothing that is kept. Writes WORKDIR/results/bench_train_<split>.json and .md (the printed table).
Example:
    genret bench-train --workdir runs/beauty --layouts causal,bucketed,packed --sizes 2x64,4x128
    genret bench-train --workdir runs/beauty --layouts bucketed --archs token,item
    genret bench-train --workdir runs/beauty --layouts bucketed --ema-decays 0,0.999
    genret bench-train --workdir runs/beauty --layouts bucketed --cooc-distills 0,0.5
"""

import argparse
import json
from collections.abc import Callable
from typing import NamedTuple

from data import atomic
from data.errors import ArgumentError
from experiments.bench.train import bench_train, markdown
from experiments.commands import _common as common
from experiments.pipeline.layout import Split
from seqmodel.config import ARCHS, LAYOUTS


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = tuple(tuple(int(v) for v in s.split("x")) for s in text.split(",") if s.strip())
    except ValueError:
        pairs = ((0,),)
    if not pairs or any(len(p) != 2 or min(p) < 1 for p in pairs):
        raise argparse.ArgumentTypeError(f"expected LAYERSxWIDTH,... e.g. 2x64,4x128, got {text!r}")
    return pairs


def _names(allowed: tuple[str, ...]):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(x.strip() for x in text.split(",") if x.strip())
        if not names or any(n not in allowed for n in names):
            raise argparse.ArgumentTypeError(f"expected some of {','.join(allowed)}, got {text!r}")
        return names

    return parse


class Sweep(NamedTuple):
    """One option timed side by side: its argument, config field and label in a variant's name."""

    arg: str  # the argument's name (--item-buckets for item_buckets)
    field: str  # the SeqModelConfig field it sets
    label: str  # shown before the value in a variant's name
    parse: Callable[[str], tuple]  # the argument's parser
    help: str  # what its values are


SWEEPS = (
    Sweep(
        "item_buckets",
        "item_embed_buckets",
        "ids",
        common.int_list(0, "0,65536", "counts"),
        "hashed item-embedding rows for the item-level retriever, e.g. 0,65536",
    ),
    Sweep(
        "ema_decays",
        "ema_decay",
        "ema",
        common.float_list(0.0, 1.0, "0,0.999", "decays"),
        "parameter moving-average decays, e.g. 0,0.999 (0: none)",
    ),
    Sweep(
        "cooc_distills",
        "cooc_distill",
        "teacher",
        common.float_list(0.0, 1.0, "0,0.5", "weights"),
        "co-occurrence teacher weights, e.g. 0,0.5 (0: none; not with packed rows)",
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--split", choices=("loo", "cold"), default="loo")
    parser.add_argument("--cold-start", type=float, default=None, metavar="P")
    parser.add_argument(
        "--layouts",
        type=_names(LAYOUTS),
        default=("causal", "bucketed", "packed"),
        help="e.g. causal,bucketed,packed",
    )
    parser.add_argument(
        "--archs",
        type=_names(ARCHS),
        default=None,
        help="retriever architectures, e.g. token,item (packed rows are token only); "
        "default: the config's",
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        help="LAYERSxWIDTH,... (heads: width/32, MLP: 2 x width); default: the config's model",
    )
    for sweep in SWEEPS:
        parser.add_argument(
            "--" + sweep.arg.replace("_", "-"),
            type=sweep.parse,
            default=None,
            help=f"{sweep.help} (seqmodel.{sweep.field}); default: the config's",
        )
    parser.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    common.positive("--steps", args.steps)
    if args.split == "cold" and args.cold_start is None:
        raise ArgumentError("--split cold needs --cold-start P")
    split = Split(args.split, args.cold_start)
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    result = bench_train(
        cfg,
        layout,
        split,
        args.layouts,
        args.sizes,
        args.steps,
        archs=args.archs,
        sweeps=[(sw.field, sw.label, getattr(args, sw.arg)) for sw in SWEEPS],
    )
    table = markdown(result)
    path = layout.results / f"bench_train_{split.name}.json"
    atomic.write_json(path, result)
    atomic.write_text(path.with_suffix(".md"), table)
    print(table)
    print(json.dumps({"written": [str(path), str(path.with_suffix(".md"))]}))
    return 0
