"""An ensemble of leave-one-out retrievers whose SIDs may differ (other tokenizers), ranked by
rescoring the union of their beams; validation only (session 28, rule X1).

Usage: python docs/scripts/cross_sid_ensemble.py [--users N] MEMBER [MEMBER ...]
MEMBER: WORKDIR or WORKDIR:N, a leave-one-out retriever of that work directory (retriever_loo,
or retriever_loo_seedN, a pipeline's ensemble member), scored with that directory's SIDs. Every
work directory must hold the same prepared data (checked on the validation targets).
--users N: a seeded sample of N users (eval.max_test_users), for a quick look.

Each member decodes every user's second-to-last item (the validation split) with STATIC over all
items, beam 20, as `genret eval-warm --validation` does for one retriever. The candidates are
the union of the members' beam items; each candidate's score is the mean over members of
log P_m(the candidate's SID under m | the history), teacher-forced through m's head; the top 10
are ranked by it. Prints each member's own Recall/NDCG@5/10 and the union's. No test target is
read and nothing is written.
"""

import dataclasses
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from data.splits import leave_one_out
from decoding import StaticConstraint, StaticIndex
from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics
from experiments.pipeline.artifacts import load_retriever
from experiments.config import load_json
from experiments.pipeline.layout import RunLayout, Split
from experiments.evaluation.retrieval import _decoders, evaluated_inputs, load_inputs, warm_scoring

K = 20


def _fmt(pred: np.ndarray, targets: np.ndarray) -> str:
    m = metrics.ranking_metrics(pred, targets, ks=(5, 10), ndcg_ks=(5, 10))
    return " / ".join(f"{100 * m[k]:.2f}" for k in ("recall@5", "ndcg@5", "recall@10", "ndcg@10"))


def _scorer(model):
    """(tokens [B, T], codes [B, C, L]) -> log P(codes | tokens) [B, C], teacher-forced."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def score(state, tokens, codes):
        m = nnx.merge(graphdef, state)
        lp, s = m.prefill(tokens)
        total = jnp.take_along_axis(lp, codes[:, :, 0], axis=-1)
        s = jnp.broadcast_to(s[:, None, :], (*codes.shape[:2], s.shape[-1]))
        for level in range(1, codes.shape[2]):
            lp, s = m.step(codes[:, :, level - 1], level, s)
            total = total + jnp.take_along_axis(lp, codes[:, :, level, None], axis=-1)[..., 0]
        return total

    return lambda tokens, codes: np.asarray(score(state, tokens, codes))


def main(members: list[str], users: int = 0) -> None:
    beams, scorers, targets0 = [], [], None
    for spec in members:
        workdir, _, seed = spec.partition(":")
        layout = RunLayout(workdir)
        cfg = load_json(layout.config)
        cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, max_test_users=users))
        ds, sids = load_inputs(cfg, layout)
        which = Split("loo", seed=int(seed) if seed else None)
        model = load_retriever(layout, which)
        split = leave_one_out(ds)
        split = split.validation_as_test()
        targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, layout.retriever(which))
        if targets0 is not None and not np.array_equal(targets, targets0):
            raise SystemExit(f"{spec}: other validation targets than the first member's")
        targets0 = targets
        V = model.space.codebook_size
        index = StaticIndex.build(sids, vocab_size=V, dense_levels=cfg.decode.dense_levels)
        scoring = warm_scoring(cfg.eval, split.train, sids, V)
        d = evaluate.decode_interleaved(
            _decoders(model, {"static": (StaticConstraint(index), scoring)}, K),
            inputs,
            metrics.SIDLookup(sids, V),
            batch_size=64,
            progress=False,
        )["static"]
        items = np.where(d.valid, d.items, -1)
        print(spec, "alone:", _fmt(items, targets), flush=True)
        beams.append(items)
        # Level-offset codes of every item under this member's SIDs, for teacher forcing.
        scorers.append((_scorer(model), inputs, sids.astype(np.int32)))
    union = np.concatenate(beams, axis=1)  # [U, K M], -1 where a beam had no item
    U, C = union.shape
    total = np.zeros((U, C), np.float64)
    for score, inputs, sids in scorers:
        for lo in range(0, U, 256):
            cand = np.maximum(union[lo : lo + 256], 0)
            codes = sids[cand]  # [B, C, L] raw codes, as prefill's and step's log-probs index them
            total[lo : lo + 256] += score(inputs[lo : lo + 256], codes)
    total /= len(scorers)
    # Each item once: a duplicate's later copies and the empty slots rank last.
    first = np.zeros_like(union, bool)
    for u in range(U):
        _, idx = np.unique(union[u], return_index=True)
        first[u, idx] = True
    total[~first | (union < 0)] = -np.inf
    order = np.argsort(-total, axis=1, kind="stable")[:, :10]
    ranked = np.take_along_axis(union, order, axis=1)
    ranked[np.take_along_axis(total, order, axis=1) == -np.inf] = -1
    print(f"union of {len(members)} members' beams, mean log P:", _fmt(ranked, targets0))


if __name__ == "__main__":
    args = sys.argv[1:]
    n = 0
    if args[:1] == ["--users"]:
        n, args = int(args[1]), args[2:]
    if not args:
        raise SystemExit(__doc__)
    main(args, n)
