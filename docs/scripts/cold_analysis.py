"""What the retriever adds to the item text on the cold-start test split, and where: the top 20 of
`static` (the retriever alone), `content` (the content neighbour), `static_content` and `hybrid`
(the work directory's eval.cold_* settings) for every test user, then

- by level: how often the first-ranked item shares the target's first l + 1 codes;
- by text distance: Recall@1 in five equal bins of users, by the cosine of the target's text
  vector to the user's query (their text profile: eval.cold_content_recent and _decay), far to
  close.

Prints both as markdown tables and draws them side by side into one PNG.
Usage: python docs/scripts/cold_analysis.py WORKDIR FRACTION --png FILE
"""

import argparse
import sys

import numpy as np
import scipy.sparse as sp

from data.splits import check_fraction, cold_start_split
from decoding import StaticConstraint, StaticIndex
from experiments import config as config_lib
from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics, plots, retrieval
from experiments.evaluation.baselines import (
    content_queries,
    content_ranking,
    rank_fusion,
)
from experiments.evaluation.profile import ContentProfile
from experiments.pipeline.layout import RunLayout, Split

BINS = 5


def rankings(workdir: str, fraction: float) -> dict:
    """The four methods' top-K items [U, K] (-1: none), the targets, the target's cosine to each
    user's query and the SIDs."""
    layout = RunLayout(workdir)
    cfg = config_lib.load_json(layout.config)
    ev = cfg.eval
    ds, sids = retrieval.load_inputs(cfg, layout)
    which = Split("cold", fraction)
    model = retrieval.load_retriever(layout, which)
    split = cold_start_split(ds, fraction)
    V, K = model.space.codebook_size, ev.beam_size
    targets, inputs = retrieval.evaluated_inputs(model, sids, split, ev, layout.retriever(which))
    static = StaticConstraint(StaticIndex.build(sids[split.cold_items], vocab_size=V))
    scoring = retrieval.cold_scoring(ev, split.train, sids, V)
    decoders = retrieval._decoders(model, {"static": (static, scoring)}, K)
    emb, histories = retrieval._content_inputs(cfg, layout, ds, split)
    decoders["static_content"], rows = retrieval.content_prior_method(
        cfg, split, model, sids[split.cold_items], static, scoring, emb, histories
    )
    out = evaluate.decode_interleaved(
        decoders,
        inputs,
        metrics.SIDLookup(sids, V),
        batch_size=64,
        row_inputs={"static_content": rows},
        desc="decoding",
    )
    ranked = {name: np.where(d.valid, d.items, -1) for name, d in out.items()}
    profile = ContentProfile.of(ev)
    ranked["content"] = content_ranking(emb, histories, split.cold_items, k=K, profile=profile)
    ranked["hybrid"] = rank_fusion(
        [ranked["static"], ranked["content"]],
        [1.0, ev.cold_hybrid_weight],
        offset=ev.cold_hybrid_offset,
        k=K,
    )
    unit, queries = content_queries(emb, histories, profile)
    product = queries.multiply(unit[targets]) if sp.issparse(queries) else queries * unit[targets]
    target_cos = np.asarray(product.sum(axis=1)).ravel()
    return {"ranked": ranked, "targets": targets, "target_cos": target_cos, "sids": sids}


def by_level(r: dict) -> dict[str, list[float]]:
    """Per method, per level l: the share of users whose first item has the target's first l + 1
    codes."""
    sids, t = r["sids"], r["targets"]
    out = {}
    for name, ranked in r["ranked"].items():
        first = ranked[:, 0]
        same = (sids[np.maximum(first, 0)] == sids[t]) & (first >= 0)[:, None]
        out[name] = [float(np.cumprod(same, axis=1)[:, level].mean()) for level in range(3)]
    return out


def by_distance(r: dict) -> tuple[np.ndarray, dict[str, list[float]]]:
    """Bin edges of the target's cosine (fifths of users) and Recall@1 per method per bin."""
    cos = r["target_cos"]
    edges = np.quantile(cos, np.linspace(0, 1, BINS + 1))
    which = np.clip(np.searchsorted(edges, cos, side="right") - 1, 0, BINS - 1)
    hit = {name: ranked[:, 0] == r["targets"] for name, ranked in r["ranked"].items()}
    return edges, {n: [float(h[which == b].mean()) for b in range(BINS)] for n, h in hit.items()}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workdir")
    p.add_argument("fraction", type=float)
    p.add_argument("--png", required=True, help="write the plot here")
    args = p.parse_args(argv)
    r = rankings(args.workdir, check_fraction(args.fraction))
    names = list(r["ranked"])
    levels = by_level(r)
    print(f"{len(r['targets'])} test users\n")
    print("| method | Recall@1 | first item shares the target's code 1 | codes 1-2 | codes 1-3 |")
    print("|---|---|---|---|---|")
    for n in names:
        r1 = float((r["ranked"][n][:, 0] == r["targets"]).mean())
        print(f"| {n} | {100 * r1:.2f} | " + " | ".join(f"{100 * v:.1f}" for v in levels[n]) + " |")
    edges, recall = by_distance(r)
    print("\n| target's cosine to the text profile | " + " | ".join(names) + " |")
    print("|---" * (1 + len(names)) + "|")
    for b in range(BINS):
        cells = " | ".join(f"{100 * recall[n][b]:.2f}" for n in names)
        print(f"| {edges[b]:.3f}-{edges[b + 1]:.3f} | {cells} |")
    plt = plots.pyplot()
    if plt is None:
        print("no matplotlib: install the plot extra for the PNG", file=sys.stderr)
        return 0
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=100)
    x = np.arange(BINS)
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        axes[0].bar(x + (i - (len(names) - 1) / 2) * width, [100 * v for v in recall[n]], width)
        axes[1].plot([1, 2, 3], [100 * v for v in levels[n]], "o-", label=n)
    axes[0].set_xticks(x, [f"{edges[b]:.2f}-{edges[b + 1]:.2f}" for b in x], fontsize=7)
    axes[0].set_xlabel("target's cosine to the user's text profile (fifths of users)")
    axes[0].set_ylabel("Recall@1 (%)")
    axes[1].set_xticks([1, 2, 3])
    axes[1].set_xlabel("first codes of the target shared by the first item")
    axes[1].set_ylabel("users (%)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    plots._save(fig, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
