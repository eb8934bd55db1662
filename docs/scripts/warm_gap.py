"""Where a leave-one-out retriever loses between the validation and the test split.

Usage: python docs/scripts/warm_gap.py WORKDIR   (after `genret train-retriever --split loo`)

Decodes every user's validation target (second-to-last item) and test target (last item) with
STATIC over the catalog, beam 20, as `genret eval-warm` does, and prints Recall@10 of the
retriever and of the model-free item co-occurrence reference by the target's count among the
training targets, by whether the target shares its day with the history's last item, and for
the test target with the validation item left out of the history. Analysis only (docs/RESULTS.md,
session 10); nothing is written.
"""

import sys
from pathlib import Path

import jax
import numpy as np

from data.splits import leave_one_out
from data.types import Histories
from decoding import StaticConstraint, StaticIndex
from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics
from experiments.pipeline.artifacts import load_retriever
from experiments.evaluation.baselines import cooccurrence_ranking
from experiments.config import load_json
from experiments.pipeline.layout import RunLayout, Split
from experiments.evaluation.retrieval import load_inputs
from seqmodel.inference import retrieval_fn
from seqmodel.tokens import encode_histories, sid_tokens

POPULARITY_BINS = [(0, 1), (1, 5), (5, 20), (20, 100), (100, None)]


def main(work: Path) -> None:
    cfg = load_json(work / "config.json")
    layout = RunLayout(work)
    ds, sids = load_inputs(cfg, layout)
    model = load_retriever(layout, Split("loo"))
    split = leave_one_out(ds)
    V = model.space.codebook_size
    index = jax.device_put(StaticConstraint(StaticIndex.build(sids, vocab_size=V)))
    decode = {"static": retrieval_fn(model, index, beam_size=20)}
    lookup, item_tokens = metrics.SIDLookup(sids, V), sid_tokens(sids, V)
    count = np.bincount(split.train.items, minlength=len(sids))
    ends = ds.histories.offsets[split.users + 1]
    target_time = {"validation": ds.histories.times[ends - 2], "test": ds.histories.times[ends - 1]}

    def hits(histories: Histories, targets: np.ndarray, desc: str):
        inputs = encode_histories(item_tokens, histories, model.cfg.max_history)
        d = evaluate.decode_interleaved(decode, inputs, lookup, batch_size=64, desc=desc)["static"]
        ours = np.where(d.valid, d.items, -1)[:, :10]
        cooc = cooccurrence_ranking(split.train, histories, len(sids), k=10)
        return (ours == targets[:, None]).any(1), (cooc == targets[:, None]).any(1)

    cases = [
        ("validation", split.valid_histories, split.valid_targets, "validation"),
        ("test", split.test_histories, split.test_targets, "test"),
        (
            "test, history without the validation item",
            split.valid_histories,
            split.test_targets,
            "test",
        ),
    ]
    print("| split | users | ours R@10 | co-occurrence R@10 |")
    print("|---|---|---|---|")
    rows = []
    for name, histories, targets, when in cases:
        ours, cooc = hits(histories, targets, name)
        print(f"| {name} | {len(targets)} | {100 * ours.mean():.2f} | {100 * cooc.mean():.2f} |")
        last_time = histories.times[histories.offsets[1:] - 1]
        groups = [
            (
                f"target count in training [{lo}, {hi or 'inf'})",
                (count[targets] >= lo) & (count[targets] < (hi or np.inf)),
            )
            for lo, hi in POPULARITY_BINS
        ]
        same_day = target_time[when] == last_time
        groups += [
            ("same day as the history's last item", same_day),
            ("later than the history's last item", ~same_day),
        ]
        rows.append((name, [(g, m.mean(), ours[m].mean(), cooc[m].mean()) for g, m in groups]))
    print("\n| split | group | share of users | ours R@10 | co-occurrence R@10 |")
    print("|---|---|---|---|---|")
    for name, groups in rows:
        for g, share, o, c in groups:
            print(f"| {name} | {g} | {100 * share:.1f} | {100 * o:.2f} | {100 * c:.2f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
