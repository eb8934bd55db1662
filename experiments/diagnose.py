"""Tuning diagnostics on the validation protocol only (it never reads a test target).

For retrievers trained with `genret train-retriever --split cold-val`: STATIC Recall@K of each, of
their ensemble (per-level log-probabilities averaged), and with a training-prior correction of the
first two levels; and where the first retriever loses its Recall@1, level by level (teacher-forced:
is the true code the best among the cold set's codes under the true prefix?). Writes
WORKDIR/results/validation_diagnose_<p>.json.
"""

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from data import atomic
from data.pipeline import pad_rows
from data.splits import validation_split
from decoding import StaticConstraint, StaticIndex, prior_correction
from decoding.beam_search import beam_search
from experiments import common, evaluate, metrics
from experiments.retrieval_eval import evaluated_inputs, load_inputs, load_retriever


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_workdir_arg(p)
    common.add_config_args(p)
    p.add_argument("--cold-start", type=float, default=0.02, help="cold-start fraction p")
    p.add_argument(
        "--retriever",
        action="append",
        type=Path,
        default=[],
        help="a cold-val retriever directory (repeatable; same tokenizer); default: "
        "WORKDIR/retriever_coldval_<p>",
    )
    p.add_argument(
        "--prior-weights",
        default="",
        help="comma-separated weights a: also decode with a * log p_train(2-code prefix) "
        "subtracted (first retriever only), e.g. 0.5,1",
    )
    p.add_argument("--beam-size", type=int, default=None, help="unset: the config's eval.beam_size")
    p.add_argument("--batch-size", type=int, default=128)


def ensemble_decoder(models, constraint, *, beam_size: int):
    """A jitted `(tokens, scoring) -> (SIDs, scores, valid)` over averaged per-level log-probs;
    `scoring` is a decoding.LevelScoring, or None for the joint log-probability."""
    num_levels = models[0].space.num_levels

    def mean_log_probs(parts):
        return jax.nn.log_softmax(sum(parts) / len(parts), axis=-1)

    def run(tokens, scoring):
        prefilled = [m.prefill(tokens) for m in models]
        first = mean_log_probs([lp for lp, _ in prefilled])

        def step(codes, level, caches):
            outs = [m.step(codes, level, c) for m, c in zip(models, caches, strict=True)]
            return mean_log_probs([o[0] for o in outs]), tuple(o[1] for o in outs)

        caches = tuple(c for _, c in prefilled)
        res = beam_search(
            step,
            first,
            caches,
            constraint,
            beam_size=beam_size,
            num_levels=num_levels,
            scoring=scoring,
        )
        return res.tokens, res.scores, res.valid

    return jax.jit(run)


def level_accuracy(model, inputs, target_sids, cold_sids, batch_size: int) -> list[dict]:
    """Teacher-forced: per level, how often the true code scores best among the cold codes
    allowed under the true prefix, given every earlier level was right."""
    L = model.space.num_levels

    @jax.jit
    def all_levels(tokens, tsids):
        lp, cache = model.prefill(tokens)
        out = [lp]
        for level in range(1, L):
            one_beam = jax.tree.map(lambda a: a[:, None], cache)
            lp, cache = model.step(tsids[:, level - 1 : level], level, one_beam)
            cache = jax.tree.map(lambda a: a[:, 0], cache)
            out.append(lp[:, 0])
        return jnp.stack(out, 1)

    padded, tpad = pad_rows(inputs, batch_size), pad_rows(target_sids, batch_size)
    lp = np.concatenate(
        [
            np.asarray(
                all_levels(jnp.asarray(padded[b : b + batch_size]), tpad[b : b + batch_size])
            )
            for b in range(0, len(padded), batch_size)
        ]
    )[: len(target_sids)]
    still = np.ones(len(target_sids), bool)
    rows = []
    for level in range(L):
        right, allowed = np.zeros(len(still), bool), np.zeros(len(still))
        for u in np.nonzero(still)[0]:
            under = (cold_sids[:, :level] == target_sids[u, :level]).all(1)
            codes = np.unique(cold_sids[under, level])
            allowed[u] = len(codes)
            right[u] = codes[np.argmax(lp[u, level, codes])] == target_sids[u, level]
        rows.append(
            {
                "level": level,
                "users_reaching": int(still.sum()),
                "accuracy_given_prefix": float(right[still].mean()),
                "mean_allowed_codes": float(allowed[still].mean()),
            }
        )
        still &= right
    return rows


def run(args: argparse.Namespace) -> int:
    common.check_cold_start_fraction(args.cold_start)
    workdir, p = args.workdir, args.cold_start
    # The evaluation's settings (users sampled, beam, index layout), so the numbers are its numbers.
    cfg = common.resolve_config(args, save=False)
    ds, sids = load_inputs(workdir)
    split = validation_split(ds, p)
    rdirs = args.retriever or [common.retriever_dir(workdir, f"coldval_{p:g}")]
    command = f"genret train-retriever --workdir {workdir} --split cold-val --cold-start {p:g}"
    models = [load_retriever(Path(r), command) for r in rdirs]
    first = models[0]
    for r, m in zip(rdirs, models, strict=True):
        if (m.space, m.cfg.max_history) != (first.space, first.cfg.max_history):
            raise ValueError(f"--retriever {r}: its token space differs from {rdirs[0]}'s")
    V = first.space.codebook_size
    weights = [float(w) for w in args.prior_weights.split(",") if w.strip()]
    targets, inputs = evaluated_inputs(first, sids, split, cfg.eval, rdirs[0])
    cold = sids[split.cold_items]
    index = StaticIndex.build(cold, vocab_size=V, dense_levels=cfg.decode.dense_levels)
    constraint = StaticConstraint(index)
    beam_size = args.beam_size or cfg.eval.beam_size
    lookup = metrics.SIDLookup(sids, V)

    decoders = {}  # one jitted decoder per model set, reused across prior weights

    def score(ms, scoring=None):
        key = tuple(map(id, ms))
        if key not in decoders:
            decoders[key] = ensemble_decoder(ms, constraint, beam_size=beam_size)
        dec = decoders[key]
        methods = {"static": lambda tokens: dec(jnp.asarray(tokens), scoring)}
        decoded = evaluate.decode_interleaved(
            methods, inputs, lookup, batch_size=args.batch_size, desc="diagnose"
        )
        return evaluate.method_metrics(
            decoded["static"], targets, split.cold_mask, allowed_key="cold_rate"
        )

    out = {"cold_start_fraction": p, "num_cold_items": len(cold), "num_users": len(targets)}
    out["retrievers"] = {str(r): score([m]) for r, m in zip(rdirs, models, strict=True)}
    if len(models) > 1:
        out["ensemble"] = score(models)
    if weights:
        events = sids[split.train.items]
        out["prior_corrected"] = {
            str(a): score(models[:1], prior_correction(events, V, prior_weight=a)) for a in weights
        }
    out["levels"] = level_accuracy(first, inputs, sids[targets], cold, args.batch_size)
    atomic.write_json(common.results_dir(workdir) / f"validation_diagnose_{p:g}.json", out)
    print(json.dumps(out, indent=1))
    return 0
