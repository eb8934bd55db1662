"""The live index on random SIDs: toggle and addition latency, and beam search with
per-request sets and windows against one global STATIC index."""

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from decoding import StaticConstraint, StaticIndex, beam_search
from decoding.live import TIME_MIN, LiveConstraint, LiveIndex, add_items, set_enabled
from experiments.bench.constraints import _stats, _table_step, _timed, random_sids

NAMES = ("in_stock", "fresh_7d", "region")


def bench_live(
    *, num_items: int, vocab: int, levels: int, batch: int, beam: int, reps: int, seed: int
) -> dict:
    """Build both indexes over the same SIDs; time updates, then the two searches interleaved."""
    rng = np.random.default_rng(seed)
    B, K, L, V, N = batch, beam, levels, vocab, num_items
    sids = np.unique(random_sids(N, L, V, seed), axis=0)
    sids = sids[rng.permutation(len(sids))]
    N = len(sids)
    out: dict = {"config": {"num_items": N, "vocab": V, "levels": L, "batch": B, "beam": K}}
    t0 = time.perf_counter()
    static = jax.device_put(StaticConstraint(StaticIndex.build(sids, vocab_size=V)))
    out["static_build_s"] = time.perf_counter() - t0
    # Every item in each set with probability 0.7, times uniform over 1000 "days".
    sets = (rng.random((N, len(NAMES))) < 0.7) @ (1 << np.arange(len(NAMES)))
    times = rng.integers(0, 1000, N)
    t0 = time.perf_counter()
    live = jax.device_put(
        # Item headroom for the 1,000 additions timed below, at any N.
        LiveIndex.build(
            sids,
            vocab_size=V,
            set_names=NAMES,
            sets=sets,
            times=times,
            spare=max(0.25, 1000 / N),
        )
    )
    jax.block_until_ready(live)
    out["live_build_s"] = time.perf_counter() - t0
    out["static_bytes"] = int(static.index.nbytes()["total"])
    out["live_bytes"] = live.nbytes()
    out["live_capacity"] = dataclasses.asdict(live.capacity)
    out["updates"] = _time_updates(live, sids, rng, reps)

    lp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(L, 64, V)).astype(np.float32) * 3), -1)
    init = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(B, V)).astype(np.float32)), -1)
    search = jax.jit(
        lambda table, init, c: beam_search(
            functools.partial(_table_step, table), init, {}, c, beam_size=K, num_levels=L
        )
    )
    # Row b asks for the sets of mask b mod 8 and items newer than one of four windows.
    masks = jnp.asarray(np.arange(B) % (1 << len(NAMES)), jnp.int32)
    windows = jnp.asarray(np.array([0, 500, 900, 990])[np.arange(B) % 4], jnp.int32)
    per_request = LiveConstraint(live, masks, windows)
    everything = LiveConstraint(live, jnp.zeros(B, jnp.int32), jnp.full(B, TIME_MIN, jnp.int32))
    runs = {"static_global": static, "live_per_request": per_request, "live_global": everything}
    for c in runs.values():
        jax.block_until_ready(search(lp, init, c))  # warm-up (compile)
    times_ms: dict[str, list[float]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(reps):
        # Rep by rep, each method in turn, starting one further each rep: a load spike on this
        # shared machine or the cache a method leaves behind hits every method alike.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times_ms[name].append(_timed(search, lp, init, runs[name]))
    out["search"] = {k: _stats(v) for k, v in times_ms.items()}
    base = np.asarray(times_ms["static_global"])
    for key, name in (
        ("per_request_vs_static", "live_per_request"),
        ("live_global_vs_static", "live_global"),
    ):
        # The ratio of medians, and the median of the ratios within a rep (paired, so slow
        # stretches of the machine cancel).
        out[key] = out["search"][name]["median_ms"] / float(np.median(base))
        out[key + "_paired"] = float(np.median(np.asarray(times_ms[name]) / base))
    res = search(lp, init, per_request)
    out["per_request_valid_rate"] = float(np.asarray(res.valid).mean())
    out["compiled_searches"] = search._cache_size()  # one STATIC, one live (both live rows)
    return out


def _time_updates(live, sids, rng, reps: int) -> dict:
    """Median/p90 ms of disable+re-enable of n items and of adding n items (from a copy)."""
    N, L = sids.shape
    V = live.vocab_size
    res = {}
    for n in (1, 1000):
        ms = []
        for _ in range(reps + 1):
            ids = rng.choice(N, n, replace=False)
            t = time.perf_counter()
            jax.block_until_ready(set_enabled(live, ids, False))
            ms.append((time.perf_counter() - t) * 1e3)
        res[f"toggle_{n}"] = _stats(ms[1:])  # the first call compiles
        # In place: the copy of the index (summaries mostly) that a pure update makes is gone.
        own, ms = jax.tree.map(jnp.copy, live), []
        for _ in range(reps + 1):
            ids = rng.choice(N, n, replace=False)
            t = time.perf_counter()
            own = jax.block_until_ready(set_enabled(own, ids, False, donate=True))
            ms.append((time.perf_counter() - t) * 1e3)
        res[f"toggle_{n}_donated"] = _stats(ms[1:])
        del own
        # New SIDs from another stream of random codes (a clash with an item is skipped).
        new = np.random.default_rng(rng.integers(1 << 30)).integers(0, V, (n, L))
        ids = np.arange(N, N + n)
        ms, status = [], None
        for _ in range(reps + 1):
            t = time.perf_counter()
            idx, status = add_items(live, ids, new)
            jax.block_until_ready(idx)
            ms.append((time.perf_counter() - t) * 1e3)
        res[f"add_{n}"] = _stats(ms[1:])
        res[f"add_{n}_status_counts"] = {
            int(k): int(v) for k, v in zip(*np.unique(status, return_counts=True), strict=True)
        }
    return res
