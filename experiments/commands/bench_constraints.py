"""Latency and memory of constrained decoding on random SIDs: STATIC vs the baseline constraints.

Every method runs through the same jit-compiled beam search; each timed constrained call is
interleaved with the same call unconstrained, so their difference is the constraint's overhead.
Example: genret bench-constraints --num-items 1000000 --methods static,ppv_exact --out b.json
"""

import argparse
import json
import os
import sys
from pathlib import Path

from data import atomic
from data.errors import ArgumentError
from experiments.bench.harness import METHODS, BenchConfig, measure_build, run_bench


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    """Flags shared with bench-sweep."""
    d = BenchConfig()
    parser.add_argument("--levels", type=int, default=d.levels, help="L, codes per SID")
    parser.add_argument("--batch", type=int, default=d.batch, help="users per call")
    parser.add_argument("--beam", type=int, default=d.beam, help="K, beam width")
    parser.add_argument("--methods", default=",".join(d.methods), help=f"subset of {METHODS}")
    parser.add_argument("--reps", type=int, default=d.reps, help="timed calls per measurement")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--dense-levels", type=int, default=d.dense_levels)
    parser.add_argument("--loop", choices=("unroll", "scan"), default="unroll")
    parser.add_argument("--ppv-top-k", type=int, default=d.ppv_top_k, help="PPV approximate k")
    parser.add_argument(
        "--hash-bits",
        type=int,
        default=d.hash_bits_per_prefix,
        help="hash bitmap bits per stored prefix",
    )


def _available_bytes() -> int:
    """Memory this process may still use (MemAvailable; physical memory where unknown)."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(num_items: int, levels: int, arg: str = "--num-items") -> None:
    """Refuses sizes whose SIDs and indexes cannot fit in memory, before allocating anything.

    The estimate is generous: random SIDs, their sorted copy, the index and the baselines' tables
    hold about 16 int32 words per (item, level); a Python dict trie far more per node.
    """
    need = 16 * 4 * num_items * levels
    have = _available_bytes()
    if need > have:
        raise ArgumentError(
            f"{arg} {num_items:,} x --levels {levels}: needs about {need / 2**30:.1f} GiB, more "
            f"than the {have / 2**30:.1f} GiB available"
        )


def bench_config(args: argparse.Namespace, **overrides) -> BenchConfig:
    for name in ("levels", "batch", "beam", "reps"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.dense_levels < 0 or args.dense_levels > args.levels:
        raise ArgumentError(f"--dense-levels must be in [0, --levels], got {args.dense_levels}")
    unknown = [m for m in args.methods.split(",") if m and m not in METHODS]
    if unknown or not args.methods.strip(","):
        raise ArgumentError(f"--methods: unknown {unknown or 'empty'}; choose from {METHODS}")
    kw = dict(
        levels=args.levels,
        batch=args.batch,
        beam=args.beam,
        reps=args.reps,
        seed=args.seed,
        dense_levels=args.dense_levels,
        unroll=args.loop == "unroll",
        methods=tuple(m for m in args.methods.split(",") if m),
        ppv_top_k=args.ppv_top_k,
        hash_bits_per_prefix=args.hash_bits,
    )
    return BenchConfig(**{**kw, **overrides})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-items", type=int, default=BenchConfig().num_items, help="N")
    parser.add_argument("--vocab", type=int, default=BenchConfig().vocab, help="V")
    add_bench_args(parser)
    parser.add_argument("--build-only", action="store_true", help="STATIC build time and memory")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")


def run(args: argparse.Namespace) -> int:
    if args.num_items < 1 or args.vocab < 2:
        raise ArgumentError("--num-items must be >= 1 and --vocab >= 2")
    cfg = bench_config(args, num_items=args.num_items, vocab=args.vocab)
    check_fits(args.num_items, args.levels)
    if args.build_only:
        result = measure_build(cfg)
    else:
        result = run_bench(cfg, progress=lambda msg: print(msg, file=sys.stderr))
    text = json.dumps(result, indent=2)
    if args.out:
        atomic.write_text(args.out, text + "\n")
    print(text)
    return 0
