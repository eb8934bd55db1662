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

import numpy as np

from data.splits import validation_split
from decoding import StaticConstraint, StaticIndex
from experiments import evaluate, metrics
from experiments.artifacts import load_retriever
from experiments.baselines import content_ranking
from experiments.config import load_json
from experiments.layout import RunLayout, Split
from experiments.retrieval_eval import (
    _content_inputs,
    _decoders,
    cold_scoring,
    content_prior_method,
    evaluated_inputs,
    load_inputs,
)


def _items(d: evaluate.Decoded) -> np.ndarray:
    return np.where(d.valid, d.items, -1)


def _fmt(pred, targets) -> str:
    m = metrics.ranking_metrics(pred, targets, ks=(1, 10), ndcg_ks=(10,))
    return " / ".join(f"{100 * m[k]:.2f}" for k in ("recall@1", "recall@10", "ndcg@10"))


def main(workdir: str, fraction: float, weights: list[float], temps: list[float]) -> None:
    layout = RunLayout(workdir)
    cfg = load_json(layout.config)
    ds, sids = load_inputs(cfg, layout)
    which = Split("cold-val", fraction)
    model = load_retriever(layout, which)
    split = validation_split(ds, fraction)
    V, K = model.space.codebook_size, cfg.eval.beam_size
    targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, layout.retriever(which))
    cold_sids = sids[split.cold_items]
    static = StaticConstraint(
        StaticIndex.build(cold_sids, vocab_size=V, dense_levels=cfg.decode.dense_levels)
    )
    scoring = cold_scoring(cfg.eval, split.train, sids, V)
    lookup = metrics.SIDLookup(sids, V)
    emb, histories = _content_inputs(cfg, layout, ds, split)
    print(f"{len(targets)} users, {len(split.cold_items)} cold items; R@1 / R@10 / NDCG@10 (%)")
    print("content", _fmt(content_ranking(emb, histories, split.cold_items, k=K), targets))
    d = evaluate.decode_interleaved(
        _decoders(model, {"static": (static, scoring)}, K), inputs, lookup, batch_size=64
    )["static"]
    print("static", _fmt(_items(d), targets))
    for t in temps:
        for w in weights:
            c = dataclasses.replace(
                cfg,
                eval=dataclasses.replace(
                    cfg.eval, cold_content_weight=w, cold_content_temperature=t
                ),
            )
            fn, queries = content_prior_method(
                c, split, model, cold_sids, static, scoring, emb, histories
            )
            d = evaluate.decode_interleaved(
                {"p": fn}, inputs, lookup, batch_size=64, row_inputs={"p": queries}
            )["p"]
            print(
                f"static_content weight={w:g} temperature={t:g}",
                _fmt(_items(d), targets),
                flush=True,
            )


if __name__ == "__main__":
    args = sys.argv[1:]
    frac = float(args[1]) if len(args) > 1 else 0.02
    ws = [float(x) for x in (args[2] if len(args) > 2 else "0.5,1,2,4").split(",")]
    ts = [float(x) for x in (args[3] if len(args) > 3 else "0.02,0.05,0.1").split(",")]
    main(args[0], frac, ws, ts)
