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

import cold_val
import numpy as np

from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics
from experiments.evaluation.baselines import CONTENT_RECENT
from experiments.evaluation.retrieval import _decoders, _sample_users
from rqvae.embed import embed_texts

K = 20


def main(workdir: str, fraction: float) -> None:
    v = cold_val.load(workdir, fraction)
    cfg, layout, ds, sids, model, split = v.cfg, v.layout, v.ds, v.sids, v.model, v.split
    targets, inputs, static, scoring = v.targets, v.inputs, v.static, v.scoring
    V = model.space.codebook_size
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
    print("content", cold_val.fmt(cold[content_order[:, :K]], targets))
    rows = np.arange(len(targets))[:, None]
    for name, d in decoded.items():
        items = np.where(d.valid, d.items, -1)
        inside = items >= 0
        print(name, "beam", cold_val.fmt(items, targets))
        cos_UK = np.where(inside, cos_UC[rows, np.maximum(column[items], 0)], 0.0)
        for lam in (1, 2, 5, 10, 20, 50):
            s = np.where(inside, d.scores + lam * cos_UK, -np.inf)
            ranked = np.take_along_axis(items, np.argsort(-s, axis=1, kind="stable"), 1)
            print(name, f"rerank lambda={lam}", cold_val.fmt(ranked, targets))
        beam_rank = np.full(cos_UC.shape, np.inf)
        beam_score = np.full(cos_UC.shape, np.nan)
        r, k = np.nonzero(inside)
        beam_rank[r, column[items[r, k]]] = k
        beam_score[r, column[items[r, k]]] = d.scores[r, k]
        for k0 in (1, 5, 20, 60):
            fused = 1.0 / (k0 + beam_rank + 1) + 1.0 / (k0 + content_rank + 1)
            top = cold[np.argsort(-fused, axis=1, kind="stable")[:, :K]]
            print(name, f"rrf k={k0}", cold_val.fmt(top, targets))
        lowest = np.nanmin(beam_score, axis=1, keepdims=True)
        filled = np.where(np.isnan(beam_score), lowest, beam_score)
        for mu in (0.005, 0.01, 0.02, 0.05, 0.1, 0.2):
            top = cold[np.argsort(-(cos_UC + mu * filled), axis=1, kind="stable")[:, :K]]
            print(name, f"content+mu={mu}", cold_val.fmt(top, targets))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.02)
