"""Benchmarks of draft decoding: per-user latency and quality of beam search vs the draft
decoders on a work directory's retriever, the latency against backbone size, and the membership
test of the hash set against STATIC's and a sorted-key binary search."""

import dataclasses
import functools
import time
from collections.abc import Callable

import jax
import numpy as np
from flax import nnx

from data.splits import cold_start_split, leave_one_out
from decoding import (
    HashSet,
    SortedKeys,
    StaticConstraint,
    StaticIndex,
    Unconstrained,
    contains,
    hash_contains,
    sorted_contains,
)
from experiments.bench.constraints import random_sids
from experiments.config import Config
from experiments.evaluation import decode as evaluate
from experiments.evaluation import draft as draft_eval
from experiments.evaluation import metrics
from experiments.evaluation.retrieval import evaluated_inputs, load_inputs
from experiments.pipeline.artifacts import load_retriever
from experiments.pipeline.layout import RunLayout, Split

# beam search unconstrained and under STATIC; drafts before and after verification, and STATIC
# masking every draft level.
METHODS = ("beam", "beam_static", "nezha_unverified", "nezha", "nezha_static")
QUALITY_KEYS = ("recall@5", "ndcg@5", "recall@10", "ndcg@10")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodeBenchConfig:
    """What `genret bench-decode` measures."""

    users: int = 1000  # seeded sample of test users for quality and the batch-64 timings
    single_users: int = 64  # users timed one by one (batch 1)
    batch_sizes: tuple[int, ...] = (1, 64)
    beams: tuple[int, ...] = (20, 256)
    # Backbones (layers, width) of the size sweep: random weights, timing only.
    sizes: tuple[tuple[int, int], ...] = ((2, 64), (4, 256), (8, 512))
    seed: int = 0


def _decoders(model, head, sids: np.ndarray, K: int, dense_levels: int, names) -> dict:
    """name -> jitted `tokens -> BeamResult`, for the `names` among METHODS."""
    from seqmodel.draft import draft_retrieval_fn
    from seqmodel.inference import retrieval_fn

    V, L = model.space.codebook_size, model.space.num_levels
    index = StaticIndex.build(sids, vocab_size=V, dense_levels=dense_levels)
    static = jax.device_put(StaticConstraint(index))
    drafts = {
        **draft_eval.draft_constraints("nezha", sids, V, L, verify=True, dense_levels=0),
        "nezha_static": static,
    }
    # One beam-search and one draft decoder (parameters on the device once); each method's
    # constraint is its call's.
    beam = {"beam": Unconstrained(V, L), "beam_static": static}
    constraints = {name: jax.device_put({**beam, **drafts}[name]) for name in names}
    run_beam = retrieval_fn(model, static, beam_size=K)
    run_draft = draft_retrieval_fn(model, head, static, beam_size=K)
    return {
        name: functools.partial(run_beam if name in beam else run_draft, constraint=c)
        for name, c in constraints.items()
    }


def time_per_user(fns: dict[str, Callable], inputs: np.ndarray, batch_size: int, calls: int):
    """ms per user of each fn, median and p90 over `calls` batches, interleaved call by call."""
    batches = [
        np.take(inputs, np.arange(i * batch_size, (i + 1) * batch_size) % len(inputs), axis=0)
        for i in range(calls)
    ]
    for fn in fns.values():
        jax.block_until_ready(fn(batches[0]))  # compile
    ms = {name: [] for name in fns}
    for batch in batches:
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(batch))
            ms[name].append((time.perf_counter() - start) * 1e3 / batch_size)
    return {name: _stats(v) for name, v in ms.items()}


def _stats(ms: list[float]) -> dict[str, float]:
    return {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90))}


def bench_decode(
    cfg: Config,
    layout: RunLayout,
    split: Split,
    bench: DecodeBenchConfig,
    *,
    name: str = "",
    log: Callable[[str], None] = print,
) -> dict:
    """Quality and latency of every method at every beam width and batch size, then the sweep."""
    ds, sids = load_inputs(cfg, layout)
    model = load_retriever(layout, split)
    head, source = draft_eval.load_head(layout, split, model, name)
    if split.kind == "loo":
        test, allowed = leave_one_out(ds), sids
    else:
        test = cold_start_split(ds, split.fraction)
        allowed = sids[test.cold_items]
    eval_cfg = dataclasses.replace(cfg.eval, max_test_users=bench.users, seed=bench.seed)
    targets, inputs = evaluated_inputs(model, sids, test, eval_cfg, layout.retriever(split))
    lookup = metrics.SIDLookup(sids, model.space.codebook_size)
    allowed_mask = np.zeros(len(sids), bool)
    allowed_mask[lookup(allowed)] = True
    out = {
        "dataset": cfg.data.dataset,
        "split": split.name,
        "head": source,
        "num_users": int(len(targets)),
        "num_allowed_items": int(len(allowed)),
        "config": dataclasses.asdict(bench),
        "backend": jax.default_backend(),
        "beams": {},
    }
    for K in bench.beams:
        fns = _decoders(model, head, allowed, K, cfg.decode.dense_levels, METHODS)
        row = {}
        big = max(bench.batch_sizes)
        log(f"[bench-decode] beam {K}: quality and batch {big} latency, {len(targets)} users")
        decoded = evaluate.decode_interleaved(fns, inputs, lookup, batch_size=big, desc=f"beam {K}")
        for m, d in decoded.items():
            row[m] = evaluate.method_metrics(d, targets, allowed_mask, allowed_key="allowed_rate")
            row[m]["valid_of_k"] = draft_eval.valid_of_k(d)
            row[m][f"batch{big}"] = _stats(list(d.seconds_per_user * 1e3))
        for B in (b for b in bench.batch_sizes if b != big):
            calls = max(bench.single_users // B, 1)
            log(f"[bench-decode] beam {K}: batch {B} latency, {calls} calls")
            for m, stats in time_per_user(fns, inputs, B, calls).items():
                row[m][f"batch{B}"] = stats
        out["beams"][str(K)] = row
    out["sizes"] = size_sweep(model, head, inputs, bench, log=log)
    return out


def size_sweep(model, head, inputs, bench: DecodeBenchConfig, *, log) -> list[dict]:
    """Beam search vs verified drafting on random backbones of several sizes (timing only)."""
    from seqmodel.draft_train import init_head
    from seqmodel.state import init_model

    K = min(bench.beams)
    out = []
    rows = np.arange(min(len(inputs), max(bench.batch_sizes) * 4))
    for layers, width in bench.sizes:
        seq = dataclasses.replace(
            model.cfg,
            num_layers=layers,
            d_model=width,
            num_heads=max(width // 64, 1),
            mlp_dim=2 * width,
            draft_head="none",
            draft=head.cfg,
        )
        backbone = init_model(seq, model.space)
        rand_head = init_head(seq, model.space)
        sids = random_sids(4096, model.space.num_levels, model.space.codebook_size, bench.seed)
        fns = _decoders(backbone, rand_head, sids, K, 0, ("beam", "nezha"))
        params = sum(x.size for x in jax.tree.leaves(nnx.state(backbone, nnx.Param)))
        point = {"layers": layers, "width": width, "params": int(params), "beam": K}
        for B in bench.batch_sizes:
            calls = max(bench.single_users // B, 1) if B == 1 else 8
            log(f"[bench-decode] size {layers}x{width}: batch {B}")
            t = time_per_user(fns, inputs[rows], B, calls)
            point[f"batch{B}"] = t
            point[f"speedup_batch{B}"] = t["beam"]["median_ms"] / t["nezha"]["median_ms"]
        out.append(point)
    return out


def markdown(result: dict) -> str:
    """The report table of `bench_decode`'s result."""
    sizes = sorted(
        {
            int(k[5:])
            for r in result["beams"].values()
            for m in r.values()
            for k in m
            if k.startswith("batch")
        }
    )
    lat = " | ".join(f"ms/user B={b} median (p90) | vs beam" for b in sizes)
    lines = [
        f"{result['dataset']}, split {result['split']}, head {result['head']}, "
        f"{result['num_users']} users, {result['backend']}",
        "",
        "| K | method | Recall@5 | NDCG@5 | Recall@10 | NDCG@10 | valid rate | valid of K | "
        + lat
        + " |",
        "|" + "---|" * (8 + 2 * len(sizes)),
    ]
    for K, row in result["beams"].items():
        for m, r in row.items():
            q = " | ".join(f"{100 * r[k]:.2f}" for k in QUALITY_KEYS)
            cells = []
            for b in sizes:
                t, base = r[f"batch{b}"], row["beam"][f"batch{b}"]
                cells.append(f"{t['median_ms']:.2f} ({t['p90_ms']:.2f})")
                cells.append(f"{base['median_ms'] / t['median_ms']:.1f}x")
            lines.append(
                f"| {K} | {m} | {q} | {100 * r['valid_rate']:.1f} | "
                f"{100 * r['valid_of_k']:.1f} | " + " | ".join(cells) + " |"
            )
    if result.get("sizes"):
        lines += [
            "",
            "Backbone size (random weights, beam "
            f"{result['sizes'][0]['beam']}): beam search vs verified drafting",
            "",
            "| layers x width | parameters | "
            + " | ".join(f"beam B={b} | nezha B={b} | speedup B={b}" for b in sizes)
            + " |",
            "|" + "---|" * (2 + 3 * len(sizes)),
        ]
        for p in result["sizes"]:
            cells = []
            for b in sizes:
                t = p[f"batch{b}"]
                cells += [
                    f"{t['beam']['median_ms']:.2f}",
                    f"{t['nezha']['median_ms']:.2f}",
                    f"{p[f'speedup_batch{b}']:.1f}x",
                ]
            lines.append(
                f"| {p['layers']} x {p['width']} | {p['params']:,} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines) + "\n"


def bench_membership(
    *,
    num_items: int,
    vocab: int,
    levels: int,
    queries: int,
    reps: int,
    seed: int,
    probes: int | None = None,
) -> dict:
    """Build time, bytes and per-call latency of the three membership tests on one query set
    (half stored SIDs, half random ones), checked to agree."""
    sids = random_sids(num_items, levels, vocab, seed)
    rng = np.random.default_rng(seed + 1)
    q = np.concatenate(
        [
            sids[rng.integers(0, num_items, queries // 2)],
            rng.integers(0, vocab, (queries - queries // 2, levels), dtype=np.int32),
        ]
    )
    builders = {
        "hash_set": lambda: HashSet.build(sids, vocab_size=vocab, probes=probes),
        "static": lambda: StaticIndex.build(sids, vocab_size=vocab),
        "sorted_keys": lambda: SortedKeys.build(sids, vocab_size=vocab),
    }
    tests = {"hash_set": hash_contains, "static": contains, "sorted_keys": sorted_contains}
    built, out = {}, {"num_items": num_items, "vocab": vocab, "levels": levels, "queries": queries}
    for name, build in builders.items():
        start = time.perf_counter()
        built[name] = jax.device_put(build())
        seconds = time.perf_counter() - start
        nbytes = built[name].nbytes()
        nbytes = nbytes["total"] if isinstance(nbytes, dict) else nbytes
        out[name] = {"build_s": seconds, "bytes_per_item": nbytes / num_items}
    q_dev = jax.device_put(q)
    fns = {name: jax.jit(tests[name]) for name in tests}
    answers = {name: np.asarray(fns[name](built[name], q_dev)) for name in fns}
    first = answers["static"]
    for name, a in answers.items():
        if not np.array_equal(a, first):
            raise AssertionError(f"{name} disagrees with STATIC on {int((a != first).sum())} SIDs")
    ms = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(built[name], q_dev))
            ms[name].append((time.perf_counter() - start) * 1e3)
    for name in fns:
        out[name].update(_stats(ms[name]))
        out[name]["ns_per_query"] = out[name]["median_ms"] * 1e6 / queries
    out["member_rate"] = float(first.mean())
    out["hash_set"].update(capacity=built["hash_set"].capacity, probes=built["hash_set"].probes)
    return out
