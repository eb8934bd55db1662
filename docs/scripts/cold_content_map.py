"""The content neighbour with a learned linear map of its query, validation only (session 28's
negative result, docs/RESULTS.md).

Usage: python docs/scripts/cold_content_map.py WORKDIR [FRACTION] [RIDGES] [free]
(defaults 0.02, "10,100,1000,10000,100000"; `free`: W = R, fitted on the next item itself, with no
shrinkage toward the identity; after `genret prepare` and `genret train-tokenizer`,
which cache the item-text embeddings). No retriever is needed and no test target is read.

The content neighbour ranks the cold items by cosine to the mean of the user's last three unit
text vectors. Here that query first goes through a linear map W = I + R fitted on the split's
training histories (pseudo-cold items removed): R is scikit-learn's `Ridge` (no intercept) of
next item's unit vector minus the query on the query, over every training position, so a strong
ridge gives back the plain neighbour. Prints Recall@1 / Recall@10 / NDCG@10 for the plain query and
for each ridge strength.
"""

import sys

import cold_val
import numpy as np
from sklearn.linear_model import Ridge

from data.splits import validation_split
from data.types import Histories
from experiments.pipeline.artifacts import load_dataset
from experiments.evaluation.baselines import CONTENT_RECENT, content_queries, content_ranking
from experiments.config import load_json
from experiments.pipeline.layout import RunLayout
from experiments.evaluation.retrieval import _content_inputs, _sample_users


def fit_map(emb: np.ndarray, train: Histories, ridge: float, free: bool = False) -> np.ndarray:
    """W [E, E]: every training item after a history's first against the content query of the
    items before it (`content_queries` of its last CONTENT_RECENT); I + R, or R alone where
    `free`."""
    n = train.lengths()
    keep = np.flatnonzero(n >= 2)
    starts = np.repeat(train.offsets[keep], n[keep] - 1)
    end = starts + np.concatenate([np.arange(1, k) for k in n[keep]])
    begin = np.maximum(starts, end - CONTENT_RECENT)
    # The items before each target, as histories the content neighbour's own query reads.
    offsets = np.concatenate([[0], np.cumsum(end - begin)]).astype(np.int64)
    take = np.repeat(begin - offsets[:-1], end - begin) + np.arange(offsets[-1])
    before = Histories(items=train.items[take], times=train.times[take], offsets=offsets)
    unit, X = content_queries(emb, before)
    X = X.astype(np.float32)
    Y = unit[train.items[end]].astype(np.float32)
    if free:
        return Ridge(alpha=ridge, fit_intercept=False).fit(X, Y).coef_.T
    R = Ridge(alpha=ridge, fit_intercept=False).fit(X, Y - X).coef_.T
    return np.eye(unit.shape[1]) + R


def main(workdir: str, fraction: float, ridges: list[float], free: bool) -> None:
    layout = RunLayout(workdir)
    cfg = load_json(layout.config)
    ds = load_dataset(layout)
    split = validation_split(ds, fraction)
    emb, histories = _content_inputs(cfg, layout, ds, split)
    targets = split.test_targets[_sample_users(len(split.test_targets), cfg.eval)]
    K, cold = cfg.eval.beam_size, split.cold_items
    print(f"{len(targets)} users, {len(cold)} cold items, embeddings {emb.shape}")
    print("content", cold_val.fmt(content_ranking(emb, histories, cold, k=K), targets))
    unit, queries = content_queries(emb, histories)
    for lam in ridges:
        sim = (queries @ fit_map(emb, split.train, lam, free)) @ unit[cold].T
        ranked = cold[np.argsort(-sim, axis=1, kind="stable")[:, :K]]
        print(f"ridge={lam:g}", cold_val.fmt(ranked, targets), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    frac = float(args[1]) if len(args) > 1 else 0.02
    lams = [float(x) for x in (args[2] if len(args) > 2 else "10,100,1000,10000,100000").split(",")]
    main(args[0], frac, lams, len(args) > 3 and args[3] == "free")
