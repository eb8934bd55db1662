"""SASRec: the ID-based sequential recommender baseline (causal self-attention over item ids,
scores tied to the item embeddings), and the harness that trains a next-item model over item
positions and ranks the full catalog with it (SASRec, or seqmodel.parallel's ParallelCodes)."""

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh
from jaxtyping import Array, Bool, Float, Int

from data import atomic
from data.errors import ArtifactError
from data.fingerprint import fingerprint
from data.pipeline import (
    HistorySource,
    batches,
    bucket_widths,
    bucketed_batches,
    padded_batches,
)
from data.types import Histories
from seqmodel import sharding
from seqmodel.checkpoint import Checkpoints
from seqmodel.config import HARNESS_LAYOUTS, SeqModelConfig, keyed_fields
from seqmodel.files import CHECKPOINTS_DIR, MODEL_FILE, SUMMARY_FILE
from seqmodel.model import DecoderBlock, RMSNorm, dropout
from seqmodel.state import TrainState, make_optimizer
from seqmodel.trainer import PatienceChange, Run, Schedule, Trainer, best_state

PAD_ITEM = 0  # item i is id i + 1
NEGATIVES_STREAM = 1  # folded into a step's key for its sampled negatives


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
        x = self.embed(items)
        valid = items != PAD_ITEM
        return item_states(self.blocks, self.norm, x, valid, self.cfg.dropout, dropout_key)

    def scores(self, h: Float[Array, "*B D"]) -> Float[Array, "*B N"]:
        """Tied output: an item's score is its embedding's dot product with the state (SASRec)."""
        return h @ self.embed.embedding[1:].T

    def next_item_nll(self, h: Float[Array, "S D"], items: Int[Array, " S"]) -> Float[Array, " S"]:
        """-log p(item | state) under the softmax over the full catalog."""
        logits_SN = self.scores(h).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits_SN, items)

    def sampled_nll(
        self, h: Float[Array, "S D"], items: Int[Array, " S"], negatives: Int[Array, " K"]
    ) -> Float[Array, " S"]:
        """-log of the target's share of a softmax over it and the `negatives` (K distinct
        catalog items drawn uniformly), each negative's score raised by log(N / K): item j != target
        is drawn with probability K / N, so their exp-sum estimates the rest of the catalog's.
        A negative that is the position's own target is left out. With all N items as negatives
        this is `next_item_nll`."""
        table = self.embed.embedding[1:]
        target_S = jnp.einsum("sd,sd->s", h, table[items]).astype(jnp.float32)
        neg_SK = (h @ table[negatives].T).astype(jnp.float32)
        neg_SK = neg_SK + jnp.log(self.num_items / negatives.shape[0])
        neg_SK = jnp.where(negatives[None, :] == items[:, None], -jnp.inf, neg_SK)
        all_SK = jnp.concatenate([target_S[:, None], neg_SK], axis=1)
        return jax.nn.logsumexp(all_SK, axis=1) - target_S

    def __call__(
        self, items: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> Float[Array, "B T N"]:
        """Scores of every catalog item as the next item, at every position."""
        return self.scores(self.hidden(items, dropout_key))


def item_states(
    blocks: nnx.List,
    norm: RMSNorm,
    x: Float[Array, "B T D"],
    valid: Bool[Array, "B T"],
    rate: float,
    dropout_key: jax.Array | None,
) -> Float[Array, "B T D"]:
    """DecoderBlocks over the item vectors `x` (dropped out at `rate`), causal over the `valid`
    positions, then `norm`."""
    B, T = valid.shape
    positions = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
    # Causal over real items; a PAD query sees itself so that its softmax stays finite.
    causal = jnp.tril(jnp.ones((T, T), bool))[None]
    mask = (causal & valid[:, None, :]) | jnp.eye(T, dtype=bool)[None]
    # SASRec drops out the input vectors too (at the blocks' rate).
    keys = (None,) * (len(blocks) + 1)
    if dropout_key is not None:
        keys = jax.random.split(dropout_key, len(blocks) + 1)
    x = dropout(x, rate, keys[-1])
    for block, key in zip(blocks, keys, strict=False):
        x, _ = block(x, positions, mask, key)
    return norm(x)


@dataclasses.dataclass(frozen=True, eq=False)
class ModelSpec:
    """The next-item model the harness trains: `build(rngs)` makes it (a module with `hidden`,
    `scores` and `next_item_nll`); `section` names its config section in messages and in the
    run's info file; `arrays` are its constant inputs (a codes table), in the run's inputs
    fingerprint beside the data, so that other ones retrain from scratch."""

    section: str
    build: Callable[[nnx.Rngs], nnx.Module]
    arrays: tuple[np.ndarray, ...] = ()


def sasrec_spec(cfg: SeqModelConfig, num_items: int) -> ModelSpec:
    """SASRec over `num_items` item ids, configured by the `sasrec` section."""
    return ModelSpec("sasrec", lambda rngs: SASRec(cfg, num_items, rngs=rngs))


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


def batch_slots(batch: dict) -> int:
    """`capacity` of a host batch: its weighted positions out of all its positions (the static
    `slots` argument of `train_step`)."""
    return capacity(int(batch["weights"].sum()), batch["weights"].size)


def loss_fn(
    params: nnx.State,
    graphdef: nnx.GraphDef,
    batch: dict,
    dropout_key: jax.Array | None,
    slots: int,
    consts: nnx.State | None = None,
) -> tuple[Float[Array, ""], dict]:
    """Mean next-item loss (the model's `next_item_nll`) at every real position; `consts` are
    the model's untrained variables (a codes table), none for SASRec. In training (a dropout
    key given) with `sampled_negatives` > 0, SASRec's `sampled_nll` over that many items drawn
    from a key of its own.

    Only the first `slots` real positions (row-major) are scored: the [positions, N] logits (or
    [positions, M, V] code logits) are most of a step's work, and most positions of a short
    history's window are padding. The caller gives `slots` >= the batch's real positions
    (`capacity`), so the loss is the full one.
    """
    model = nnx.merge(graphdef, params) if consts is None else nnx.merge(graphdef, params, consts)
    h_BTD = model.hidden(batch["inputs"], dropout_key)
    B, T, D = h_BTD.shape
    w_P = batch["weights"].reshape(B * T)
    pos_S = jnp.nonzero(w_P, size=slots, fill_value=0)[0]
    target_S = jnp.maximum(batch["targets"].reshape(B * T)[pos_S] - 1, 0)
    h_SD = h_BTD.reshape(B * T, D)[pos_S]
    k = model.cfg.sampled_negatives
    if k and dropout_key is not None:
        key = jax.random.fold_in(dropout_key, NEGATIVES_STREAM)
        negatives_K = jax.random.choice(key, model.num_items, (k,), replace=False)
        nll_S = model.sampled_nll(h_SD, target_S, negatives_K)
    else:
        nll_S = model.next_item_nll(h_SD, target_S)
    count = w_P.sum()
    # Slots past the real count repeat position 0 (the fill value): weight 0.
    w_S = (jnp.arange(slots) < count).astype(jnp.float32)
    # Bucketed batches carry `norm`, the mean real positions of a row over all users: dividing
    # by its sum, not by this batch's count, weighs a position the same in a batch of short
    # histories as in one of long ones (as random batches do on average).
    denom = batch["norm"].sum() if "norm" in batch else count.astype(jnp.float32)
    nll_sum = (nll_S * w_S).sum()
    mean_nll = nll_sum / jnp.maximum(count, 1).astype(jnp.float32)
    return nll_sum / jnp.maximum(denom, 1.0), {"count": count, "mean_nll": mean_nll}


def train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    seed: int,
    state: TrainState,
    batch: dict,
    consts: nnx.State,
    slots: int,
) -> tuple[TrainState, dict]:
    """One AdamW step; dropout keys derive from (seed, step) so a resumed run replays exactly."""
    key = jax.random.fold_in(jax.random.key(seed), state.step)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (_, aux), grads = grad_fn(state.params, graphdef, batch, key, slots, consts)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # The logged loss is the batch's mean NLL per real position: the objective itself, in the
    # bucketed layout, scales with how long the batch's histories are.
    new = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
    return new, {"loss": aux["mean_nll"]}


def new_state(
    cfg: SeqModelConfig, num_items: int, total_steps: int, model: ModelSpec | None = None
) -> tuple[nnx.GraphDef, optax.GradientTransformation, TrainState, nnx.State]:
    """(graphdef, optimizer, step-0 state, untrained variables) of a fresh `model` (SASRec by
    default): the optimizer updates the parameters alone."""
    spec = sasrec_spec(cfg, num_items) if model is None else model
    module = nnx.jit(lambda: spec.build(nnx.Rngs(cfg.seed)))()
    graphdef, params, consts = nnx.split(module, nnx.Param, ...)
    tx = make_optimizer(cfg, total_steps)
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    return graphdef, tx, state, consts


@functools.partial(jax.jit, static_argnums=0, static_argnames="k")
def _rank(graphdef: nnx.GraphDef, variables: Any, batch: Int[Array, "B T"], *, k: int):
    # Only the last position's state is scored: scoring all T positions and slicing the last one
    # costs T times the matmul (6.7x the time of a 10,000-user Sports validation, BENCHMARKS).
    model = nnx.merge(graphdef, variables)
    return jax.lax.top_k(model.scores(model.hidden(batch)[:, -1]), k)[1]


def top_k(
    graphdef: nnx.GraphDef,
    variables: Any,
    items: Int[np.ndarray, "U T"],
    *,
    k: int,
    batch_size: int,
    mesh: Mesh | None = None,
) -> Int[np.ndarray, "U k"]:
    """The k best-scored catalog items after each history (full ranking, no item excluded) by
    the model of `graphdef` and `variables` (its parameters and constants); batches go to the
    default device, or are split along `mesh`'s `data` axis."""
    put = jax.device_put if mesh is None else functools.partial(sharding.put_batch, mesh=mesh)
    out = [
        jax.device_get(_rank(graphdef, variables, put(b), k=k))
        for b in padded_batches(items, batch_size=batch_size)
    ]
    return np.concatenate(out)[: len(items)]


def _recall(pred: np.ndarray, targets: np.ndarray) -> float:
    return float((pred == targets[:, None]).any(1).mean())


def _input_arrays(
    train: Histories, valid_histories: Histories, valid_targets: np.ndarray, spec: ModelSpec
) -> tuple[np.ndarray, ...]:
    return (train.items, train.offsets, valid_histories.items, valid_targets, *spec.arrays)


def _inputs_key(cfg: SeqModelConfig, num_items: int, arrays: tuple[np.ndarray, ...]) -> str:
    """A run's inputs fingerprint (its info file's `inputs`): config, catalog size, data."""
    return fingerprint(keyed_fields(cfg), num_items, arrays=arrays)


def training_batches(cfg: SeqModelConfig, train: Histories, section: str = "sasrec"):
    """(endless iterator of next-item batches in `cfg.layout`, steps per epoch)."""
    if cfg.layout not in HARNESS_LAYOUTS:
        raise ValueError(
            f"{section}.layout={cfg.layout!r}: this model trains in one of {HARNESS_LAYOUTS}"
        )
    source, transform = HistorySource(train), NextItems(cfg.max_history)
    if cfg.layout == "bucketed":
        # A row's real inputs: all but its last item, at most max_history (at least one, so
        # that no bucket is zero wide).
        lengths = np.clip(train.lengths() - 1, 1, cfg.max_history)
        widths = bucket_widths(lengths)
        try:
            ds, steps = bucketed_batches(
                source, transform, lengths, widths, batch_size=cfg.batch_size, seed=cfg.seed, unit=1
            )
        except ValueError:
            raise ValueError(
                f"{section}.batch_size={cfg.batch_size} exceeds every length bucket's users "
                f"({section}.layout=bucketed)"
            ) from None
        return iter(ds), steps
    steps = len(source) // cfg.batch_size
    if steps == 0:
        raise ValueError(f"{section}.batch_size={cfg.batch_size} exceeds {len(source)} users")
    return iter(batches(source, transform, batch_size=cfg.batch_size, seed=cfg.seed)), steps


def train_and_evaluate(
    cfg: SeqModelConfig,
    workdir: Path | str,
    train: Histories,
    valid_histories: Histories,
    valid_targets: Int[np.ndarray, " M"],
    num_items: int,
    *,
    model: ModelSpec | None = None,
    stop_after: int | None = None,
    show_progress: bool = True,
) -> tuple[nnx.GraphDef, Any, dict]:
    """Trains `model` (SASRec by default; resuming from workdir/checkpoints), validates
    Recall@10 every eval_every steps, early-stops; returns (graphdef, the best checkpoint's
    variables: parameters and constants, summary)."""
    workdir = Path(workdir)
    spec = sasrec_spec(cfg, num_items) if model is None else model
    if cfg.sampled_negatives >= num_items:
        raise ValueError(
            f"{spec.section}.sampled_negatives={cfg.sampled_negatives} must be under the "
            f"catalog's {num_items} items"
        )
    iterator, steps_per_epoch = training_batches(cfg, train, spec.section)
    total = cfg.max_steps or cfg.num_epochs * steps_per_epoch
    graphdef, tx, state, consts = new_state(cfg, num_items, total, spec)
    mesh = sharding.make_mesh()
    sharding.check_batch_size(cfg.batch_size, mesh)
    trainer = Trainer(
        train_step,
        graphdef,
        tx,
        cfg.seed,
        mesh=mesh,
        args={"consts": consts},
        static_argnames=("slots",),
        static_of=lambda b: {"slots": batch_slots(b)},
    )
    consts = trainer.replicate(consts)
    arrays = _input_arrays(train, valid_histories, valid_targets, spec)

    def key_at_patience(patience: int) -> str:
        return _inputs_key(dataclasses.replace(cfg, patience=patience), num_items, arrays)

    # The retriever's policy: other inputs retrain from scratch (one line), else resume, with the
    # metrics log cut back to the restored step; a new patience alone resumes the same run.
    run = Run(
        workdir,
        MODEL_FILE,
        {spec.section: dataclasses.asdict(cfg), "inputs": key_at_patience(cfg.patience)},
        what="config or data",
        patience_change=PatienceChange(spec.section, cfg.patience, key_at_patience),
    )
    valid_items = encode_items(valid_histories, cfg.max_history)

    def validate(state: TrainState) -> dict:
        variables = nnx.merge_state(state.params, consts)
        pred = top_k(graphdef, variables, valid_items, k=10, batch_size=256, mesh=mesh)
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
        desc=spec.section,
        show_progress=show_progress,
    )
    best = best_state(workdir, jax.eval_shape(lambda: fitted.state))
    summary = fitted.summary()
    if jax.process_index() == 0:
        atomic.write_json(workdir / SUMMARY_FILE, summary)
    return graphdef, nnx.merge_state(best.params, consts), summary


def load_trained(
    cfg: SeqModelConfig,
    workdir: Path | str,
    train: Histories,
    valid_histories: Histories,
    valid_targets: Int[np.ndarray, " M"],
    num_items: int,
    *,
    model: ModelSpec | None = None,
    rebuild: str,
) -> tuple[nnx.GraphDef, Any]:
    """(graphdef, the best checkpoint's variables) of the finished run that `train_and_evaluate`
    made in `workdir` from exactly these arguments, restored read-only, never trained; else an
    ArtifactError naming `workdir` and `rebuild`, the command that trains it."""
    workdir = Path(workdir)
    spec = sasrec_spec(cfg, num_items) if model is None else model
    try:
        info = json.loads((workdir / MODEL_FILE).read_text())
    except (OSError, ValueError):
        info = None
    if not isinstance(info, dict) or not (workdir / SUMMARY_FILE).is_file():
        raise ArtifactError(f"{workdir}: no finished {spec.section} run; train it: `{rebuild}`")
    arrays = _input_arrays(train, valid_histories, valid_targets, spec)
    if info.get("inputs") != _inputs_key(cfg, num_items, arrays):
        raise ArtifactError(
            f"{workdir}: trained on other data or another {spec.section} config than these (its "
            f"inputs fingerprint differs); retrain it: `{rebuild}`"
        )
    # The optimizer's state has the same shape whatever the schedule's length.
    graphdef, _, state, consts = new_state(cfg, num_items, 1, spec)
    ckpts = Checkpoints(workdir / CHECKPOINTS_DIR, read_only=True, rebuild=rebuild)
    try:
        best = ckpts.restore_best_params(jax.eval_shape(lambda: state))
    except FileNotFoundError as e:
        raise ArtifactError(f"{e}: `{rebuild}`") from None
    finally:
        ckpts.close()
    return graphdef, nnx.merge_state(best.params, consts)
