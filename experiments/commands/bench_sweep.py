"""The paper's latency sweeps (N = 1e5..1e7 at V = 2048; V = 256..8192 at N = 1e6), resumable.

Each point's JSON goes to --out-dir (existing points with the same config are reused); then PNG
plots and a markdown table replace the generated block of --markdown (docs/BENCHMARKS.md).
"""

import argparse
import sys
from pathlib import Path

from data import atomic
from experiments.bench.constraints import (
    check_fits,
    markdown_table,
    replace_block,
    series,
    sweep_points,
)
from experiments.bench.sweep import run_sweep
from experiments.commands import _common as common
from experiments.commands._common import add_bench_args, bench_config
from experiments.evaluation import plots

MARKERS = ("<!-- bench-sweep:begin -->", "<!-- bench-sweep:end -->")
SKIP_ABOVE = {"cpu_trie": 2_000_000}  # a dict trie of 1e7 SIDs needs > 10 GB of host memory


def _ints(text: str) -> tuple[int, ...]:
    values = tuple(int(float(x)) for x in text.split(",") if x)
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive numbers, e.g. 1e5,1e6; got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--items", type=_ints, default=_ints("1e5,1e6,1e7"), help="N axis")
    parser.add_argument("--vocabs", type=_ints, default=_ints("256,1024,2048,8192"), help="V axis")
    parser.add_argument("--vocab-for-items", type=int, default=2048)
    parser.add_argument("--items-for-vocab", type=int, default=1_000_000)
    add_bench_args(parser)
    parser.add_argument("--out-dir", type=common.path_arg, default=Path("runs/bench_sweep"))
    parser.add_argument("--markdown", type=common.path_arg, default=Path("docs/BENCHMARKS.md"))
    parser.add_argument("--plots-dir", type=common.path_arg, default=Path("docs/img"))


def run(args: argparse.Namespace) -> int:
    check_fits(max(args.items + (args.items_for_vocab,)), args.levels, "--items")
    pts = sweep_points(
        bench_config(args),
        items=args.items,
        vocabs=args.vocabs,
        vocab_for_items=args.vocab_for_items,
        items_for_vocab=args.items_for_vocab,
    )
    results = run_sweep(
        pts, args.out_dir, skip_above=SKIP_ABOVE, progress=lambda msg: print(msg, file=sys.stderr)
    )
    imgs = [
        plots.latency_sweep(
            series(results, axis), axis, args.plots_dir / f"decoding_latency_vs_{axis}.png"
        )
        for axis in ("items", "vocab")
    ]
    links = "".join(f"![{p.stem}]({Path('img') / p.name})\n" for p in imgs if p)
    text = args.markdown.read_text() if args.markdown.exists() else ""
    atomic.write_text(
        args.markdown, replace_block(text, markdown_table(results) + "\n" + links, *MARKERS)
    )
    return 0
