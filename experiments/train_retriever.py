"""Train the decoder retriever on the cold-start split (no cold item in any training history) or,
with --split loo, on TIGER's leave-one-out split (all but each user's last two items).

Reads W/prepared (`genret prepare`) and W/tokenizer (`genret train-tokenizer`); writes
W/retriever_cold_<p>/ or W/retriever_loo/: checkpoints (best + latest), metrics.jsonl, loss.png,
train_summary.json. Validation: next-item Recall@K by beam search on held-out training items (no
test target is used). Rerunning the same command resumes from the latest checkpoint.
"""

import argparse
import json

import jax

import rqvae
from data.prepared import load_prepared
from experiments import common
from seqmodel.train import check_sids_match, cold_start_data, loo_data, train_and_evaluate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument(
        "--split",
        choices=("cold", "cold-val", "loo"),
        default="cold",
        help="cold: cold-start training; cold-val: the same protocol inside the training period, "
        "for tuning (no test target seen); loo: leave-one-out",
    )
    parser.add_argument(
        "--cold-start",
        type=float,
        default=None,
        metavar="P",
        help="with --split cold (required): fraction of newest items held out, e.g. 0.02",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() first (several hosts; see README)",
    )
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    if args.split == "loo" and args.cold_start is not None:
        raise ValueError("--cold-start: not used with --split loo")
    if args.split != "loo" and not 0.0 < (args.cold_start or 0.0) < 1.0:
        raise ValueError(f"--cold-start: expected a fraction in (0, 1), got {args.cold_start}")
    if args.distributed:
        jax.distributed.initialize()
    cfg = common.resolve_config(args, save=jax.process_index() == 0)
    ds = load_prepared(common.prepared_dir(args.workdir))
    tok_dir = common.tokenizer_dir(args.workdir)
    sids, asins = rqvae.load_sids(tok_dir)
    check_sids_match(
        asins, ds.catalog.asins, tok_dir, sids=sids, codebook_size=cfg.rqvae.codebook_size
    )
    V = rqvae.token_vocab_size(sids, cfg.rqvae.codebook_size)
    if args.split == "loo":
        data = loo_data(ds, sids, codebook_size=V, cfg=cfg.seqmodel)
        out = common.retriever_dir(args.workdir, "loo")
    else:
        val = args.split == "cold-val"
        data = cold_start_data(
            ds, sids, codebook_size=V, fraction=args.cold_start, cfg=cfg.seqmodel, validation=val
        )
        name = f"{'coldval' if val else 'cold'}_{args.cold_start:g}"
        out = common.retriever_dir(args.workdir, name)
    result = train_and_evaluate(cfg.seqmodel, out, data, show_progress=not args.no_progress)
    print(json.dumps(result.summary, indent=2))
    return 0
