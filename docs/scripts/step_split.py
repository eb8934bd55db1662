"""What XLA's intra-op split costs STATIC's constrained step and search on a CPU.

XLA's CPU compiler splits a large enough gather over as many tasks as the compiling thread may run
on (its CPU affinity, read at compile time). This script compiles the bench's step (one sparse
level, `genret bench-constraints`' stand-in model) and its whole search twice: as JAX does, and
while the compiling thread is pinned to one CPU (so without the split; the program then runs
on JAX's threads as usual). It checks that both give the same tokens, scores and flags, counts
the split operations, and times in one process, the two variants alternated in blocks:
  - step, back to back: the step called again and again (its data stay in the caches);
  - step after a search: each step call follows one search call, as the bench interleaves them;
  - search: the whole search.
Prints a markdown table of medians (ms) per size. With `--workdir W` (a leave-one-out run:
W/retriever_loo, W/tokenizer/sids.npy, W's prepared data) it also times W's whole decode (the
retriever's layers and the search over the catalog, beam 20) both ways, for the first users'
histories at several batch sizes.

Usage: python docs/scripts/step_split.py [--num-items 100000 1000000] [--reps 200] [--workdir W]
"""

import argparse
import contextlib
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from decoding.beam_search import beam_search, next_level
from experiments.bench.constraints import (
    BenchConfig,
    _table_step,
    _timed,
    build,
    prefix_carry,
    random_sids,
    stand_in,
)

SPLIT = "outer_dimension_partitions"  # how the compiled text marks a split operation


@contextlib.contextmanager
def pinned():
    """The calling thread on its first allowed CPU (Linux affinities are per thread)."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def compiled_pair(fn, *args):
    """(as JAX compiles it, compiled while pinned); two function objects, so that JAX's
    in-memory cache does not hand the first executable to the second compile."""
    default = jax.jit(lambda *a: fn(*a)).lower(*args).compile()
    with pinned():
        narrow = jax.jit(lambda *a: fn(*a)).lower(*args).compile()
    return default, narrow


def same_results(pair, args) -> bool:
    """Whether both executables of `compiled_pair` return the same arrays, bit for bit."""
    outs = [jax.tree.leaves(f(*args)) for f in pair]
    return all(np.array_equal(a, b) for a, b in zip(*outs, strict=True))


def median_ms(fn, args, reps, before=None) -> float:
    out = []
    for _ in range(reps):
        if before is not None:
            jax.block_until_ready(before())
        out.append(_timed(fn, *args))
    return float(np.median(out))


def time_pair(pair, args, reps, before=None, *, digits: int = 2) -> str:
    """Both executables of `compiled_pair` (each call after its `before` call, if given),
    alternated in blocks (default, pinned, pinned, default): 'default / pinned (ratio)'."""
    times = [[], []]
    for block in range(4):
        for i in (0, 1) if block % 2 == 0 else (1, 0):
            times[i].append(median_ms(pair[i], args, reps, before and before[i]))
    d, p = (float(np.median(t)) for t in times)
    return f"{d:.{digits}f} / {p:.{digits}f} ({p / d:.2f}x)"


def measure(n: int, reps: int) -> dict:
    cfg = BenchConfig(num_items=n, methods=("static",))
    K, L, V = cfg.beam, cfg.levels, cfg.vocab
    table, init, level = stand_in(cfg)
    c = jax.device_put(build("static", random_sids(n, L, V, cfg.seed), cfg, None))
    model = functools.partial(_table_step, table)
    carry = jax.jit(functools.partial(prefix_carry, beam_size=K, num_levels=L, level=level))(
        table, init, c
    )
    steps = compiled_pair(lambda c, carry: next_level(model, c, K, level, carry), c, carry)
    searches = compiled_pair(
        lambda init, c: beam_search(model, init, {}, c, beam_size=K, num_levels=L), init, c
    )
    same = same_results(steps, (c, carry)) and same_results(searches, (init, c))
    row = {
        "split ops (default / pinned)": "{} / {}".format(
            *(f.as_text().count(SPLIT) for f in steps)
        ),
        "same results": same,
    }
    after_search = [lambda: searches[0](init, c), lambda: searches[1](init, c)]
    row["step, back to back"] = time_pair(steps, (c, carry), reps, digits=3)
    row["step after a search"] = time_pair(steps, (c, carry), reps, after_search, digits=3)
    row["search"] = time_pair(searches, (init, c), reps, digits=3)
    return row


def measure_retriever(workdir: str) -> None:
    """The whole decode of W's retriever, compiled both ways, at batch sizes 1 to 256."""
    from flax import nnx

    from decoding import StaticConstraint, StaticIndex
    from experiments.pipeline.artifacts import load_dataset
    from experiments.pipeline.layout import RunLayout
    from seqmodel.inference import load_retriever, retriever_decoder
    from seqmodel.tokens import encode_histories, sid_tokens

    layout = RunLayout(workdir)
    model = load_retriever(layout.root / "retriever_loo", read_only=True)
    sids = np.load(layout.root / "tokenizer" / "sids.npy")
    V = model.space.codebook_size
    c = jax.device_put(StaticConstraint(StaticIndex.build(sids, vocab_size=V)))
    graphdef, params = nnx.split(model)
    params = jax.device_put(params)
    histories = load_dataset(layout).histories
    print("| users per call | default / pinned decode, ms |\n|---|---|")
    for batch in (1, 16, 64, 256):
        users = np.arange(min(batch, len(histories)))
        tokens = jnp.asarray(
            encode_histories(sid_tokens(sids, V), histories, model.cfg.max_history, users)
        )

        def decode(params, tokens, c):
            # A decoder of its own per compile (see compiled_pair).
            d = retriever_decoder(graphdef, sids.shape[1], c, beam_size=20)
            return d.program(params, tokens, c, None)

        pair = compiled_pair(decode, params, tokens, c)
        same = same_results(pair, (params, tokens, c))
        timing = time_pair(pair, (params, tokens, c), max(5, 200 // batch))
        print(f"| {batch} | {timing}{'' if same else ' (results differ)'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-items", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--workdir", default=None, help="also time this run's retriever decode")
    args = ap.parse_args()
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("step_split: needs an OS that pins threads and at least two CPUs")
    # A persistent cache keys a program by its text and options, not by the affinity it was
    # compiled under: it would hand the default executable to the pinned compile.
    jax.config.update("jax_enable_compilation_cache", False)
    rows = {n: measure(n, args.reps) for n in args.num_items}
    keys = list(next(iter(rows.values())))
    print("| N | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for n, row in rows.items():
        print(f"| {n:.0e} | " + " | ".join(str(row[k]) for k in keys) + " |")
    print("(ms, medians: default / pinned compile)")
    if args.workdir:
        measure_retriever(args.workdir)


if __name__ == "__main__":
    main()
