"""The stages as library functions of (resolved config, run layout): each checks its inputs,
does its work and returns what it wrote. `genret <command>` calls one; `genret pipeline` calls
them in order, in one process, so the prepared dataset is loaded once per run."""

import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np

import rqvae
from data import atomic, prepared, splits
from data.config import amazon_category
from data.environment import environment
from data.errors import ArgumentError, ArtifactError
from data.types import Histories
from experiments import config as config_lib
from experiments.config import Config
from experiments.evaluation import plots, report
from experiments.evaluation import retrieval as retrieval_eval
from experiments.pipeline.artifacts import (
    load_dataset,
    load_json_result,
    load_sids,
    own_leave_one_out,
    parallel_cold_histories,
    split_examples,
    trained_inputs,
)
from experiments.pipeline.layout import RunLayout, Split
from seqmodel.config import SeqModelConfig

# Where the real files live on development machines and in CI (see README).
DEFAULT_AMAZON_ROOT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "amazon2014"


@dataclasses.dataclass(frozen=True)
class Written:
    """What a stage wrote: its artifacts, and a summary for the terminal."""

    paths: tuple[Path, ...]
    summary: dict


def save_config(cfg: Config, layout: RunLayout) -> None:
    """config.json := the config of the last stage that finished (process 0 only)."""
    if jax.process_index() != 0:
        return
    text = json.dumps(config_lib.to_dict(cfg), indent=2) + "\n"
    if not layout.config.is_file() or layout.config.read_text() != text:
        atomic.write_text(layout.config, text)


def raw_dir_of(cfg: Config, layout: RunLayout) -> Path:
    """The folder the prepare stage reads (for synthetic data: generates)."""
    data = cfg.data
    if data.dataset == "synthetic":
        return Path(data.raw_dir) if data.raw_dir else layout.raw
    if data.raw_dir:
        return Path(data.raw_dir)
    if amazon_category(data):
        return DEFAULT_AMAZON_ROOT / amazon_category(data)
    raise ArgumentError(f"--raw-dir: required with --dataset {data.dataset}")


def prepare(cfg: Config, layout: RunLayout, *, progress: bool = True) -> Written:
    """Raw files -> the prepared dataset (reused while the raw files and data config match)."""
    out = prepared.prepare(cfg.data, raw_dir_of(cfg, layout), layout.prepared, progress=progress)
    summary = json.loads((out / "report.json").read_text())
    return Written((out,), {"prepared": str(out), **summary})


def _offline_models() -> None:
    """MiniLM loads from the model files inside its package; never ask a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def train_tokenizer(cfg: Config, layout: RunLayout, *, progress: bool = True) -> Written:
    """Item texts -> embeddings -> RQ-VAE -> SIDs of every item, in the tokenizer directory."""
    from rqvae.pipeline import summary, tokenize_catalog

    ds = load_dataset(layout)
    _offline_models()
    # It reads only what every split of this run trains on; a leave-one-out run ranks the items
    # it leaves out by their first training interaction, a cold-start run leaves the cold set out.
    fractions = cfg.eval.cold_start_fractions if cfg.eval.cold else ()
    metrics = tokenize_catalog(
        cfg.rqvae,
        ds.catalog,
        layout.tokenizer,
        histories=splits.tokenizer_histories(ds, fractions),
        cache_dir=layout.embeddings,
        cold_fraction=max(cfg.eval.cold_start_fractions),
        progress=progress,
    )
    sids, _ = rqvae.load_sids(layout.tokenizer)
    plot = plots.code_usage(sids[:, :-1], cfg.rqvae.codebook_size, layout.code_usage_plot)
    paths = (layout.sids, layout.asins, layout.tokenizer_metrics) + ((plot,) if plot else ())
    return Written(paths, {"tokenizer": str(layout.tokenizer), **summary(metrics)})


def train_retriever(
    cfg: Config, layout: RunLayout, split: Split, *, progress: bool = True
) -> Written:
    """The decoder retriever of `split`, trained (or resumed) in its directory (an ensemble
    member's split: with its own seed). Under seqmodel.self_distill its teachers come first: the
    same config without it (nor seqmodel.sasrec_teacher) at seeds seed, seed + 1, ...
    (seqmodel.distill_teachers), each trained (or resumed) in its teacher directory. Under
    seqmodel.sasrec_teacher, SASRec comes before them (`sasrec_next_items`)."""
    from seqmodel.files import SUMMARY_FILE
    from seqmodel.train import inputs_fingerprint, train_and_evaluate
    from seqmodel.trainer import read_metrics

    if split.kind == "loo":
        own_leave_one_out(cfg, layout)
    ds = load_dataset(layout)
    sids = load_sids(cfg, layout, ds)
    V = rqvae.token_vocab_size(sids, cfg.rqvae.codebook_size)
    seq = split.retriever_config(cfg.seqmodel)
    data = split_examples(ds, sids, split, V, seq)
    next_items = None
    if seq.sasrec_teacher:
        next_items = sasrec_next_items(cfg, layout, split, seq.sasrec_teacher, progress=progress)
    teachers = []
    for j in range(seq.distill_teachers if seq.self_distill else 0):
        teacher = layout.teacher(split, j)
        plain = dataclasses.replace(
            seq, self_distill=0.0, distill_teachers=1, seed=seq.seed + j, sasrec_teacher=0
        )
        # A finished teacher of these inputs is kept (its summary is written when its run ends);
        # any other is resumed, or started over where its inputs differ.
        kept = (teacher / SUMMARY_FILE).is_file() and (
            trained_inputs(teacher) == inputs_fingerprint(plain, data)
        )
        if not kept:
            train_and_evaluate(plain, teacher, data, show_progress=progress)
        teachers.append(teacher)
    result = train_and_evaluate(
        seq,
        layout.retriever(split),
        data,
        show_progress=progress,
        teacher_dirs=teachers,
        next_items=next_items,
    )
    paths = [layout.retriever_summary(split), layout.retriever_model(split)]
    if jax.process_index() == 0:
        rows = read_metrics(layout.retriever_metrics(split))
        plot = plots.loss_curve(rows, layout.retriever_plot(split))
        paths += [plot] if plot else []
    return Written(tuple(paths), {"retriever": str(layout.retriever(split)), **result.summary})


def sasrec_next_items(
    cfg: Config, layout: RunLayout, split: Split, k: int, *, progress: bool = True
):
    """seqmodel.sasrec_teacher: the `sasrec` section's SASRec, trained (or resumed) in
    W/sasrec_loo as `genret sasrec` trains it, and its k most probable next items at every
    position of the leave-one-out training histories (seqmodel.sasrec_teacher.next_item_topk),
    kept beside it for the same run, best step and k."""
    from seqmodel.files import MODEL_FILE
    from seqmodel.sasrec_teacher import NextItemTopK, next_item_topk

    if split.kind != "loo":
        raise ArgumentError(
            f"seqmodel.sasrec_teacher={k}: leave-one-out only (--split loo), not --split "
            f"{split.kind}; set seqmodel.sasrec_teacher=0 for the cold-start splits"
        )
    ds = load_dataset(layout)
    if k > len(ds.catalog):
        raise ArgumentError(
            f"seqmodel.sasrec_teacher={k}: more next items than the {len(ds.catalog)} in the "
            "catalog"
        )
    graphdef, variables, summary, loo = _loo_next_item_model(
        cfg.sasrec, layout.sasrec, ds, model=None, progress=progress
    )
    run = json.loads((layout.sasrec / MODEL_FILE).read_text())
    key = f"{run['inputs']}:{summary['best_step']}:top{k}"
    path = layout.sasrec_next_items(k)
    top = NextItemTopK.load(path, key)
    if top is None:
        top = next_item_topk(
            graphdef,
            variables,
            loo.train,
            max_history=cfg.sasrec.max_history,
            k=k,
            key=key,
            show_progress=progress,
        )
        if jax.process_index() == 0:
            top.save(path)
    return top


def sasrec_teacher(cfg: Config, layout: RunLayout, *, progress: bool = True) -> Written:
    """The pipeline's stage for seqmodel.sasrec_teacher: `sasrec_next_items` before the
    leave-one-out retrievers that read it."""
    k = cfg.seqmodel.sasrec_teacher
    top = sasrec_next_items(cfg, layout, Split("loo"), k, progress=progress)
    return Written((layout.sasrec_next_items(k),), {"positions": int(len(top.items)), "k": k})


def train_parallel_cold(
    cfg: Config, layout: RunLayout, split: Split, *, progress: bool = True
) -> Written:
    """The parallel-codes retriever of a cold-start split (`split`: cold or cold-val), trained
    (or resumed) in WORKDIR/parallel_<split>, for eval-cold-start's `parallel` method
    (eval.cold_parallel); the `parallel` section configures it.

    It trains on what the split's decoder retriever trains on (data.examples.cold_start_histories,
    with the `parallel` section's eval_users and seed): no cold item, and no test user's
    interaction from their target on. Its early stop ranks the whole catalog (the cold items by
    their codes too) after the held-out users' histories for their last training items
    (Recall@10; warm items, never a test interaction). Item codes: `_item_codes`, saved
    beside the checkpoints.
    """
    from seqmodel import sasrec as sasrec_lib
    from seqmodel.parallel import parallel_spec

    if split.kind == "loo":
        raise ArgumentError(
            "--parallel: with --split cold or cold-val; leave-one-out's parallel-codes "
            "retriever is `genret parallel`"
        )
    seq = cfg.parallel
    ds = load_dataset(layout)
    data = parallel_cold_histories(ds, split, seq)
    codes, codes_summary = _item_codes(cfg, layout, ds, (split.fraction,), data.split.cold_mask)
    if jax.process_index() == 0:
        atomic.save_npy(layout.parallel_cold_codes(split), codes)
    run_dir = layout.parallel_cold(split)
    _, _, summary = sasrec_lib.train_and_evaluate(
        seq,
        run_dir,
        data.train,
        data.valid_histories,
        data.valid_targets,
        len(ds.catalog),
        model=parallel_spec(seq, codes),
        show_progress=progress,
    )
    paths = (layout.parallel_cold_summary(split), layout.parallel_cold_codes(split))
    return Written(paths, {"parallel": str(run_dir), **summary, "codes": codes_summary})


def _item_codes(
    cfg: Config,
    layout: RunLayout,
    ds,
    fractions: tuple[float, ...],
    excluded: np.ndarray,
) -> tuple[np.ndarray, dict]:
    """Every item's `parallel.num_codes` codes and their statistics: product quantization of its
    text embedding (rqvae.embedder, cached in WORKDIR/embeddings), so a cold item has codes from
    its text alone. With rqvae.cf_dim, beside the co-occurrence part of the tokenizer's rule:
    counted on the interactions every split of these cold-start `fractions` (none: leave-one-out)
    trains on (data.splits.tokenizer_histories) with the `excluded` items left out, whose vectors
    are then predicted from their text."""
    from rqvae.cooc import cooccurrence_vectors, with_cooccurrence
    from rqvae.embed import embed_texts
    from rqvae.pq import code_stats, fit_product_quantizer

    seq = cfg.parallel
    _offline_models()
    x = embed_texts(ds.catalog.texts, cfg.rqvae, layout.embeddings)
    if cfg.rqvae.cf_dim:
        cf, _ = cooccurrence_vectors(
            splits.tokenizer_histories(ds, fractions),
            x,
            excluded,
            dim=cfg.rqvae.cf_dim,
            window=cfg.rqvae.cf_window,
            seed=cfg.rqvae.seed,
        )
        x = with_cooccurrence(x, cf, cfg.rqvae.cf_weight)
    pq = fit_product_quantizer(
        x,
        num_codes=seq.num_codes,
        codebook_size=seq.codebook_size,
        pca_dim=seq.pca_dim,
        seed=seq.seed,
    )
    codes = pq.encode(x)
    summary = {
        **code_stats(codes),
        "embedder": cfg.rqvae.embedder,
        "cf_dim": cfg.rqvae.cf_dim,
        "pca_explained_variance_ratio": pq.explained_variance_ratio,
    }
    return codes, summary


def evaluate_cold_start(
    cfg: Config,
    layout: RunLayout,
    fraction: float,
    *,
    validation: bool = False,
    batch_size: int = 64,
    progress: bool = True,
) -> Written:
    """Unconstrained vs constrained random vs STATIC over the cold set (or the validation set)."""
    result = retrieval_eval.evaluate_cold_start(
        cfg, layout, fraction, batch_size=batch_size, validation=validation, progress=progress
    )
    return Written((layout.cold_start_result(fraction, validation=validation),), result)


def evaluate_warm(
    cfg: Config,
    layout: RunLayout,
    *,
    batch_size: int = 64,
    validation: bool = False,
    ensemble: Sequence[Path | str] = (),
    holdout_of: Sequence[Path | str] = (),
    progress: bool = True,
) -> Written:
    """TIGER's leave-one-out Recall/NDCG@5/10 of the leave-one-out retriever (`validation`: on
    every user's second-to-last item instead of the last; `ensemble`: averaged with these other
    leave-one-out retrievers of the same SIDs; `holdout_of`: retrievers whose holdouts the
    validation's outside_holdout block also leaves out)."""
    result = retrieval_eval.evaluate_warm(
        cfg,
        layout,
        batch_size=batch_size,
        validation=validation,
        ensemble=ensemble,
        holdout_of=holdout_of,
        progress=progress,
    )
    path = layout.validation_warm_result if validation else layout.warm_result
    return Written((path,), result)


def copy_warm_result(warm: RunLayout, layout: RunLayout) -> Written:
    """The leave-one-out part's results/warm.json (`eval.warm_preset`, run in `warm`) as this
    run's results/warm.json, with the work directory it came from."""
    result = load_json_result(warm.warm_result)
    result["run"] = str(warm.root)
    atomic.write_json(layout.warm_result, result)
    return Written((layout.warm_result,), {"warm": str(layout.warm_result), "run": str(warm.root)})


def write_report(cfg: Config, layout: RunLayout) -> Written:
    """results/report.md (and its plots) from the results present."""
    if not layout.results.is_dir():
        raise ArtifactError(
            f"{layout.results}: no results yet; run `genret pipeline --workdir {layout.root}`"
        )
    paths = report.write_report(cfg, layout)
    return Written(tuple(paths), {"report": str(layout.report)})


def sasrec(
    cfg: Config,
    layout: RunLayout,
    *,
    validation: bool = False,
    holdout_of: Sequence[Path | str] = (),
    progress: bool = True,
) -> Written:
    """The SASRec baseline on TIGER's leave-one-out split: trained (or resumed) on all but each
    user's last two items, early-stopped on a sample of second-to-last items, then ranked over
    the full catalog for every test user (Recall/NDCG@5/10); with `validation`, for every
    user's second-to-last item instead, and the test targets are not read. `holdout_of`: the
    leave-one-out retriever directories whose checkpoint users the validation's
    outside_holdout block also leaves out."""
    out = layout.validation_sasrec_result if validation else layout.sasrec_result
    return _next_item_model(
        cfg,
        layout,
        cfg.sasrec,
        layout.sasrec,
        out,
        "sasrec",
        validation=validation,
        holdout_of=holdout_of,
        progress=progress,
    )


def parallel(
    cfg: Config,
    layout: RunLayout,
    *,
    validation: bool = False,
    holdout_of: Sequence[Path | str] = (),
    progress: bool = True,
) -> Written:
    """The parallel-codes retriever (RPG) on TIGER's leave-one-out split, as `sasrec` trains and
    ranks SASRec: item text embeddings (rqvae.embedder, cached in WORKDIR/embeddings; with
    rqvae.cf_dim, beside the co-occurrence part the tokenizer would add) -> product
    quantization into `parallel.num_codes` codes per item (WORKDIR/parallel_loo/pq_codes.npy)
    -> training -> full-catalog ranking of every test (`validation`: validation) user."""
    from seqmodel.parallel import parallel_spec

    seq = cfg.parallel
    ds = load_dataset(layout)
    # Leave-one-out: no cold-start fraction, no item excluded.
    codes, codes_summary = _item_codes(cfg, layout, ds, (), np.zeros(len(ds.catalog), bool))
    if jax.process_index() == 0:
        atomic.save_npy(layout.parallel_codes, codes)
    out = layout.validation_parallel_result if validation else layout.parallel_result
    return _next_item_model(
        cfg,
        layout,
        seq,
        layout.parallel,
        out,
        "parallel_codes",
        model=parallel_spec(seq, codes),
        extra={"codes": codes_summary},
        validation=validation,
        holdout_of=holdout_of,
        progress=progress,
    )


def _loo_next_item_model(seq: SeqModelConfig, run_dir: Path, ds, *, model, progress: bool):
    """(graphdef, variables, training summary, the leave-one-out split) of a next-item model of
    seqmodel.sasrec's harness (`model`: a ModelSpec; None: SASRec), trained (or resumed) in
    `run_dir` on the split's training histories and early-stopped on a sample of second-to-last
    items (`seq.eval_users`, `seq.seed`)."""
    from data.splits import holdout_rows, leave_one_out
    from seqmodel import sasrec as sasrec_lib

    split = leave_one_out(ds)
    rows = holdout_rows(len(split.valid_targets), seq.eval_users, seq.seed)
    valid_h = Histories.from_lists([split.valid_histories[int(i)] for i in rows])
    graphdef, variables, summary = sasrec_lib.train_and_evaluate(
        seq,
        run_dir,
        split.train,
        valid_h,
        split.valid_targets[rows],
        len(ds.catalog),
        model=model,
        show_progress=progress,
    )
    return graphdef, variables, summary, split


def _next_item_model(
    cfg: Config,
    layout: RunLayout,
    seq: SeqModelConfig,
    run_dir: Path,
    out: Path,
    method: str,
    *,
    model=None,
    extra: dict | None = None,
    validation: bool,
    holdout_of: Sequence[Path | str] = (),
    progress: bool,
) -> Written:
    """Trains (or resumes) a next-item model of seqmodel.sasrec's harness in `run_dir` (`model`:
    a ModelSpec; None: SASRec) on TIGER's leave-one-out split, early-stopped on a sample of
    second-to-last items, ranks the full catalog after every test user's history (validation:
    every user's second-to-last item; the test targets are not read) and writes `out`: the
    ranking metrics of `method`, the same without history items, the training summary.
    `holdout_of` (validation only): retriever directories whose checkpoint users the
    outside_holdout block also leaves out."""
    from data.splits import holdout_rows, leave_one_out, outside_holdouts
    from experiments.evaluation import metrics
    from seqmodel import sasrec as sasrec_lib

    if holdout_of and not validation:
        raise ArgumentError("--holdout-of: only with --validation")
    ds = load_dataset(layout)
    # Read before training, so that a DIR without a retriever is named before any work.
    others = []
    if holdout_of:
        others = retrieval_eval.chosen_on(holdout_of, len(leave_one_out(ds).valid_targets))
    graphdef, variables, summary, split = _loo_next_item_model(
        seq, run_dir, ds, model=model, progress=progress
    )
    rows = holdout_rows(len(split.valid_targets), seq.eval_users, seq.seed)
    if validation:
        histories, targets = split.valid_histories, split.valid_targets
    else:
        histories, targets = split.test_histories, split.test_targets
    start = time.perf_counter()
    ranked = sasrec_lib.encode_items(histories, seq.max_history)
    pred = sasrec_lib.top_k(graphdef, variables, ranked, k=10, batch_size=256)
    seconds = (time.perf_counter() - start) / len(pred)
    # The top 10 among the items not in the user's history (S3-Rec's full-sort protocol, whose
    # SASRec numbers TIGER's Table 1 quotes): one interaction per user and item, so a history
    # item is never a target.
    wide = min(metrics.unseen_depth(histories, 10), len(ds.catalog))
    unseen = metrics.drop_seen(
        sasrec_lib.top_k(graphdef, variables, ranked, k=wide, batch_size=256), histories, 10
    )
    result = {
        "dataset": cfg.data.dataset,
        "split": "validation" if validation else "test",
        "num_test_users": int(len(pred)),
        "methods": {
            method: {
                **metrics.ranking_metrics(pred, targets, ks=(5, 10), ndcg_ks=(5, 10)),
                "latency_ms_median": 1000 * seconds,
            }
        },
        "history_excluded": {
            method: metrics.ranking_metrics(unseen, targets, ks=(5, 10), ndcg_ks=(5, 10))
        },
        "train": summary,
        **(extra or {}),
        "seed": seq.seed,
        "environment": environment(),
    }
    if validation:
        # The users the early stop did not see: their numbers carry no bias from the choice of
        # checkpoint. Runs whose holdouts differ compare on the users outside the larger one
        # (samples of one seed are nested).
        outside = outside_holdouts(np.arange(len(targets)), rows, *others)
        result["outside_holdout"] = {
            "num_users": int(len(outside)),
            method: metrics.ranking_metrics(
                pred[outside], targets[outside], ks=(5, 10), ndcg_ks=(5, 10)
            ),
        }
        if holdout_of:
            result["outside_holdout"]["holdout_of"] = [str(d) for d in holdout_of]
    atomic.write_json(out, result)
    return Written((out,), result)
