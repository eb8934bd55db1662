"""Ranking metrics on host arrays: SID -> item lookup, Recall@K, NDCG@K, random baseline."""

import numpy as np
from jaxtyping import Bool, Float, Int

from data.types import Histories


class SIDLookup:
    """Maps SID rows [.., L] to catalog indices (-1 where no item has that SID)."""

    def __init__(self, sids: Int[np.ndarray, "N L"], vocab_size: int):
        sids = np.asarray(sids)
        if sids.ndim != 2:
            raise ValueError(f"sids: expected a [N, L] array, got shape {sids.shape}")
        if sids.min() < 0 or sids.max() >= vocab_size:
            raise ValueError(f"sids: codes must lie in [0, {vocab_size})")
        if sids.shape[1] * np.log2(vocab_size) > 62:
            raise ValueError("sids: L * log2(V) > 62 bits; cannot pack SIDs into int64 keys")
        self.vocab_size = vocab_size
        keys = self._pack(sids)
        self._order = np.argsort(keys, kind="stable")
        self._sorted = keys[self._order]
        if np.any(self._sorted[1:] == self._sorted[:-1]):
            raise ValueError("sids: two items share a SID; SIDs must be unique")

    def _pack(self, sids: np.ndarray) -> np.ndarray:
        keys = np.zeros(sids.shape[:-1], np.int64)
        for level in range(sids.shape[-1]):
            keys = keys * self.vocab_size + sids[..., level].astype(np.int64)
        return keys

    def __call__(self, tokens: Int[np.ndarray, "*batch L"]) -> Int[np.ndarray, "*batch"]:
        tokens = np.asarray(tokens)
        in_range = np.all((tokens >= 0) & (tokens < self.vocab_size), axis=-1)
        keys = self._pack(np.clip(tokens, 0, self.vocab_size - 1))
        pos = np.clip(np.searchsorted(self._sorted, keys), 0, len(self._sorted) - 1)
        found = (self._sorted[pos] == keys) & in_range
        return np.where(found, self._order[pos], -1)


def ranking_metrics(
    predicted: Int[np.ndarray, "U K"],
    targets: Int[np.ndarray, " U"],
    ks: tuple[int, ...] = (1, 5, 10),
    ndcg_ks: tuple[int, ...] = (10,),
) -> dict[str, float]:
    """Recall@K and NDCG@K for one target per user; predicted item -1 never matches."""
    predicted = np.asarray(predicted)
    targets = np.asarray(targets)
    if predicted.ndim != 2 or targets.shape != predicted.shape[:1]:
        raise ValueError(f"predicted {predicted.shape} and targets {targets.shape} do not align")
    hits = (predicted == targets[:, None]) & (predicted >= 0)
    # The first hit's rank; users without a hit get a rank no cutoff reaches (even k > K).
    first = np.where(hits.any(1), hits.argmax(1), np.iinfo(np.int64).max)
    out = {}
    for k in ks:
        out[f"recall@{k}"] = float(np.mean(first < k))
    for k in ndcg_ks:
        gain = np.where(first < k, 1.0 / np.log2(first + 2.0), 0.0)
        out[f"ndcg@{k}"] = float(np.mean(gain))
    return out


def unseen_depth(histories: Histories, k: int) -> int:
    """How deep a ranking must go for `drop_seen(ranking, histories, k)` to be the exact top k
    among unseen items: k plus the longest history (at most that many drop out)."""
    return k + int(histories.lengths().max(initial=0))


def drop_seen(
    predicted: Int[np.ndarray, "U K"], histories: Histories, k: int | None = None
) -> Int[np.ndarray, "U k"]:
    """Each ranked list without the items of its user's history, the rest moved up in order and
    padded with -1; the first `k` (default K) columns. For data that keep one interaction per
    (user, item), where a history item is never a target (S3-Rec's full-sort protocol)."""
    predicted = np.asarray(predicted)
    if predicted.ndim != 2 or len(predicted) != len(histories):
        raise ValueError(
            f"drop_seen: predicted {predicted.shape} does not align with {len(histories)} histories"
        )
    U, K = predicted.shape
    k = K if k is None else k
    rows = np.repeat(np.arange(U), histories.lengths())
    # A ranked item is seen when (its row, it) is among the (row, history item) pairs.
    width = np.int64(max(int(predicted.max(initial=0)), int(histories.items.max(initial=0))) + 1)
    seen_keys = np.unique(rows * width + histories.items)
    keys = np.arange(U)[:, None] * width + predicted
    keep = (predicted >= 0) & ~np.isin(keys, seen_keys)
    # Stable: kept items first, in their ranked order.
    order = np.argsort(~keep, axis=1, kind="stable")
    out = np.where(np.take_along_axis(keep, order, 1), np.take_along_axis(predicted, order, 1), -1)
    if k > K:
        out = np.pad(out, ((0, 0), (0, k - K)), constant_values=-1)
    return out[:, :k]


def valid_rates(
    predicted: Int[np.ndarray, "U K"],
    valid: Bool[np.ndarray, "U K"],
    allowed: Bool[np.ndarray, " N"],
) -> dict[str, float]:
    """Share of returned beams that are real items, and that are allowed (e.g. cold-start) items."""
    predicted = np.asarray(predicted)
    returned = np.asarray(valid)
    n = max(int(returned.sum()), 1)
    is_item = (predicted >= 0) & returned
    is_allowed = is_item & np.asarray(allowed)[np.maximum(predicted, 0)]
    return {"valid_rate": float(is_item.sum() / n), "allowed_rate": float(is_allowed.sum() / n)}


def expected_random_metrics(
    num_allowed: int, ks: tuple[int, ...] = (1, 5, 10), ndcg_ks: tuple[int, ...] = (10,)
) -> dict[str, float]:
    """Closed form for K distinct uniform guesses from an allowed set that holds the target."""
    if num_allowed < 1:
        raise ValueError("num_allowed must be >= 1")
    out = {f"recall@{k}": min(k, num_allowed) / num_allowed for k in ks}
    for k in ndcg_ks:
        ranks = np.arange(min(k, num_allowed))
        out[f"ndcg@{k}"] = float(np.sum(1.0 / np.log2(ranks + 2.0)) / num_allowed)
    return out


def sample_random_predictions(
    allowed_items: Int[np.ndarray, " C"], num_users: int, k: int, seed: int
) -> Int[np.ndarray, "U K"]:
    """K distinct items per user, uniform over the allowed set (padded with -1 when C < K)."""
    rng = np.random.default_rng(seed)
    allowed_items = np.asarray(allowed_items)
    c = len(allowed_items)
    take = min(k, c)
    # argsort of uniform keys = a uniform random permutation per row; keep the first `take`.
    picks = np.argsort(rng.random((num_users, c)), axis=1)[:, :take]
    out = np.full((num_users, k), -1, np.int64)
    out[:, :take] = allowed_items[picks]
    return out


def latency_summary(seconds_per_user: Float[np.ndarray, " R"]) -> dict[str, float]:
    ms = np.asarray(seconds_per_user) * 1e3
    return {
        "latency_ms_median": float(np.median(ms)),
        "latency_ms_p90": float(np.percentile(ms, 90)),
    }
