"""Cold-start and leave-one-out evaluations of a trained retriever, written to WORKDIR/results/."""

import time
from pathlib import Path

import jax
import numpy as np

import rqvae
from data import atomic
from data.prepared import load_prepared
from data.splits import cold_start_split, leave_one_out, validation_split
from data.types import Histories
from decoding import StaticConstraint, StaticIndex, Unconstrained, prior_correction
from experiments import common, evaluate, metrics
from seqmodel import train as seqmodel_train
from seqmodel.tokens import encode_histories, sid_tokens
from seqmodel.train import MODEL_FILE, check_sids_match


def _require(path: Path, command: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; make it with `{command}`")
    return path


def load_inputs(workdir: Path):
    """The prepared dataset and the tokenizer's SIDs, checked to describe the same catalog."""
    _require(common.prepared_dir(workdir), f"genret prepare --workdir {workdir}")
    tok = common.tokenizer_dir(workdir)
    _require(tok / "sids.npy", f"genret train-tokenizer --workdir {workdir}")
    ds = load_prepared(common.prepared_dir(workdir))
    sids, asins = rqvae.load_sids(tok)
    check_sids_match(asins, ds.catalog.asins, tok)
    return ds, np.asarray(sids, np.int32)


def load_retriever(rdir: Path, command: str):
    """The best checkpoint's Decoder; a missing artifact names the command that makes it."""
    _require(rdir / MODEL_FILE, command)
    _require(rdir / "checkpoints", command)
    return seqmodel_train.load_retriever(rdir)


def _decoders(model, methods: dict, beam_size: int) -> dict:
    """One jitted decode per `name: (constraint, scoring)`; each index is moved to the device once,
    not per batch."""
    return {
        name: seqmodel_train.retrieval_fn(
            model, jax.device_put(constraint), beam_size=beam_size, scoring=scoring
        )
        for name, (constraint, scoring) in methods.items()
    }


def cold_scoring(eval_cfg, train: Histories, sids: np.ndarray, codebook_size: int):
    """The cold-start beam scores of eval_cfg (prior counted over the training interactions), or
    None for the plain joint log-probability."""
    if eval_cfg.cold_prior_weight == 0 and all(w == 1 for w in eval_cfg.cold_level_weights):
        return None
    try:
        return prior_correction(
            sids[train.items],
            codebook_size,
            prior_weight=eval_cfg.cold_prior_weight,
            level_weights=eval_cfg.cold_level_weights,
        )
    except ValueError as e:
        raise ValueError(f"eval.cold_level_weights / eval.cold_prior_weight: {e}") from None


def _sample_users(num_users: int, eval_cfg) -> np.ndarray:
    """All test users, or a seeded sample of eval.max_test_users of them."""
    users = np.arange(num_users)
    if eval_cfg.max_test_users and num_users > eval_cfg.max_test_users:
        rng = np.random.default_rng(eval_cfg.seed)
        users = np.sort(rng.choice(users, eval_cfg.max_test_users, replace=False))
    return users


def evaluated_inputs(model, sids: np.ndarray, split, eval_cfg, rdir: Path):
    """(targets, token inputs) of the evaluated users; only those users' histories are encoded."""
    space = model.space
    L = space.num_levels
    if sids.shape[1] != L:
        raise ValueError(f"{rdir}: retriever expects {L} SID levels, tokenizer has {sids.shape[1]}")
    users = _sample_users(len(split.test_targets), eval_cfg)
    item_tokens = sid_tokens(sids, space.codebook_size)
    inputs = encode_histories(item_tokens, split.test_histories, model.cfg.max_history, users)
    return split.test_targets[users], inputs


def evaluate_cold_start(
    cfg, workdir: Path, fraction: float, *, batch_size: int = 64, validation: bool = False
) -> dict:
    """Unconstrained vs constrained random vs STATIC over the cold set; writes the results JSON.

    validation=True runs the tuning protocol (data.splits.validation_split): no test target is read.
    """
    common.check_cold_start_fraction(fraction)
    ds, sids = load_inputs(workdir)
    split = (validation_split if validation else cold_start_split)(ds, fraction)
    name = f"{'coldval' if validation else 'cold'}_{fraction:g}"
    rdir = common.retriever_dir(workdir, name)
    split_arg = "--split cold-val " if validation else ""
    model = load_retriever(
        rdir, f"genret train-retriever --workdir {workdir} {split_arg}--cold-start {fraction:g}"
    )
    V, L = model.space.codebook_size, model.space.num_levels
    targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, rdir)
    K = cfg.eval.beam_size
    build_start = time.perf_counter()
    index = StaticIndex.build(
        sids[split.cold_items], vocab_size=V, dense_levels=cfg.decode.dense_levels
    )
    build_seconds = time.perf_counter() - build_start
    scoring = cold_scoring(cfg.eval, split.train, sids, V)
    static = StaticConstraint(index)
    constraints = {"unconstrained": (Unconstrained(V, L), scoring), "static": (static, scoring)}
    if scoring is not None:
        constraints["static_plain"] = (static, None)
    decoders = _decoders(model, constraints, K)
    decoded = evaluate.decode_interleaved(
        decoders,
        inputs,
        metrics.SIDLookup(sids, V),
        batch_size=batch_size,
        desc=f"cold {fraction:g}",
    )
    cold = split.cold_mask
    methods = {
        name: evaluate.method_metrics(decoded[name], targets, cold, allowed_key="cold_rate")
        for name in constraints
    }
    methods["random"] = evaluate.random_metrics(
        split.cold_items, targets, beam_size=K, seed=cfg.eval.seed
    )
    overhead = decoded["static"].seconds_per_user / decoded["unconstrained"].seconds_per_user
    result = {
        "dataset": cfg.data.dataset,
        "cold_start_fraction": fraction,
        "num_cold_items": int(len(split.cold_items)),
        "num_test_users": int(len(targets)),
        "beam_size": K,
        "methods": {
            k: methods[k]
            for k in ("unconstrained", "random", "static", "static_plain")
            if k in methods
        },
        "scoring": {
            "prior_weight": cfg.eval.cold_prior_weight,
            "level_weights": list(cfg.eval.cold_level_weights) or [1.0] * L,
        },
        "static_overhead_ratio_median": float(np.median(overhead)),
        "static_index_build_seconds": build_seconds,
        "static_index_bytes": int(index.nbytes()["total"]),
        "seed": cfg.eval.seed,
        "split": "validation" if validation else "test",
    }
    prefix = "validation_" if validation else ""
    atomic.write_json(common.results_dir(workdir) / f"{prefix}cold_start_{fraction:g}.json", result)
    return result


def evaluate_warm(cfg, workdir: Path, *, batch_size: int = 64) -> dict:
    """TIGER's leave-one-out: Recall/NDCG@5/10, unconstrained and constrained to all items."""
    ds, sids = load_inputs(workdir)
    split = leave_one_out(ds)
    rdir = common.retriever_dir(workdir, "loo")
    model = load_retriever(rdir, f"genret train-retriever --workdir {workdir} --split loo")
    V, L = model.space.codebook_size, model.space.num_levels
    targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, rdir)
    K = max(cfg.eval.beam_size, 10)  # Recall@10 needs at least 10 beams
    index = StaticIndex.build(sids, vocab_size=V, dense_levels=cfg.decode.dense_levels)
    decoded = evaluate.decode_interleaved(
        _decoders(
            model,
            {
                "unconstrained": (Unconstrained(V, L), None),
                "static_all_items": (StaticConstraint(index), None),
            },
            K,
        ),
        inputs,
        metrics.SIDLookup(sids, V),
        batch_size=batch_size,
        desc="leave-one-out",
    )
    everything = np.ones(len(sids), bool)
    result = {
        "dataset": cfg.data.dataset,
        "num_test_users": int(len(targets)),
        "beam_size": K,
        "methods": {
            name: evaluate.method_metrics(d, targets, everything, allowed_key="item_rate")
            for name, d in decoded.items()
        },
        "seed": cfg.eval.seed,
    }
    atomic.write_json(common.results_dir(workdir) / "warm.json", result)
    return result
