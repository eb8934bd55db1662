"""SASRec: the ID-based sequential recommender baseline (causal self-attention over item ids,
scores tied to the item embeddings), trained and ranked over the full catalog in the same harness
as the generative retriever."""

import dataclasses
import functools
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh
from jaxtyping import Array, Float, Int

from data import atomic
from data.fingerprint import fingerprint
from data.pipeline import HistorySource, batches, padded_batches
from data.types import Histories
from seqmodel import sharding
from seqmodel.config import SeqModelConfig
from seqmodel.files import MODEL_FILE, SUMMARY_FILE
from seqmodel.model import DecoderBlock, RMSNorm, dropout
from seqmodel.state import TrainState, make_optimizer
from seqmodel.trainer import PatienceChange, Run, Schedule, Trainer, best_state

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
    graphdef: nnx.GraphDef,
    params: Any,
    items: Int[np.ndarray, "U T"],
    *,
    k: int,
    batch_size: int,
    mesh: Mesh | None = None,
) -> Int[np.ndarray, "U k"]:
    """The k best-scored catalog items after each history (full ranking, no item excluded);
    batches go to the default device, or are split along `mesh`'s `data` axis."""
    put = jax.device_put if mesh is None else functools.partial(sharding.put_batch, mesh=mesh)
    out = [
        jax.device_get(_rank(graphdef, params, put(b), k=k))
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
    source = HistorySource(train)
    steps_per_epoch = len(source) // cfg.batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"sasrec.batch_size={cfg.batch_size} exceeds {len(source)} users")
    total = cfg.max_steps or cfg.num_epochs * steps_per_epoch
    iterator = iter(
        batches(source, NextItems(cfg.max_history), batch_size=cfg.batch_size, seed=cfg.seed)
    )
    graphdef, tx, state = new_state(cfg, num_items, total)
    mesh = sharding.make_mesh()
    sharding.check_batch_size(cfg.batch_size, mesh)
    trainer = Trainer(
        train_step,
        graphdef,
        tx,
        cfg.seed,
        mesh=mesh,
        static_argnames=("slots",),
        static_of=lambda b: {"slots": capacity(int(b["weights"].sum()), b["weights"].size)},
    )
    arrays = (train.items, train.offsets, valid_histories.items, valid_targets)

    def key_at_patience(patience: int) -> str:
        fields = dataclasses.asdict(dataclasses.replace(cfg, patience=patience))
        return fingerprint(fields, num_items, arrays=arrays)

    # The retriever's policy: other inputs retrain from scratch (one line), else resume, with the
    # metrics log cut back to the restored step; a new patience alone resumes the same run.
    run = Run(
        workdir,
        MODEL_FILE,
        {"sasrec": dataclasses.asdict(cfg), "inputs": key_at_patience(cfg.patience)},
        what="config or data",
        patience_change=PatienceChange("sasrec", cfg.patience, key_at_patience),
    )
    valid_items = encode_items(valid_histories, cfg.max_history)

    def validate(state: TrainState) -> dict:
        pred = top_k(graphdef, state.params, valid_items, k=10, batch_size=256, mesh=mesh)
        return {"valid_recall@10": _recall(pred, valid_targets)}

    # One log row per validation: the step's loss beside its recall.
    fitted = trainer.fit(
        state,
        iterator,
        run,
        Schedule(
            total=total, eval_every=cfg.eval_every, patience=cfg.patience, stop_after=stop_after
        ),
        validate=validate,
        score="valid_recall@10",
        row=lambda m: {"loss": float(m["loss"])},
        log_steps=False,
        desc="sasrec",
        show_progress=show_progress,
    )
    best = best_state(workdir, jax.eval_shape(lambda: fitted.state))
    summary = fitted.summary()
    if jax.process_index() == 0:
        atomic.write_json(workdir / SUMMARY_FILE, summary)
    return graphdef, best.params, summary
