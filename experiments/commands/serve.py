"""`genret serve`: recommendations from a trained retriever over HTTP JSON, with live item
toggles and additions (experiments/serving/app.py has the routes and why FastAPI + uvicorn).

Example: genret serve --workdir runs/beauty --port 8000, then
  curl -s localhost:8000/recommend -H 'content-type: application/json' \
    -d '{"history": ["B004756YJA"], "k": 5}'
"""

import argparse
import ipaddress
import os

from data.errors import ArgumentError
from experiments.commands import _common as common
from experiments.pipeline.layout import SPLIT_KINDS, Split

TOKEN_ENV = "GENRET_SERVE_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--split", choices=SPLIT_KINDS, default="loo", help="whose retriever")
    common.add_cpu_cores_arg(parser)
    parser.add_argument("--cold-start", type=float, default=None, metavar="P")
    parser.add_argument("--host", default="127.0.0.1", help="other than loopback: needs a token")
    parser.add_argument(
        "--token",
        default=None,
        help=f"bearer token of the write routes /items/... (default: ${TOKEN_ENV}, which keeps "
        "it out of the process list)",
    )
    parser.add_argument("--max-body-mb", type=float, default=4.0, help="larger bodies get a 413")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=16, help="requests per decode call")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="batch gathering window")
    parser.add_argument("--beam-size", type=int, default=20, help="beam width = the largest k")
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="toggle items in place on the device (no index copy: for large catalogs; a toggle "
        "waits for the decodes in flight)",
    )


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is None and not _loopback(args.host):
        raise ArgumentError(
            f"--host {args.host} is not loopback: set a token for the write routes with --token "
            f"or the environment variable {TOKEN_ENV}"
        )
    if not 0 < args.max_body_mb <= 1024:
        raise ArgumentError(f"--max-body-mb: must be in (0, 1024], got {args.max_body_mb}")
    try:
        import uvicorn

        from experiments.serving import app as serve_app
    except ImportError as e:
        extra = "pip install -e '.[serve]'"
        raise ArgumentError(f"genret serve needs the serve extra: {extra} ({e})") from None
    common.positive("--batch-size", args.batch_size)
    common.positive("--beam-size", args.beam_size)
    if not 0 <= args.max_wait_ms <= 1000:
        raise ArgumentError(f"--max-wait-ms: must be in [0, 1000], got {args.max_wait_ms}")
    if not 0 <= args.port < 65536:
        raise ArgumentError(f"--port: must be in [0, 65535], got {args.port}")
    split = Split(args.split, args.cold_start)
    layout = common.layout_of(args)
    model_file = layout.retriever_model(split)
    common.check_retriever_beam_size(
        "--beam-size", args.beam_size, model_file, batch_size=args.batch_size
    )
    cfg = serve_app.ServeConfig(
        batch_size=args.batch_size,
        max_wait_ms=args.max_wait_ms,
        beam_size=args.beam_size,
        in_place=args.in_place,
        max_body_bytes=int(args.max_body_mb * 2**20),
    )
    rec = serve_app.load_recommender(layout, split, cfg)
    where = f"http://{args.host}:{args.port}"
    print(f"genret serve: {rec.catalog.num_items} items at {where}", flush=True)
    app = serve_app.create_app(rec, token=token)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
