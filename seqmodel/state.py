"""The retriever's train state and its one factory: model, AdamW schedule and optimizer state,
used alike to start training, to restore a checkpoint and to load a trained retriever."""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from seqmodel.config import SeqModelConfig
from seqmodel.item_model import ItemDecoder
from seqmodel.model import Decoder
from seqmodel.tokens import TokenSpace

# A trained retriever of either architecture (seqmodel.arch): both prefill, step and train alike.
Retriever = Decoder | ItemDecoder


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


def init_model(cfg: SeqModelConfig, space: TokenSpace) -> Retriever:
    """A fresh retriever of `cfg.arch`; built under jit (eager init compiles every random op
    separately)."""
    cls = ItemDecoder if cfg.arch == "item" else Decoder
    return nnx.jit(lambda: cls(cfg, space, rngs=nnx.Rngs(cfg.seed)))()


def new_train_state(
    cfg: SeqModelConfig, space: TokenSpace, total_steps: int
) -> tuple[nnx.GraphDef, optax.GradientTransformation, TrainState]:
    """(graphdef, optimizer, step-0 state) of a fresh retriever."""
    graphdef, params = nnx.split(init_model(cfg, space))
    tx = make_optimizer(cfg, total_steps)
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    return graphdef, tx, state


def abstract_train_state(cfg: SeqModelConfig, space: TokenSpace) -> tuple[nnx.GraphDef, Any]:
    """(graphdef, shapes and dtypes of a train state): the restore target of a checkpoint.

    The optimizer state's structure does not depend on the schedule length, so any works here.
    """
    graphdef, _, state = new_train_state(cfg, space, 1)
    return graphdef, jax.eval_shape(lambda: state)
