"""The retrieval service: a trained retriever behind a live catalog (`decoding.live`), served as
HTTP JSON by FastAPI, with requests batched on the server into one compiled beam search.

Why FastAPI (on Starlette) + uvicorn: both are mature and widely deployed ASGI projects, so the
app runs on any ASGI server and is tested in-process through httpx's ASGI transport without a
socket; FastAPI's pydantic request models reject malformed bodies with the location of the bad
field (`history[3]`, `k`), which is the error contract of this service; uvicorn is the reference
ASGI server. Checks that need the catalog (unknown items, set names, history length) raise the
same kind of error, and so do malformed requests, unknown routes, bodies over the size limit and
missing tokens: every 4xx body is {"error": "<field>: <why>", "field": "<field>"}, echoing at
most a short prefix of any value the client sent. Types are strict: "5" is no k, 1 no boolean.

Consistency: a request's constraint reads the catalog's index once, when its batch is formed, so
a toggle acknowledged before a request was sent applies to it. A write request is validated
whole before anything is applied: a failed one changes nothing. Writes run one at a time in a
worker thread, so that recommendations keep flowing meanwhile.
"""

import asyncio
import collections
import contextlib
import dataclasses
import hmac
import threading
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from decoding import Unconstrained
from decoding.live import (
    MAX_SETS,
    TIME_MIN,
    LiveCatalog,
    LiveConstraint,
    LiveIndex,
    compile_updates,
    lookup,
)
from seqmodel.inference import retrieval_fn
from seqmodel.state import Retriever
from seqmodel.tokens import encode_history, sid_tokens

INT32_MAX = 2**31 - 1
MAX_WRITE = 10_000  # items per write request
WRITE_ROUTES = "/items/"  # the prefix of the routes that change the catalog (token-protected)
_ECHO = 40  # characters of a client's value that an error message repeats


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeConfig:
    batch_size: int = 16  # B: requests per decode call (padded: one compiled program)
    max_wait_ms: float = 5.0  # how long a batch waits for more requests after its first
    beam_size: int = 20  # K: also the largest k a request may ask for
    set_names: tuple[str, ...] = ("in_stock", "new")  # "new": items added by /items/add
    # Toggles update the device index in place (no copy: for large catalogs); a toggle then
    # waits for the decodes in flight to finish.
    in_place: bool = False
    # Larger request bodies are refused (413); 10,000 added items take about 1 MB.
    max_body_bytes: int = 4 << 20


def _short(value) -> str:
    """A client's value as an error message quotes it: at most a short prefix."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= _ECHO else text[:_ECHO] + "..."


class RequestError(Exception):
    """A request that cannot be served; `field` names the offending part of its body."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


# ---------------------------------------------------------------------------------------------
# Request bodies: unknown fields are errors, so a typo is not silently ignored, and types are
# strict (no "5" -> 5, true -> 1 or "yes" -> True), so a client's mistyped field is not guessed at.


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RecommendBody(_Body):
    history: list[str] = Field(max_length=10_000)
    k: int | None = None  # default: min(10, the beam width)
    sets: list[str] = Field(default_factory=list, max_length=MAX_SETS)
    newer_than: int | None = Field(default=None, ge=TIME_MIN, le=INT32_MAX)


class ItemsBody(_Body):
    asins: list[str] = Field(min_length=1, max_length=MAX_WRITE)


class MembershipBody(ItemsBody):
    set: str
    member: bool


class NewItem(_Body):
    asin: str = Field(min_length=1, max_length=200)
    sid: list[int]
    time: int | None = Field(default=None, ge=TIME_MIN, le=INT32_MAX)
    sets: list[str] | None = None  # default: every named set


class AddBody(_Body):
    items: list[NewItem] = Field(min_length=1, max_length=MAX_WRITE)


# ---------------------------------------------------------------------------------------------


class Recommender:
    """The retriever, the live catalog and the host maps asin <-> item id <-> SID.

    Writes come from the event loop (one at a time); decoding runs in a worker thread and reads
    only the catalog's index (one immutable snapshot per batch) and append-only maps.
    """

    def __init__(
        self,
        model: Retriever,
        sids: np.ndarray,
        asins: Sequence[str],
        times: np.ndarray,
        cfg: ServeConfig,
    ):
        space = model.space
        self.cfg = cfg
        self.max_history = model.cfg.max_history
        self.num_levels, self.vocab = space.num_levels, space.codebook_size
        sids = np.asarray(sids, np.int32)
        times = np.clip(np.asarray(times, np.int64), TIME_MIN, INT32_MAX)
        self.asins = [str(a) for a in asins]
        self.ids = {a: i for i, a in enumerate(self.asins)}
        self.by_sid = {s.tobytes(): a for s, a in zip(sids, self.asins, strict=True)}
        self.tokens = sid_tokens(sids, self.vocab)
        # Every batch brings its own constraint (the catalog's index of the moment, the rows'
        # sets and times); the decoder's own, unconstrained, is never used, so never compiled.
        self._retrieval = retrieval_fn(
            model, Unconstrained(self.vocab, self.num_levels), beam_size=cfg.beam_size
        )
        self._pad_tokens = encode_history(self.tokens, np.zeros(0, np.int64), self.max_history)
        self._write_lock = threading.Lock()
        old = 1 << cfg.set_names.index("new") if "new" in cfg.set_names else 0
        # A rebuilt index (an addition past capacity) has new shapes: its rebuild thread compiles
        # the decoder for them before the swap, or the next request would wait for that.
        self.catalog = LiveCatalog(
            sids,
            vocab_size=self.vocab,
            set_names=cfg.set_names,
            sets=np.full(len(sids), (1 << len(cfg.set_names)) - 1 - old),
            times=times,
            in_place=cfg.in_place,
            warm=self._decode_padding,
        )
        compile_updates(self.catalog.index)  # compile before the first request
        self._decode_padding(self.catalog.index)

    # -- recommend ------------------------------------------------------------------------------

    def _pad_row(self) -> tuple[np.ndarray, int, int]:
        return self._pad_tokens, 0, TIME_MIN

    def _decode_padding(self, index: LiveIndex) -> None:
        """Decodes a batch of padding rows on `index`: compiles the decoder for its shapes."""
        B = self.cfg.batch_size
        c = LiveConstraint(index, jnp.zeros(B, jnp.int32), jnp.full(B, TIME_MIN, jnp.int32))
        tokens = np.stack([self._pad_tokens] * B)
        jax.block_until_ready(self._retrieval(tokens, constraint=c))

    def prepare(self, body: RecommendBody) -> tuple[np.ndarray, int, int, int]:
        """(tokens, set mask, min time, k) of a request, or RequestError naming the field."""
        if len(body.history) > self.max_history:
            raise RequestError(
                "history", f"{len(body.history)} items; this model reads at most {self.max_history}"
            )
        ids = []
        for i, a in enumerate(body.history):
            if (j := self.ids.get(a)) is None:
                raise RequestError(f"history[{i}]", f"unknown item {_short(a)}")
            ids.append(j)
        k = min(10, self.cfg.beam_size) if body.k is None else body.k
        if not 1 <= k <= self.cfg.beam_size:
            raise RequestError("k", f"must be in [1, {self.cfg.beam_size}], got {_short(k)}")
        mask = self._mask(body.sets, "sets")
        min_time = TIME_MIN if body.newer_than is None else body.newer_than
        tokens = encode_history(self.tokens, np.asarray(ids, np.int64), self.max_history)
        return tokens, mask, min_time, k

    def _mask(self, names: Sequence[str], field: str) -> int:
        for i, n in enumerate(names):
            if n not in self.cfg.set_names:
                known = ", ".join(self.cfg.set_names)
                raise RequestError(f"{field}[{i}]", f"unknown set {_short(n)}; known sets: {known}")
        return sum(1 << self.cfg.set_names.index(n) for n in set(names))

    def run_batch(self, rows: list[tuple[np.ndarray, int, int]]) -> list[list[tuple[str, float]]]:
        """Decodes up to B requests padded to B rows: per row, its valid beams (asin, score)."""
        B = self.cfg.batch_size
        rows = rows + [self._pad_row()] * (B - len(rows))
        tokens = np.stack([r[0] for r in rows])
        sets = jnp.asarray([r[1] for r in rows], jnp.int32)
        min_time = jnp.asarray([r[2] for r in rows], jnp.int32)
        # The index is held until the results are on the host (an in-place toggle waits).
        with self.catalog.reading() as index:
            c = LiveConstraint(index, sets, min_time)
            res = self._retrieval(tokens, constraint=c)
            toks, scores, valid = jax.device_get((res.tokens, res.scores, res.valid))
        toks = toks.astype(np.int32)
        out = []
        for b in range(B):
            out.append(
                [
                    (self.by_sid[toks[b, j].tobytes()], float(scores[b, j]))
                    for j in range(toks.shape[1])
                    if valid[b, j]
                ]
            )
        return out

    # -- writes ---------------------------------------------------------------------------------

    def item_ids(self, asins: Sequence[str], field: str = "asins") -> np.ndarray:
        ids = []
        for i, a in enumerate(asins):
            if (j := self.ids.get(a)) is None:
                raise RequestError(f"{field}[{i}]", f"unknown item {_short(a)}")
            ids.append(j)
        return np.asarray(ids, np.int32)

    def set_enabled(self, asins: Sequence[str], value: bool) -> int:
        ids = self.item_ids(asins)
        with self._write_lock:
            self.catalog.set_enabled(ids, value)
        return len(ids)

    def set_membership(self, asins: Sequence[str], set_name: str, value: bool) -> int:
        if set_name not in self.cfg.set_names:
            known = ", ".join(self.cfg.set_names)
            raise RequestError("set", f"unknown set {_short(set_name)}; known sets: {known}")
        ids = self.item_ids(asins)
        with self._write_lock:
            self.catalog.set_membership(set_name, ids, value)
        return len(ids)

    def add(self, items: Sequence[NewItem]) -> dict:
        """New items with explicit SIDs; all are checked before any is added."""
        with self._write_lock:  # the checks too: two additions of one new asin, one wins
            return self._add(items)

    def _add(self, items: Sequence[NewItem]) -> dict:
        L, V = self.num_levels, self.vocab
        now = min(int(time.time()), INT32_MAX)
        sids, masks, times, seen_sid, seen_asin = [], [], [], set(), set()
        for i, it in enumerate(items):
            if it.asin in self.ids or it.asin in seen_asin:
                raise RequestError(f"items[{i}].asin", f"item {_short(it.asin)} already exists")
            if len(it.sid) != L or any(not 0 <= c < V for c in it.sid):
                raise RequestError(f"items[{i}].sid", f"expected {L} codes in [0, {V})")
            sid = np.asarray(it.sid, np.int32)
            if sid.tobytes() in self.by_sid or sid.tobytes() in seen_sid:
                raise RequestError(f"items[{i}].sid", f"SID {it.sid} is already an item's")
            names = self.cfg.set_names if it.sets is None else it.sets
            masks.append(self._mask(names, f"items[{i}].sets"))
            seen_sid.add(sid.tobytes())
            seen_asin.add(it.asin)
            sids.append(sid)
            times.append(now if it.time is None else it.time)
        sids = np.stack(sids)
        # SID -> asin first: a decode that sees the new items in the index can name them; the
        # asin -> id map last: a request naming a new item finds its tokens.
        for s, it in zip(sids, items, strict=True):
            self.by_sid[s.tobytes()] = it.asin
        try:
            ids = self.catalog.add(sids, sets=np.asarray(masks), times=np.asarray(times))
        except ValueError as e:  # checked above; kept so that a failure changes nothing
            for s in sids:
                del self.by_sid[s.tobytes()]
            raise RequestError("items", str(e)) from None
        self.tokens = np.concatenate([self.tokens, sid_tokens(sids, V)])
        self.asins.extend(it.asin for it in items)
        for j, it in zip(ids, items, strict=True):
            self.ids[it.asin] = int(j)
        # Past the index's spare capacity, a background rebuild places them (decodable then).
        with self.catalog.reading() as index:
            placed = np.asarray(lookup(index, sids)) >= 0
        return {"added": len(items), "decodable_now": int(placed.sum())}


# ---------------------------------------------------------------------------------------------


class Batcher:
    """Gathers recommend requests into batches of up to B (waiting at most max_wait_ms after the
    first) and decodes each batch in a worker thread, so toggles keep flowing meanwhile."""

    def __init__(self, rec: Recommender, stats: "Stats"):
        self.rec, self.stats = rec, stats
        self.pending: collections.deque = collections.deque()
        # Set on every arrival. The batcher only waits on it (never on a queue get that a
        # timeout could cancel after taking a request: asyncio.wait_for on 3.11 can lose one).
        self.arrived = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def submit(self, row) -> list[tuple[str, float]]:
        if self.task is None:  # started by the first request (in-process clients skip lifespan)
            self.task = asyncio.create_task(self.loop())
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((row, fut))
        self.arrived.set()
        return await fut

    async def _wait(self, timeout: float | None) -> None:
        """Until the next arrival (or the timeout); the caller checked `pending` just before,
        with no await in between, so no arrival is missed."""
        self.arrived.clear()
        try:
            await asyncio.wait_for(self.arrived.wait(), timeout)
        except TimeoutError:
            pass

    async def loop(self) -> None:
        B, wait = self.rec.cfg.batch_size, self.rec.cfg.max_wait_ms / 1e3
        while True:
            while not self.pending:
                await self._wait(None)
            deadline = time.perf_counter() + wait
            while len(self.pending) < B and (left := deadline - time.perf_counter()) > 0:
                await self._wait(left)
            batch = [self.pending.popleft() for _ in range(min(B, len(self.pending)))]
            t = time.perf_counter()
            try:
                results = await asyncio.to_thread(self.rec.run_batch, [r for r, _ in batch])
            except Exception as e:  # a bug: fail this batch's requests, keep serving
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.stats.batch(len(batch), time.perf_counter() - t)
            for (_, fut), res in zip(batch, results, strict=False):
                if not fut.done():
                    fut.set_result(res)


class Stats:
    """Request counts per endpoint and status, batch sizes, latency percentiles (last 10,000)."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()
        self.latency_ms: collections.deque = collections.deque(maxlen=10_000)
        self.decode_ms: collections.deque = collections.deque(maxlen=10_000)
        self.batch_sizes: collections.Counter = collections.Counter()

    def batch(self, size: int, seconds: float) -> None:
        self.batch_sizes[size] += 1
        self.decode_ms.append(seconds * 1e3)

    def summary(self) -> dict:
        def pct(xs) -> dict:
            if not xs:
                return {"count": 0}
            a = np.asarray(xs)
            return {
                "count": len(a),
                "p50_ms": float(np.percentile(a, 50)),
                "p99_ms": float(np.percentile(a, 99)),
            }

        n = sum(self.batch_sizes.values())
        rows = sum(k * v for k, v in self.batch_sizes.items())
        return {
            "requests": {f"{p} {s}": c for (p, s), c in sorted(self.counts.items())},
            "batches": n,
            "mean_batch_size": rows / n if n else 0.0,
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
            "recommend_latency": pct(self.latency_ms),
            "decode_latency": pct(self.decode_ms),
        }


def _field(loc: Sequence) -> str:
    """('body', 'history', 3) -> 'history[3]' (a long key as a short prefix)."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        part = part if isinstance(part, int) or len(part) <= _ECHO else part[:_ECHO] + "..."
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _error(status: int, field: str, message: str, headers=None) -> JSONResponse:
    """The service's one error body (messages quote short prefixes; this bounds the rest)."""
    body = {"error": f"{field}: {message}"[:300], "field": field}
    return JSONResponse(body, status_code=status, headers=headers)


def _is_json(content_type: str | None) -> bool:
    kind = (content_type or "").split(";")[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def _validation_error(errors: Sequence[dict], content_type: str | None) -> tuple[int, str, str]:
    """(status, field, message) of pydantic's first error, the body's own problems named so."""
    if not errors:
        return 422, "body", "invalid request"
    e, loc = errors[0], tuple(errors[0].get("loc", ()))
    if e["type"] == "json_invalid":  # loc: ("body", character offset)
        at = f" at character {loc[1]}" if len(loc) > 1 else ""
        return 422, "body", f"invalid JSON{at}: {e.get('ctx', {}).get('error', e['msg'])}"
    if loc in ((), ("body",)):
        if e["type"] == "missing":
            return 422, "body", "missing: expected a JSON object"
        if not _is_json(content_type):
            got = "none" if content_type is None else _short(content_type)
            return 415, "content-type", f"expected application/json, got {got}"
        return 422, "body", "expected a JSON object"
    return 422, _field(loc), "unknown field" if e["type"] == "extra_forbidden" else e["msg"]


# The field named by an HTTP error: the router's (unknown path or method), FastAPI's (a body
# that does not parse), ours (size and token).
_HTTP_FIELD = {400: "body", 401: "authorization", 404: "path", 405: "method", 413: "body"}


class _Guard:
    """ASGI middleware that refuses before the body is read: a write without the bearer token
    (when one is set; read routes stay open), and a body over the size limit (by its
    Content-Length, else counted as it streams in)."""

    def __init__(self, app, *, token: str | None, max_body_bytes: int):
        self.app, self.token, self.limit = app, token, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refused = None
        if self.token is not None and scope["path"].startswith(WRITE_ROUTES):
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not given.strip():
                refused = "missing: this route needs the header 'Authorization: Bearer <token>'"
            elif not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                refused = "wrong bearer token"
            if refused:
                reply = _error(401, "authorization", refused, {"WWW-Authenticate": "Bearer"})
                return await reply(scope, receive, send)
        too_large = f"over the limit of {self.limit} bytes"
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.limit:
            return await _error(413, "body", too_large)(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:  # FastAPI re-raises an HTTPException met reading the body
                raise HTTPException(413, too_large)
            return message

        await self.app(scope, counted, send)


def create_app(rec: Recommender, *, token: str | None = None) -> FastAPI:
    """The service's routes over `rec`; the batcher starts and stops with the app. With a
    `token`, the write routes (/items/...) need the header `Authorization: Bearer <token>`."""
    stats = Stats()
    batcher = Batcher(rec, stats)
    writes = asyncio.Lock()  # one write at a time, so one worker thread at most waits on it

    async def lifespan(app: FastAPI):
        yield
        if batcher.task is not None:
            batcher.task.cancel()
        # A rebuild thread killed at exit inside XLA (its compile) would abort the process.
        with contextlib.suppress(RuntimeError):  # a failed rebuild: nothing left to wait for
            await asyncio.to_thread(rec.catalog.wait)

    app = FastAPI(title="genret", lifespan=lifespan)
    app.state.stats = stats
    app.add_middleware(_Guard, token=token, max_body_bytes=rec.cfg.max_body_bytes)

    @app.middleware("http")  # outside the guard: its refusals are counted too
    async def count(request: Request, call_next):
        response = await call_next(request)
        path = request.url.path
        known = any(path == getattr(r, "path", None) for r in app.routes)
        stats.counts[(path if known else "(other)", response.status_code)] += 1
        return response

    @app.exception_handler(RequestError)
    async def bad_request(request: Request, e: RequestError):
        return _error(422, e.field, e.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError):
        status, field, msg = _validation_error(e.errors(), request.headers.get("content-type"))
        return _error(status, field, msg)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException):
        field = _HTTP_FIELD.get(e.status_code, "request")
        msg = {
            400: "could not be parsed as JSON",
            404: f"no route {_short(request.url.path)}",
            405: f"{_short(request.method)} is not allowed on {_short(request.url.path)}",
        }.get(e.status_code, str(e.detail))
        return _error(e.status_code, field, msg, getattr(e, "headers", None))

    async def write(fn, *args):
        """A write in a worker thread (recommendations flow meanwhile), one at a time."""
        async with writes:
            return await asyncio.to_thread(fn, *args)

    @app.post("/recommend")
    async def recommend(body: RecommendBody) -> dict:
        t = time.perf_counter()
        tokens, mask, min_time, k = rec.prepare(body)
        beams = await batcher.submit((tokens, mask, min_time))
        stats.latency_ms.append((time.perf_counter() - t) * 1e3)
        return {"items": [{"asin": a, "score": s} for a, s in beams[:k]]}

    @app.post("/items/disable")
    async def disable(body: ItemsBody) -> dict:
        return {"disabled": await write(rec.set_enabled, body.asins, False)}

    @app.post("/items/enable")
    async def enable(body: ItemsBody) -> dict:
        return {"enabled": await write(rec.set_enabled, body.asins, True)}

    @app.post("/items/membership")
    async def membership(body: MembershipBody) -> dict:
        return {"changed": await write(rec.set_membership, body.asins, body.set, body.member)}

    @app.post("/items/add")
    async def add(body: AddBody) -> dict:
        return await write(rec.add, body.items)

    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "items": rec.catalog.num_items,
            "sets": list(rec.cfg.set_names),
            "max_history": rec.max_history,
            "max_k": rec.cfg.beam_size,
            "sid_levels": rec.num_levels,
            "codebook_size": rec.vocab,
        }

    @app.get("/metrics")
    async def metrics() -> dict:
        return stats.summary()

    return app


def load_recommender(layout, split, cfg: ServeConfig) -> Recommender:
    """The retriever of `split` in a work directory, over its whole catalog (item time: the
    item's first review, so `newer_than` selects items that appeared since)."""
    from data.errors import ArtifactError
    from experiments import config as config_lib
    from experiments.pipeline import artifacts

    layout.require(layout.config, f"genret prepare --workdir {layout.root}")
    run_cfg = config_lib.load_json(layout.config)
    ds = artifacts.load_dataset(layout)
    sids = artifacts.load_sids(run_cfg, layout, ds)
    model = artifacts.load_retriever(layout, split)
    if sids.shape[1] != model.space.num_levels:
        raise ArtifactError(
            f"{layout.retriever(split)}: expects {model.space.num_levels} SID levels, the "
            f"tokenizer has {sids.shape[1]}; retrain the retriever on these SIDs"
        )
    return Recommender(model, sids, ds.catalog.asins, ds.catalog.first_time, cfg)
