"""The retriever's train state and its one factory: model, AdamW schedule and optimizer state,
used alike to start training, to restore a checkpoint and to load a trained retriever."""

from typing import Any, NamedTuple

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


def warmup_cosine(cfg: SeqModelConfig, total_steps: int) -> optax.Schedule:
    """Linear warmup over `cfg.warmup_steps` (fewer in a run shorter than that), then cosine decay
    to 10% of the peak at `total_steps`."""
    warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))
    return optax.warmup_cosine_decay_schedule(
        0.0, cfg.learning_rate, warmup, max(total_steps, warmup + 1), cfg.learning_rate * 0.1
    )


def traced_warmup_cosine(cfg: SeqModelConfig, count: jax.Array, total_steps: jax.Array | int):
    """`warmup_cosine(cfg, total_steps)(count)` for a `total_steps` that may be known only when
    the program runs (an int32 scalar), so that one compiled train step serves every length.

    The optimizer computes its rates here whether the length is a constant or an argument, and
    gets the same float32 bits both ways; optax's own schedule agrees to float32 rounding (how
    XLA folds its constants changes between releases). tests/seqmodel/test_state.py checks both.
    """
    peak = cfg.learning_rate
    total = jnp.asarray(total_steps, jnp.int32)
    warmup = jnp.minimum(cfg.warmup_steps, jnp.maximum(total - 1, 0))
    # optax.linear_schedule(0, peak, warmup); a zero-step warmup holds 0.
    ramp = jnp.clip(count, 0, warmup)
    frac = 1 - ramp.astype(jnp.float32) * (1.0 / warmup.astype(jnp.float32))
    warm_lr = jnp.where(warmup > 0, (0.0 - peak) * frac + peak, 0.0)
    # optax.cosine_decay_schedule(peak, decay, alpha=0.1) at count - warmup.
    decay = (jnp.maximum(total, warmup + 1) - warmup).astype(jnp.float32)
    t = jnp.minimum(count - warmup, decay)
    cosine = 0.5 * (1 + jnp.cos(t * (jnp.float32(jnp.pi) * (1.0 / decay))))
    alpha = (peak * 0.1) / peak
    decayed_lr = peak * ((1 - alpha) * cosine**1.0 + alpha)
    return jnp.where(count < warmup, warm_lr, decayed_lr)


def scale_by_warmup_cosine(
    cfg: SeqModelConfig, total_steps: int
) -> optax.GradientTransformationExtraArgs:
    """optax.scale_by_learning_rate(warmup_cosine(cfg, total_steps)), whose update also takes
    `total_steps=` (an int32 scalar) to run a schedule of that length instead: the length then is
    an argument of the compiled step, not a constant of it. Both compute the rate by
    traced_warmup_cosine, so they take the same steps to the last bit."""
    fixed = optax.scale_by_learning_rate(
        lambda count: traced_warmup_cosine(cfg, count, total_steps)
    )

    def update(updates, state, params=None, *, total_steps=None, **extra_args):
        if total_steps is None:
            return fixed.update(updates, state, params)
        traced = optax.scale_by_learning_rate(
            lambda count: traced_warmup_cosine(cfg, count, total_steps)
        )
        return traced.update(updates, state, params)

    return optax.GradientTransformationExtraArgs(fixed.init, update)


def make_optimizer(cfg: SeqModelConfig, total_steps: int) -> optax.GradientTransformationExtraArgs:
    """AdamW with linear warmup then cosine decay to 10%, after global-norm clipping: the state and
    updates of optax.chain(clip_by_global_norm, adamw(warmup_cosine)), with the schedule's length
    optionally given to `update` as `total_steps=` (scale_by_warmup_cosine)."""
    adamw = optax.chain(
        optax.scale_by_adam(),
        optax.add_decayed_weights(cfg.weight_decay),
        scale_by_warmup_cosine(cfg, total_steps),
    )
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip), adamw)


class ParamsEMA(NamedTuple):
    """Optimizer state of `track_params_ema`: the steps taken and the averaged parameters."""

    count: Any  # int32 scalar
    ema: Any  # nnx.State, as the parameters


def track_params_ema(decay: float) -> optax.GradientTransformation:
    """Passes the updates through and keeps an exponential moving average of the parameters they
    produce (Polyak averaging), read back by `eval_params`.

    The rate warms up as min(decay, (1 + t) / (10 + t)) at step t, so the average follows the
    parameters early on instead of staying near their initial values.
    """

    def init(params):
        return ParamsEMA(jnp.zeros((), jnp.int32), jax.tree.map(jnp.copy, params))

    def update(updates, state, params):
        t = state.count.astype(jnp.float32)
        rate = jnp.minimum(decay, (1.0 + t) / (10.0 + t))
        new = optax.apply_updates(params, updates)
        ema = optax.incremental_update(new, state.ema, 1.0 - rate)
        return updates, ParamsEMA(state.count + 1, ema)

    return optax.GradientTransformation(init, update)


def retriever_optimizer(cfg: SeqModelConfig, total_steps: int) -> optax.GradientTransformation:
    """`make_optimizer`, followed by the parameter average when `cfg.ema_decay` > 0."""
    tx = make_optimizer(cfg, total_steps)
    return optax.chain(tx, track_params_ema(cfg.ema_decay)) if cfg.ema_decay else tx


def eval_params(state: TrainState) -> Any:
    """The parameters a trained retriever decodes with: their moving average where the run kept
    one (`seqmodel.ema_decay` > 0), else the parameters themselves."""
    opt = state.opt_state
    if isinstance(opt, tuple) and len(opt) == 2 and isinstance(opt[1], ParamsEMA):
        return opt[1].ema
    return state.params


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
    tx = retriever_optimizer(cfg, total_steps)
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    return graphdef, tx, state


def abstract_train_state(cfg: SeqModelConfig, space: TokenSpace) -> tuple[nnx.GraphDef, Any]:
    """(graphdef, shapes and dtypes of a train state): the restore target of a checkpoint.

    The optimizer state's structure does not depend on the schedule length, so any works here.
    """
    graphdef, _, state = new_train_state(cfg, space, 1)
    return graphdef, jax.eval_shape(lambda: state)
