"""Latency and memory of constrained decoding on random SIDs: STATIC vs the baseline constraints.

Every method runs through the same jit-compiled beam search; each timed constrained call is
interleaved with the same call unconstrained, so their difference is the constraint's overhead.
Example: genret bench-constraints --num-items 1000000 --methods static,ppv_exact --out b.json
"""

import argparse
import json
import sys

import jax

from data import atomic
from data.errors import ArgumentError
from experiments.bench.constraints import (
    SHARDED_METHODS,
    WORDS_BUILD,
    WORDS_SEARCH,
    BenchConfig,
    check_fits,
    measure_build,
    run_bench,
)
from experiments.commands import _common as common
from experiments.commands._common import add_bench_args, bench_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-items", type=int, default=BenchConfig().num_items, help="N")
    parser.add_argument("--vocab", type=int, default=BenchConfig().vocab, help="V")
    add_bench_args(parser)
    parser.add_argument("--build-only", action="store_true", help="STATIC build time and memory")
    parser.add_argument(
        "--devices",
        type=int,
        default=0,
        help="run on a mesh of N devices, the index replicated or split (static_sharded, "
        "static_sharded_compact); "
        f"methods default to {','.join(SHARDED_METHODS)}",
    )
    parser.add_argument("--out", type=common.path_arg, default=None, help="write the JSON here too")


def _words(args: argparse.Namespace, methods: tuple[str, ...]) -> float:
    """int32 words per (item, level) at the run's peak (see `check_fits`)."""
    if args.build_only:
        return WORDS_BUILD
    if not set(methods) <= {"static", "static_sharded", "static_sharded_compact"}:
        return WORDS_SEARCH
    # STATIC alone: the build's peak, or after it the SIDs (one word) beside the index's copies
    # (about 1.25 words each, the compact one half that): the host one, one per device where
    # replicated, one split.
    copies = (
        1
        + ("static" in methods) * max(args.devices, 1)
        + ("static_sharded" in methods)
        + 0.5 * ("static_sharded_compact" in methods)
    )
    return max(WORDS_BUILD, 1 + 1.25 * copies)


def run(args: argparse.Namespace) -> int:
    if args.num_items < 1 or args.vocab < 2:
        raise ArgumentError("--num-items must be >= 1 and --vocab >= 2")
    if not 0 <= args.devices <= jax.device_count():
        raise ArgumentError(
            f"--devices must be in [0, {jax.device_count()}] (the devices JAX sees; on CPU set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count=N), got {args.devices}"
        )
    if args.devices and args.methods == ",".join(BenchConfig().methods):
        args.methods = ",".join(SHARDED_METHODS)
    cfg = bench_config(args, num_items=args.num_items, vocab=args.vocab, devices=args.devices)
    check_fits(args.num_items, args.levels, words=_words(args, cfg.methods))
    if args.build_only:
        result = measure_build(cfg)
    else:
        result = run_bench(cfg, progress=lambda msg: print(msg, file=sys.stderr))
    if args.cpu_cores is not None:
        result["cpu_cores"] = args.cpu_cores  # the latency mode (experiments.runtime.latency)
    text = json.dumps(result, indent=2)
    if args.out:
        atomic.write_text(args.out, text + "\n")
    print(text)
    return 0
