"""Tuning diagnostics on the validation protocol only (never a test target): STATIC Recall@K of
several cold-val retrievers alone and as an ensemble, with a training-prior correction, and where
the first retriever loses its Recall@1, level by level."""

from pathlib import Path

import jax
import numpy as np

from data import atomic
from data.errors import ArgumentError
from data.pipeline import padded_batches
from data.splits import validation_split
from decoding import (
    StaticConstraint,
    StaticIndex,
    prior_correction,
)
from experiments.config import Config
from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics
from experiments.evaluation.retrieval import evaluated_inputs, load_inputs
from experiments.pipeline.artifacts import load_retriever
from experiments.pipeline.layout import RunLayout, Split
from seqmodel.inference import ensemble_decoder, retrieval_fn
from seqmodel.state import Retriever


def level_accuracy(
    model: Retriever,
    inputs: np.ndarray,
    target_sids: np.ndarray,
    cold_sids: np.ndarray,
    batch_size: int,
) -> list[dict]:
    """Per level, how often the true code scores best among the cold codes allowed under the
    true prefix, given every earlier level was right (what teacher forcing measures)."""
    V, L = model.space.codebook_size, model.space.num_levels
    # One beam under the cold set takes, at each level, the best allowed code under its own
    # prefix: as long as every earlier pick was the true code, that is the true prefix, so its
    # picks answer the question level by level (ties go to the lower code, as argmax's do).
    greedy = retrieval_fn(
        model, StaticConstraint(StaticIndex.build(cold_sids, vocab_size=V)), beam_size=1
    )
    picked = np.concatenate(
        [
            np.asarray(greedy(tokens).tokens[:, 0])
            for tokens in padded_batches(inputs, batch_size=batch_size)
        ]
    )[: len(target_sids)]
    still = np.ones(len(target_sids), bool)
    rows = []
    for level in range(L):
        right = picked[:, level] == target_sids[:, level]
        allowed = np.zeros(len(still))
        for u in np.nonzero(still)[0]:
            under = (cold_sids[:, :level] == target_sids[u, :level]).all(1)
            allowed[u] = len(np.unique(cold_sids[under, level]))
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


def diagnose(
    cfg: Config,
    layout: RunLayout,
    fraction: float,
    *,
    retrievers: list[Path] = (),
    prior_weights: tuple[float, ...] = (),
    beam_size: int | None = None,
    batch_size: int = 128,
) -> dict:
    """Scores the cold-val retrievers (default: the work directory's) and writes the diagnosis."""
    split_name = Split("cold-val", fraction)
    ds, sids = load_inputs(cfg, layout)
    split = validation_split(ds, fraction)
    rdirs = list(retrievers) or [layout.retriever(split_name)]
    models = [load_retriever(layout, split_name, Path(r)) for r in rdirs]
    first = models[0]
    for r, m in zip(rdirs, models, strict=True):
        if (m.space, m.cfg.max_history) != (first.space, first.cfg.max_history):
            raise ArgumentError(f"--retriever {r}: its token space differs from {rdirs[0]}'s")
    V = first.space.codebook_size
    # The evaluation's settings (users sampled, beam, index layout), so the numbers are its numbers.
    targets, inputs = evaluated_inputs(first, sids, split, cfg.eval, rdirs[0])
    cold = sids[split.cold_items]
    index = StaticIndex.build(cold, vocab_size=V, dense_levels=cfg.decode.dense_levels)
    constraint = jax.device_put(StaticConstraint(index))
    beam_size = beam_size or cfg.eval.beam_size
    lookup = metrics.SIDLookup(sids, V)

    decoders = {}  # one jitted decoder per model set, reused across prior weights

    def score(ms, scoring=None):
        key = tuple(map(id, ms))
        if key not in decoders:
            decoders[key] = ensemble_decoder(ms, constraint, beam_size=beam_size)
        dec = decoders[key]
        methods = {"static": lambda tokens: dec(tokens, scoring=scoring)}
        decoded = evaluate.decode_interleaved(
            methods, inputs, lookup, batch_size=batch_size, desc="diagnose"
        )
        return evaluate.method_metrics(
            decoded["static"], targets, split.cold_mask, allowed_key="cold_rate"
        )

    out = {"cold_start_fraction": fraction, "num_cold_items": len(cold), "num_users": len(targets)}
    out["retrievers"] = {str(r): score([m]) for r, m in zip(rdirs, models, strict=True)}
    if len(models) > 1:
        out["ensemble"] = score(models)
    if prior_weights:
        events = sids[split.train.items]
        out["prior_corrected"] = {
            str(a): score(models[:1], prior_correction(events, V, prior_weight=a))
            for a in prior_weights
        }
    out["levels"] = level_accuracy(first, inputs, sids[targets], cold, batch_size)
    atomic.write_json(layout.diagnose_result(fraction), out)
    return out
