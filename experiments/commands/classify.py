"""Train a small causal LM from item title and brand to category paths, then score its decoded
labels unconstrained vs constrained to the training label set (single- and multi-label).

Writes WORKDIR/results/classify_<dataset>.json and prints a markdown table. Example:
genret classify --dataset beauty --workdir runs/classify (Beauty: ~10 min on 2 CPU cores).
--dataset file reads any Amazon-2014-style meta file (--meta FILE); sports has no categories.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

from tqdm import tqdm

from data.amazon import find_raw_files
from data.config import AMAZON_SHORTCUTS, SyntheticConfig
from data.errors import ArgumentError
from data.synthetic import ensure_raw_files
from experiments.classify.run import (
    ClassifyConfig,
    check_settings,
    markdown_table,
    result_path,
    run_classify,
)
from experiments.commands import _common as common
from experiments.pipeline.stages import DEFAULT_AMAZON_ROOT

_FIXED = ("dataset", "meta_path")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset", choices=("beauty", "toys", "synthetic", "file"), default="beauty"
    )
    parser.add_argument(
        "--raw-dir",
        type=common.path_arg,
        default=None,
        help="default: ../shared/data/amazon2014/<Cat>",
    )
    parser.add_argument(
        "--meta", type=common.path_arg, default=None, help="the meta file (--dataset file)"
    )
    parser.add_argument("--workdir", type=common.path_arg, required=True)
    for f in dataclasses.fields(ClassifyConfig):
        if f.name not in _FIXED:
            flag, kind = "--" + f.name.replace("_", "-"), type(f.default)
            if kind is bool:
                parser.add_argument(flag, action="store_true", help=f"ClassifyConfig.{f.name}")
            else:
                parser.add_argument(
                    flag, type=kind, default=f.default, help=f"ClassifyConfig.{f.name}"
                )


def _meta_path(args: argparse.Namespace) -> Path:
    if args.dataset == "file":
        if args.meta is None:
            raise ArgumentError("--meta: required with --dataset file")
        return args.meta
    if args.meta is not None:
        raise ArgumentError("--meta: only with --dataset file")
    if args.dataset == "synthetic":
        return ensure_raw_files(SyntheticConfig(), args.workdir / "raw")[1]
    category = AMAZON_SHORTCUTS[args.dataset]
    return find_raw_files(args.raw_dir or DEFAULT_AMAZON_ROOT / category, category)[1]


def run(args: argparse.Namespace) -> int:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ClassifyConfig)
              if f.name not in _FIXED}  # fmt: skip
    # Before anything is written (the synthetic meta file), naming the flag typed.
    check_settings(values, lambda name, value: f"--{name.replace('_', '-')} {value}")
    common.check_creatable(args.workdir)
    meta = _meta_path(args)
    cfg = ClassifyConfig(dataset=args.dataset, meta_path=str(meta.resolve()), **values)
    # tqdm.write: a log line during training does not break the progress bar.
    result = run_classify(cfg, args.workdir, log=lambda m: tqdm.write(m, file=sys.stderr))
    print(markdown_table(result))
    print(f"wrote {result_path(args.workdir, cfg.dataset)}", file=sys.stderr)
    return 0
