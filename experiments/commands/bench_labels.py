"""Per-step cost of constraining B x K rows to a label set over V tokens: ours vs Python tries
and, with the bench extra, llguidance and xgrammar.

Needs the hf extra (torch, transformers). Writes JSON to stdout (and --out), a markdown table to
stderr. Example: genret bench-labels --labels 1000,100000 --vocab 50000 --out runs/bench_labels.json
"""

import argparse
import json
import sys

from data import atomic
from data.errors import ArgumentError
from experiments.bench.labels import (
    METHODS,
    MODES,
    LabelBenchConfig,
    markdown_table,
    run_label_bench,
)
from experiments.commands import _common as common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = LabelBenchConfig()
    parser.add_argument("--labels", default=",".join(map(str, d.num_labels)), help="label counts")
    parser.add_argument("--vocab", type=int, default=d.vocab, help="V")
    parser.add_argument("--batch", type=int, default=d.batch, help="B")
    parser.add_argument("--beam", type=int, default=d.beam, help="K, rows per prompt")
    parser.add_argument("--max-len", type=int, default=d.max_len, help="tokens per label, at most")
    parser.add_argument("--reps", type=int, default=d.reps, help="timed calls per step")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--methods", default=",".join(d.methods), help=f"subset of {METHODS}")
    parser.add_argument("--modes", default=",".join(d.modes), help=f"subset of {MODES}")
    parser.add_argument("--steps", default="", help="steps to time, e.g. 0,1,3 (default: all)")
    parser.add_argument("--subset-size", type=int, default=d.subset_size, help="labels per prompt")
    parser.add_argument("--multi-labels", type=int, default=d.multi_labels, help="max labels")
    parser.add_argument(
        "--xgrammar-max-labels", type=int, default=d.xgrammar_max_labels, help="skip larger"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=d.torch_threads,
        help="torch intra-op threads (default 0: every core, as the JAX methods use)",
    )
    parser.add_argument("--out", type=common.path_arg, default=None, help="write the JSON here too")


def run(args: argparse.Namespace) -> int:
    try:
        labels = tuple(int(n) for n in args.labels.split(","))
    except ValueError:
        raise ArgumentError(
            f"--labels: expected comma-separated ints, got {args.labels!r}"
        ) from None
    try:
        steps = tuple(int(t) for t in args.steps.split(",") if t)
    except ValueError:
        raise ArgumentError(f"--steps: expected comma-separated ints, got {args.steps!r}") from None
    if any(t < 0 for t in steps):
        raise ArgumentError("--steps must be >= 0")
    modes = tuple(m for m in args.modes.split(",") if m)
    if not modes or set(modes) - set(MODES):
        raise ArgumentError(f"--modes: {args.modes!r}; choose from {MODES}")
    for name in ("batch", "beam", "max_len", "reps", "subset_size", "multi_labels"):
        if getattr(args, name) < 1:
            raise ArgumentError(f"--{name.replace('_', '-')} must be >= 1")
    if args.torch_threads < 0:
        raise ArgumentError("--torch-threads must be >= 0")
    if args.vocab < 3 or min(labels) < 1:
        raise ArgumentError("--vocab must be >= 3 and every --labels count >= 1")
    methods = tuple(m for m in args.methods.split(",") if m)
    if not methods or set(methods) - set(METHODS):
        raise ArgumentError(f"--methods: {args.methods!r}; choose from {METHODS}")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise ArgumentError(
            "bench-labels needs torch and transformers: pip install -e '.[hf]'"
        ) from None
    cfg = LabelBenchConfig(
        num_labels=labels,
        vocab=args.vocab,
        batch=args.batch,
        beam=args.beam,
        max_len=args.max_len,
        reps=args.reps,
        seed=args.seed,
        methods=methods,
        modes=modes,
        steps=steps,
        subset_size=args.subset_size,
        multi_labels=args.multi_labels,
        xgrammar_max_labels=args.xgrammar_max_labels,
        torch_threads=args.torch_threads,
    )
    result = run_label_bench(cfg, progress=lambda msg: print(msg, file=sys.stderr))
    text = json.dumps(result, indent=2)
    if args.out:
        atomic.write_text(args.out, text + "\n")
    print(text)
    print(markdown_table(result, "genret bench-labels " + " ".join(sys.argv[2:])), file=sys.stderr)
    return 0
