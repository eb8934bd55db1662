"""Embed the item texts, train the RQ-VAE and write every item's Semantic ID to WORKDIR/tokenizer.

Reads WORKDIR/prepared (run `genret prepare` first). Embeddings are cached in WORKDIR/embeddings;
training checkpoints in WORKDIR/tokenizer/checkpoints, so a killed run resumes where it stopped.
Writes sids.npy (int32 [N, L+1]), asins.txt, config.json, metrics.json and code_usage.png.
"""

import argparse
import json
import os

from data import prepared
from experiments import common


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
    from rqvae.pipeline import summary, tokenize_catalog

    if args.embedder:
        args.overrides = [*args.overrides, f"rqvae.embedder={args.embedder}"]
    if args.fit_on:
        args.overrides = [*args.overrides, f"rqvae.fit_on={args.fit_on}"]
    cfg = common.resolve_config(args)
    ds = prepared.load_prepared(common.prepared_dir(args.workdir))
    # MiniLM loads from the model files inside its package; never ask a hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    out = common.tokenizer_dir(args.workdir)
    metrics = tokenize_catalog(
        cfg.rqvae,
        ds.catalog,
        out,
        cache_dir=args.workdir / "embeddings",
        cold_fraction=max(cfg.eval.cold_start_fractions),
        progress=not args.no_progress,
    )
    print(json.dumps({"tokenizer": str(out), **summary(metrics)}))
    return 0
