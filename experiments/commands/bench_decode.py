"""Per-user decoding latency (median, p90) and quality of beam search vs the NEZHA draft decoders
on a work directory's retriever: beam search unconstrained and under STATIC, drafts before and
after hash-set verification, and drafts under STATIC; at each beam width and batch size. Then the
same latency on random backbones of several sizes (layers x width), beam search vs verified
drafting, to read off the speedup to expect for a larger model.

Needs a retriever and a draft head (`genret train-draft`, or a joint head). Writes
WORKDIR/results/bench_decode_<split>.json and .md (the table it prints).
"""

import argparse
import json

from data import atomic
from data.errors import ArgumentError
from experiments.bench import decode as draft_bench
from experiments.commands import _common as common
from experiments.evaluation import draft as draft_eval
from experiments.pipeline.layout import SPLIT_KINDS, Split


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = tuple(tuple(int(v) for v in s.split("x")) for s in text.split(",") if s.strip())
    except ValueError:
        pairs = ((0,),)
    if any(len(p) != 2 or min(p) < 1 or p[1] % 64 and p[1] > 64 for p in pairs):
        raise argparse.ArgumentTypeError(f"expected LAYERSxWIDTH,... e.g. 2x64,4x256, got {text!r}")
    return pairs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = draft_bench.DecodeBenchConfig()
    common.add_workdir_arg(parser)
    parser.add_argument("--split", choices=SPLIT_KINDS, default="loo")
    parser.add_argument("--cold-start", type=float, default=None, metavar="P")
    parser.add_argument("--draft-name", default="", help="the head of `train-draft --name`")
    parser.add_argument("--users", type=int, default=d.users, help="test users (seeded sample)")
    parser.add_argument("--single-users", type=int, default=d.single_users, help="batch-1 calls")
    parser.add_argument("--batch-sizes", type=_ints, default=d.batch_sizes, help="e.g. 1,64")
    parser.add_argument("--beams", type=_ints, default=d.beams, help="beam widths, e.g. 20,256")
    parser.add_argument(
        "--sizes", type=_sizes, default=d.sizes, help="backbones LxW of the size sweep, or none"
    )
    parser.add_argument("--no-sizes", action="store_true", help="skip the backbone size sweep")
    parser.add_argument("--seed", type=int, default=d.seed)
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    split = Split(args.split, args.cold_start)
    draft_eval.check_name("--draft-name", args.draft_name)
    for name in ("users", "single_users"):
        common.positive(f"--{name.replace('_', '-')}", getattr(args, name))
    if split.kind == "cold-val":
        raise ArgumentError("--split cold-val: bench-decode reads test users; use loo or cold")
    bench = draft_bench.DecodeBenchConfig(
        users=args.users,
        single_users=args.single_users,
        batch_sizes=args.batch_sizes,
        beams=args.beams,
        sizes=() if args.no_sizes else args.sizes,
        seed=args.seed,
    )
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    result = draft_bench.bench_decode(cfg, layout, split, bench, name=args.draft_name)
    table = draft_bench.markdown(result)
    path = layout.decode_bench(split, args.draft_name)
    atomic.write_json(path, result)
    atomic.write_text(path.with_suffix(".md"), table)
    print(table)
    print(json.dumps({"written": [str(path), str(path.with_suffix(".md"))]}))
    return 0
