"""Retriever training: data from the cold-start split, one jitted step, validation, checkpoints."""

import dataclasses
import functools
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int
from tqdm.auto import tqdm

from data import atomic
from data.pipeline import HistorySource, batches, pad_rows
from data.splits import cold_start_split, holdout_last, leave_one_out, validation_split
from data.types import Histories, InteractionData
from decoding import BeamResult, LevelScoring, StaticConstraint, StaticIndex, beam_search
from seqmodel import sharding
from seqmodel.checkpoint import Checkpoints
from seqmodel.config import SeqModelConfig
from seqmodel.model import Decoder, token_log_likelihood
from seqmodel.tokens import (
    PAD,
    TokenizeExample,
    TokenSpace,
    WindowSource,
    encode_histories,
    sid_tokens,
)

MODEL_FILE = "retriever.json"


@dataclasses.dataclass(frozen=True)
class RetrieverData:
    """What training needs: item SIDs, training histories and a validation holdout."""

    sids: np.ndarray  # int32 [N, L+1]
    codebook_size: int  # V
    train: Histories
    valid_histories: Histories
    valid_targets: np.ndarray  # int32 [M]
    allowed: np.ndarray  # bool [N]: items a validation beam may return (the non-cold ones)


def check_sids_match(
    asins: list[str],
    catalog_asins,
    tokenizer_dir: Path | str,
    *,
    sids: np.ndarray | None = None,
    codebook_size: int | None = None,
) -> None:
    """The tokenizer's item order must be the prepared catalog's, else SIDs name wrong items."""
    if sids is not None and codebook_size is not None:
        # The code levels must fit the codebook; the last (collision) level may count past it.
        codes = np.asarray(sids)[:, :-1]
        if codes.size and codes.max() >= codebook_size:
            raise ValueError(
                f"{tokenizer_dir}/sids.npy: codes reach {codes.max()}, but the config's "
                f"rqvae.codebook_size is {codebook_size}; retrain the tokenizer with this config"
            )
    catalog = [str(a) for a in catalog_asins]
    if len(asins) != len(catalog):
        raise ValueError(
            f"{tokenizer_dir}: {len(asins)} SIDs for a prepared catalog of {len(catalog)} items; "
            "retrain the tokenizer on this prepared dataset"
        )
    bad = next((i for i, (a, b) in enumerate(zip(asins, catalog, strict=True)) if a != b), None)
    if bad is not None:
        raise ValueError(
            f"{tokenizer_dir}/asins.txt line {bad + 1}: {asins[bad]!r}, but the prepared "
            f"catalog has {catalog[bad]!r}; retrain the tokenizer on this prepared dataset"
        )


def cold_start_data(
    ds: InteractionData,
    sids: np.ndarray,
    *,
    codebook_size: int,
    fraction: float,
    cfg: SeqModelConfig,
    validation: bool = False,
) -> RetrieverData:
    """Training histories without any cold-start item, minus a validation holdout of last items.

    validation=True trains for the tuning protocol (data.splits.validation_split): the real cold
    items are gone and the newest remaining items play the cold set.
    """
    split = (validation_split if validation else cold_start_split)(ds, fraction)
    train, valid_h, valid_t = holdout_last(split.train, max_users=cfg.eval_users, seed=cfg.seed)
    return RetrieverData(
        sids=np.asarray(sids, np.int32),
        codebook_size=codebook_size,
        train=train,
        valid_histories=valid_h,
        valid_targets=valid_t,
        allowed=~split.cold_mask,
    )


def loo_data(
    ds: InteractionData, sids: np.ndarray, *, codebook_size: int, cfg: SeqModelConfig
) -> RetrieverData:
    """Leave-one-out (TIGER): train on all but the last two items; validate on a seeded sample of
    eval_users second-to-last items (never a test target); every item allowed."""
    split = leave_one_out(ds)
    rng = np.random.default_rng(cfg.seed)
    rows = np.sort(rng.permutation(len(split.valid_targets))[: cfg.eval_users])
    return RetrieverData(
        sids=np.asarray(sids, np.int32),
        codebook_size=codebook_size,
        train=split.train,
        valid_histories=Histories.from_lists([split.valid_histories[int(i)] for i in rows]),
        valid_targets=split.valid_targets[rows].astype(np.int32),
        allowed=np.ones(len(sids), bool),
    )


@flax.struct.dataclass
class TrainState:
    """Step, parameters and optimizer state; leaves are Any since tree maps hold specs or None."""

    step: Any  # int32 scalar
    params: Any  # nnx.State
    opt_state: Any  # optax.OptState


def make_optimizer(cfg: SeqModelConfig, total_steps: int) -> optax.GradientTransformation:
    """AdamW with linear warmup then cosine decay to 10%, after global-norm clipping."""
    warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, cfg.learning_rate, warmup, max(total_steps, warmup + 1), cfg.learning_rate * 0.1
    )
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(schedule, weight_decay=cfg.weight_decay),
    )


def loss_fn(
    params: nnx.State, graphdef: nnx.GraphDef, batch: dict, dropout_key: jax.Array | None
) -> tuple[Float[Array, ""], dict]:
    """Mean negative log-likelihood of the weighted target tokens."""
    model = nnx.merge(graphdef, params)
    logits = model.target_logits(batch["inputs"], dropout_key)
    ll = token_log_likelihood(logits, batch["targets"], model.space)
    w = batch["weights"]
    count = w.sum()
    nll_sum = -(ll * w).sum()
    return nll_sum / jnp.maximum(count, 1.0), {"nll_sum": nll_sum, "count": count}


def train_step(graphdef, tx, seed: int, state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    """One AdamW step; dropout keys derive from (seed, step) so a resumed run replays exactly."""
    key = jax.random.fold_in(jax.random.key(seed), state.step)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, aux), grads = grad_fn(state.params, graphdef, batch, key)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {
        "loss": loss,
        "grad_norm": optax.tree.norm(grads),
        "tokens": (batch["inputs"] != PAD).sum(),
        **aux,
    }
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


def decode(
    graphdef: nnx.GraphDef,
    params,
    tokens: Int[Array, "B T"],
    constraint,
    beam_size: int,
    scoring: LevelScoring | None = None,
) -> BeamResult:
    """Prefill + beam search over the model's step function (call inside jax.jit)."""
    model = nnx.merge(graphdef, params)
    log_probs, cache = model.prefill(tokens)
    return beam_search(
        model.step,
        log_probs,
        cache,
        constraint,
        beam_size=beam_size,
        num_levels=model.space.num_levels,
        scoring=scoring,
    )


def recall_at_k(
    decode_fn, params, tokens: np.ndarray, target_sids: np.ndarray, *, batch_size: int, mesh
) -> float:
    """Fraction of rows whose target SID is among the valid beams (last batch padded, trimmed)."""
    U = len(tokens)
    tokens, targets = pad_rows(tokens, batch_size), pad_rows(target_sids, batch_size)
    hits = []
    for b in range(0, len(tokens), batch_size):
        res = decode_fn(params, sharding.put_batch(tokens[b : b + batch_size], mesh))
        beams, valid = jax.device_get((res.tokens, res.valid))
        same = (beams == targets[b : b + batch_size, None, :]).all(-1)
        hits.append((same & valid).any(-1))
    return float(np.concatenate(hits)[:U].mean())


def init_model(cfg: SeqModelConfig, space: TokenSpace) -> Decoder:
    """A fresh Decoder; built under jit (eager init compiles every random op separately)."""
    return nnx.jit(lambda: Decoder(cfg, space, rngs=nnx.Rngs(cfg.seed)))()


def training_source(cfg: SeqModelConfig, h: Histories):
    """One record per user (causal layout) or per (user, target position) (sliding layout)."""
    return HistorySource(h) if cfg.layout == "causal" else WindowSource(h, cfg.max_history)


@dataclasses.dataclass
class TrainResult:
    """The final training state and the run summary written to train_summary.json."""

    state: TrainState
    summary: dict


def inputs_fingerprint(cfg: SeqModelConfig, data: RetrieverData) -> str:
    """Hash of the config, SIDs and split: a checkpoint resumes only under the same inputs."""
    h = hashlib.sha256(json.dumps(dataclasses.asdict(cfg), sort_keys=True).encode())
    for a in (data.sids, data.train.items, data.train.offsets, data.valid_targets, data.allowed):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _start_over_if_inputs_changed(workdir: Path, info: dict, lead: bool) -> None:
    """A changed config, tokenizer or split makes old checkpoints meaningless: drop them."""
    path = workdir / MODEL_FILE
    if not path.exists() or json.loads(path.read_text()).get("inputs") == info["inputs"]:
        return
    if lead:
        tqdm.write(f"{workdir}: config, SIDs or split changed since the last run; starting over")
        shutil.rmtree(workdir / "checkpoints", ignore_errors=True)
        (workdir / "metrics.jsonl").unlink(missing_ok=True)
        path.unlink()


def _read_metrics(path: Path, upto_step: int) -> list[dict]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["step"] <= upto_step]


def _append(path: Path, rows: list[dict]) -> None:
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def train_and_evaluate(
    cfg: SeqModelConfig,
    workdir: Path | str,
    data: RetrieverData,
    *,
    stop_after: int | None = None,
    mesh=None,
    show_progress: bool = True,
) -> TrainResult:
    """Trains (resuming from workdir/checkpoints), validates Recall@K, early-stops, checkpoints.

    `stop_after` ends the run after that many steps in total, as a kill would (tests of resume).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    mesh = sharding.make_mesh() if mesh is None else mesh
    sharding.check_batch_size(cfg.batch_size, mesh)
    V = data.codebook_size
    space = TokenSpace(num_levels=data.sids.shape[1], codebook_size=V)
    item_tokens = sid_tokens(data.sids, V)
    source = training_source(cfg, data.train)
    steps_per_epoch = len(source) // cfg.batch_size
    if steps_per_epoch == 0:
        raise ValueError(
            f"seqmodel.batch_size={cfg.batch_size} exceeds the {len(source)} training examples"
        )
    total = cfg.max_steps or cfg.num_epochs * steps_per_epoch
    transform = TokenizeExample(item_tokens, cfg.max_history, cfg.layout)
    iterator = iter(batches(source, transform, batch_size=cfg.batch_size, seed=cfg.seed))

    model = init_model(cfg, space)
    graphdef, params = nnx.split(model)
    tx = make_optimizer(cfg, total)
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    state = jax.device_put(state, sharding.replicated(mesh))
    # Several hosts: every process trains; only process 0 writes the run's files.
    lead = jax.process_index() == 0
    info = {
        "seqmodel": dataclasses.asdict(cfg),
        "num_levels": space.num_levels,
        "codebook_size": V,
        "inputs": inputs_fingerprint(cfg, data),
    }
    _start_over_if_inputs_changed(workdir, info, lead)
    ckpts = Checkpoints(workdir / "checkpoints")
    progress = {"best_recall": -1.0, "best_step": 0, "bad_evals": 0, "stopped": False}
    if ckpts.latest_step() is not None:
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
        )
        state, progress = ckpts.restore_latest(abstract, iterator)
    step = int(jax.device_get(state.step))
    if lead:
        atomic.write_json(workdir / MODEL_FILE, info)
    metrics_path = workdir / "metrics.jsonl"
    rows = _read_metrics(metrics_path, step)
    if lead:
        atomic.write_text(metrics_path, "".join(json.dumps(r) + "\n" for r in rows))

    step_fn = jax.jit(
        functools.partial(train_step, graphdef, tx, cfg.seed), donate_argnames="state"
    )
    # The index is replicated on every device (STATIC appendix A.3), passed as an argument.
    constraint = jax.device_put(
        StaticConstraint(StaticIndex.build(data.sids[data.allowed], vocab_size=V)),
        sharding.replicated(mesh),
    )
    decode_jit = jax.jit(lambda p, c, t: decode(graphdef, p, t, c, cfg.eval_beam_size))

    def decode_fn(p, t):
        return decode_jit(p, constraint, t)

    valid_tokens = encode_histories(item_tokens, data.valid_histories, cfg.max_history)
    valid_sids = data.sids[data.valid_targets]
    eval_batch = max(len(jax.devices()), min(256, cfg.batch_size))

    def validate_and_save(step: int) -> dict:
        recall = recall_at_k(
            decode_fn, state.params, valid_tokens, valid_sids, batch_size=eval_batch, mesh=mesh
        )
        better = recall > progress["best_recall"]
        if better:
            progress.update(best_recall=recall, best_step=step, bad_evals=0)
        else:
            progress["bad_evals"] += 1
        progress["stopped"] = progress["bad_evals"] >= cfg.patience
        ckpts.save(step, state, iterator, dict(progress), best=better)
        return {"step": step, f"valid_recall@{cfg.eval_beam_size}": recall}

    end = total if stop_after is None else min(total, stop_after)
    bar = tqdm(total=total, initial=step, desc="train", unit="step", disable=not show_progress)
    pending, window, train_seconds, tokens_seen = None, [], 0.0, 0
    t0 = time.perf_counter()
    # Implicit host<->device copies in the hot loop are bugs (a stray float() or numpy operand).
    with jax.transfer_guard("disallow"):
        while step < end and not progress["stopped"]:
            batch = sharding.put_batch(next(iterator), mesh)
            state, metrics = step_fn(state, batch)
            step += 1
            if pending is not None:
                window.append(_host_row(*pending))
            pending = (step, metrics)
            if step % cfg.eval_every == 0 or step == end:
                window.append(_host_row(*pending))
                pending = None
                # Per-window throughput (non-PAD input tokens), validation time excluded.
                seconds = time.perf_counter() - t0
                tokens = sum(r.pop("tokens") for r in window)
                train_seconds, tokens_seen = train_seconds + seconds, tokens_seen + tokens
                tps = tokens / max(seconds, 1e-9)
                window[-1]["tokens_per_s"] = tps
                window.append(validate_and_save(step))
                if lead:
                    _append(metrics_path, window)
                bar.set_postfix(
                    loss=f"{window[-2]['loss']:.3f}",
                    tok_s=f"{tps:,.0f}",
                    recall=f"{window[-1][f'valid_recall@{cfg.eval_beam_size}']:.3f}",
                )
                window = []
                t0 = time.perf_counter()
            elif step % 10 == 0 and window:
                tps = sum(r["tokens"] for r in window) / max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix(loss=f"{window[-1]['loss']:.3f}", tok_s=f"{tps:,.0f}")
            bar.update(1)
    bar.close()
    ckpts.wait()
    ckpts.close()
    rows = _read_metrics(metrics_path, step)
    summary = {
        "steps": step,
        "total_steps": total,
        "steps_per_epoch": steps_per_epoch,
        "early_stopped": progress["stopped"],
        "best_step": progress["best_step"],
        f"best_valid_recall@{cfg.eval_beam_size}": progress["best_recall"],
        "train_seconds_this_run": train_seconds,
        "tokens_per_s_this_run": tokens_seen / max(train_seconds, 1e-9),
        "devices": int(mesh.devices.size),
    }
    if lead:
        atomic.write_json(workdir / "train_summary.json", summary)
        plot_losses(rows, workdir / "loss.png")
    return TrainResult(state=state, summary=summary)


def _host_row(step: int, metrics: dict) -> dict:
    m = jax.device_get(metrics)
    return {
        "step": step,
        "loss": float(m["loss"]),
        "grad_norm": float(m["grad_norm"]),
        "tokens": int(m["tokens"]),
    }


def plot_losses(rows: list[dict], path: Path) -> None:
    """Training loss per step and validation recall, one PNG (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    evals = [(r["step"], v) for r in rows for k, v in r.items() if k.startswith("valid_recall")]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    if train:
        ax.plot(*zip(*train, strict=True), lw=0.8, label="train loss (nats/token)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if evals:
        ax2 = ax.twinx()
        ax2.plot(*zip(*evals, strict=True), "o-", color="C1", label="valid Recall@K")
        ax2.set_ylabel("valid Recall@K")
    fig.legend(loc="upper right")
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def load_retriever(retriever_dir: Path | str) -> Decoder:
    """The best checkpoint's model from a `train_and_evaluate` work directory."""
    retriever_dir = Path(retriever_dir)
    path = retriever_dir / MODEL_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no trained retriever; run `genret train-retriever` first")
    info = json.loads(path.read_text())
    cfg = SeqModelConfig(**info["seqmodel"])
    space = TokenSpace(num_levels=info["num_levels"], codebook_size=info["codebook_size"])
    graphdef, params = nnx.split(init_model(cfg, space))
    tx = make_optimizer(cfg, 1)  # only the optimizer state's structure matters here
    abstract = jax.eval_shape(
        lambda p: TrainState(step=jnp.zeros((), jnp.int32), params=p, opt_state=tx.init(p)), params
    )
    ckpts = Checkpoints(retriever_dir / "checkpoints")
    try:
        state = ckpts.restore_best_params(abstract)
    finally:
        ckpts.close()
    return nnx.merge(graphdef, state.params)


def retrieval_fn(
    model: Decoder, constraint, *, beam_size: int, scoring: LevelScoring | None = None
):
    """A jitted `tokens [B, T] -> (beam SIDs [B, K, L], scores [B, K], valid [B, K])`; beams are
    ranked by `scoring` when given (decoding.scoring), else by their joint log-probability."""
    graphdef, params = nnx.split(model)
    fn = jax.jit(lambda p, c, s, t: decode(graphdef, p, t, c, beam_size, s))

    def run(tokens):
        result = fn(params, constraint, scoring, jnp.asarray(tokens))
        return result.tokens, result.scores, result.valid

    return run
