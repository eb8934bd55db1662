"""Draft decoding (NEZHA) as stages: a head trained on a frozen retriever, and the leave-one-out
and cold-start evaluations of the draft decoders, written beside beam search's results."""

import dataclasses
import functools
import json
import re

import jax
import numpy as np

from data import atomic
from data.errors import ArgumentError, ArtifactError
from data.fingerprint import fingerprint
from data.splits import check_fraction, cold_start_split, leave_one_out, validation_split
from decoding import (
    Constraint,
    HashSet,
    HashVerify,
    StaticConstraint,
    StaticIndex,
    Unconstrained,
)
from experiments.config import Config
from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics
from experiments.evaluation.retrieval import cold_scoring, evaluated_inputs, load_inputs
from experiments.pipeline.artifacts import load_retriever, split_examples
from experiments.pipeline.layout import RunLayout, Split
from experiments.pipeline.stages import Written
from seqmodel.state import Retriever

DECODERS = ("beam", "nezha", "nezha-static")
WARM_KEYS = ("recall@5", "ndcg@5", "recall@10", "ndcg@10", "valid_rate", "valid_of_k")
COLD_KEYS = ("recall@1", "recall@5", "recall@10", "ndcg@10", "valid_rate", "cold_rate")


def check_decoder(decoder: str) -> str:
    if decoder not in DECODERS:
        raise ArgumentError(f"--decoder: expected one of {', '.join(DECODERS)}, got {decoder!r}")
    return decoder


def check_name(arg: str, name: str) -> str:
    """A head's name becomes part of directory and file names: letters, digits, - and _ only."""
    if name and not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ArgumentError(f"{arg} {name!r}: use letters, digits, '-' and '_' only")
    return name


def retriever_key(layout: RunLayout, split: Split) -> str:
    """Which weights a head was trained on: the retriever's inputs and its best step."""
    command = split.train_command(layout.root)
    model_file = layout.require(layout.retriever_model(split), command)
    summary_file = layout.require(layout.retriever_summary(split), command)
    try:
        inputs = json.loads(model_file.read_text())["inputs"]
        best = json.loads(summary_file.read_text())["best_step"]
    except (OSError, ValueError, KeyError) as e:
        raise ArtifactError(
            f"{layout.retriever(split)}: cannot read its description ({type(e).__name__}); "
            f"retrain it with `{command}`"
        ) from None
    return fingerprint(inputs, best)


def train_draft(
    cfg: Config, layout: RunLayout, split: Split, *, name: str = "", progress: bool = True
) -> Written:
    """A draft head (`seqmodel.draft`) trained on `split`'s frozen retriever, on its own split."""
    from seqmodel.draft_train import train_draft as train

    ds, sids = load_inputs(cfg, layout)
    model = _token_level(load_retriever(layout, split), layout, split)
    key = retriever_key(layout, split)
    # The retriever's own sizes and holdout, and the head of the resolved config.
    seq = dataclasses.replace(model.cfg, draft=cfg.seqmodel.draft)
    data = split_examples(ds, sids, split, model.space.codebook_size, seq)
    result = train(
        seq, layout.draft(split, name), model, data, retriever_key=key, show_progress=progress
    )
    paths = (layout.draft_summary(split, name), layout.draft_model(split, name))
    return Written(paths, {"draft": str(layout.draft(split, name)), **result.summary})


def _token_level(model, layout: RunLayout, split: Split):
    """`model`, unless it is the item-level retriever (it decodes in its own head already)."""
    if model.cfg.arch != "token":
        raise ArtifactError(
            f"{layout.retriever(split)}: an item-level retriever (seqmodel.arch={model.cfg.arch}) "
            "takes no NEZHA draft head; use --decoder beam, or train with seqmodel.arch=token"
        )
    return model


def load_head(layout: RunLayout, split: Split, model: Retriever, name: str = ""):
    """(head, where it came from): the retriever's joint head, else the add-on `name`."""
    from seqmodel.draft_train import load_draft

    _token_level(model, layout, split)
    if not name and hasattr(model, "draft"):
        return model.draft, "joint"
    command = split.train_draft_command(layout.root, name)
    layout.require(layout.draft_model(split, name), command)
    head, info = load_draft(layout.draft(split, name), model)
    if info.get("retriever") != retriever_key(layout, split):
        raise ArtifactError(
            f"{layout.draft(split, name)}: trained on other weights of {layout.retriever(split)}; "
            f"retrain it with `{command}`"
        )
    return head, layout.draft(split, name).name


def draft_constraints(
    decoder: str, allowed_sids: np.ndarray, V: int, L: int, *, verify: bool, dense_levels: int
) -> dict[str, Constraint]:
    """The methods a draft decoder reports: nezha = drafts before and after verification (the
    hash set over the allowed SIDs); nezha-static = every draft level masked by STATIC."""
    if decoder == "nezha":
        out: dict[str, Constraint] = {"nezha_unverified": Unconstrained(V, L)}
        if verify:
            out["nezha"] = HashVerify(HashSet.build(allowed_sids, vocab_size=V))
        return out
    index = StaticIndex.build(allowed_sids, vocab_size=V, dense_levels=dense_levels)
    return {"nezha_static": StaticConstraint(index)}


def valid_of_k(decoded: evaluate.Decoded) -> float:
    """Share of the K result slots that hold a real item (NEZHA's "valid drafts"): a verified
    search may keep fewer than K beams."""
    return float(((decoded.items >= 0) & decoded.valid).mean())


def _metrics(decoded: dict, targets, allowed_mask, allowed_key: str) -> dict:
    out = {}
    for m, d in decoded.items():
        out[m] = evaluate.method_metrics(d, targets, allowed_mask, allowed_key=allowed_key)
        out[m]["valid_of_k"] = valid_of_k(d)
    return out


def _decode(model, head, constraints, scoring, inputs, sids, K, batch_size, desc, progress):
    from seqmodel.draft import draft_retrieval_fn

    # One decoder (parameters on the device once); each method's constraint is its call's.
    placed = {name: jax.device_put(c) for name, c in constraints.items()}
    run = draft_retrieval_fn(model, head, next(iter(placed.values())), beam_size=K, scoring=scoring)
    fns = {name: functools.partial(run, constraint=c) for name, c in placed.items()}
    V = model.space.codebook_size
    return evaluate.decode_interleaved(
        fns, inputs, metrics.SIDLookup(sids, V), batch_size=batch_size, desc=desc, progress=progress
    )


def evaluate_warm(
    cfg: Config,
    layout: RunLayout,
    decoder: str,
    *,
    batch_size: int = 64,
    name: str = "",
    progress: bool = True,
) -> Written:
    """Leave-one-out Recall/NDCG@5/10 of a draft decoder (same users and K as beam search's)."""
    loo = Split("loo")
    ds, sids = load_inputs(cfg, layout)
    model = load_retriever(layout, loo)
    head, source = load_head(layout, loo, model, name)
    V, L = model.space.codebook_size, model.space.num_levels
    targets, inputs = evaluated_inputs(
        model, sids, leave_one_out(ds), cfg.eval, layout.retriever(loo)
    )
    K = max(cfg.eval.beam_size, 10)  # Recall@10 needs at least 10 beams
    constraints = draft_constraints(
        decoder, sids, V, L, verify=cfg.seqmodel.draft.verify, dense_levels=cfg.decode.dense_levels
    )
    decoded = _decode(
        model, head, constraints, None, inputs, sids, K, batch_size, decoder, progress
    )
    everything = np.ones(len(sids), bool)
    result = {
        "dataset": cfg.data.dataset,
        "decoder": decoder,
        "head": source,
        "num_test_users": int(len(targets)),
        "beam_size": K,
        "methods": _metrics(decoded, targets, everything, "item_rate"),
        "seed": cfg.eval.seed,
    }
    path = layout.decoder_warm_result(decoder, name)
    atomic.write_json(path, result)
    return Written((path,), result)


def evaluate_cold_start(
    cfg: Config,
    layout: RunLayout,
    decoder: str,
    fraction: float,
    *,
    batch_size: int = 64,
    validation: bool = False,
    name: str = "",
    progress: bool = True,
) -> Written:
    """A draft decoder over the cold set: verified against it (nezha) or masked by STATIC over it
    (nezha-static); beam scores as beam search's (eval.cold_prior_weight, cold_level_weights)."""
    fraction = check_fraction(fraction)
    which = Split("cold-val" if validation else "cold", fraction)
    ds, sids = load_inputs(cfg, layout)
    model = load_retriever(layout, which)
    head, source = load_head(layout, which, model, name)
    split = (validation_split if validation else cold_start_split)(ds, fraction)
    V, L = model.space.codebook_size, model.space.num_levels
    targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, layout.retriever(which))
    K = cfg.eval.beam_size
    constraints = draft_constraints(
        decoder,
        sids[split.cold_items],
        V,
        L,
        verify=cfg.seqmodel.draft.verify,
        dense_levels=cfg.decode.dense_levels,
    )
    scoring = cold_scoring(cfg.eval, split.train, sids, V)
    desc = f"cold {fraction:g}"
    decoded = _decode(
        model, head, constraints, scoring, inputs, sids, K, batch_size, desc, progress
    )
    result = {
        "dataset": cfg.data.dataset,
        "decoder": decoder,
        "head": source,
        "cold_start_fraction": fraction,
        "num_cold_items": int(len(split.cold_items)),
        "num_test_users": int(len(targets)),
        "beam_size": K,
        "methods": _metrics(decoded, targets, split.cold_mask, "cold_rate"),
        "scoring": {
            "prior_weight": cfg.eval.cold_prior_weight,
            "level_weights": list(cfg.eval.cold_level_weights) or [1.0] * L,
        },
        "seed": cfg.eval.seed,
        "split": "validation" if validation else "test",
    }
    path = layout.decoder_cold_start_result(decoder, fraction, validation=validation, name=name)
    atomic.write_json(path, result)
    return Written((path,), result)


def methods_table(result: dict, keys: tuple[str, ...]) -> str:
    """Markdown: one row per method, metrics in percent, latency in ms."""
    head = "| method | " + " | ".join(keys) + " | latency ms (median) |"
    rows = [head, "|" + "---|" * (len(keys) + 2)]
    for name, m in result["methods"].items():
        cells = " | ".join(f"{100 * m[k]:.2f}" for k in keys)
        rows.append(f"| {name} | {cells} | {m['latency_ms_median']:.2f} |")
    return "\n".join(rows)
