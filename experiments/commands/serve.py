"""`genret serve`: recommendations from a trained retriever over HTTP JSON, with live item
toggles and additions (experiments/serving/app.py has the routes and why FastAPI + uvicorn).

Example: genret serve --workdir runs/beauty --port 8000, then
  curl -s localhost:8000/recommend -H 'content-type: application/json' \
    -d '{"history": ["B004756YJA"], "k": 5}'
"""

import argparse

from data.errors import ArgumentError
from experiments.commands import _common as common
from experiments.pipeline.layout import SPLIT_KINDS, Split


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--split", choices=SPLIT_KINDS, default="loo", help="whose retriever")
    parser.add_argument("--cold-start", type=float, default=None, metavar="P")
    parser.add_argument("--host", default="127.0.0.1")
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


def run(args: argparse.Namespace) -> int:
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
    cfg = serve_app.ServeConfig(
        batch_size=args.batch_size,
        max_wait_ms=args.max_wait_ms,
        beam_size=args.beam_size,
        in_place=args.in_place,
    )
    rec = serve_app.load_recommender(common.layout_of(args), split, cfg)
    where = f"http://{args.host}:{args.port}"
    print(f"genret serve: {rec.catalog.num_items} items at {where}", flush=True)
    uvicorn.run(serve_app.create_app(rec), host=args.host, port=args.port, log_level="warning")
    return 0
