"""Blends of STATIC's cold-start beams with the content nearest neighbour, validation only.

Usage: python docs/scripts/cold_blend.py WORKDIR [FRACTION]   (default 0.02; after
`genret train-retriever --workdir WORKDIR --split cold-val --cold-start FRACTION`)

Decodes every validation user once with STATIC over the pseudo-cold set, beam 20, with the run's
cold-start beam scores ("scored") and with the plain joint log-probability ("plain"), as
`genret eval-cold-start --validation` does, and prints Recall@1 / Recall@10 / NDCG@10 of:
- rerank: the 20 beams reordered by beam score + lambda x content cosine;
- rrf: reciprocal rank fusion (constant k) of the beam's ranks and the content ranks of the whole
  cold set;
- content+mu: the content cosine of every cold item + mu x its beam score (items outside the beam
  get the beam's lowest score).
The content cosine is the `content` baseline's: the cold item's text vector against the mean of
the user's last three items'. Analysis only (docs/RESULTS.md, session 12); nothing is written and
no test target is read.
"""

import sys

import numpy as np

from data.splits import validation_split
from decoding import StaticConstraint, StaticIndex
from experiments import evaluate, metrics
from experiments.artifacts import load_retriever
from experiments.baselines import CONTENT_RECENT
from experiments.config import load_json
from experiments.layout import RunLayout, Split
from experiments.retrieval_eval import (
    _decoders,
    _sample_users,
    cold_scoring,
    evaluated_inputs,
    load_inputs,
)
from rqvae.embed import embed_texts

K = 20


def _metrics(pred, targets):
    m = metrics.ranking_metrics(pred, targets, ks=(1, 10), ndcg_ks=(10,))
    return " / ".join(f"{100 * m[k]:.2f}" for k in ("recall@1", "recall@10", "ndcg@10"))


def main(workdir: str, fraction: float) -> None:
    layout = RunLayout(workdir)
    cfg = load_json(layout.config)
    ds, sids = load_inputs(cfg, layout)
    which = Split("cold-val", fraction)
    model = load_retriever(layout, which)
    split = validation_split(ds, fraction)
    V = model.space.codebook_size
    targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, layout.retriever(which))
    index = StaticIndex.build(
        sids[split.cold_items], vocab_size=V, dense_levels=cfg.decode.dense_levels
    )
    static = StaticConstraint(index)
    scoring = cold_scoring(cfg.eval, split.train, sids, V)
    methods = {"scored": (static, scoring), "plain": (static, None)}
    decoded = evaluate.decode_interleaved(
        _decoders(model, methods, K), inputs, metrics.SIDLookup(sids, V), batch_size=64
    )
    emb = embed_texts(ds.catalog.texts, cfg.rqvae, cache_dir=layout.embeddings)
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    users = _sample_users(len(split.test_targets), cfg.eval)
    query = np.stack(
        [unit[np.asarray(split.test_histories[int(u)][-CONTENT_RECENT:])].mean(0) for u in users]
    )
    cold = split.cold_items
    cos_UC = query @ unit[cold].T
    content_order = np.argsort(-cos_UC, axis=1, kind="stable")
    content_rank = np.argsort(content_order, axis=1)  # rank of each cold item per user
    column = np.full(len(sids), -1)
    column[cold] = np.arange(len(cold))
    print(f"{len(targets)} users, {len(cold)} cold items; Recall@1 / Recall@10 / NDCG@10 (%)")
    print("content", _metrics(cold[content_order[:, :K]], targets))
    rows = np.arange(len(targets))[:, None]
    for name, d in decoded.items():
        items = np.where(d.valid, d.items, -1)
        inside = items >= 0
        print(name, "beam", _metrics(items, targets))
        cos_UK = np.where(inside, cos_UC[rows, np.maximum(column[items], 0)], 0.0)
        for lam in (1, 2, 5, 10, 20, 50):
            s = np.where(inside, d.scores + lam * cos_UK, -np.inf)
            ranked = np.take_along_axis(items, np.argsort(-s, axis=1, kind="stable"), 1)
            print(name, f"rerank lambda={lam}", _metrics(ranked, targets))
        beam_rank = np.full(cos_UC.shape, np.inf)
        beam_score = np.full(cos_UC.shape, np.nan)
        r, k = np.nonzero(inside)
        beam_rank[r, column[items[r, k]]] = k
        beam_score[r, column[items[r, k]]] = d.scores[r, k]
        for k0 in (1, 5, 20, 60):
            fused = 1.0 / (k0 + beam_rank + 1) + 1.0 / (k0 + content_rank + 1)
            top = cold[np.argsort(-fused, axis=1, kind="stable")[:, :K]]
            print(name, f"rrf k={k0}", _metrics(top, targets))
        lowest = np.nanmin(beam_score, axis=1, keepdims=True)
        filled = np.where(np.isnan(beam_score), lowest, beam_score)
        for mu in (0.005, 0.01, 0.02, 0.05, 0.1, 0.2):
            top = cold[np.argsort(-(cos_UC + mu * filled), axis=1, kind="stable")[:, :K]]
            print(name, f"content+mu={mu}", _metrics(top, targets))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.02)
