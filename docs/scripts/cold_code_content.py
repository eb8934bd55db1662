"""How much of the content baseline's cold-start signal the Semantic IDs keep, validation only.

Usage: python docs/scripts/cold_code_content.py WORKDIR [FRACTION]   (default 0.02; WORKDIR holds a
prepared dataset, its item-text embeddings and a trained tokenizer: `genret prepare` and `genret
train-tokenizer`)

The `content` baseline ranks the cold items by the cosine between their text vector and the mean
of the user's last three items'. Here every item's text vector is first replaced by the mean text
vector of all catalog items that share its first d codes (d = 0, 1, 2, 3: what an item's first d
SID tokens say about its text), and the same baseline runs on those vectors. Items that share the
codes tie; ties are broken at random, and each row is the mean over five orders. d = 3 keeps what
three levels of codes know; the full vectors are the baseline itself. A generative retriever
trained without the cold items reaches them only through their codes, so the d = 3 row is what
a retriever could get from text through the SIDs, if it ranked as well as a cosine does.
Analysis only (docs/RESULTS.md, session 13); nothing is written and no test target is read.
"""

import sys

import numpy as np

from data.splits import validation_split
from data.types import Histories
from experiments.pipeline.artifacts import load_dataset, load_sids
from experiments.evaluation.baselines import content_metrics
from experiments.config import load_json
from experiments.pipeline.layout import RunLayout
from experiments.evaluation.retrieval import _sample_users
from rqvae.embed import embed_texts

K, ORDERS = 20, 5


def prefix_means(emb: np.ndarray, sids: np.ndarray, depth: int) -> np.ndarray:
    """Each item's vector replaced by the mean vector of the items sharing its first `depth`
    codes (depth 0: the catalog mean)."""
    if depth == 0:
        return np.broadcast_to(emb.mean(0), emb.shape).copy()
    _, group = np.unique(sids[:, :depth], axis=0, return_inverse=True)
    group = group.reshape(-1)
    sums = np.zeros((group.max() + 1, emb.shape[1]))
    np.add.at(sums, group, emb)
    return (sums / np.bincount(group)[:, None])[group]


def main(workdir: str, fraction: float) -> None:
    layout = RunLayout(workdir)
    cfg = load_json(layout.config)
    ds = load_dataset(layout)
    sids = load_sids(cfg, layout, ds)
    emb = np.asarray(
        embed_texts(ds.catalog.texts, cfg.rqvae, cache_dir=layout.embeddings), np.float64
    )
    split = validation_split(ds, fraction)
    users = _sample_users(len(split.test_targets), cfg.eval)
    histories = Histories.from_lists([split.test_histories[int(u)] for u in users])
    targets = split.test_targets[users]
    cold = split.cold_items
    levels = sids.shape[1] - 1  # the last token tells colliding items apart, nothing about text
    distinct = len(np.unique(sids[cold, :levels], axis=0))
    print(
        f"{workdir}, validation {fraction:g}: {len(targets)} users, {len(cold)} pseudo-cold items"
    )
    print(f"({distinct} distinct {levels}-code prefixes among them); Recall@1 / @10 / NDCG@10")
    rng = np.random.default_rng(0)
    rows = [(f"d = {d}", prefix_means(emb, sids, d)) for d in range(levels + 1)]
    for name, vectors in [*rows, ("full text vectors (the baseline)", emb)]:
        runs = []
        for _ in range(ORDERS):
            # content_ranking breaks ties by catalog index: a tiny perturbation breaks them at
            # random instead (1e-9 of a unit vector; distinct cosines are further apart).
            jitter = (
                1e-9 * rng.standard_normal(vectors.shape) * np.linalg.norm(vectors, axis=1)[:, None]
            )
            m = content_metrics(vectors + jitter, histories, targets, cold, k=K)
            runs.append([100 * m[k] for k in ("recall@1", "recall@10", "ndcg@10")])
        r1, r10, n10 = np.mean(runs, axis=0)
        print(f"  {name}: {r1:.2f} / {r10:.2f} / {n10:.2f}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.02)
