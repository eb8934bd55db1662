"""Batched, timed decoding of many users with several constraints, and per-method metrics."""

import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np
from jaxtyping import Int
from tqdm import tqdm

from data.pipeline import padded_batches
from decoding import BeamResult
from experiments.evaluation import metrics

# decode_batch(history int32[B, T]) -> the batch's beams (tokens, scores, valid flags)
DecodeBatch = Callable[[np.ndarray], BeamResult]


@dataclasses.dataclass(frozen=True)
class Decoded:
    """One method's beams for every user, mapped to catalog items (-1: no such item)."""

    items: np.ndarray  # int64 [U, K]
    scores: np.ndarray  # float32 [U, K]
    valid: np.ndarray  # bool [U, K]
    seconds_per_user: np.ndarray  # float64 [num_batches]


def decode_interleaved(
    methods: dict[str, DecodeBatch],
    inputs: Int[np.ndarray, "U T"],
    lookup: metrics.SIDLookup,
    *,
    batch_size: int,
    desc: str = "decoding",
    progress: bool = True,
    row_inputs: dict[str, np.ndarray] | None = None,
) -> dict[str, Decoded]:
    """Runs every method on each batch in turn, so their latencies share the machine's state.

    The last batch is padded by repeating its final row (one compiled shape), then trimmed.
    Each method gets one untimed warm-up call (compilation) before the timed batches.
    `row_inputs[name]` [U, ...]: a second per-user argument of that method, batched the same way.
    """
    U = len(inputs)
    if U == 0:
        raise ValueError("no users to decode")
    extra = dict(row_inputs or {})
    if unknown := set(extra) - set(methods):
        raise ValueError(f"row_inputs for unknown methods: {sorted(unknown)}")
    for name, rows in extra.items():
        if len(rows) != U:
            raise ValueError(f"row_inputs[{name!r}]: {len(rows)} rows for {U} users")
    names = list(extra)
    batches = list(padded_batches(inputs, *(extra[n] for n in names), batch_size=batch_size))
    if not names:
        batches = [(b,) for b in batches]

    def call(name: str, fn: DecodeBatch, batch: tuple):
        if name in extra:
            return fn(batch[0], batch[1 + names.index(name)])
        return fn(batch[0])

    for name, fn in methods.items():
        jax.block_until_ready(call(name, fn, batches[0]))
    out = {name: ([], [], [], []) for name in methods}
    for batch in tqdm(batches, desc=desc, unit="batch", leave=False, disable=not progress):
        for name, fn in methods.items():
            start = time.perf_counter()
            res = jax.block_until_ready(call(name, fn, batch))
            elapsed = time.perf_counter() - start
            tokens, scores, valid = jax.device_get((res.tokens, res.scores, res.valid))
            acc = out[name]
            acc[0].append(lookup(np.asarray(tokens)))
            acc[1].append(np.asarray(scores))
            acc[2].append(np.asarray(valid))
            acc[3].append(elapsed / batch_size)
    return {
        name: Decoded(
            items=np.concatenate(a[0])[:U],
            scores=np.concatenate(a[1])[:U],
            valid=np.concatenate(a[2])[:U],
            seconds_per_user=np.asarray(a[3]),
        )
        for name, a in out.items()
    }


def method_metrics(
    decoded: Decoded, targets: Int[np.ndarray, " U"], allowed_mask: np.ndarray, *, allowed_key: str
) -> dict:
    """Recall@1/5/10, NDCG@10, valid rate, allowed-set rate and latency for one method."""
    items = np.where(decoded.valid, decoded.items, -1)
    out = metrics.ranking_metrics(items, targets, ks=(1, 5, 10), ndcg_ks=(5, 10))
    rates = metrics.valid_rates(decoded.items, decoded.valid, allowed_mask)
    out["valid_rate"] = rates["valid_rate"]
    out[allowed_key] = rates["allowed_rate"]
    out.update(metrics.latency_summary(decoded.seconds_per_user))
    return out


def random_metrics(
    allowed_items: np.ndarray, targets: np.ndarray, *, beam_size: int, seed: int
) -> dict:
    """Constrained random guessing: a seeded sample beside its closed-form expectation."""
    start = time.perf_counter()
    pred = metrics.sample_random_predictions(allowed_items, len(targets), beam_size, seed)
    seconds = (time.perf_counter() - start) / max(len(targets), 1)
    out = metrics.ranking_metrics(pred, targets, ks=(1, 5, 10), ndcg_ks=(5, 10))
    expected = metrics.expected_random_metrics(len(allowed_items), ks=(1, 5, 10), ndcg_ks=(5, 10))
    out.update({f"expected_{k}": v for k, v in expected.items()})
    # Padding (-1, when |C| < K) is not a returned beam; every returned guess is an allowed item.
    returned = pred >= 0
    out["valid_rate"] = out["cold_rate"] = float(returned.sum() / max(returned.sum(), 1))
    out.update(metrics.latency_summary(np.array([seconds])))
    return out
