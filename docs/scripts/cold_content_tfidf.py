"""The content neighbour on the item texts' TF-IDF rows instead of the tokenizer's embeddings
(their 256-dim SVD), validation only (session 29, rules C3 and C4; docs/RESULTS.md).

Usage: python docs/scripts/cold_content_tfidf.py WORKDIR [FRACTION] [prior WEIGHTS TEMPERATURES]
(default 0.02; after `genret prepare` and `genret train-tokenizer`, which cache the embeddings).
No test target is read. Prints Recall@1 / Recall@10 / NDCG@10 of the content neighbour with each
kind of vectors (eval.cold_content_vectors = embeddings, tfidf). With `prior`, also STATIC with
the content prior in its beams (`genret eval-cold-start`'s `static_content`) on each, at every
weight x temperature given (comma-separated); that needs the cold-val retriever (`genret
train-retriever --workdir WORKDIR --split cold-val --cold-start FRACTION`).
"""

import sys

import cold_val
from cold_content_prior import prior_items

from data.splits import validation_split
from experiments.pipeline.artifacts import load_dataset
from experiments.evaluation.baselines import content_ranking
from experiments.config import apply_overrides, load_json
from experiments.pipeline.layout import RunLayout
from experiments.evaluation.retrieval import _content_inputs, _sample_users


def main(workdir: str, fraction: float, grid: tuple[list[float], list[float]] | None) -> None:
    layout = RunLayout(workdir)
    v = cold_val.load(workdir, fraction) if grid else None
    if v is not None:  # the retriever's inputs hold the dataset and split: read them once
        cfg, ds, split = v.cfg, v.ds, v.split
    else:
        cfg = load_json(layout.config)
        ds = load_dataset(layout)
        split = validation_split(ds, fraction)
    targets = split.test_targets[_sample_users(len(split.test_targets), cfg.eval)]
    K, cold = cfg.eval.beam_size, split.cold_items
    print(f"{len(targets)} users, {len(cold)} cold items; R@1 / R@10 / NDCG@10 (%)", flush=True)
    for vectors in ("embeddings", "tfidf"):
        c = apply_overrides(cfg, [f"eval.cold_content_vectors={vectors}"])
        emb, histories = _content_inputs(c, layout, ds, split)
        ranked = content_ranking(emb, histories, cold, k=K)
        print(f"content {vectors} {emb.shape}", cold_val.fmt(ranked, targets), flush=True)
        for t in grid[1] if grid else ():
            for w in grid[0]:
                got = prior_items(v, emb, histories, w, t)
                print(f"static_content {vectors} w={w:g} T={t:g}", cold_val.fmt(got, targets))


if __name__ == "__main__":
    args = sys.argv[1:]
    grid = None
    if args[2:3] == ["prior"]:
        grid = ([float(x) for x in args[3].split(",")], [float(x) for x in args[4].split(",")])
    main(args[0], float(args[1]) if len(args) > 1 else 0.02, grid)
