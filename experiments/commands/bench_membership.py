"""Membership of whole SIDs on device, on random SIDs: the hash set that verifies drafted SIDs
(decoding.HashSet) vs STATIC's `decoding.contains` vs a binary search over sorted keys. Build
time, bytes per item and per-call latency (median, p90) of one jitted query batch.

Example: genret bench-membership --num-items 1000000 --vocab 2048 --levels 8 --out m.json
(about 15 s on 2 CPU cores).
"""

import argparse
import json

from data import atomic
from data.errors import ArgumentError
from experiments.bench import decode as draft_bench
from experiments.bench.constraints import check_fits
from experiments.commands import _common as common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-items", type=int, default=100_000, help="N")
    parser.add_argument("--vocab", type=int, default=2048, help="V")
    parser.add_argument("--levels", type=int, default=8, help="L")
    parser.add_argument("--queries", type=int, default=65536, help="SIDs per call (half stored)")
    parser.add_argument("--reps", type=int, default=20, help="timed calls per method")
    parser.add_argument(
        "--probes", type=int, default=None, help="hash set: slots a query reads (default: fewest)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=common.path_arg, default=None, help="write the JSON here too")


def run(args: argparse.Namespace) -> int:
    for name in ("num_items", "levels", "queries", "reps", "probes"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ArgumentError(f"--{name.replace('_', '-')} must be >= 1")
    if args.vocab < 2:
        raise ArgumentError("--vocab must be >= 2")
    check_fits(args.num_items, args.levels)
    result = draft_bench.bench_membership(
        num_items=args.num_items,
        vocab=args.vocab,
        levels=args.levels,
        queries=args.queries,
        reps=args.reps,
        seed=args.seed,
        probes=args.probes,
    )
    text = json.dumps(result, indent=2)
    if args.out:
        atomic.write_text(args.out, text + "\n")
    print(text)
    return 0
