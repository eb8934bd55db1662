"""Model-free baselines in the evaluation harness: the content nearest neighbour (the candidate
item whose text embedding is closest to the user's recent items)."""

import time

import numpy as np
from jaxtyping import Float, Int

from data.types import Histories
from experiments import metrics

CONTENT_RECENT = 3  # the user's last items whose mean embedding is the query


def content_ranking(
    emb: Float[np.ndarray, "N E"],
    histories: Histories,
    candidates: Int[np.ndarray, " C"],
    *,
    k: int,
    recent: int = CONTENT_RECENT,
    chunk: int = 4096,
) -> Int[np.ndarray, "U k"]:
    """For each history, the top-k candidates by cosine between the candidate's embedding and the
    mean of the unit embeddings of the history's last `recent` items (-1 pads when C < k).

    Ties rank the lower catalog index first, so the result does not depend on numpy's sort.
    """
    if recent < 1 or k < 1:
        raise ValueError(f"recent and k must be >= 1, got {recent} and {k}")
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    cand = np.asarray(candidates)
    cand_CE = unit[cand]
    lengths = histories.lengths()
    if (lengths < 1).any():
        raise ValueError("content_ranking: every history needs at least one item")
    # Mean of each user's last `recent` unit embeddings, via a ragged sum over the CSR layout.
    take = np.minimum(lengths, recent)
    ends = histories.offsets[1:]
    rows = np.repeat(np.arange(len(histories)), take)
    pos = np.repeat(ends - take, take) + (
        np.arange(take.sum()) - np.repeat(np.cumsum(take) - take, take)
    )
    query_UE = np.zeros((len(histories), emb.shape[1]), np.float64)
    np.add.at(query_UE, rows, unit[histories.items[pos]])
    query_UE /= take[:, None]
    out = np.full((len(histories), k), -1, np.int64)
    kk = min(k, len(cand))
    order_by_index = np.argsort(cand, kind="stable")
    for lo in range(0, len(histories), chunk):
        sim_UC = query_UE[lo : lo + chunk] @ cand_CE.T
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
) -> dict:
    """Recall@1/5/10 and NDCG@5/10 of the content nearest neighbour, with its latency per user."""
    start = time.perf_counter()
    pred = content_ranking(emb, histories, candidates, k=k)
    seconds = (time.perf_counter() - start) / max(len(targets), 1)
    out = metrics.ranking_metrics(pred, targets, ks=(1, 5, 10), ndcg_ks=(5, 10))
    returned = pred >= 0
    out["valid_rate"] = out["cold_rate"] = float(returned.sum() / max(returned.sum(), 1))
    out.update(metrics.latency_summary(np.array([seconds])))
    return out
