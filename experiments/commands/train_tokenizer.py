"""Embed the item texts, train the RQ-VAE and write every item's Semantic ID to WORKDIR/tokenizer.

Reads WORKDIR/prepared (run `genret prepare` first). Embeddings are cached in WORKDIR/embeddings;
training checkpoints in WORKDIR/tokenizer/checkpoints, so a killed run resumes where it stopped.
Writes sids.npy (int32 [N, L+1]), asins.txt, config.json, metrics.json and code_usage.png.
"""

import argparse
import json

from experiments.commands import _common as common
from experiments.pipeline import stages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    common.add_config_args(parser)
    parser.add_argument(
        "--embedder",
        choices=("tfidf", "minilm"),
        default=None,
        help="item text embedder; unset: the config's rqvae.embedder",
    )
    parser.add_argument(
        "--fit-on",
        choices=("all", "warm"),
        default=None,
        help="fit on all items or only on those outside the largest cold-start set, "
        "which are then only encoded; unset: the config's rqvae.fit_on",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.embedder:
        args.overrides = [*args.overrides, f"rqvae.embedder={args.embedder}"]
    if args.fit_on:
        args.overrides = [*args.overrides, f"rqvae.fit_on={args.fit_on}"]
    layout = common.layout_of(args)
    cfg = common.resolve_config(args, layout)
    written = stages.train_tokenizer(cfg, layout, progress=not args.no_progress)
    stages.save_config(cfg, layout)
    print(json.dumps(written.summary))
    return 0
