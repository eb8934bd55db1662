"""Cold-start and leave-one-out evaluations of a trained retriever, written to WORKDIR/results/."""

import dataclasses
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from data import atomic
from data.environment import environment
from data.errors import ArgumentError, ArtifactError
from data.pipeline import padded_batches
from data.splits import (
    ColdStartSplit,
    LeaveOneOutSplit,
    check_fraction,
    cold_start_split,
    holdout_rows,
    leave_one_out,
    outside_holdouts,
    validation_split,
)
from data.types import Histories, InteractionData
from decoding import (
    BeamResult,
    LevelScoring,
    PrefixTable,
    StaticConstraint,
    StaticIndex,
    Unconstrained,
    prior_correction,
)
from experiments.config import Config, EvalConfig
from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics
from experiments.evaluation.baselines import (
    CooccurrencePrior,
    content_metrics,
    content_queries,
    content_ranking,
    cooccurrence_metrics,
    cosines,
    loo_training,
    rank_fusion,
)
from experiments.evaluation.decode import Decoded
from experiments.evaluation.profile import PLAIN_PROFILE, ContentProfile
from experiments.evaluation.report import (
    CONTENT_PRIOR,
    COOCCURRENCE_PRIOR,
    HYBRID,
    PARALLEL,
    PARALLEL_CONTENT,
)
from experiments.pipeline.artifacts import (
    evaluated_checkpoint,
    load_dataset,
    load_parallel_cold,
    load_retriever,
    load_sids,
    own_leave_one_out,
    require_retriever,
    trained_on,
)
from experiments.pipeline.layout import RunLayout, Split
from seqmodel.files import MODEL_FILE
from seqmodel.inference import load_retriever as load_retriever_dir
from seqmodel.inference import prior_retrieval_fn, read_description, retrieval_fn
from seqmodel.state import Retriever
from seqmodel.tokens import encode_histories, sid_tokens


def load_inputs(cfg: Config, layout: RunLayout) -> tuple[InteractionData, np.ndarray]:
    """The prepared dataset and the tokenizer's SIDs, checked to describe the same catalog."""
    ds = load_dataset(layout)
    return ds, load_sids(cfg, layout, ds)


def _decoders(
    model: Retriever | list[Retriever], methods: dict, beam_size: int, rule: str = "product"
) -> dict:
    """One decode per `name: (constraint, scoring)`, all on one jitted decoder whose parameters
    and indexes are moved to the device once, not per batch. A list of several models decodes
    their ensemble (`retrieval_fn`, by `rule`)."""
    placed = {}  # one device copy per index, however many methods use it
    for c, _ in methods.values():
        placed.setdefault(id(c), jax.device_put(c))
    first = next(iter(methods.values()))[0]
    run = retrieval_fn(model, placed[id(first)], beam_size=beam_size, rule=rule)
    return {
        name: functools.partial(run, constraint=placed[id(c)], scoring=scoring)
        for name, (c, scoring) in methods.items()
    }


def ensemble_members(
    dirs: Sequence[Path | str], ds: InteractionData, sids: np.ndarray
) -> list[Retriever]:
    """The leave-one-out retrievers in `dirs`, each checked to have been trained on exactly these
    SIDs and this split (its recorded inputs fingerprint); else an ArtifactError naming it."""
    members = []
    for d in map(Path, dirs):
        if not trained_on(d, ds, sids, Split("loo"), "train-retriever --split loo"):
            raise ArtifactError(
                f"{d}: not a leave-one-out retriever of this work directory's SIDs (trained on "
                "other SIDs or another split); train it with `genret train-retriever --split loo` "
                "in a work directory holding a copy of this tokenizer"
            )
        members.append(load_retriever_dir(d, read_only=True))
    return members


HARNESS_SECTIONS = ("sasrec", "parallel")  # a SASRec-harness run's retriever.json section


def chosen_on(dirs: Sequence[Path | str], num_users: int) -> list[np.ndarray]:
    """The validation rows (of TIGER's split, `num_users` of them) on which each of these
    leave-one-out models chose its checkpoint: its seeded sample of its `eval_users`
    (data.splits.holdout_rows with its own seed), one array per directory, for
    data.splits.outside_holdouts. A directory holds a retriever, or a run of the SASRec harness
    (`genret sasrec`'s WORKDIR/sasrec_loo, `genret parallel`'s WORKDIR/parallel_loo)."""
    return [holdout_rows(num_users, *_holdout_spec(Path(d))) for d in dirs]


def _holdout_spec(run_dir: Path) -> tuple[int, int]:
    """(eval_users, seed) of the leave-one-out model trained in `run_dir`."""
    path = run_dir / MODEL_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        info = None
    section = next((s for s in HARNESS_SECTIONS if isinstance(info, dict) and s in info), None)
    if section is None:
        _, seq, _ = read_description(path, "retriever", "train-retriever --split loo")
        return seq.eval_users, seq.seed
    fields = info[section]
    users, seed = (
        fields.get(k) if isinstance(fields, dict) else None for k in ("eval_users", "seed")
    )
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (users, seed)) or users < 1:
        raise ArtifactError(f"{path}: no eval_users and seed in its {section} section; retrain it")
    return users, seed


def _content_inputs(
    cfg: Config, layout: RunLayout, ds: InteractionData, split: ColdStartSplit
) -> tuple[np.ndarray | sp.csr_matrix, Histories]:
    """(the content neighbour's item vectors, eval.cold_content_vectors: the tokenizer's item-text
    embeddings, cached by its stage, or the sparse TF-IDF rows; the evaluated users' histories)."""
    from rqvae.embed import embed_texts, tfidf_rows

    if cfg.eval.cold_content_vectors == "tfidf":
        emb = tfidf_rows(ds.catalog.texts, cfg.rqvae, cache_dir=layout.embeddings)
        if emb is None:
            raise ArtifactError(
                f"{layout.prepared}: no item text has a word TF-IDF keeps; set "
                "eval.cold_content_vectors=embeddings"
            )
    else:
        emb = embed_texts(ds.catalog.texts, cfg.rqvae, cache_dir=layout.embeddings)
    users = _sample_users(len(split.test_targets), cfg.eval)
    return emb, Histories.from_lists([split.test_histories[int(u)] for u in users])


EXACT_CALL_USERS = 64  # cold_content_exact's memory bound: at most this many users' K-wide beams


def content_prior_method(
    cfg: Config,
    split: ColdStartSplit,
    model: Retriever,
    index_sids: np.ndarray,
    constraint: StaticConstraint,
    scoring: LevelScoring | None,
    emb: np.ndarray,
    histories: Histories,
) -> tuple[Callable, np.ndarray]:
    """STATIC with the content prior (eval.cold_content_weight, _temperature): the decode
    function `(tokens, rows) -> beams` and its row inputs, the evaluated users' rows 0..U-1 in
    their content queries (the content neighbour's, from `_content_inputs`, dense or sparse).
    Each batch's cosines to the cold items (`split.cold_items`, whose SIDs are `index_sids`) are
    computed with its batch, so memory does not grow with users x items."""
    unit, queries = content_queries(emb, histories, ContentProfile.of(cfg.eval))
    cold_unit = unit[split.cold_items].T
    table = PrefixTable.build(index_sids, model.space.codebook_size)
    K = cfg.eval.beam_size
    # Exact: one beam per cold item, so no item is pruned at a shallow level and the top K are
    # those of the summed scores over the whole cold set.
    beam = max(K, len(index_sids)) if cfg.eval.cold_content_exact else K
    run = prior_retrieval_fn(
        model,
        constraint,
        table,
        weight=cfg.eval.cold_content_weight,
        beam_size=beam,
        scoring=scoring,
    )
    t = cfg.eval.cold_content_temperature
    # Users per call: as many beams per call as K-wide beams of EXACT_CALL_USERS users.
    chunk = max(1, EXACT_CALL_USERS * K // beam)

    def decode_batch(tokens: np.ndarray, rows: np.ndarray):
        sim = cosines(queries[rows], cold_unit).astype(np.float32)  # [B, C]
        bias = table.conditional_log_prior(sim / t)
        if beam == K:
            return run(tokens, bias)
        parts = [run(tok, b) for tok, b in padded_batches(tokens, bias, batch_size=chunk)]
        return BeamResult(
            *(
                jnp.concatenate([getattr(r, f)[:, :K] for r in parts])[: len(tokens)]
                for f in ("tokens", "scores", "valid")
            )
        )

    return decode_batch, np.arange(len(histories))


def cooccurrence_prior_method(
    eval_cfg: EvalConfig,
    models: list[Retriever],
    sids: np.ndarray,
    constraint: StaticConstraint,
    scoring: LevelScoring | None,
    train: Histories,
    beam_size: int,
) -> Callable:
    """The retrievers' beams over the catalog with the co-occurrence prior
    (eval.warm_cooc_weight, _smoothing; `baselines.CooccurrencePrior` counted on `train`; an
    ensemble ranked by eval.warm_ensemble_rule): the decode function `(tokens, last items) ->
    beams`. Each batch's priors over the catalog are computed with its batch, so memory does not
    grow with users x items."""
    table = PrefixTable.build(sids, models[0].space.codebook_size)
    prior = CooccurrencePrior.fit(train, len(sids), eval_cfg.warm_cooc_smoothing)
    run = prior_retrieval_fn(
        models,
        constraint,
        table,
        weight=eval_cfg.warm_cooc_weight,
        beam_size=beam_size,
        scoring=scoring,
        rule=eval_cfg.warm_ensemble_rule,
    )

    def decode_batch(tokens: np.ndarray, last: np.ndarray):
        return run(tokens, table.conditional_log_prior(prior.log_prob(last)))

    return decode_batch


def _prior_scoring(
    train: Histories,
    sids: np.ndarray,
    codebook_size: int,
    *,
    prior_weight: float,
    level_weights: tuple[float, ...] = (),
    prior_levels: int = 2,
    keys: str,
) -> LevelScoring | None:
    """decoding.prior_correction with the prior counted over the training targets, or None for
    the plain joint log-probability; a rejected value is an ArgumentError naming `keys`."""
    if prior_weight == 0 and all(w == 1 for w in level_weights):
        return None
    try:
        return prior_correction(
            sids[train.items],
            codebook_size,
            prior_weight=prior_weight,
            level_weights=level_weights,
            prior_levels=prior_levels,
        )
    except ValueError as e:
        raise ArgumentError(f"{keys}: {e}") from None


def cold_scoring(
    eval_cfg: EvalConfig, train: Histories, sids: np.ndarray, codebook_size: int
) -> LevelScoring | None:
    """The cold-start beam scores of eval_cfg (prior counted over the training interactions), or
    None for the plain joint log-probability."""
    return _prior_scoring(
        train,
        sids,
        codebook_size,
        prior_weight=eval_cfg.cold_prior_weight,
        level_weights=eval_cfg.cold_level_weights,
        keys="eval.cold_level_weights / eval.cold_prior_weight",
    )


def warm_scoring(
    eval_cfg: EvalConfig, train: Histories, sids: np.ndarray, codebook_size: int
) -> LevelScoring | None:
    """The leave-one-out beam scores of eval_cfg: the joint log-probability minus
    warm_prior_weight x the log prior of the first warm_prior_levels codes, counted over the
    training targets (no validation or test item); None for the plain joint log-probability."""
    return _prior_scoring(
        train,
        sids,
        codebook_size,
        prior_weight=eval_cfg.warm_prior_weight,
        prior_levels=eval_cfg.warm_prior_levels,
        keys="eval.warm_prior_levels / eval.warm_prior_weight",
    )


def _sample_users(num_users: int, eval_cfg) -> np.ndarray:
    """All test users, or a seeded sample of eval.max_test_users of them."""
    users = np.arange(num_users)
    if eval_cfg.max_test_users and num_users > eval_cfg.max_test_users:
        rng = np.random.default_rng(eval_cfg.seed)
        users = np.sort(rng.choice(users, eval_cfg.max_test_users, replace=False))
    return users


def evaluated_inputs(
    model: Retriever,
    sids: np.ndarray,
    split: ColdStartSplit | LeaveOneOutSplit,
    eval_cfg: EvalConfig,
    rdir: Path | str,
) -> tuple[np.ndarray, np.ndarray]:
    """(targets, token inputs) of the evaluated users; only those users' histories are encoded."""
    space = model.space
    L = space.num_levels
    if sids.shape[1] != L:
        raise ArtifactError(
            f"{rdir}: retriever expects {L} SID levels, the tokenizer has {sids.shape[1]}; "
            "retrain the retriever on these SIDs"
        )
    users = _sample_users(len(split.test_targets), eval_cfg)
    item_tokens = sid_tokens(sids, space.codebook_size)
    inputs = encode_histories(item_tokens, split.test_histories, model.cfg.max_history, users)
    return split.test_targets[users], inputs


def _cold_header(cfg: Config, split: ColdStartSplit, num_users: int, validation: bool) -> dict:
    """What every cold-start result file records besides its methods."""
    out = {
        "dataset": cfg.data.dataset,
        "cold_start_fraction": split.fraction,
        "num_cold_items": int(len(split.cold_items)),
        "num_test_users": int(num_users),
        "beam_size": cfg.eval.beam_size,
        "seed": cfg.eval.seed,
        "split": "validation" if validation else "test",
        # The item vectors of `content` and `static_content` (eval.cold_content_vectors).
        "content_vectors": cfg.eval.cold_content_vectors,
    }
    profile = ContentProfile.of(cfg.eval)
    if profile != PLAIN_PROFILE:
        out["content_profile"] = dataclasses.asdict(profile)
    return out


def _model_free(
    cfg: Config, split: ColdStartSplit, targets, emb: np.ndarray, histories: Histories
) -> dict:
    """Constrained random guessing and the content neighbour over the cold set, for the evaluated
    users (`emb`, `histories`: `_content_inputs`; item-text embeddings, no model)."""
    K = cfg.eval.beam_size
    return {
        "random": evaluate.random_metrics(
            split.cold_items, targets, beam_size=K, seed=cfg.eval.seed
        ),
        "content": content_metrics(
            emb, histories, targets, split.cold_items, k=K, profile=ContentProfile.of(cfg.eval)
        ),
    }


def hybrid_metrics(
    eval_cfg: EvalConfig,
    static: Decoded,
    emb: np.ndarray,
    histories: Histories,
    split: ColdStartSplit,
    targets: np.ndarray,
) -> dict:
    """The LIGER-style hybrid: STATIC's valid beams and the content neighbour's top-K over the
    cold set fused by weighted reciprocal rank (eval.cold_hybrid_weight, _offset); its latency is
    STATIC's plus the content neighbour's."""
    ranking = np.where(static.valid, static.items, -1)
    return _fused_metrics(
        eval_cfg, ranking, static.seconds_per_user, emb, histories, split, targets
    )


def _fused_metrics(
    eval_cfg: EvalConfig,
    ranking: Int[np.ndarray, "U K"],
    seconds_per_user: np.ndarray,
    emb: np.ndarray,
    histories: Histories,
    split: ColdStartSplit,
    targets: np.ndarray,
) -> dict:
    """A model's cold-set ranking (-1: padding) and the content neighbour's top-K fused by
    weighted reciprocal rank (weight 1 for the model's, eval.cold_hybrid_weight for the content
    neighbour's, offset eval.cold_hybrid_offset); its latency is the model's
    (`seconds_per_user`) plus the content neighbour's."""
    K = eval_cfg.beam_size
    start = time.perf_counter()
    profile = ContentProfile.of(eval_cfg)
    content = content_ranking(emb, histories, split.cold_items, k=K, profile=profile)
    fused = rank_fusion(
        [ranking, content],
        [1.0, eval_cfg.cold_hybrid_weight],
        offset=eval_cfg.cold_hybrid_offset,
        k=K,
    )
    seconds = (time.perf_counter() - start) / max(len(targets), 1)
    out = metrics.ranking_metrics(fused, targets, ks=(1, 5, 10), ndcg_ks=(5, 10))
    out["valid_rate"] = out["cold_rate"] = float(
        np.isin(fused[fused >= 0], split.cold_items).mean()
    )
    out.update(metrics.latency_summary(seconds_per_user + seconds))
    return out


def parallel_methods(
    eval_cfg: EvalConfig,
    model: tuple,
    max_history: int,
    emb: np.ndarray,
    histories: Histories,
    split: ColdStartSplit,
    targets: np.ndarray,
    *,
    batch_size: int,
) -> dict:
    """`parallel` (eval.cold_parallel): the top eval.beam_size cold items by the parallel-codes
    retriever `model` ((graphdef, variables), artifacts.load_parallel_cold) after each
    evaluated user's history (its last `max_history` items), exact over the whole cold set; with
    eval.cold_hybrid_weight also `parallel_content`, that ranking fused with the content
    neighbour's as `hybrid` fuses STATIC's."""
    from seqmodel.parallel import top_k_among
    from seqmodel.sasrec import encode_items

    graphdef, variables = model
    K = eval_cfg.beam_size
    encoded = encode_items(histories, max_history)
    rank = functools.partial(
        top_k_among, graphdef, variables, items=split.cold_items, k=K, batch_size=batch_size
    )
    rank(encoded[:batch_size])  # compiles: the timed call runs the compiled program alone
    start = time.perf_counter()
    pred = rank(encoded)
    seconds = np.array([(time.perf_counter() - start) / len(encoded)])
    out = metrics.ranking_metrics(pred, targets, ks=(1, 5, 10), ndcg_ks=(5, 10))
    out["valid_rate"] = out["cold_rate"] = float(np.isin(pred[pred >= 0], split.cold_items).mean())
    out.update(metrics.latency_summary(seconds))
    methods = {PARALLEL: out}
    if eval_cfg.cold_hybrid_weight:
        methods[PARALLEL_CONTENT] = _fused_metrics(
            eval_cfg, pred, seconds, emb, histories, split, targets
        )
    return methods


def evaluate_cold_baselines(
    cfg: Config, layout: RunLayout, fraction: float, *, validation: bool = False
) -> dict:
    """The model-free methods alone (constrained random, content nearest neighbour) on the
    cold-start protocol: no retriever needed, the same users as `evaluate_cold_start`."""
    fraction = check_fraction(fraction)
    ds = load_dataset(layout)
    split = (validation_split if validation else cold_start_split)(ds, fraction)
    users = _sample_users(len(split.test_targets), cfg.eval)
    targets = split.test_targets[users]
    result = {
        **_cold_header(cfg, split, len(targets), validation),
        "methods": _model_free(cfg, split, targets, *_content_inputs(cfg, layout, ds, split)),
    }
    result["environment"] = environment()
    atomic.write_json(layout.cold_baselines_result(fraction, validation=validation), result)
    return result


def evaluate_cold_start(
    cfg: Config,
    layout: RunLayout,
    fraction: float,
    *,
    batch_size: int = 64,
    validation: bool = False,
    progress: bool = True,
) -> dict:
    """Unconstrained vs constrained random vs STATIC over the cold set (with eval.cold_parallel,
    the split's parallel-codes retriever too); writes the results JSON.

    validation=True runs the tuning protocol (data.splits.validation_split): no test target is read.
    """
    fraction = check_fraction(fraction)
    which = Split("cold-val" if validation else "cold", fraction)
    ds, sids = load_inputs(cfg, layout)
    rdir = layout.retriever(which)
    model = load_retriever(layout, which)
    checkpoint = evaluated_checkpoint(rdir, layout.root)  # after the load: the step it restored
    # Before any decoding: a missing or stale parallel-codes retriever is the first error.
    parallel = load_parallel_cold(cfg, layout, which) if cfg.eval.cold_parallel else None
    split = (validation_split if validation else cold_start_split)(ds, fraction)
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
    emb, histories = _content_inputs(cfg, layout, ds, split)
    row_inputs = {}
    if cfg.eval.cold_content_weight:
        decoders[CONTENT_PRIOR], row_inputs[CONTENT_PRIOR] = content_prior_method(
            cfg, split, model, sids[split.cold_items], static, scoring, emb, histories
        )
    decoded = evaluate.decode_interleaved(
        decoders,
        inputs,
        metrics.SIDLookup(sids, V),
        batch_size=batch_size,
        desc=f"cold {fraction:g}",
        progress=progress,
        row_inputs=row_inputs,
    )
    cold = split.cold_mask
    methods = {
        name: evaluate.method_metrics(decoded[name], targets, cold, allowed_key="cold_rate")
        for name in decoded
    }
    methods.update(_model_free(cfg, split, targets, emb, histories))
    if cfg.eval.cold_hybrid_weight:
        methods[HYBRID] = hybrid_metrics(
            cfg.eval, decoded["static"], emb, histories, split, targets
        )
    if parallel is not None:
        methods.update(
            parallel_methods(
                cfg.eval,
                parallel,
                cfg.parallel.max_history,
                emb,
                histories,
                split,
                targets,
                batch_size=batch_size,
            )
        )
    overhead = decoded["static"].seconds_per_user / decoded["unconstrained"].seconds_per_user
    result = {
        **_cold_header(cfg, split, len(targets), validation),
        "methods": {
            k: methods[k]
            for k in (
                "unconstrained",
                "random",
                "content",
                "static",
                "static_plain",
                CONTENT_PRIOR,
                HYBRID,
                PARALLEL,
                PARALLEL_CONTENT,
            )
            if k in methods
        },
        "scoring": {
            "prior_weight": cfg.eval.cold_prior_weight,
            "level_weights": list(cfg.eval.cold_level_weights) or [1.0] * L,
        },
        "static_overhead_ratio_median": float(np.median(overhead)),
        "static_index_build_seconds": build_seconds,
        "static_index_bytes": int(index.nbytes()["total"]),
    }
    if cfg.eval.cold_hybrid_weight:
        result["scoring"]["hybrid_weight"] = cfg.eval.cold_hybrid_weight
        result["scoring"]["hybrid_offset"] = cfg.eval.cold_hybrid_offset
    if cfg.eval.cold_content_weight:
        result["scoring"]["content_weight"] = cfg.eval.cold_content_weight
        result["scoring"]["content_temperature"] = cfg.eval.cold_content_temperature
        result["scoring"]["content_exact"] = cfg.eval.cold_content_exact
    result.update(checkpoint)
    if parallel is not None:
        # The parallel-codes retriever's run, relative to the work directory.
        result["parallel_retriever"] = layout.parallel_cold(which).name
    result["environment"] = environment()
    atomic.write_json(layout.cold_start_result(fraction, validation=validation), result)
    return result


def evaluate_warm(
    cfg: Config,
    layout: RunLayout,
    *,
    batch_size: int = 64,
    validation: bool = False,
    ensemble: Sequence[Path | str] = (),
    holdout_of: Sequence[Path | str] = (),
    progress: bool = True,
) -> dict:
    """TIGER's leave-one-out: Recall/NDCG@5/10, unconstrained and constrained to all items.

    `validation`: the same on every user's second-to-last item (never trained on; the tuning
    protocol, far larger than the retriever's own 1,000-user holdout). `ensemble`: other
    leave-one-out retriever directories trained on the same SIDs (other seeds); the beams then
    rank by the average of all the retrievers' per-level log-probabilities, together with the
    pipeline's own members (`eval.warm_ensemble_seeds`). With `validation`, the block
    `outside_holdout` scores the users that neither these retrievers nor those of `holdout_of`
    chose their checkpoints on."""
    if holdout_of and not validation:
        raise ArgumentError("--holdout-of: only with --validation")
    own_leave_one_out(cfg, layout)
    loo = Split("loo")
    ds, sids = load_inputs(cfg, layout)
    rdir = layout.retriever(loo)
    model = load_retriever(layout, loo)
    checkpoint = evaluated_checkpoint(rdir, layout.root)  # after the load: the step it restored
    # A missing member of the pipeline's own: the one-line "run the pipeline", before any is loaded.
    own = [require_retriever(layout, Split("loo", seed=s)) for s in cfg.eval.warm_ensemble_seeds]
    ensemble = [*own, *ensemble]
    members = ensemble_members(ensemble, ds, sids)
    split = leave_one_out(ds)
    if validation:
        split = split.validation_as_test()
        # The users any of these retrievers chose its checkpoint on (read before decoding, so
        # that a DIR without a retriever is named before any work).
        chosen = chosen_on([rdir, *ensemble, *holdout_of], len(split.users))
    V, L = model.space.codebook_size, model.space.num_levels
    targets, inputs = evaluated_inputs(model, sids, split, cfg.eval, rdir)
    K = max(cfg.eval.beam_size, 10)  # Recall@10 needs at least 10 beams
    index = StaticIndex.build(sids, vocab_size=V, dense_levels=cfg.decode.dense_levels)
    scoring = warm_scoring(cfg.eval, split.train, sids, V)
    static = StaticConstraint(index)
    constraints = {
        "unconstrained": (Unconstrained(V, L), scoring),
        "static_all_items": (static, scoring),
    }
    if scoring is not None:  # the plain joint log-probability beside (TIGER's ranking rule)
        constraints["static_plain"] = (static, None)
    rule = cfg.eval.warm_ensemble_rule
    decoders = _decoders([model, *members], constraints, K, rule)
    users = _sample_users(len(split.test_targets), cfg.eval)
    histories = Histories.from_lists([split.test_histories[int(u)] for u in users])
    row_inputs = {}
    if cfg.eval.warm_cooc_weight:
        train = loo_training(ds.histories, len(sids))
        decoders[COOCCURRENCE_PRIOR] = cooccurrence_prior_method(
            cfg.eval, [model, *members], sids, static, scoring, train, K
        )
        row_inputs[COOCCURRENCE_PRIOR] = histories.items[histories.offsets[1:] - 1]
    decoded = evaluate.decode_interleaved(
        decoders,
        inputs,
        metrics.SIDLookup(sids, V),
        batch_size=batch_size,
        desc="leave-one-out",
        progress=progress,
        row_inputs=row_inputs,
    )
    everything = np.ones(len(sids), bool)
    methods = {
        name: evaluate.method_metrics(d, targets, everything, allowed_key="item_rate")
        for name, d in decoded.items()
    }
    # A model-free reference: the items most often next to the user's last item in training.
    # One ranking gives both the plain list and the one without the user's history items.
    cooc, cooc_unseen = cooccurrence_metrics(ds.histories, histories, targets, len(sids))
    methods["item_cooccurrence"] = cooc
    # The same ranked lists without each user's own history items: one interaction per user and
    # item, so a history item is never a target (S3-Rec's full-sort protocol ranks this way).
    history_excluded = {
        name: metrics.ranking_metrics(
            metrics.drop_seen(np.where(d.valid, d.items, -1), histories, 10),
            targets,
            ks=(1, 5, 10),
            ndcg_ks=(5, 10),
        )
        for name, d in decoded.items()
    }
    history_excluded["item_cooccurrence"] = cooc_unseen
    result = {
        "dataset": cfg.data.dataset,
        "num_test_users": int(len(targets)),
        "beam_size": K,
        "methods": methods,
        "history_excluded": history_excluded,
        "seed": cfg.eval.seed,
        "split": "validation" if validation else "test",
    }
    if validation:
        # Users outside every holdout: their numbers carry no bias from the choices of
        # checkpoint (runs whose holdouts differ compare here, as SASRec's do).
        outside = outside_holdouts(users, *chosen)
        result["outside_holdout"] = {"num_users": int(len(outside))} | {
            name: metrics.ranking_metrics(
                np.where(d.valid, d.items, -1)[outside],
                targets[outside],
                ks=(1, 5, 10),
                ndcg_ks=(5, 10),
            )
            for name, d in decoded.items()
        }
        if holdout_of:
            result["outside_holdout"]["holdout_of"] = [str(d) for d in holdout_of]
    if members:
        result["ensemble"] = [str(rdir), *map(str, ensemble)]
        result["ensemble_rule"] = rule
    if scoring is not None:
        result["scoring"] = {
            "prior_weight": cfg.eval.warm_prior_weight,
            "prior_levels": cfg.eval.warm_prior_levels,
        }
    if cfg.eval.warm_cooc_weight:
        result["cooccurrence_prior"] = {
            "weight": cfg.eval.warm_cooc_weight,
            "smoothing": cfg.eval.warm_cooc_smoothing,
        }
    result.update(checkpoint)
    result["environment"] = environment()
    atomic.write_json(layout.validation_warm_result if validation else layout.warm_result, result)
    return result
