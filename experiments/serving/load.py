"""The loopback load test of `genret serve`: latency and throughput per concurrency level while a
toggler disables and re-enables ~1,000 items a second, and a check of every response.

The check's rule: item x is *certainly disabled* for a request sent at s and answered at r when
a disable of x was acknowledged at or before s and no enable of x was sent before r. The server
applies a toggle before acknowledging it and reads the catalog once per batch, after the request
arrived, so such an item must never be returned. Items toggled while a request is in flight
may go either way. The toggled items are the ones the model ranks highest for the test
histories (from a warm-up pass), so the filter is exercised: `filtered_responses` counts the
responses whose warm-up top-k held a certainly-disabled item.
"""

import asyncio
import collections
import dataclasses
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np

from data.errors import StageError


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadConfig:
    concurrency: tuple[int, ...] = (1, 8, 32)
    requests: int = 400  # per level, at most
    seconds: float = 20.0  # per level, at most
    k: int = 10
    toggle_rate: float = 1000.0  # items toggled per second (half disabled, half re-enabled)
    toggle_batch: int = 100  # items per tick: toggle_batch / 2 disabled, as many re-enabled
    disabled_window: int = 500  # items kept disabled at once (FIFO)
    seed: int = 0


class Toggles:
    """Who is disabled when: per item, intervals [disable acknowledged, enable sent)."""

    def __init__(self):
        self.closed: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
        self.open: dict[str, float] = {}

    def certainly_disabled(self, item: str, sent: float, received: float) -> bool:
        if (t := self.open.get(item)) is not None and t <= sent:
            return True
        return any(a <= sent and b >= received for a, b in self.closed.get(item, ()))


async def _toggler(client, pool: list[str], cfg: LoadConfig, toggles: Toggles, stop, out: dict):
    rng = np.random.default_rng(cfg.seed + 1)
    half = cfg.toggle_batch // 2
    tick = cfg.toggle_batch / cfg.toggle_rate
    fifo: collections.deque = collections.deque()
    window = min(cfg.disabled_window, len(pool) // 2)  # so that enabled items remain to pick
    lat, n, start = [], 0, time.perf_counter()
    next_t = start
    while not stop.is_set():
        enabled = [a for a in pool if a not in toggles.open]
        off = [str(a) for a in rng.choice(enabled, min(half, len(enabled)), replace=False)]
        on = [fifo.popleft() for _ in range(min(half, len(fifo)))] if len(fifo) >= window else []
        t = time.perf_counter()
        r = await client.post("/items/disable", json={"asins": off})
        ack = time.perf_counter()
        lat.append((ack - t) * 1e3)
        r.raise_for_status()
        for a in off:
            toggles.open[a] = ack
        fifo.extend(off)
        if on:
            sent = time.perf_counter()
            for a in on:  # from here on, a response may hold a: the interval closes now
                toggles.closed[a].append((toggles.open.pop(a), sent))
            r = await client.post("/items/enable", json={"asins": on})
            lat.append((time.perf_counter() - sent) * 1e3)
            r.raise_for_status()
        n += len(off) + len(on)
        next_t += tick
        await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
    out["toggles"] = n
    out["toggle_seconds"] = time.perf_counter() - start
    out["toggle_ms"] = lat
    # Leave the catalog as found.
    back = list(toggles.open)
    if back:
        sent = time.perf_counter()
        for a in back:
            toggles.closed[a].append((toggles.open.pop(a), sent))
        (await client.post("/items/enable", json={"asins": back})).raise_for_status()


async def _level(client, histories, tops, pool, cfg: LoadConfig, c: int) -> dict:
    toggles, stop, tog = Toggles(), asyncio.Event(), {}
    rng = np.random.default_rng(cfg.seed + c)
    lat, errors, violations, filtered, done = [], 0, 0, 0, 0
    issued = 0
    before = (await client.get("/metrics")).json()
    toggler = asyncio.create_task(_toggler(client, pool, cfg, toggles, stop, tog))
    start = time.perf_counter()

    async def worker():
        nonlocal issued, errors, violations, filtered, done
        while issued < cfg.requests and time.perf_counter() - start < cfg.seconds:
            issued += 1
            u = int(rng.integers(len(histories)))
            body = {"history": histories[u], "k": cfg.k}
            if rng.random() < 0.5:
                body["sets"] = ["in_stock"]
            sent = time.perf_counter()
            try:
                r = await client.post("/recommend", json=body)
                got = time.perf_counter()
                r.raise_for_status()
                items = [x["asin"] for x in r.json()["items"]]
            except (httpx.HTTPError, ValueError, KeyError):
                errors += 1
                continue
            lat.append((got - sent) * 1e3)
            done += 1
            violations += sum(toggles.certainly_disabled(a, sent, got) for a in items)
            filtered += any(toggles.certainly_disabled(a, sent, got) for a in tops[u])

    await asyncio.gather(*[worker() for _ in range(c)])
    elapsed = time.perf_counter() - start
    stop.set()
    await toggler
    after = (await client.get("/metrics")).json()
    batches = after["batches"] - before["batches"]
    rows = sum(int(k) * v for k, v in after["batch_sizes"].items()) - sum(
        int(k) * v for k, v in before["batch_sizes"].items()
    )
    tl = np.asarray(tog["toggle_ms"] or [0.0])
    return {
        "concurrency": c,
        "requests": done,
        "errors": errors,
        "seconds": elapsed,
        "requests_per_s": done / elapsed,
        "p50_ms": float(np.percentile(lat, 50)) if lat else None,
        "p99_ms": float(np.percentile(lat, 99)) if lat else None,
        "mean_server_batch": rows / batches if batches else 0.0,
        "toggles_per_s": tog["toggles"] / tog["toggle_seconds"],
        "toggle_p50_ms": float(np.percentile(tl, 50)),
        "toggle_p99_ms": float(np.percentile(tl, 99)),
        "disabled_returned": int(violations),
        "filtered_responses": int(filtered),
    }


async def run_load(
    url: str, histories: list[list[str]], cfg: LoadConfig, transport=None, token=None
) -> dict:
    """Warm-up (each history once: the unconstrained top-k, whose union is the toggled pool),
    then one measured run per concurrency level; `token`: the service's bearer token."""
    limits = httpx.Limits(max_connections=max(cfg.concurrency) + 4)
    headers = {"authorization": f"Bearer {token}"} if token else None
    async with httpx.AsyncClient(
        base_url=url, timeout=60.0, limits=limits, transport=transport, headers=headers
    ) as client:
        limit = (await client.get("/health")).json()["max_history"]
        histories = [h[-limit:] for h in histories]
        tops = []
        for i in range(0, len(histories), 16):
            rs = await asyncio.gather(
                *[
                    client.post("/recommend", json={"history": h, "k": cfg.k})
                    for h in histories[i : i + 16]
                ]
            )
            for r in rs:
                r.raise_for_status()
                tops.append([x["asin"] for x in r.json()["items"]])
        pool = sorted({a for t in tops for a in t})
        levels = [await _level(client, histories, tops, pool, cfg, c) for c in cfg.concurrency]
        server = (await client.get("/metrics")).json()
    return {
        "config": dataclasses.asdict(cfg),
        "histories": len(histories),
        "toggled_pool": len(pool),
        "levels": levels,
        "server_metrics": server,
    }


def markdown(result: dict) -> str:
    head = (
        "| concurrency | requests | errors | req/s | p50 ms | p99 ms | server batch | toggles/s "
        "| toggle p99 ms | disabled returned | filtered responses |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = [
        f"| {x['concurrency']} | {x['requests']} | {x['errors']} | {x['requests_per_s']:.1f} "
        f"| {x['p50_ms']:.1f} | {x['p99_ms']:.1f} | {x['mean_server_batch']:.1f} "
        f"| {x['toggles_per_s']:.0f} | {x['toggle_p99_ms']:.1f} | {x['disabled_returned']} "
        f"| {x['filtered_responses']} |"
        for x in result["levels"]
    ]
    return head + "\n".join(rows) + "\n"


def _histories(layout, users: int, seed: int) -> list[list[str]]:
    """A seeded sample of users' histories (cut to the model's limit by the load test)."""
    from experiments.pipeline.artifacts import load_dataset

    ds = load_dataset(layout)
    h, asins = ds.histories, ds.catalog.asins
    pick = np.random.default_rng(seed).choice(len(h), min(users, len(h)), replace=False)
    return [[str(asins[i]) for i in h.items[h.offsets[u] : h.offsets[u + 1]][-200:]] for u in pick]


def _start_server(args) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "experiments.cli", "serve", "--workdir", str(args.workdir)]
    cmd += ["--port", str(port), "--batch-size", str(args.batch_size)]
    cmd += ["--max-wait-ms", str(args.max_wait_ms)]
    # stderr to a file: a pipe nobody reads would block the server once full.
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            tail = " ".join(log.read().split())[-500:]
            raise StageError(f"genret serve exited with {proc.returncode}: {tail}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.terminate()
    raise StageError("genret serve did not answer /health within 300 s")
