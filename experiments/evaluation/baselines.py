"""Model-free baselines in the evaluation harness: the content nearest neighbour (the candidate
item whose text embedding is closest to the user's recent items) and, for leave-one-out, item
co-occurrence (the items most often next to the user's last item in the training histories),
also as a prior over the catalog (`CooccurrencePrior`)."""

import dataclasses
import time

import numpy as np
import scipy.sparse as sp
from jaxtyping import Float, Int

from data.types import Histories
from experiments.evaluation import metrics
from experiments.evaluation.profile import PLAIN_PROFILE, ContentProfile
from rqvae.cooc import cooccurrence_counts, training_sequences


def content_queries(
    emb: Float[np.ndarray, "N E"] | sp.spmatrix,
    histories: Histories,
    profile: ContentProfile = PLAIN_PROFILE,
) -> tuple[Float[np.ndarray, "N E"], Float[np.ndarray, "U E"]]:
    """(unit item embeddings, each history's query: its text `profile`). A sparse `emb` (TF-IDF
    rows) gives both as sparse CSR."""
    rows, items, take = recent_items(histories, profile.recent)
    if sp.issparse(emb):
        weight = _profile_weights(rows, take, profile.decay, len(histories))
        emb = sp.csr_matrix(emb, dtype=np.float64)
        norms = np.sqrt(np.asarray(emb.multiply(emb).sum(axis=1)).ravel())
        unit = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ emb
        mean = sp.csr_matrix((weight, (rows, items)), shape=(len(histories), emb.shape[0]))
        return unit.tocsr(), (mean @ unit).tocsr()
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    # Weighted sum of each user's last unit embeddings, via a ragged sum over the CSR layout.
    query_UE = np.zeros((len(histories), emb.shape[1]), np.float64)
    if profile.decay == 1.0:  # the plain mean, summed then divided (the same floats as ever)
        np.add.at(query_UE, rows, unit[items])
        return unit, query_UE / take[:, None]
    weight = _profile_weights(rows, take, profile.decay, len(histories))
    np.add.at(query_UE, rows, weight[:, None] * unit[items])
    return unit, query_UE


def places_from_end(take: Int[np.ndarray, " U"]) -> Int[np.ndarray, " P"]:
    """For `recent_items`' flat (row, item) pairs, each item's places from the end of its row's
    kept items (0: the last item)."""
    return np.repeat(np.cumsum(take) - 1, take) - np.arange(take.sum())


def _profile_weights(rows, take, decay: float, num_rows: int) -> np.ndarray:
    """Each (row, item) pair's weight, decay**(places from the end), each row's summing to 1."""
    weight = decay ** places_from_end(take).astype(np.float64)
    return weight / np.bincount(rows, weight, minlength=num_rows)[rows]


def cosines(queries, items_T) -> np.ndarray:
    """queries @ items_T as a dense array, for dense and sparse (`content_queries`) operands."""
    out = queries @ items_T
    return out.toarray() if sp.issparse(out) else np.asarray(out)


def recent_items(
    histories: Histories, recent: int
) -> tuple[Int[np.ndarray, " P"], Int[np.ndarray, " P"], Int[np.ndarray, " U"]]:
    """(row, item) of each history's last `recent` items, flat, and how many each history has."""
    lengths = histories.lengths()
    if (lengths < 1).any():
        raise ValueError("content baseline: every history needs at least one item")
    take = np.minimum(lengths, recent)
    ends = histories.offsets[1:]
    rows = np.repeat(np.arange(len(histories)), take)
    pos = np.repeat(ends - take, take) + (
        np.arange(take.sum()) - np.repeat(np.cumsum(take) - take, take)
    )
    return rows, histories.items[pos], take


def content_ranking(
    emb: Float[np.ndarray, "N E"],
    histories: Histories,
    candidates: Int[np.ndarray, " C"],
    *,
    k: int,
    profile: ContentProfile = PLAIN_PROFILE,
    chunk: int = 4096,
) -> Int[np.ndarray, "U k"]:
    """For each history, the top-k candidates by cosine between the candidate's embedding and the
    history's text `profile` (-1 pads when C < k).

    Ties rank the lower catalog index first, so the result does not depend on numpy's sort.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    unit, query_UE = content_queries(emb, histories, profile)
    cand = np.asarray(candidates)
    cand_CE = unit[cand]
    out = np.full((len(histories), k), -1, np.int64)
    kk = min(k, len(cand))
    order_by_index = np.argsort(cand, kind="stable")
    for lo in range(0, len(histories), chunk):
        sim_UC = cosines(query_UE[lo : lo + chunk], cand_CE.T)
        # Stable sort of -similarity over candidates ordered by catalog index breaks ties low-first.
        ranked = np.argsort(-sim_UC[:, order_by_index], axis=1, kind="stable")[:, :kk]
        out[lo : lo + chunk, :kk] = cand[order_by_index][ranked]
    return out


def content_metrics(
    emb: Float[np.ndarray, "N E"],
    histories: Histories,
    targets: Int[np.ndarray, " U"],
    candidates: Int[np.ndarray, " C"],
    *,
    k: int,
    profile: ContentProfile = PLAIN_PROFILE,
) -> dict:
    """Recall@1/5/10 and NDCG@5/10 of the content nearest neighbour, with its latency per user."""
    start = time.perf_counter()
    pred = content_ranking(emb, histories, candidates, k=k, profile=profile)
    seconds = (time.perf_counter() - start) / max(len(targets), 1)
    out = metrics.ranking_metrics(pred, targets, ks=(1, 5, 10), ndcg_ks=(5, 10))
    returned = pred >= 0
    out["valid_rate"] = out["cold_rate"] = float(returned.sum() / max(returned.sum(), 1))
    out.update(metrics.latency_summary(np.array([seconds])))
    return out


def cooccurrence_ranking(
    train: Histories, histories: Histories, num_items: int, *, k: int, window: int = 1
) -> Int[np.ndarray, "U k"]:
    """For each history, the top-k items by how often they stood at most `window` positions from
    its last item in `train`; ties, and the rest of a short list, by popularity in `train`, then
    by the lower catalog index."""
    if k < 1 or (histories.lengths() < 1).any():
        raise ValueError("cooccurrence_ranking: k >= 1 and a non-empty history per user")
    counts = cooccurrence_counts(train, num_items, window).tocsr()
    popularity = np.bincount(train.items, minlength=num_items)
    by_popularity = np.lexsort((np.arange(num_items), -popularity))
    last = histories.items[histories.offsets[1:] - 1]
    kk = min(k, num_items)
    table = {}
    for item in np.unique(last):
        row = counts[item]
        # Stored neighbours by (count, popularity, index); popular items fill the rest.
        order = np.lexsort((row.indices, -popularity[row.indices], -row.data))
        seen = row.indices[order][:kk]
        fill = by_popularity[~np.isin(by_popularity, seen)][: kk - len(seen)]
        table[item] = np.concatenate([seen, fill])
    out = np.full((len(histories), k), -1, np.int64)
    out[:, :kk] = np.stack([table[i] for i in last])
    return out


def loo_training(histories_all: Histories, num_items: int) -> Histories:
    """Leave-one-out's training histories: every user's last two items left out, so no
    validation or test target is read."""
    return training_sequences(histories_all, np.zeros(num_items, bool), holdout_last=2)


@dataclasses.dataclass(frozen=True)
class CooccurrencePrior:
    """p(item | last item) = (count(last, item) + s * pop(item)) / (n(last) + s): the pairs at
    most one position apart in the training histories (both orders), smoothed toward the
    add-one popularity shares `pop` with s pseudo-counts (a Dirichlet prior), so every item keeps
    some mass and a last item never seen in a pair gives popularity alone."""

    counts: sp.csr_matrix  # [N, N]
    totals: np.ndarray  # float64 [N]: n(item), its row's sum
    popularity: np.ndarray  # float64 [N], sums to 1
    smoothing: float

    @classmethod
    def fit(cls, train: Histories, num_items: int, smoothing: float) -> "CooccurrencePrior":
        if not smoothing > 0:
            raise ValueError(f"smoothing must be > 0, got {smoothing}")
        counts = cooccurrence_counts(train, num_items, 1).tocsr()
        pop = np.bincount(train.items, minlength=num_items).astype(np.float64) + 1.0
        totals = np.asarray(counts.sum(axis=1), np.float64).ravel()
        return cls(counts, totals, pop / pop.sum(), float(smoothing))

    def log_prob(self, last: Int[np.ndarray, " B"]) -> Float[np.ndarray, "B N"]:
        """log p(item | last) for every item of the catalog, one row per last item."""
        last = np.asarray(last, np.int64)
        s = self.smoothing
        mass = self.counts[last].toarray() + s * self.popularity[None, :]
        return np.log(mass) - np.log(self.totals[last] + s)[:, None]


def cooccurrence_metrics(
    histories_all: Histories,
    histories: Histories,
    targets: Int[np.ndarray, " U"],
    num_items: int,
) -> tuple[dict, dict]:
    """Recall@1/5/10 and NDCG@5/10 of `cooccurrence_ranking`, counted on leave-one-out's training
    histories (every user's last two items left out, so no validation or test target is read):
    (the plain top 10, the top 10 among the items not in the user's history). Both come from one
    ranking deep enough for the second (`metrics.unseen_depth`), whose first 10 columns are the
    first; the latency is that ranking's, per user."""
    start = time.perf_counter()
    train = loo_training(histories_all, num_items)
    depth = metrics.unseen_depth(histories, 10)
    pred = cooccurrence_ranking(train, histories, num_items, k=depth)
    seconds = (time.perf_counter() - start) / max(len(targets), 1)
    out = []
    for ranked in (pred[:, :10], metrics.drop_seen(pred, histories, 10)):
        m = metrics.ranking_metrics(ranked, targets, ks=(1, 5, 10), ndcg_ks=(5, 10))
        m["valid_rate"] = m["item_rate"] = 1.0
        m.update(metrics.latency_summary(np.array([seconds])))
        out.append(m)
    return out[0], out[1]


def rank_fusion(
    rankings: list[Int[np.ndarray, "U K"]], weights: list[float], *, offset: float, k: int
) -> Int[np.ndarray, "U k"]:
    """Weighted reciprocal rank fusion: each item's score is the sum over the rankings holding it
    of weight / (offset + its 0-based rank there); the top-k by score, ties to the lower catalog
    index, -1 padding where fewer than k items appear. Entries < 0 in a ranking are padding."""
    if len(rankings) != len(weights) or not rankings:
        raise ValueError("rank_fusion: one weight per ranking, at least one ranking")
    if offset <= 0 or k < 1:
        raise ValueError(f"rank_fusion: offset must be > 0 and k >= 1, got {offset}, {k}")
    U = len(rankings[0])
    items = np.concatenate([np.asarray(r, np.int64) for r in rankings], axis=1)  # [U, sum K]
    score = np.concatenate(
        [
            np.broadcast_to(w / (offset + np.arange(r.shape[1], dtype=np.float64)), r.shape)
            for r, w in zip(rankings, weights, strict=True)
        ],
        axis=1,
    )
    score = np.where(items >= 0, score, 0.0)
    # Sum the scores of an item's entries: sort each row by item, add up runs of equal items.
    order = np.argsort(items, axis=1, kind="stable")
    items = np.take_along_axis(items, order, axis=1)
    score = np.take_along_axis(score, order, axis=1)
    first = np.ones_like(items, bool)
    first[:, 1:] = items[:, 1:] != items[:, :-1]
    run = np.cumsum(first, axis=1) - 1  # run id of each entry within its row
    total = np.zeros(items.shape, np.float64)
    np.add.at(total, (np.arange(U)[:, None].repeat(items.shape[1], 1), run), score)
    ids = np.where(first & (items >= 0), items, -1)
    # Keep one entry per item (its run's total), the rest -inf; rank by -total, then item id.
    fused = np.where(ids >= 0, np.take_along_axis(total, run, axis=1), -np.inf)
    best = np.lexsort((ids, -fused), axis=1)[:, :k]
    out = np.take_along_axis(ids, best, axis=1)
    out = np.where(np.isfinite(np.take_along_axis(fused, best, axis=1)), out, -1)
    if out.shape[1] < k:
        out = np.pad(out, ((0, 0), (0, k - out.shape[1])), constant_values=-1)
    return out
