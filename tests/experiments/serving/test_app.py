"""genret serve: recommendations, toggles and additions over HTTP (in-process, no socket),
4xx naming the field with nothing changed (strict types, malformed bodies, short echoes, size
limit, bearer token), per-request constraints inside one server batch, additions that compile
nothing, and the load test's check on a short run."""

import asyncio
import contextlib

import numpy as np
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

import jax  # noqa: E402
from flax import nnx  # noqa: E402

from experiments import cli  # noqa: E402
from experiments.serving import app as serve_app  # noqa: E402
from experiments.serving import load as serve_load  # noqa: E402
from seqmodel.config import SeqModelConfig  # noqa: E402
from seqmodel.model import Decoder  # noqa: E402
from seqmodel.tokens import TokenSpace  # noqa: E402

V, L, N = 8, 3, 60
ASINS = [f"A{i:03d}" for i in range(N)]


@pytest.fixture(scope="module", params=[False, True], ids=["copy", "in_place"])
def rec(request) -> serve_app.Recommender:
    """A random-weight retriever over 60 items with distinct SIDs, compiled once per module;
    toggles copy the index or update it in place."""
    cfg = SeqModelConfig(num_layers=1, d_model=16, num_heads=2, mlp_dim=32, max_history=4)
    model = Decoder(cfg, TokenSpace(num_levels=L, codebook_size=V), rngs=nnx.Rngs(0))
    flat = np.random.default_rng(0).choice(V**L, N, replace=False)
    sids = np.stack([(flat // V**i) % V for i in (2, 1, 0)], 1)
    times = np.arange(N) * 10  # item i "appeared" at time 10 i
    serve_cfg = serve_app.ServeConfig(
        batch_size=4, max_wait_ms=20, beam_size=8, in_place=request.param
    )
    return serve_app.Recommender(model, sids, ASINS, times, serve_cfg)


def _run(rec, fn, token=None):
    """fn(client) on a fresh app (its own batcher) in a fresh event loop."""

    async def main():
        app = serve_app.create_app(rec) if token is None else serve_app.create_app(rec, token=token)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await fn(c)

    return asyncio.run(main())


def _items(r) -> list[str]:
    assert r.status_code == 200, r.text
    return [x["asin"] for x in r.json()["items"]]


def test_recommend_returns_k_known_items_with_sorted_scores(rec):
    async def go(c):
        return await c.post("/recommend", json={"history": ASINS[:3], "k": 5})

    r = _run(rec, go)
    items = r.json()["items"]
    assert len(items) == 5 and {x["asin"] for x in items} <= set(ASINS)
    scores = [x["score"] for x in items]
    assert scores == sorted(scores, reverse=True) and np.isfinite(scores).all()


def test_disabled_items_never_returned_then_back_after_enable(rec):
    async def go(c):
        first = _items(await c.post("/recommend", json={"history": ASINS[:2], "k": 8}))
        assert (await c.post("/items/disable", json={"asins": first[:3]})).status_code == 200
        after = _items(await c.post("/recommend", json={"history": ASINS[:2], "k": 8}))
        assert (await c.post("/items/enable", json={"asins": first[:3]})).status_code == 200
        again = _items(await c.post("/recommend", json={"history": ASINS[:2], "k": 8}))
        return first, after, again

    first, after, again = _run(rec, go)
    assert not set(first[:3]) & set(after)
    assert again == first


def test_one_batch_serves_rows_with_different_constraints(rec):
    """Concurrent requests land in one padded batch; each gets the result of its own sets and
    window (and the same as when sent alone)."""
    bodies = [
        {"history": ASINS[:3], "k": 8, "newer_than": 400},
        {"history": ASINS[:3], "k": 8},
        {"history": ASINS[5:7], "k": 8, "newer_than": 550},
    ]

    async def go(c):
        together = await asyncio.gather(*[c.post("/recommend", json=b) for b in bodies])
        alone = [await c.post("/recommend", json=b) for b in bodies]
        metrics = (await c.get("/metrics")).json()
        return together, alone, metrics

    together, alone, metrics = _run(rec, go)
    got = [_items(r) for r in together]
    assert got == [_items(r) for r in alone]
    assert all(ASINS.index(a) * 10 >= 400 for a in got[0])
    assert set(got[2]) <= {ASINS[i] for i in range(55, 60)} and len(got[2]) == 5
    assert len(got[1]) == 8
    assert "3" in metrics["batch_sizes"], metrics  # the three shared one decode call


def test_added_item_is_decodable(rec):
    async def go(c):
        used = {tuple(rec.catalog._sids[i]) for i in range(rec.catalog.num_items)}
        sid = next(s for s in np.ndindex(V, V, V) if s not in used)
        body = {"items": [{"asin": "NEW-1", "sid": list(sid), "time": 5}]}
        r = await c.post("/items/add", json=body)
        assert r.status_code == 200 and r.json()["added"] == 1, r.text
        only_new = await c.post("/recommend", json={"history": ["NEW-1"], "k": 3, "sets": ["new"]})
        again = await c.post("/items/add", json=body)
        return only_new, again

    only_new, again = _run(rec, go)
    assert _items(only_new) == ["NEW-1"]  # the one item of set "new", and usable in a history
    assert again.status_code == 422 and again.json()["field"] == "items[0].asin"


@pytest.mark.parametrize(
    "path,body,field",
    [
        ("/recommend", {"history": ["A000", "nope"]}, "history[1]"),
        ("/recommend", {"history": ASINS[:5]}, "history"),  # max_history is 4
        ("/recommend", {"history": ASINS[:2], "sets": ["in_stock", "bogus"]}, "sets[1]"),
        ("/recommend", {"history": ASINS[:2], "k": 9}, "k"),
        ("/recommend", {"history": ASINS[:2], "k": "many"}, "k"),
        ("/recommend", {"history": ASINS[:2], "extra": 1}, "extra"),
        ("/recommend", {"k": 3}, "history"),
        ("/items/disable", {"asins": ["A001", "A002", "zzz"]}, "asins[2]"),
        ("/items/disable", {"asins": []}, "asins"),
        ("/items/enable", {"asins": [7]}, "asins[0]"),
        ("/items/membership", {"asins": ["A001"], "set": "bogus", "member": False}, "set"),
        ("/items/add", {"items": [{"asin": "X", "sid": [0, 0]}]}, "items[0].sid"),
        ("/items/add", {"items": [{"asin": "X", "sid": [0, 0, 99]}]}, "items[0].sid"),
        ("/items/add", {"items": [{"asin": "A003", "sid": [0, 0, 0]}]}, "items[0].asin"),
        # Strict types: nothing is coerced.
        ("/recommend", {"history": ASINS[:2], "k": "5"}, "k"),
        ("/recommend", {"history": ASINS[:2], "k": True}, "k"),
        ("/recommend", {"history": ASINS[:2], "k": 5.0}, "k"),
        ("/recommend", {"history": ASINS[:2], "newer_than": "400"}, "newer_than"),
        ("/items/membership", {"asins": ["A001"], "set": "new", "member": "yes"}, "member"),
        ("/items/membership", {"asins": ["A001"], "set": "new", "member": 1}, "member"),
        ("/items/add", {"items": [{"asin": "X", "sid": ["1", 2, 3]}]}, "items[0].sid[0]"),
        ("/items/add", {"items": [{"asin": "X", "sid": [1, 2, 3], "time": True}]}, "items[0].time"),
    ],
)
def test_bad_requests_are_422_naming_the_field_and_change_nothing(rec, path, body, field):
    before = tuple(np.asarray(x).copy() for x in (rec.catalog.index.item_flags,))
    n = rec.catalog.num_items

    async def go(c):
        return await c.post(path, json=body)

    r = _run(rec, go)
    assert r.status_code == 422, r.text
    assert r.json().keys() == {"error", "field"}, r.json()
    assert r.json()["field"] == field and r.json()["error"].startswith(field), r.json()
    assert rec.catalog.num_items == n
    np.testing.assert_array_equal(np.asarray(rec.catalog.index.item_flags), before[0])


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    "method,path,kwargs,status,field",
    [
        ("POST", "/recommend", {"content": b'{"history": [', "headers": JSON}, 422, "body"),
        ("POST", "/recommend", {"content": b'{"history": ["\xff"]}', "headers": JSON}, 400, "body"),
        (
            "POST",
            "/recommend",
            {"content": b'{"k": ' + b"9" * 5000 + b"}", "headers": JSON},
            400,
            "body",
        ),
        ("POST", "/recommend", {"content": b'{"history": ["A001"]}'}, 415, "content-type"),
        (
            "POST",
            "/recommend",
            {"content": b'{"history": ["A001"]}', "headers": {"content-type": "text/plain"}},
            415,
            "content-type",
        ),
        ("POST", "/recommend", {"data": {"history": "A001"}}, 415, "content-type"),
        ("POST", "/recommend", {}, 422, "body"),
        ("POST", "/recommend", {"headers": JSON}, 422, "body"),
        ("POST", "/recommend", {"json": ["A001"]}, 422, "body"),
        ("POST", "/recommend", {"json": {"history": [["A001"]]}}, 422, "history[0]"),
        ("POST", "/items/add", {"json": {"items": {"asin": "X", "sid": [1, 2, 3]}}}, 422, "items"),
        (
            "POST",
            "/items/add",
            {"json": {"items": [{"asin": "X", "sid": [1, 2, 3], "y": 0}]}},
            422,
            "items[0].y",
        ),
        ("POST", "/nope", {"json": {}}, 404, "path"),
        ("GET", "/recommend", {}, 405, "method"),
    ],
)
def test_malformed_requests_get_the_error_body(rec, method, path, kwargs, status, field):
    """Bad JSON, bad encoding, wrong content type, no body, wrong nesting, unknown fields,
    routes and methods: each the documented {"error", "field"} body, nothing else."""
    n = rec.catalog.num_items

    async def go(c):
        return await c.request(method, path, **kwargs)

    r = _run(rec, go)
    assert (r.status_code, r.json().get("field")) == (status, field), r.text
    assert r.json().keys() == {"error", "field"} and r.json()["error"].startswith(field + ": ")
    assert rec.catalog.num_items == n


MB = 1_000_000


@pytest.mark.parametrize(
    "path,body",
    [
        ("/recommend", {"history": ["x" * MB]}),
        ("/recommend", {"history": ASINS[:2], "sets": ["s" * MB]}),
        ("/recommend", {"history": ASINS[:2], "k": 10**4000}),
        ("/recommend", {"history": ASINS[:2], "y" * MB: 1}),
        ("/items/disable", {"asins": ["x" * MB]}),
        ("/items/membership", {"asins": ["A001"], "set": "s" * MB, "member": True}),
        ("/items/add", {"items": [{"asin": "A001", "sid": [0, 0, 0]}], "z" * MB: 0}),
    ],
)
def test_error_bodies_quote_only_a_short_prefix_of_a_value(rec, path, body):
    async def go(c):
        return await c.post(path, json=body)

    r = _run(rec, go)
    assert r.status_code == 422 and len(r.content) < 400, (r.status_code, r.text[:200])
    assert r.json().keys() == {"error", "field"}


@pytest.mark.parametrize("streamed", [False, True], ids=["content_length", "chunked"])
def test_a_body_over_the_limit_is_413(rec, streamed):
    limit = rec.cfg.max_body_bytes
    body = b'{"history": ["' + b"x" * limit + b'"]}'

    async def chunks():
        for i in range(0, len(body), 1 << 16):
            yield body[i : i + (1 << 16)]

    async def go(c):
        content = chunks() if streamed else body
        big = await c.post("/recommend", content=content, headers=JSON)
        small = await c.post("/recommend", json={"history": ASINS[:2], "k": 3})
        return big, small

    big, small = _run(rec, go)
    assert big.status_code == 413, big.text[:200]
    assert big.json() == {"error": f"body: over the limit of {limit} bytes", "field": "body"}
    assert small.status_code == 200  # and the service goes on


WRITES = [
    ("/items/disable", {"asins": ["A010"]}),
    ("/items/enable", {"asins": ["A010"]}),
    ("/items/membership", {"asins": ["A010"], "set": "in_stock", "member": True}),
]


def test_write_routes_need_the_bearer_token_and_read_routes_stay_open(rec):
    before = np.asarray(rec.catalog.index.item_flags).copy()

    async def go(c):
        out = []
        for path, body in WRITES:
            for auth in (None, "Bearer wrong", "Basic s3cret", "Bearer s3cret"):
                headers = {} if auth is None else {"authorization": auth}
                r = await c.post(path, json=body, headers=headers)
                out.append((path, auth, r.status_code, r.json()))
        reads = [
            (await c.post("/recommend", json={"history": ASINS[:2], "k": 3})).status_code,
            (await c.get("/health")).status_code,
            (await c.get("/metrics")).status_code,
            (await c.get("/docs")).status_code,
        ]
        return out, reads

    out, reads = _run(rec, go, token="s3cret")
    for path, auth, status, body in out:
        if auth == "Bearer s3cret":
            assert status == 200, (path, body)
        else:
            assert status == 401 and body["field"] == "authorization", (path, auth, body)
            assert body.keys() == {"error", "field"}
    assert reads == [200] * 4
    np.testing.assert_array_equal(np.asarray(rec.catalog.index.item_flags), before)


@contextlib.contextmanager
def _lowered_programs():
    """The programs JAX lowers (then compiles or loads) inside the block."""
    seen = []

    def listen(event, seconds, **kwargs):
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            seen.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def test_additions_within_capacity_compile_nothing(rec):
    """Additions of any count that fit the index's spare capacity, and the recommendation after
    them, run programs compiled at start-up: no request waits for a compile."""
    used = {tuple(rec.catalog._sids[i]) for i in range(rec.catalog.num_items)}
    # Free SIDs under existing 2-code prefixes: no new node is needed, so they fit.
    prefixes = {s[:2] for s in used}
    free = [s for s in np.ndindex(V, V, V) if s[:2] in prefixes and s not in used]
    sizes = (1, 3, 6)
    assert len(free) >= sum(sizes)
    start = rec.catalog.num_items

    async def go(c):
        out, at = [], 0
        for n in sizes:
            items = [{"asin": f"FIT-{start + at + i}", "sid": list(free[at + i])} for i in range(n)]
            at += n
            out.append((await c.post("/items/add", json={"items": items})).json())
        r = await c.post("/recommend", json={"history": [items[0]["asin"]], "k": 3})
        return out, r

    with _lowered_programs() as lowered:
        out, r = _run(rec, go)
    assert [x["decodable_now"] for x in out] == list(sizes), out  # all within capacity
    assert r.status_code == 200
    assert not lowered, f"{len(lowered)} programs compiled on the request path"


def test_health_and_metrics_count_requests(rec):
    async def go(c):
        await c.post("/recommend", json={"history": ["nope"]})
        return (await c.get("/health")).json(), (await c.get("/metrics")).json()

    health, metrics = _run(rec, go)
    assert health["status"] == "ok" and health["max_history"] == 4 and health["max_k"] == 8
    assert metrics["requests"]["/recommend 422"] == 1


def test_load_test_finds_no_disabled_item_and_no_error(rec):
    """A short run of the load test in-process: the toggler exercises the filter."""
    cfg = serve_load.LoadConfig(
        concurrency=(1, 4),
        requests=24,
        seconds=5,
        k=4,
        toggle_rate=200,
        toggle_batch=10,
        disabled_window=10,
    )
    histories = [[ASINS[(3 * u + j) % N] for j in range(3)] for u in range(20)]

    async def main():  # behind a token, which the toggles carry
        transport = httpx.ASGITransport(app=serve_app.create_app(rec, token="s3cret"))
        return await serve_load.run_load(
            "http://test", histories, cfg, transport=transport, token="s3cret"
        )

    result = asyncio.run(main())
    for level in result["levels"]:
        assert level["errors"] == 0 and level["disabled_returned"] == 0, level
        assert level["requests"] > 0 and level["toggles_per_s"] > 0
    assert sum(x["filtered_responses"] for x in result["levels"]) > 0
    assert "| 4 |" in serve_load.markdown(result)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "myhost.example"])
def test_serve_off_loopback_without_a_token_refuses_in_one_line(
    tmp_path, capsys, monkeypatch, host
):
    monkeypatch.delenv("GENRET_SERVE_TOKEN", raising=False)
    assert cli.main(["serve", "--workdir", str(tmp_path), "--host", host]) == 1
    err = capsys.readouterr().err
    assert "--token" in err and "GENRET_SERVE_TOKEN" in err and len(err.strip().splitlines()) == 1
    # With the token in the environment it goes on (to the missing retriever, here).
    monkeypatch.setenv("GENRET_SERVE_TOKEN", "s3cret")
    assert cli.main(["serve", "--workdir", str(tmp_path), "--host", host]) == 1
    assert "genret prepare" in capsys.readouterr().err


def test_serve_without_retriever_is_one_line_error(tmp_path, capsys):
    assert cli.main(["serve", "--workdir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "genret prepare" in err and len(err.strip().splitlines()) == 1
