"""Latency and memory of the constraint methods on random SIDs, all through the same beam search."""

import dataclasses
import functools
import hashlib
import os
import resource
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from data.errors import ArgumentError
from decoding.baselines import CpuTrie, HashBitmap, PPVApprox, PPVExact, index_nbytes
from decoding.beam_search import beam_search, first_level, next_level
from decoding.constraints import Constraint, StaticConstraint, Unconstrained, contains
from decoding.sharding import data_mesh, device_nbytes, replicate, shard_index
from decoding.static_index import StaticIndex

METHODS = (
    "static",
    "static_compact",
    "static_sharded",
    "static_sharded_compact",
    "static_stored_next",
    "cpu_trie",
    "ppv_exact",
    "ppv_approx",
    "hash_bitmap",
)
SHARDED_METHODS = ("static", "static_sharded", "static_sharded_compact")  # --devices alone
_SPLIT = ("static_sharded", "static_sharded_compact")  # placed by shard_index
_ROWS = 64  # log-prob table rows: the step's log-probs depend on the previous code


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """One benchmark point."""

    num_items: int = 100_000
    vocab: int = 2048
    levels: int = 8
    batch: int = 2
    beam: int = 70
    methods: tuple[str, ...] = ("static", "cpu_trie", "ppv_exact", "ppv_approx", "hash_bitmap")
    reps: int = 20
    seed: int = 0
    dense_levels: int = 2
    ppv_top_k: int = 50
    hash_bits_per_prefix: int = 16
    unroll: bool = True
    step_level: int = -1  # -1: levels // 2
    devices: int = 0  # > 0: every method on a mesh of this many devices (index replicated or
    # split by static_sharded); 0: the default device


@dataclasses.dataclass(frozen=True)
class _StoredNextStatic(StaticConstraint):
    """STATIC with the next state stored per edge (one more gather) instead of implied."""

    next_state: object = None

    def advance(self, level, state, tokens, aux):
        if self._is_dense(level):
            return super().advance(level, state, tokens, aux)
        return jnp.take(self.next_state, aux, mode="clip")


jax.tree_util.register_dataclass(
    _StoredNextStatic, data_fields=["index", "next_state"], meta_fields=[]
)


def random_sids(num_items: int, levels: int, vocab: int, seed: int) -> np.ndarray:
    """Uniform random SIDs (duplicates possible and dropped by the builders)."""
    return np.random.default_rng(seed).integers(0, vocab, (num_items, levels), dtype=np.int32)


def build(method: str, sids: np.ndarray, cfg: BenchConfig, mesh=None) -> Constraint:
    """The constraint of one method over `sids` (static_sharded: split over `mesh`'s axis)."""
    V = cfg.vocab
    if method in ("static_sharded", "static_sharded_compact"):
        if mesh is None:
            raise ValueError(f"{method} needs --devices N (a mesh to split the index over)")
        layout = "compact" if method == "static_sharded_compact" else "csr"
        idx = StaticIndex.build(sids, vocab_size=V, dense_levels=cfg.dense_levels, layout=layout)
        return shard_index(idx, mesh, mesh.axis_names[0])
    if method in ("static", "static_compact", "static_stored_next"):
        layout = "compact" if method == "static_compact" else "csr"
        idx = StaticIndex.build(sids, vocab_size=V, dense_levels=cfg.dense_levels, layout=layout)
        if method != "static_stored_next":
            return StaticConstraint(idx)
        nxt = np.arange(idx.capacity.edges, dtype=np.int32) + int(idx.num_dense_nodes)
        return _StoredNextStatic(idx, nxt)
    if method == "cpu_trie":
        return CpuTrie.build(sids, vocab_size=V)
    if method == "ppv_exact":
        return PPVExact.build(sids, vocab_size=V)
    if method == "ppv_approx":
        return PPVApprox(sids, vocab_size=V, top_k=cfg.ppv_top_k)
    if method == "hash_bitmap":
        return HashBitmap.build(sids, vocab_size=V, bits_per_prefix=cfg.hash_bits_per_prefix)
    raise ValueError(f"--methods: unknown method {method!r}; choose from {', '.join(METHODS)}")


def _swap_one_more(search, table, init, sids: np.ndarray, cfg: BenchConfig, place) -> dict:
    """Adds one item: rebuild, then the first search with the new set (compiles only if the
    capacity bucket changed)."""
    extra = random_sids(1, cfg.levels, cfg.vocab, cfg.seed + 2)
    compiled = search._cache_size()
    t0 = time.perf_counter()
    c = place(
        StaticConstraint(
            StaticIndex.build(
                np.concatenate([sids, extra]), vocab_size=cfg.vocab, dense_levels=cfg.dense_levels
            )
        )
    )
    build_s = time.perf_counter() - t0
    first_ms = _timed(search, table, init, c)
    return {
        "add_one_build_s": build_s,
        "add_one_first_search_ms": first_ms,
        "add_one_recompiled": search._cache_size() > compiled,
    }


def measure_build(cfg: BenchConfig) -> dict:
    """STATIC build alone: seconds, index bytes and the process's peak RSS (input included)."""
    sids = random_sids(cfg.num_items, cfg.levels, cfg.vocab, cfg.seed)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t0 = time.perf_counter()
    idx = StaticIndex.build(sids, vocab_size=cfg.vocab, dense_levels=cfg.dense_levels)
    build_s = time.perf_counter() - t0
    nbytes = idx.nbytes()
    out = {
        "config": dataclasses.asdict(cfg),
        "build_s": build_s,
        "input_bytes": sids.nbytes,
        "index_bytes": nbytes,
        "bytes_per_item": nbytes["total"] / cfg.num_items,
        "distinct_items": int(idx.num_items),
        "peak_rss_gib_before_build": rss_before,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    if "static_compact" in cfg.methods:
        del idx
        t0 = time.perf_counter()
        idx = StaticIndex.build(
            sids, vocab_size=cfg.vocab, dense_levels=cfg.dense_levels, layout="compact"
        )
        compact = idx.nbytes()
        out["compact"] = {
            "build_s": time.perf_counter() - t0,
            "index_bytes": compact,
            "bytes_per_item": compact["total"] / cfg.num_items,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        }
    return out


def _table_step(table, tokens, level, cache):
    """Stand-in model step: log-probs from a fixed table row chosen by the previous code."""
    return jnp.take(table, level, axis=0)[tokens % _ROWS], cache


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return (time.perf_counter() - t) * 1e3


def _stats(ms: list[float]) -> dict[str, float]:
    return {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90))}


def stand_in(cfg: BenchConfig) -> tuple[jax.Array, jax.Array, int]:
    """The stand-in model of the timed searches: its log-prob table [L, _ROWS, V] (`_table_step`),
    the first level's log-probs [B, V] (both drawn with seed + 1) and the level whose step is
    timed (cfg.step_level; -1: L // 2)."""
    L, V = cfg.levels, cfg.vocab
    rng = np.random.default_rng(cfg.seed + 1)
    logits = rng.normal(size=(L, _ROWS, V)).astype(np.float32) * 3
    table = jax.nn.log_softmax(jnp.asarray(logits), axis=-1)
    init = jnp.asarray(rng.normal(size=(cfg.batch, V)).astype(np.float32))
    init = jax.nn.log_softmax(init, axis=-1)
    level = min(max(cfg.step_level if cfg.step_level >= 0 else L // 2, 1), L - 1)
    return table, init, level


def prefix_carry(table, init, c: Constraint, *, beam_size: int, num_levels: int, level: int):
    """The search's carry after levels 0 .. level - 1 of the stand-in model (traceable): what
    the timed step at `level` starts from."""
    carry = first_level(init, {}, c, beam_size=beam_size, num_levels=num_levels)
    for lev in range(1, level):
        carry = next_level(functools.partial(_table_step, table), c, beam_size, lev, carry)
    return carry


def run_bench(cfg: BenchConfig, progress: Callable[[str], None] | None = None) -> dict:
    """Builds every method, then times steps and full searches interleaved with unconstrained."""
    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"--methods: unknown {unknown}; choose from {', '.join(METHODS)}")
    K, L, V = cfg.beam, cfg.levels, cfg.vocab
    if L < 2:
        raise ValueError(f"--levels must be >= 2 to time a step after level 0, got {L}")
    sids = random_sids(cfg.num_items, L, V, cfg.seed)
    table, init, level = stand_in(cfg)
    mesh = None
    place = jax.device_put
    if cfg.devices:
        if cfg.devices > jax.device_count():
            raise ValueError(
                f"--devices {cfg.devices}: only {jax.device_count()} devices (on CPU set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={cfg.devices})"
            )
        mesh = data_mesh(jax.devices()[: cfg.devices], axis="index")
        place = functools.partial(replicate, mesh=mesh)
        table, init = place((table, init))

    search = jax.jit(
        lambda table, init, c: beam_search(
            functools.partial(_table_step, table),
            init,
            {},
            c,
            beam_size=K,
            num_levels=L,
            unroll=cfg.unroll,
        )
    )

    prefix = jax.jit(functools.partial(prefix_carry, beam_size=K, num_levels=L, level=level))
    step = jax.jit(
        lambda table, c, carry: next_level(
            functools.partial(_table_step, table), c, K, level, carry
        )
    )
    unc = Unconstrained(V, L)
    unc_carry = prefix(table, init, unc)
    static_idx = None
    beams, kept = {}, {}
    out = {"config": dataclasses.asdict(cfg), "step_level": level, "methods": {}}
    for method in cfg.methods:
        if progress:
            progress(f"{method}: build")
        t0 = time.perf_counter()
        c = build(method, sids, cfg, mesh)
        build_s = time.perf_counter() - t0
        c = place(c) if method not in ("cpu_trie", *_SPLIT) else c
        nbytes = index_nbytes(c)
        per_device = device_nbytes(c) if method != "cpu_trie" else {}
        carry = prefix(table, init, c)
        jax.block_until_ready((step(table, c, carry), step(table, unc, unc_carry)))  # warm-up
        jax.block_until_ready((search(table, init, c), search(table, init, unc)))
        times = {"step": [], "unc_step": [], "search": [], "unc_search": []}
        for _ in range(cfg.reps):
            times["step"].append(_timed(step, table, c, carry))
            times["unc_step"].append(_timed(step, table, unc, unc_carry))
            times["search"].append(_timed(search, table, init, c))
            times["unc_search"].append(_timed(search, table, init, unc))
        res = search(table, init, c)
        beams[method] = [np.asarray(getattr(res, f)) for f in ("tokens", "valid", "scores")]
        # A digest of the beams, to compare runs that cannot hold both indexes at once.
        digest = hashlib.sha1()
        for part in beams[method]:
            digest.update(np.ascontiguousarray(part).tobytes())
        row = {
            "build_s": build_s,
            "index_bytes": nbytes,
            "bytes_per_item": nbytes / cfg.num_items,
            # The most any one device holds (the whole index where it is replicated).
            "bytes_per_device": max(per_device.values(), default=nbytes),
            "beams_sha1": digest.hexdigest(),
            "step": _stats(times["step"]),
            "unconstrained_step": _stats(times["unc_step"]),
            "search": _stats(times["search"]),
            "unconstrained_search": _stats(times["unc_search"]),
            "valid_rate": float(np.asarray(res.valid).mean()),
        }
        row["step_overhead_ms"] = row["step"]["median_ms"] - row["unconstrained_step"]["median_ms"]
        row["search_ratio"] = row["search"]["median_ms"] / row["unconstrained_search"]["median_ms"]
        if method == "static" and not cfg.devices:
            # (Skipped on a mesh: a second build beside the copies would double the peak.)
            row.update(_swap_one_more(search, table, init, sids, cfg, place))
        if method == "hash_bitmap":
            if static_idx is None:
                static_idx = StaticIndex.build(sids, vocab_size=V, dense_levels=cfg.dense_levels)
            claimed = np.asarray(res.tokens)[np.asarray(res.valid)]
            member = np.asarray(contains(static_idx, claimed)) if len(claimed) else np.ones(0)
            row["false_positive_rate"] = float(1 - member.mean()) if len(claimed) else 0.0
            # The chance that one probe of a prefix that is not allowed passes.
            bits = np.unpackbits(np.asarray(c.words).view(np.uint8))
            row["probe_false_positive_rate"] = float(bits.mean())
        out["methods"][method] = row
        if cfg.devices:
            kept[method] = c
        del c
    if len(kept) > 1:
        out["methods"] = {
            **out["methods"],
            **_interleaved(kept, step, search, prefix, table, init, cfg, out["methods"]),
        }
    kept.clear()
    if "static" in beams:
        # 1 when a method returns exactly the replicated STATIC index's beams, scores and flags.
        ref = beams["static"]
        for method, res in beams.items():
            same = all(np.array_equal(a, b) for a, b in zip(res, ref, strict=True))
            out["methods"][method]["beams_equal"] = int(same)
    return out


def _interleaved(kept, step, search, prefix, table, init, cfg, rows) -> dict:
    """The methods' steps and searches once more, in rotated order within each repetition, so
    that load from other processes falls on all of them alike: the ratios to compare."""
    names = list(kept)
    carries = {m: prefix(table, init, kept[m]) for m in names}
    times = {(m, what): [] for m in names for what in ("step", "search")}
    for r in range(cfg.reps):
        for m in names[r % len(names) :] + names[: r % len(names)]:
            times[m, "step"].append(_timed(step, table, kept[m], carries[m]))
            times[m, "search"].append(_timed(search, table, init, kept[m]))
    out = {}
    for m in names:
        row = dict(rows[m])
        row["step_interleaved"] = _stats(times[m, "step"])
        row["search_interleaved"] = _stats(times[m, "search"])
        if "static" in names:
            for what in ("step", "search"):
                ref = np.median(times["static", what])
                row[f"{what}_vs_static"] = float(np.median(times[m, what]) / ref)
        out[m] = row
    return out


def sweep_points(
    base: BenchConfig,
    *,
    items: tuple[int, ...],
    vocabs: tuple[int, ...],
    vocab_for_items: int,
    items_for_vocab: int,
) -> list[tuple[str, BenchConfig]]:
    """The paper's two axes: N at a fixed V, then V at a fixed N."""
    pts = [("items", dataclasses.replace(base, num_items=n, vocab=vocab_for_items)) for n in items]
    pts += [
        ("vocab", dataclasses.replace(base, num_items=items_for_vocab, vocab=v)) for v in vocabs
    ]
    return pts


def point_name(cfg: BenchConfig) -> str:
    return f"N{cfg.num_items}_V{cfg.vocab}_L{cfg.levels}_B{cfg.batch}_K{cfg.beam}"


def markdown_table(points: list[dict]) -> str:
    """One row per (point, method); `points` are run_bench outputs with an added "axis"."""
    head = (
        "| axis | N | V | method | build s | bytes/item | step ms (p90) | unconstr. step ms "
        "| search ms (p90) | unconstr. search ms | search / unconstr. | search / STATIC "
        "| valid rate |\n|" + "---|" * 13
    )
    rows = [head]
    for p in points:
        cfg, methods = p["config"], p["methods"]
        static_ms = methods.get("static", {}).get("search", {}).get("median_ms")
        for name, m in methods.items():
            vs_static = f"{m['search']['median_ms'] / static_ms:.1f}x" if static_ms else "-"
            valid = f"{m['valid_rate']:.3f}"
            if "false_positive_rate" in m:
                valid += f" (FP {m['false_positive_rate']:.2f})"
            rows.append(
                f"| {p['axis']} | {cfg['num_items']:.0e} | {cfg['vocab']} | {name} "
                f"| {m['build_s']:.2f} | {m['bytes_per_item']:.1f} "
                f"| {m['step']['median_ms']:.2f} ({m['step']['p90_ms']:.2f}) "
                f"| {m['unconstrained_step']['median_ms']:.2f} "
                f"| {m['search']['median_ms']:.2f} ({m['search']['p90_ms']:.2f}) "
                f"| {m['unconstrained_search']['median_ms']:.2f} | {m['search_ratio']:.2f} "
                f"| {vs_static} | {valid} |"
            )
    return "\n".join(rows) + "\n"


def replace_block(text: str, block: str, begin: str, end: str) -> str:
    """Replaces the text between markers (inclusive), or appends the block when absent."""
    new = f"{begin}\n{block}{end}"
    if begin in text and end in text:
        return text[: text.index(begin)] + new + text[text.index(end) + len(end) :]
    return text.rstrip("\n") + "\n\n" + new + "\n"


def series(results: list[dict], axis: str) -> dict[str, tuple[list[int], list[float]]]:
    """Median full-search ms per method along one sweep axis ("items" or "vocab")."""
    key = "num_items" if axis == "items" else "vocab"
    out: dict[str, tuple[list[int], list[float]]] = {}
    for r in (r for r in results if r["axis"] == axis):
        x = r["config"][key]
        first = next(iter(r["methods"].values()), None)
        rows = {"unconstrained": first["unconstrained_search"]} if first else {}
        rows.update({name: m["search"] for name, m in r["methods"].items()})
        for name, stats in rows.items():
            xs, ys = out.setdefault(name, ([], []))
            xs.append(x)
            ys.append(stats["median_ms"])
    return out


def available_bytes() -> int:
    """Memory this process may still use (MemAvailable; physical memory where unknown)."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# int32 words per (item, level) that a run holds at its peak, rounded up. Search: random SIDs,
# their sorted copy, the index and the baselines' tables. Build only: the SIDs, the sort and the
# index (the 1e8 x 8 row of docs/BENCHMARKS.md peaks at 11.4 GiB, 3.8 words).
WORDS_SEARCH = 16
WORDS_BUILD = 5


def check_fits(
    num_items: int, levels: int, arg: str = "--num-items", *, words: float = WORDS_SEARCH
) -> None:
    """Refuses sizes whose SIDs and indexes cannot fit in memory, before allocating anything:
    `words` int32 words per (item, level) (WORDS_SEARCH, or WORDS_BUILD for a build alone)."""
    need = int(words * 4 * num_items * levels)
    have = available_bytes()
    if need > have:
        raise ArgumentError(
            f"{arg} {num_items:,} x --levels {levels}: needs about {need / 2**30:.1f} GiB, more "
            f"than the {have / 2**30:.1f} GiB available"
        )
