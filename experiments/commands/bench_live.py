"""The live index on random SIDs: toggle and addition latency (1 and 1,000 items) and beam search
with per-request sets and windows vs one global STATIC index, interleaved in one process.

Example: genret bench-live --num-items 1000000 --vocab 2048 --levels 8 --out live.json
"""

import argparse
import json

from data import atomic
from data.errors import ArgumentError
from experiments.bench.live import bench_live
from experiments.commands import _common as common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-items", type=int, default=1_000_000, help="N")
    parser.add_argument("--vocab", type=int, default=2048, help="V")
    parser.add_argument("--levels", type=int, default=8, help="L")
    parser.add_argument("--batch", type=int, default=8, help="B: request rows, each its own sets")
    parser.add_argument("--beam", type=int, default=70, help="K")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=common.path_arg, default=None, help="write the JSON here too")


def run(args: argparse.Namespace) -> int:
    for name in ("num_items", "levels", "batch", "beam", "reps"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name.replace('_', '-')} must be >= 1")
    result = bench_live(**{k: v for k, v in vars(args).items() if k not in ("out", "debug")})
    text = json.dumps(result, indent=2)
    if args.out:
        atomic.write_text(args.out, text + "\n")
    print(text)
    return 0
