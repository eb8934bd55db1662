"""SASRec: the ID-based sequential recommender baseline (causal self-attention over item ids,
scores tied to the item embeddings), trained and ranked over the full catalog in the same harness
as the generative retriever."""

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int
from tqdm.auto import tqdm

from data import atomic, runlock
from data.fingerprint import fingerprint
from data.pipeline import HistorySource, batches, padded_batches
from data.types import Histories
from seqmodel.checkpoint import record_validation, stopped
from seqmodel.config import SeqModelConfig
from seqmodel.files import METRICS_FILE, MODEL_FILE, SUMMARY_FILE
from seqmodel.model import DecoderBlock, RMSNorm, dropout
from seqmodel.state import TrainState, make_optimizer
from seqmodel.train import PatienceChange, append_metrics, start_or_resume

PAD_ITEM = 0  # item i is id i + 1


class SASRec(nnx.Module):
    """Item embedding, causal DecoderBlocks over the item sequence, logits = h . item embeddings."""

    def __init__(self, cfg: SeqModelConfig, num_items: int, *, rngs: nnx.Rngs):
        self.cfg, self.num_items = cfg, num_items
        self.embed = nnx.Embed(num_items + 1, cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([DecoderBlock(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.d_model, rngs=rngs)

    def hidden(
        self, items: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> Float[Array, "B T D"]:
        """The normed state after each position, from which every item is scored."""
        B, T = items.shape
        positions = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
        valid = items != PAD_ITEM
        # Causal over real items; a PAD query sees itself so that its softmax stays finite.
        causal = jnp.tril(jnp.ones((T, T), bool))[None]
        mask = (causal & valid[:, None, :]) | jnp.eye(T, dtype=bool)[None]
        # SASRec drops out the input embeddings too, at the blocks' rate.
        keys = (None,) * (len(self.blocks) + 1)
        if dropout_key is not None:
            keys = jax.random.split(dropout_key, len(self.blocks) + 1)
        x = dropout(self.embed(items), self.cfg.dropout, keys[-1])
        for block, key in zip(self.blocks, keys, strict=False):
            x, _ = block(x, positions, mask, key)
        return self.norm(x)

    def scores(self, h: Float[Array, "*B D"]) -> Float[Array, "*B N"]:
        """Tied output: an item's score is its embedding's dot product with the state (SASRec)."""
        return h @ self.embed.embedding[1:].T

    def __call__(
        self, items: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> Float[Array, "B T N"]:
        """Scores of every catalog item as the next item, at every position."""
        return self.scores(self.hidden(items, dropout_key))


@dataclasses.dataclass(frozen=True)
class NextItems(grain.transforms.Map):
    """A user's last max_len + 1 items -> left-padded inputs, next-item targets, weights."""

    max_len: int

    def map(self, record: dict) -> dict:
        seq = np.asarray(record["items"], np.int32)[-(self.max_len + 1) :] + 1
        inputs = np.full(self.max_len, PAD_ITEM, np.int32)
        targets = np.full(self.max_len, PAD_ITEM, np.int32)
        n = len(seq) - 1
        if n > 0:
            inputs[self.max_len - n :] = seq[:-1]
            targets[self.max_len - n :] = seq[1:]
        return {"inputs": inputs, "targets": targets, "weights": (targets != PAD_ITEM)}


def encode_items(h: Histories, max_len: int) -> Int[np.ndarray, "U T"]:
    """The last max_len items of each history as left-padded ids (item i -> i + 1)."""
    out = np.full((len(h), max_len), PAD_ITEM, np.int32)
    for u in range(len(h)):
        kept = h[u][-max_len:] + 1
        out[u, max_len - len(kept) :] = kept
    return out


def capacity(real: int, slots: int) -> int:
    """How many positions a batch with `real` weighted positions out of `slots` scores: `real`
    rounded up to an eighth of `slots`, so at most eight step shapes ever compile."""
    unit = max(1, -(-slots // 8))
    return min(slots, max(unit, -(-real // unit) * unit))


def loss_fn(
    params: nnx.State,
    graphdef: nnx.GraphDef,
    batch: dict,
    dropout_key: jax.Array | None,
    slots: int,
) -> tuple[Float[Array, ""], dict]:
    """Mean cross-entropy of the next item over the full catalog, at every real position.

    Only the first `slots` real positions (row-major) are scored: the [positions, N] logits are
    most of a step's work, and most positions of a short history's window are padding. The caller
    gives `slots` >= the batch's real positions (`capacity`), so the loss is the full one.
    """
    model = nnx.merge(graphdef, params)
    h_BTD = model.hidden(batch["inputs"], dropout_key)
    B, T, D = h_BTD.shape
    w_P = batch["weights"].reshape(B * T)
    pos_S = jnp.nonzero(w_P, size=slots, fill_value=0)[0]
    logits_SN = model.scores(h_BTD.reshape(B * T, D)[pos_S]).astype(jnp.float32)
    target_S = jnp.maximum(batch["targets"].reshape(B * T)[pos_S] - 1, 0)
    nll_S = optax.softmax_cross_entropy_with_integer_labels(logits_SN, target_S)
    count = w_P.sum()
    # Slots past the real count repeat position 0 (the fill value): weight 0.
    w_S = (jnp.arange(slots) < count).astype(jnp.float32)
    return (nll_S * w_S).sum() / jnp.maximum(count, 1).astype(jnp.float32), {"count": count}


def train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    seed: int,
    state: TrainState,
    batch: dict,
    slots: int,
) -> tuple[TrainState, dict]:
    """One AdamW step; dropout keys derive from (seed, step) so a resumed run replays exactly."""
    key = jax.random.fold_in(jax.random.key(seed), state.step)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, _), grads = grad_fn(state.params, graphdef, batch, key, slots)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), {"loss": loss}


def new_state(cfg: SeqModelConfig, num_items: int, total_steps: int):
    """(graphdef, optimizer, step-0 state) of a fresh SASRec."""
    model = nnx.jit(lambda: SASRec(cfg, num_items, rngs=nnx.Rngs(cfg.seed)))()
    graphdef, params = nnx.split(model)
    tx = make_optimizer(cfg, total_steps)
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    return graphdef, tx, state


@functools.partial(jax.jit, static_argnums=0, static_argnames="k")
def _rank(graphdef: nnx.GraphDef, params: Any, batch: Int[Array, "B T"], *, k: int):
    # Only the last position's state is scored: scoring all T positions and slicing the last one
    # costs T times the matmul (6.7x the time of a 10,000-user Sports validation, BENCHMARKS).
    model = nnx.merge(graphdef, params)
    return jax.lax.top_k(model.scores(model.hidden(batch)[:, -1]), k)[1]


def top_k(
    graphdef: nnx.GraphDef, params: Any, items: Int[np.ndarray, "U T"], *, k: int, batch_size: int
) -> Int[np.ndarray, "U k"]:
    """The k best-scored catalog items after each history (full ranking, no item excluded)."""
    out = [
        np.asarray(_rank(graphdef, params, jax.device_put(b), k=k))
        for b in padded_batches(items, batch_size=batch_size)
    ]
    return np.concatenate(out)[: len(items)]


def _recall(pred: np.ndarray, targets: np.ndarray) -> float:
    return float((pred == targets[:, None]).any(1).mean())


def train_and_evaluate(
    cfg: SeqModelConfig,
    workdir: Path | str,
    train: Histories,
    valid_histories: Histories,
    valid_targets: Int[np.ndarray, " M"],
    num_items: int,
    *,
    stop_after: int | None = None,
    show_progress: bool = True,
) -> tuple[nnx.GraphDef, Any, dict]:
    """Trains (resuming from workdir/checkpoints), validates Recall@10 every eval_every steps,
    early-stops; returns (graphdef, the best parameters, summary)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    source = HistorySource(train)
    steps_per_epoch = len(source) // cfg.batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"sasrec.batch_size={cfg.batch_size} exceeds {len(source)} users")
    total = cfg.max_steps or cfg.num_epochs * steps_per_epoch
    iterator = iter(
        batches(source, NextItems(cfg.max_history), batch_size=cfg.batch_size, seed=cfg.seed)
    )
    graphdef, tx, state = new_state(cfg, num_items, total)
    arrays = (train.items, train.offsets, valid_histories.items, valid_targets)

    def key_at_patience(patience: int) -> str:
        fields = dataclasses.asdict(dataclasses.replace(cfg, patience=patience))
        return fingerprint(fields, num_items, arrays=arrays)

    info = {"sasrec": dataclasses.asdict(cfg), "inputs": key_at_patience(cfg.patience)}
    # The retriever's policy: other inputs retrain from scratch (one line), else resume, with the
    # metrics log cut back to the restored step; a new patience alone resumes the same run.
    ckpts, state, progress, step, seconds_before = start_or_resume(
        workdir,
        MODEL_FILE,
        info,
        state,
        iterator,
        lead=True,
        what="config or data",
        patience_change=PatienceChange("sasrec", cfg.patience, key_at_patience),
    )
    metrics_path = workdir / METRICS_FILE
    step_fn = jax.jit(
        functools.partial(train_step, graphdef, tx, cfg.seed),
        donate_argnames="state",
        static_argnames="slots",
    )
    valid_items = encode_items(valid_histories, cfg.max_history)
    end = total if stop_after is None else min(total, stop_after)
    bar = tqdm(total=total, initial=step, desc="sasrec", unit="step", disable=not show_progress)
    t0, seconds = time.perf_counter(), 0.0
    while step < end and not stopped(progress, cfg.patience):
        batch = next(iterator)
        slots = capacity(int(batch["weights"].sum()), batch["weights"].size)
        state, metrics = step_fn(state, jax.device_put(batch), slots=slots)
        step += 1
        bar.update(1)
        if step % cfg.eval_every == 0 or step == end:
            seconds += time.perf_counter() - t0
            pred = top_k(graphdef, state.params, valid_items, k=10, batch_size=256)
            recall = _recall(pred, valid_targets)
            better = record_validation(progress, step, recall)
            ckpts.save(step, state, iterator, dict(progress), best=better)
            row = {"step": step, "loss": float(metrics["loss"]), "valid_recall@10": recall}
            append_metrics(metrics_path, [{**row, "train_seconds": seconds_before + seconds}])
            bar.set_postfix(loss=f"{float(metrics['loss']):.3f}", recall10=f"{recall:.4f}")
            t0 = time.perf_counter()
    bar.close()
    ckpts.wait()
    best = ckpts.restore_best_params(jax.eval_shape(lambda: state))
    ckpts.close()
    runlock.release(workdir)
    summary = {
        "steps": step,
        "total_steps": total,
        "early_stopped": stopped(progress, cfg.patience),
        "best_step": progress["best_step"],
        "best_valid_recall@10": progress["best_recall"],
        "train_seconds_this_run": seconds,
    }
    atomic.write_json(workdir / SUMMARY_FILE, summary)
    return graphdef, best.params, summary
