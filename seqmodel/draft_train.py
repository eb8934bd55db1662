"""The draft head's training: its loss on a retriever batch (joint training), and the add-on run
that trains a head on a frozen retriever (its step and validation, in `seqmodel.trainer`'s loop),
and loading a trained head."""

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jaxtyping import Array, Float

from data import atomic
from data.errors import ArtifactError
from data.examples import RetrieverData
from data.fingerprint import fingerprint
from data.pipeline import batches
from decoding import HashSet, HashVerify
from seqmodel import sharding
from seqmodel.config import DraftConfig, SeqModelConfig, keyed_fields
from seqmodel.draft import DraftHead, draft_decoder, draft_nll
from seqmodel.draft_files import DRAFT_FILE
from seqmodel.files import SUMMARY_FILE
from seqmodel.inference import read_description, recall_at_k
from seqmodel.state import TrainState
from seqmodel.tokens import (
    NUM_SPECIAL,
    TokenizeExample,
    TokenSpace,
    WindowSource,
    encode_histories,
    sid_tokens,
)
from seqmodel.trainer import Run, Schedule, Trainer, best_state


def _loss(
    head_params: nnx.State,
    head_def: nnx.GraphDef,
    backbone_def: nnx.GraphDef,
    backbone_params: nnx.State,
    batch: dict,
) -> tuple[Float[Array, ""], dict]:
    """Mean per-code NLL of the head; the backbone is an argument the gradient does not touch."""
    head = nnx.merge(head_def, head_params)
    backbone = nnx.merge(backbone_def, backbone_params)
    nll_sum, count = draft_nll(head, backbone, batch)
    return nll_sum / jnp.maximum(count, 1.0), {"nll_sum": nll_sum, "count": count}


def train_step(
    head_def: nnx.GraphDef,
    backbone_def: nnx.GraphDef,
    tx: optax.GradientTransformation,
    state: TrainState,
    backbone_params: nnx.State,
    batch: dict,
) -> tuple[TrainState, dict]:
    """One AdamW step on the head's parameters (no dropout: the frozen retriever as at test)."""
    grad_fn = jax.value_and_grad(_loss, has_aux=True)
    (loss, aux), grads = grad_fn(state.params, head_def, backbone_def, backbone_params, batch)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), **aux}
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


def make_optimizer(cfg: DraftConfig, total_steps: int, grad_clip: float):
    """AdamW, linear warmup then cosine decay to 10%, after global-norm clipping."""
    warmup = min(cfg.warmup_steps, max(total_steps - 1, 0))
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, cfg.learning_rate, warmup, max(total_steps, warmup + 1), cfg.learning_rate * 0.1
    )
    return optax.chain(
        optax.clip_by_global_norm(grad_clip), optax.adamw(schedule, weight_decay=cfg.weight_decay)
    )


def init_head(cfg: SeqModelConfig, space: TokenSpace) -> DraftHead:
    """A fresh head for a retriever of config `cfg`; built under jit (eager init is slow)."""
    return nnx.jit(
        lambda: DraftHead(cfg.draft, space, cfg.d_model, rngs=nnx.Rngs(cfg.draft.seed))
    )()


def copy_retriever_weights(head: DraftHead, backbone: Any) -> None:
    """W_l := the retriever's level-l head kernel, embed_l := its level-l code embeddings."""
    L, V = head.space.num_levels, head.space.codebook_size
    kernel_DLV = backbone.head.kernel[...].reshape(-1, L, V)
    head.out[...] = jnp.transpose(kernel_DLV, (1, 0, 2)).astype(head.out[...].dtype)
    # Code c of level l is token NUM_SPECIAL + l * V + c (seqmodel.tokens).
    codes = backbone.embed.embedding[...][NUM_SPECIAL : NUM_SPECIAL + L * V]
    head.code_embed[...] = codes.reshape(L, V, -1).astype(head.code_embed[...].dtype)


def _new_state(cfg: SeqModelConfig, space: TokenSpace, total_steps: int, backbone=None):
    head = init_head(cfg, space)
    if backbone is not None and cfg.draft.init_from_retriever:
        copy_retriever_weights(head, backbone)
    head_def, params = nnx.split(head)
    tx = make_optimizer(cfg.draft, total_steps, cfg.grad_clip)
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    return head_def, tx, state


@dataclasses.dataclass
class DraftResult:
    """The trained head's final state and the run summary (train_summary.json)."""

    state: TrainState
    summary: dict


def train_draft(
    cfg: SeqModelConfig,
    workdir: Path | str,
    backbone: Any,
    data: RetrieverData,
    *,
    retriever_key: str,
    stop_after: int | None = None,
    show_progress: bool = True,
) -> DraftResult:
    """Trains `cfg.draft`'s head on the frozen `backbone` (a seqmodel Decoder), resuming.

    Examples: every (history, next item) window of `data.train`. Validation: Recall@K of draft
    decoding with hash-set verification over `data.allowed`, on the held-out items. `retriever_key`
    names the retriever's weights (its inputs fingerprint and best step): a head trained for
    other weights starts over.
    """
    workdir = Path(workdir)
    dcfg = cfg.draft
    mesh = sharding.make_mesh()
    sharding.check_batch_size(dcfg.batch_size, mesh)
    space = backbone.space
    V = space.codebook_size
    item_tokens = sid_tokens(data.sids, V)
    source = WindowSource(data.train, cfg.max_history)
    steps_per_epoch = len(source) // dcfg.batch_size
    if steps_per_epoch == 0:
        raise ValueError(
            f"seqmodel.draft.batch_size={dcfg.batch_size} exceeds the {len(source)} examples"
        )
    total = dcfg.max_steps or dcfg.num_epochs * steps_per_epoch
    transform = TokenizeExample(item_tokens, cfg.max_history, "sliding")
    iterator = iter(batches(source, transform, batch_size=dcfg.batch_size, seed=dcfg.seed))
    head_def, tx, state = _new_state(cfg, space, total, backbone)
    backbone_def, backbone_params = nnx.split(backbone)
    backbone_params = jax.device_put(backbone_params, sharding.replicated(mesh))
    arrays = (data.sids, data.train.items, data.train.offsets, data.valid_targets, data.allowed)
    run = Run(
        workdir,
        DRAFT_FILE,
        {
            "seqmodel": dataclasses.asdict(cfg),
            "num_levels": space.num_levels,
            "codebook_size": V,
            "retriever": retriever_key,
            "inputs": fingerprint(keyed_fields(cfg), retriever_key, arrays=arrays),
        },
        what="config, SIDs, split or retriever",
    )
    trainer = Trainer(
        train_step, head_def, backbone_def, tx, mesh=mesh, args={"backbone_params": backbone_params}
    )
    verify = jax.device_put(
        HashVerify(HashSet.build(data.sids[data.allowed], vocab_size=V)), sharding.replicated(mesh)
    )
    K = cfg.eval_beam_size
    decoder = draft_decoder(backbone_def, head_def, space, verify, K)
    valid_tokens = encode_histories(item_tokens, data.valid_histories, cfg.max_history)
    valid_sids = data.sids[data.valid_targets]
    eval_batch = max(len(jax.devices()), min(256, dcfg.batch_size))
    score = f"valid_draft_recall@{K}"

    def validate(state: TrainState) -> dict:
        recall = recall_at_k(
            lambda p, t: decoder((backbone_params, p), t),
            state.params,
            valid_tokens,
            valid_sids,
            batch_size=eval_batch,
            mesh=mesh,
        )
        return {score: recall}

    fitted = trainer.fit(
        state,
        iterator,
        run,
        Schedule(
            total=total, eval_every=dcfg.eval_every, patience=dcfg.patience, stop_after=stop_after
        ),
        validate=validate,
        score=score,
        desc="draft",
        show_progress=show_progress,
    )
    summary = {**fitted.summary(), "steps_per_epoch": steps_per_epoch}
    if jax.process_index() == 0:
        atomic.write_json(workdir / SUMMARY_FILE, summary)
    return DraftResult(state=fitted.state, summary=summary)


def load_draft(draft_dir: Path | str, backbone: Any) -> tuple[DraftHead, dict]:
    """(the best checkpoint's head, its draft.json) from a `train_draft` directory, checked to
    belong to `backbone`'s token space and width."""
    draft_dir = Path(draft_dir)
    path = draft_dir / DRAFT_FILE
    info, cfg, space = read_description(path, "draft head", "train-draft")
    if space != backbone.space or cfg.d_model != backbone.cfg.d_model:
        raise ArtifactError(
            f"{path}: the head was trained for another retriever (token space or width differ); "
            "retrain it with `genret train-draft`"
        )
    head_def, _, state = _new_state(cfg, space, 1)
    restored = best_state(draft_dir, jax.eval_shape(lambda: state))
    return nnx.merge(head_def, restored.params), info
