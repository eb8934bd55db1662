"""How much the beam search loses: a leave-one-out item-level retriever's validation numbers with
its beams, against the exact top 10 of its joint log-probability over every catalog item, and the
exact top 10 of that log-probability renormalised at each level over the prefix's real children
(the codes that lead to some item).

Scores the whole catalog per user: level by level, every distinct SID prefix of the catalog gets
the head's state and log-probs (the trie is walked breadth-first). Users: the validation users
outside the retriever's checkpoint holdout and those of `--holdout-of` (as `genret eval-warm
--validation`'s block `outside_holdout`). Reads no test target.
Usage: python docs/scripts/exact_ranking.py WORKDIR [--holdout-of DIR ...] [--max-users N]
"""

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from data.errors import GenretError
from data.splits import leave_one_out, outside_holdouts
from decoding import StaticConstraint, StaticIndex
from experiments.config import load_json
from experiments.evaluation import metrics
from experiments.evaluation.retrieval import chosen_on, evaluated_inputs, load_inputs
from experiments.pipeline.layout import RunLayout
from seqmodel.inference import load_retriever, retrieval_fn

NUMBERS = ("recall@5", "ndcg@5", "recall@10", "ndcg@10")


class Trie:
    """The catalog's SID prefixes, level by level: `prefix[l]` [N] is each item's prefix of
    length l (its id among that level's prefixes), `parent[l]` and `code[l]` (l >= 1) the
    prefix of length l - 1 and the last code of each prefix of length l, `children[l]` [P_l, V]
    which codes follow each prefix of length l in some item."""

    def __init__(self, sids: np.ndarray, V: int):
        N, L = sids.shape
        self.prefix, self.parent, self.code, self.children = [np.zeros(N, np.int64)], [], [], []
        for level in range(1, L):
            key = self.prefix[-1] * V + sids[:, level - 1]
            uniq, inv = np.unique(key, return_inverse=True)
            self.parent.append(uniq // V)
            self.code.append(uniq % V)
            self.prefix.append(inv)
        for level in range(L):
            m = np.zeros((self.prefix[level].max() + 1, V), bool)
            m[self.prefix[level], sids[:, level]] = True
            self.children.append(m)


def exact_scorer(model, sids: np.ndarray):
    """A jitted `tokens [B, T] -> (top 10 by joint log-prob, top 10 renormalised) [B, 10]`."""
    V, L = model.space.codebook_size, model.space.num_levels
    trie = Trie(sids, V)
    t = jax.tree.map(jnp.asarray, (trie.prefix, trie.parent, trie.code, trie.children, sids))
    prefix, parent, code, children, sids_j = t

    @jax.jit
    def top10(tokens):
        lp, s = model.prefill(tokens)
        per_level, s = [lp[:, None, :]], s[:, None, :]  # level l: [B, P_l, V]
        for level in range(1, L):
            s = s[:, parent[level - 1]]
            codes = jnp.broadcast_to(code[level - 1], s.shape[:2])
            lp, s = model.step(codes, level, s)
            per_level.append(lp)
        joint = renormalised = 0.0
        for level, lp in enumerate(per_level):
            z = jax.nn.logsumexp(jnp.where(children[level][None], lp, -jnp.inf), axis=-1)
            item = lp[:, prefix[level], sids_j[:, level]]
            joint = joint + item
            renormalised = renormalised + item - z[:, prefix[level]]
        return jax.lax.top_k(joint, 10)[1], jax.lax.top_k(renormalised, 10)[1]

    return top10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("--holdout-of", action="append", default=[], metavar="DIR")
    ap.add_argument("--max-users", type=int, default=0, help="the first N users only (0: all)")
    args = ap.parse_args()
    layout = RunLayout(args.workdir)
    cfg = load_json(layout.config)
    ds, sids = load_inputs(cfg, layout)
    rdir = layout.root / "retriever_loo"
    model = load_retriever(rdir, read_only=True)
    split = leave_one_out(ds).validation_as_test()
    targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, rdir)
    chosen = chosen_on([rdir, *args.holdout_of], len(split.users))
    users = outside_holdouts(np.arange(len(targets)), *chosen)
    if args.max_users:
        users = users[: args.max_users]
    V = model.space.codebook_size
    beams = retrieval_fn(
        model,
        jax.device_put(StaticConstraint(StaticIndex.build(sids, vocab_size=V))),
        beam_size=max(cfg.eval.beam_size, 10),
    )
    lookup = metrics.SIDLookup(sids, V)
    top10 = exact_scorer(model, sids)
    ranked = {"beam search": [], "exact": [], "exact, renormalised": []}
    B = 8  # the catalog's prefixes x B users of states and log-probs per call
    for i in range(0, len(users), B):
        rows = users[i : i + B]
        tok = inputs[rows]
        res = beams(tok)
        items = lookup(np.asarray(res.tokens)[:, :10])
        ranked["beam search"].append(np.where(np.asarray(res.valid)[:, :10], items, -1))
        pad = np.concatenate([tok, np.repeat(tok[-1:], B - len(rows), 0)])
        for name, top in zip(
            ("exact", "exact, renormalised"), top10(jnp.asarray(pad)), strict=True
        ):
            ranked[name].append(np.asarray(top)[: len(rows)])
    print(f"{len(users)} validation users, R@5 / N@5 / R@10 / N@10 (%)")
    for name, parts in ranked.items():
        m = metrics.ranking_metrics(np.concatenate(parts), targets[users], ndcg_ks=(5, 10))
        print(f"| {name} | " + " / ".join(f"{100 * m[k]:.2f}" for k in NUMBERS) + " |")


if __name__ == "__main__":
    try:
        main()
    except GenretError as e:  # bad input: one line, no traceback
        sys.exit(f"exact_ranking: {e}")
