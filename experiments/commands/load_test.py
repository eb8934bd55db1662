"""`genret load-test`: requests/s and p50/p99 latency of `genret serve` on loopback at several
concurrency levels while ~1,000 items a second are toggled, checking that no response holds an
item disabled before it was sent (experiments/serving/load.py states the rule).

Starts `genret serve --workdir W` on a free loopback port (or drives --url), sends histories of
the work directory's users, and writes --out (JSON) and its markdown table beside it (.md). The
toggles carry the bearer token of $GENRET_SERVE_TOKEN when it is set (the started server's too).
Example: genret load-test --workdir runs/beauty --out runs/serve_load.json
"""

import argparse
import asyncio
import json
import os
import urllib.parse

from data import atomic
from data.errors import ArgumentError
from experiments.commands import _common as common
from experiments.commands.serve import TOKEN_ENV
from experiments.serving.load import _histories, _start_server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(parser)
    parser.add_argument("--url", default=None, help="a running service (default: start one)")
    parser.add_argument(
        "--concurrency", type=common.int_list(1, "1,8,32"), default=(1, 8, 32), help="e.g. 1,8,32"
    )
    parser.add_argument("--requests", type=int, default=400, help="per level, at most")
    parser.add_argument("--seconds", type=float, default=20.0, help="per level, at most")
    parser.add_argument("--users", type=int, default=200, help="histories sampled")
    parser.add_argument("--toggle-rate", type=float, default=1000.0, help="items toggled per s")
    parser.add_argument("--batch-size", type=int, default=16, help="of the started server")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="of the started server")
    parser.add_argument(
        "--out", type=common.path_arg, required=True, help="JSON result (.md beside it)"
    )
    parser.add_argument("--seed", type=int, default=0)


def _check_url(url: str) -> None:
    """An ArgumentError unless `url` is http(s)://HOST[:PORT][/...]."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ArgumentError(f"--url {url!r}: expected http://host:port or https://host:port")
    try:
        parts.port  # noqa: B018 (raises on a port that is no number or out of range)
    except ValueError as e:
        raise ArgumentError(f"--url {url!r}: {e}") from None


def run(args: argparse.Namespace) -> int:
    try:
        import httpx

        from experiments.serving import load as serve_load
    except ImportError as e:
        extra = "pip install -e '.[serve]'"
        raise ArgumentError(f"genret load-test needs the serve extra: {extra} ({e})") from None
    if args.url is not None:
        _check_url(args.url)
    for name in ("requests", "users"):
        common.positive(f"--{name}", getattr(args, name))
    if args.seconds <= 0 or args.toggle_rate <= 0:
        raise ArgumentError("--seconds and --toggle-rate: must be > 0")
    cfg = serve_load.LoadConfig(
        concurrency=args.concurrency,
        requests=args.requests,
        seconds=args.seconds,
        toggle_rate=args.toggle_rate,
        seed=args.seed,
    )
    histories = _histories(common.layout_of(args), args.users, args.seed)
    server = None if args.url else _start_server(args)
    try:
        url = args.url or server[1]
        token = os.environ.get(TOKEN_ENV) or None
        try:
            result = asyncio.run(serve_load.run_load(url, histories, cfg, token=token))
        except (OSError, httpx.TransportError) as e:
            if not args.url:
                raise
            raise ArgumentError(f"--url {args.url}: cannot reach the service ({e})") from None
    finally:
        if server is not None:
            server[0].terminate()
            server[0].wait(30)
    result["url"] = args.url or "started: " + " ".join(server[0].args[3:])
    table = serve_load.markdown(result)
    atomic.write_text(args.out, json.dumps(result, indent=2) + "\n")
    atomic.write_text(args.out.with_suffix(".md"), table)
    print(table, end="")
    bad = sum(x["errors"] + x["disabled_returned"] for x in result["levels"])
    return 1 if bad else 0
