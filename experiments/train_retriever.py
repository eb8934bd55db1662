"""Train the decoder retriever on the cold-start split: no cold item in any training history.

Reads W/prepared (`genret prepare`) and W/tokenizer (`genret train-tokenizer`); writes
W/retriever_cold_<p>/: checkpoints (best + latest), metrics.jsonl, loss.png, train_summary.json.
Validation: next-item Recall@K by beam search on a holdout of training users' last items (no test
target is used). Rerunning the same command resumes from the latest checkpoint.
"""

import argparse
import json

import rqvae
from data.prepared import load_prepared
from experiments import common
from seqmodel.train import check_sids_match, cold_start_data, train_and_evaluate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument(
        "--cold-start",
        type=float,
        required=True,
        metavar="P",
        help="fraction of newest items held out as the cold-start set, e.g. 0.02",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() first (several hosts; see README)",
    )
    common.add_config_args(parser)


def run(args: argparse.Namespace) -> int:
    if not 0.0 < args.cold_start < 1.0:
        raise ValueError(f"--cold-start: expected a fraction in (0, 1), got {args.cold_start}")
    if args.distributed:
        import jax

        jax.distributed.initialize()
    cfg = common.resolve_config(args, save=not args.distributed or _is_lead())
    ds = load_prepared(common.prepared_dir(args.workdir))
    tok_dir = common.tokenizer_dir(args.workdir)
    sids, asins = rqvae.load_sids(tok_dir)
    V = cfg.rqvae.codebook_size
    check_sids_match(asins, ds.catalog.asins, tok_dir, sids=sids, codebook_size=V)
    data = cold_start_data(ds, sids, codebook_size=V, fraction=args.cold_start, cfg=cfg.seqmodel)
    out = common.retriever_dir(args.workdir, f"cold_{args.cold_start:g}")
    result = train_and_evaluate(cfg.seqmodel, out, data, show_progress=not args.no_progress)
    print(json.dumps(result.summary, indent=2))
    return 0


def _is_lead() -> bool:
    import jax

    return jax.process_index() == 0
