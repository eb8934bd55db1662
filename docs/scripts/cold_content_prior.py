"""STATIC with the content prior in its beam scores, over a grid of weights and temperatures,
validation only.

Usage: python docs/scripts/cold_content_prior.py WORKDIR [FRACTION] [WEIGHTS] [TEMPERATURES]
(defaults 0.02, "0.5,1,2,4", "0.02,0.05,0.1"; after `genret train-retriever --workdir WORKDIR
--split cold-val --cold-start FRACTION`).

Decodes every validation user with STATIC over the pseudo-cold set, beam 20, the run's cold-start
beam scores, plus eval.cold_content_weight x the content prior at each grid point (the method
`static_content` of `genret eval-cold-start`), and prints Recall@1 / Recall@10 / NDCG@10 beside
STATIC alone and the content neighbour. Nothing is written and no test target is read.
"""

import dataclasses
import sys

import cold_val
import numpy as np

from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics
from experiments.evaluation.baselines import content_ranking
from experiments.evaluation.retrieval import _content_inputs, _decoders, content_prior_method


def _items(d: evaluate.Decoded) -> np.ndarray:
    return np.where(d.valid, d.items, -1)


def main(workdir: str, fraction: float, weights: list[float], temps: list[float]) -> None:
    v = cold_val.load(workdir, fraction)
    cfg, split, model, targets = v.cfg, v.split, v.model, v.targets
    V, K = model.space.codebook_size, cfg.eval.beam_size
    lookup = metrics.SIDLookup(v.sids, V)
    emb, histories = _content_inputs(cfg, v.layout, v.ds, split)
    print(f"{len(targets)} users, {len(split.cold_items)} cold items; R@1 / R@10 / NDCG@10 (%)")
    ranked = content_ranking(emb, histories, split.cold_items, k=K)
    print("content", cold_val.fmt(ranked, targets))
    d = evaluate.decode_interleaved(
        _decoders(model, {"static": (v.static, v.scoring)}, K), v.inputs, lookup, batch_size=64
    )["static"]
    print("static", cold_val.fmt(_items(d), targets))
    for t in temps:
        for w in weights:
            print(
                f"static_content weight={w:g} temperature={t:g}",
                cold_val.fmt(prior_items(v, emb, histories, w, t), targets),
                flush=True,
            )


def prior_items(v: cold_val.ColdVal, emb: np.ndarray, histories, w: float, t: float) -> np.ndarray:
    """STATIC's items [U, K] with the content prior of `emb` at weight w, temperature t."""
    cfg = dataclasses.replace(
        v.cfg,
        eval=dataclasses.replace(v.cfg.eval, cold_content_weight=w, cold_content_temperature=t),
    )
    split = v.split
    fn, queries = content_prior_method(
        cfg, split, v.model, v.sids[split.cold_items], v.static, v.scoring, emb, histories
    )
    lookup = metrics.SIDLookup(v.sids, v.model.space.codebook_size)
    d = evaluate.decode_interleaved(
        {"p": fn}, v.inputs, lookup, batch_size=64, row_inputs={"p": queries}, progress=False
    )["p"]
    return _items(d)


if __name__ == "__main__":
    args = sys.argv[1:]
    frac = float(args[1]) if len(args) > 1 else 0.02
    ws = [float(x) for x in (args[2] if len(args) > 2 else "0.5,1,2,4").split(",")]
    ts = [float(x) for x in (args[3] if len(args) > 3 else "0.02,0.05,0.1").split(",")]
    main(args[0], frac, ws, ts)
