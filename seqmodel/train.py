"""Retriever training: its loss and step, batches of each layout, and `train_and_evaluate`, which
hands them to the one training loop (`seqmodel.trainer`) with Recall@K validation."""

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh
from jaxtyping import Array, Float, Int

from data import atomic
from data.environment import environment
from data.examples import RetrieverData
from data.fingerprint import fingerprint
from data.pipeline import (
    HistorySource,
    batches,
    bucket_widths,
    bucketed_batches,
    packed_batches,
    shuffle_record_ties,
)
from data.types import Histories
from decoding import StaticConstraint, StaticIndex
from seqmodel import sharding
from seqmodel.config import SeqModelConfig, identity_fields
from seqmodel.cooc_teacher import CoocTeacher
from seqmodel.draft import draft_nll
from seqmodel.files import MODEL_FILE, SUMMARY_FILE
from seqmodel.inference import (
    item_rank_of,
    load_described_retriever,
    recall_at_k,
    retriever_decoder,
)
from seqmodel.model import token_log_likelihood
from seqmodel.sasrec_teacher import NextItemTopK, SasrecTeacher, check_histories
from seqmodel.state import Retriever, TrainState, eval_params, new_train_state
from seqmodel.tokens import (
    NUM_SPECIAL,
    PAD,
    TokenizeExample,
    TokenSpace,
    WindowSource,
    encode_histories,
    sid_tokens,
)
from seqmodel.trainer import PatienceChange, Run, Schedule, Trainer
from seqmodel.trainer import read_metrics as read_metrics  # the pipeline reads the log from here


def loss_fn(
    params: nnx.State, graphdef: nnx.GraphDef, batch: dict, dropout_key: jax.Array | None
) -> tuple[Float[Array, ""], dict]:
    """Mean negative log-likelihood of the weighted target tokens."""
    model = nnx.merge(graphdef, params)
    if model.cfg.unlikelihood:
        logits, repeat = model.target_and_repeat_logits(batch["inputs"], dropout_key)
    elif model.cfg.item_contrast or model.cfg.item_softmax:
        logits, states = model.target_logits_and_states(batch["inputs"], dropout_key)
    else:
        logits = model.target_logits(batch["inputs"], dropout_key, batch.get("segments"))
    ll = token_log_likelihood(logits, batch["targets"], model.space)
    w = batch["weights"]
    count = w.sum()
    nll_sum = -(ll * w).sum()
    # "norm" (bucketed layout): the batch's expected weight, so that every token weighs the same
    # whatever the lengths its batch holds.
    denominator = batch["norm"].sum() if "norm" in batch else count
    mixed = ll
    if "teach_codes" in batch:  # seqmodel.cooc_distill: the teacher's cross-entropy mixed in
        mixed = teacher_mix(ll, logits, batch["teach_codes"], batch["teach_weights"], model.cfg)
    if "teacher_logits" in batch:  # seqmodel.self_distill: a trained retriever's, mixed in
        mixed = teacher_soft_mix(mixed, logits, batch["teacher_logits"], model.cfg.self_distill)
    objective = -(mixed * w).sum()
    loss, aux = objective / jnp.maximum(denominator, 1.0), {"nll_sum": nll_sum, "count": count}
    if model.cfg.unlikelihood:
        penalty = repeat_penalty(repeat, batch["inputs"], w, model.space.num_levels)
        loss = loss + model.cfg.unlikelihood * penalty
    if model.cfg.item_contrast:
        logq = batch.get("target_logq")
        contrast = item_contrast_loss(model, states, batch["targets"], w, logq)
        loss = loss + model.cfg.item_contrast * contrast
        aux["item_contrast"] = contrast
    if model.cfg.item_softmax:
        item_nll = item_softmax_loss(model, states, batch["targets"], w, batch["catalog"])
        loss = loss + model.cfg.item_softmax * item_nll
        aux["item_softmax"] = item_nll
    if hasattr(model, "draft"):
        # Joint training (seqmodel.draft_head="joint"): the head's NLL on each row's last item,
        # from a second backbone pass over history + placeholders. Its dropout key is new, so
        # the retriever's own masks are those of a run without a head.
        key = None if dropout_key is None else jax.random.fold_in(dropout_key, 1 << 20)
        d_sum, d_count = draft_nll(model.draft, model, batch, key)
        loss = loss + model.cfg.draft.loss_weight * d_sum / jnp.maximum(d_count, 1.0)
        aux.update(draft_nll_sum=d_sum, draft_count=d_count)
    return loss, aux


def repeat_penalty(
    repeat: Float[Array, "B G"], inputs: Int[Array, "B T"], w: Float[Array, "B T"], L: int
) -> Float[Array, ""]:
    """Mean of -log(1 - p) over the groups that read an item and have a target after it, p the
    probability of predicting that item again (`target_and_repeat_logits`); L tokens per item."""
    B, T = inputs.shape
    # Group g reads the tokens up to g L, an item's last code where that token is a code (not BOS
    # or padding), and predicts the item whose level 0 is the target at position g L.
    real = inputs.reshape(B, T // L, L)[:, :, 0] >= NUM_SPECIAL
    has_target = w.reshape(B, T // L, L)[:, :, 0] > 0
    mask = (real & has_target).astype(jnp.float32)
    # log(1 - p) from log p, kept finite: p is capped just under 1.
    log_not = jnp.log1p(-jnp.exp(jnp.minimum(repeat, -1e-6)))
    return -(log_not * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def item_contrast_loss(
    model,
    states: Float[Array, "B G D"],
    targets: Int[Array, "B T"],
    w: Float[Array, "B T"],
    logq: Float[Array, "B T"] | None = None,
) -> Float[Array, ""]:
    """Mean over the batch's target items of -log softmax_j(h_i . e_j - log q_j) at j = i, where
    h_i is the backbone state before target item i, e_j the input vector of target item j
    (`ItemDecoder.item_vectors`), q_j its share of the training targets (`logq`, per target
    token; none: 0) and j runs over the batch's target items, the other copies of item i left
    out (seqmodel.item_contrast)."""
    B, G, D = states.shape
    L = model.space.num_levels
    ids = targets.reshape(B * G, L)
    # Group g has a target item where its first level is a weighted target.
    has = w.reshape(B * G, L)[:, 0] > 0
    h = states.reshape(B * G, D).astype(jnp.float32)
    e = model.item_vectors(ids).astype(jnp.float32)
    same = (ids[:, None, :] == ids[None, :, :]).all(axis=-1)
    keep = has[None, :] & (~same | jnp.eye(B * G, dtype=bool))
    scores = h @ e.T
    if logq is not None:
        scores = scores - logq.reshape(B * G, L)[None, :, 0]
    log_p = jax.nn.log_softmax(jnp.where(keep, scores, -1e9), axis=-1)
    own = jnp.diagonal(log_p)
    return -(own * has).sum() / jnp.maximum(has.sum(), 1.0)


def item_softmax_loss(
    model,
    states: Float[Array, "B G D"],
    targets: Int[Array, "B T"],
    w: Float[Array, "B T"],
    catalog: Int[Array, "N L"],
) -> Float[Array, ""]:
    """Mean over the batch's target items of -log softmax_j(q_i . o_j) at j = i, where q_i is
    the item query of the backbone state before target item i, o_j the input vector of catalog
    item j (`ItemDecoder.item_inputs`) and j runs over `catalog`, the level-offset tokens of the
    training items, each once (seqmodel.item_softmax)."""
    B, G, D = states.shape
    L = model.space.num_levels
    ids = targets.reshape(B * G, L)
    # Group g has a target item where its first level is a weighted target.
    has = w.reshape(B * G, L)[:, 0] > 0
    q = model.item_query(states.reshape(B * G, D)).astype(jnp.float32)
    own = jnp.einsum("nd,nd->n", q, model.item_inputs(ids).astype(jnp.float32))
    log_z = jax.nn.logsumexp(q @ model.item_inputs(catalog).astype(jnp.float32).T, axis=-1)
    return ((log_z - own) * has).sum() / jnp.maximum(has.sum(), 1.0)


def teacher_mix(
    ll: Float[Array, "B T"],
    logits: Float[Array, "B T V"],
    codes: Int[Array, "B T K"],
    weights: Float[Array, "B T K"],
    cfg: SeqModelConfig,
) -> Float[Array, "B T"]:
    """(1 - a) ll + a (the teacher's weighted mean log-prob of its codes), a = cfg.cooc_distill,
    where the teacher has weight; `ll` elsewhere (seqmodel.cooc_teacher)."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    total = weights.sum(axis=-1)
    soft = (jnp.take_along_axis(log_probs, codes, axis=-1) * weights).sum(-1)
    soft = soft / jnp.maximum(total, 1e-9)
    a = cfg.cooc_distill
    return jnp.where(total > 0, (1.0 - a) * ll + a * soft, ll)


def teacher_soft_mix(
    ll: Float[Array, "B T"],
    logits: Float[Array, "B T V"],
    teacher_logits: Float[Array, "B T V"],
    a: float,
) -> Float[Array, "B T"]:
    """(1 - a) ll + a sum_v p_teacher(v) log p(v) over the codes of each target's level
    (seqmodel.self_distill)."""
    soft = (jax.nn.softmax(teacher_logits, axis=-1) * jax.nn.log_softmax(logits, axis=-1)).sum(-1)
    return (1.0 - a) * ll + a * soft


def mean_distribution(logits: list[Float[Array, "B T V"]]) -> Float[Array, "B T V"]:
    """Logits of the mean of the softmax distributions of `logits` (an ensemble teacher,
    seqmodel.distill_teachers); one teacher's logits as they are."""
    if len(logits) == 1:
        return logits[0]
    log_p = jnp.stack([jax.nn.log_softmax(x, axis=-1) for x in logits])
    return jax.nn.logsumexp(log_p, axis=0) - jnp.log(len(logits))


def train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    seed: int | jax.Array,
    state: TrainState,
    batch: dict,
    total_steps: jax.Array | None = None,
    teacher_params: tuple[nnx.State, ...] | None = None,
    catalog: jax.Array | None = None,
    *,
    teacher_graphdefs: tuple[nnx.GraphDef, ...] = (),
) -> tuple[TrainState, dict]:
    """One AdamW step; dropout keys derive from (seed, step) so a resumed run replays exactly.

    `total_steps`, when given, is the schedule's length for `tx` from seqmodel.state's
    make_optimizer: passed with the seed as arguments (`step_arguments`), they leave one compiled
    program for every run of the same shapes, whatever its seed and length. `teacher_params`
    (with their `teacher_graphdefs`): frozen retrievers of one architecture, the mean of whose
    teacher-forced distributions on the batch the loss distils (seqmodel.self_distill).
    `catalog`: the training items' level-offset tokens [N, L], for seqmodel.item_softmax."""
    if catalog is not None:
        batch = {**batch, "catalog": catalog}
    if teacher_params is not None:
        t_logits = mean_distribution(
            [
                nnx.merge(g, p).target_logits(batch["inputs"], None, batch.get("segments"))
                for g, p in zip(teacher_graphdefs, teacher_params, strict=True)
            ]
        )
        batch = {**batch, "teacher_logits": jax.lax.stop_gradient(t_logits)}
    key = jax.random.fold_in(jax.random.key(seed), state.step)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, aux), grads = grad_fn(state.params, graphdef, batch, key)
    extra = {} if total_steps is None else {"total_steps": total_steps}
    updates, opt_state = tx.update(grads, state.opt_state, state.params, **extra)
    params = optax.apply_updates(state.params, updates)
    metrics = {
        "loss": loss,
        "grad_norm": optax.tree.norm(grads),
        "tokens": (batch["inputs"] != PAD).sum(),
        **aux,
    }
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


def step_arguments(seed: int, total_steps: int) -> dict | None:
    """`train_step`'s seed and schedule length as int32 scalars, or None for a seed outside int32
    (a Python int key of that size has another layout, so it stays a constant of the program)."""
    if not 0 <= seed < 2**31:
        return None
    return {"seed": jnp.int32(seed), "total_steps": jnp.int32(total_steps)}


def make_trainer(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    seed: int,
    total_steps: int,
    mesh: Mesh,
    teachers: list[Retriever] | None = None,
    catalog: np.ndarray | None = None,
) -> Trainer:
    """The retriever's `Trainer` over `train_step`. Seed and schedule length are arguments of the
    program, not constants: retrievers that differ only in them (ensemble seeds; a pipeline's
    cold-start and leave-one-out runs) share its compilation, through JAX's persistent cache
    across processes. Same floats either way (the seed is exact integer arithmetic;
    seqmodel.state.traced_warmup_cosine for the length).
    The `teachers` (seqmodel.self_distill) are arguments too: their parameters, frozen; and so
    is the `catalog` of seqmodel.item_softmax."""
    step, extra = train_step, {}
    if teachers:
        graphdefs, params = zip(*(nnx.split(t) for t in teachers), strict=True)
        step = functools.partial(train_step, teacher_graphdefs=graphdefs)
        extra = {"teacher_params": params}
    if catalog is not None:
        extra["catalog"] = jax.device_put(catalog, sharding.replicated(mesh))
    args = step_arguments(seed, total_steps)
    if args is None:
        return Trainer(step, graphdef, tx, seed, mesh=mesh, args=extra)
    return Trainer(step, graphdef, tx, mesh=mesh, args={**args, **extra})


def training_source(cfg: SeqModelConfig, h: Histories) -> HistorySource | WindowSource:
    """One record per user (causal, bucketed, packed) or per (user, target position) (sliding)."""
    return WindowSource(h, cfg.max_history) if cfg.layout == "sliding" else HistorySource(h)


def training_batches(
    cfg: SeqModelConfig,
    data: RetrieverData,
    item_tokens: np.ndarray,
    next_items: NextItemTopK | None = None,
):
    """(endless iterator of the layout's training batches, steps per epoch); `next_items`:
    seqmodel.sasrec_teacher's table over data.train, exactly when cfg.sasrec_teacher > 0."""
    space = TokenSpace(num_levels=data.sids.shape[1], codebook_size=data.codebook_size)
    source = training_source(cfg, data.train)
    rows = len(source)
    if cfg.layout == "packed":
        rows = -(-packed_tokens(data.train, cfg.max_history, space) // row_length(cfg, space))
    steps_per_epoch = rows // cfg.batch_size
    if steps_per_epoch == 0:
        raise ValueError(
            f"seqmodel.batch_size={cfg.batch_size} exceeds the {rows} training rows "
            f"(layout {cfg.layout})"
        )
    teacher = (
        CoocTeacher.build(data.train, data.sids, cfg.cooc_neighbors) if cfg.cooc_distill else None
    )
    if (next_items is not None) != bool(cfg.sasrec_teacher):
        raise ValueError("seqmodel.sasrec_teacher > 0 needs a next-item table, and only it")
    second = None
    if next_items is not None:
        check_histories(next_items, data.train, "seqmodel.sasrec_teacher")
        second = SasrecTeacher(data.sids, next_items, cfg.sasrec_teacher_weight)
    row_layout = "causal" if cfg.layout == "bucketed" else cfg.layout
    log_q = target_log_shares(data.train, len(data.sids)) if cfg.item_contrast_logq else None
    transform = TokenizeExample(item_tokens, cfg.max_history, row_layout, teacher, log_q, second)
    augment = shuffle_record_ties if cfg.shuffle_ties else None
    if cfg.layout == "bucketed":
        lengths = np.minimum(data.train.lengths(), cfg.max_history)
        ds, steps_per_epoch = bucketed_batches(
            source,
            transform,
            lengths,
            bucket_widths(lengths),
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            unit=space.num_levels,
            augment=augment,
        )
        return iter(ds), steps_per_epoch
    if cfg.layout == "packed":
        ds = packed_batches(
            source,
            transform,
            row_length=row_length(cfg, space),
            batch_size=cfg.batch_size,
            seed=cfg.seed,
        )
    else:
        ds = batches(source, transform, batch_size=cfg.batch_size, seed=cfg.seed, augment=augment)
    return iter(ds), steps_per_epoch


def target_log_shares(train: Histories, num_items: int) -> Float[np.ndarray, " N"]:
    """log of each item's share of the training targets (every history item after the first),
    add-one smoothed so that no item's is -inf (seqmodel.item_contrast_logq)."""
    lengths = train.lengths()
    first = train.offsets[:-1][lengths > 0]
    is_target = np.ones(len(train.items), bool)
    is_target[first] = False
    counts = np.bincount(train.items[is_target], minlength=num_items) + 1.0
    return np.log(counts / counts.sum()).astype(np.float32)


def row_length(cfg: SeqModelConfig, space: TokenSpace) -> int:
    """Tokens per training row: a full history's inputs (BOS + max_history items, minus one)."""
    return space.context_length(cfg.max_history) - 1


def packed_tokens(h: Histories, max_history: int, space: TokenSpace) -> int:
    """Input tokens of one epoch of the packed layout (each user: its last max_history items)."""
    return int(np.minimum(h.lengths(), max_history).sum()) * space.num_levels


@dataclasses.dataclass
class TrainResult:
    """The final training state and the run summary written to train_summary.json."""

    state: TrainState
    summary: dict


def inputs_fingerprint(cfg: SeqModelConfig, data: RetrieverData, teacher: str = "") -> str:
    """Hash of the config, SIDs and split (and the `teacher`'s own inputs fingerprint, under
    seqmodel.self_distill): a checkpoint resumes only under the same inputs."""
    arrays = (data.sids, data.train.items, data.train.offsets, data.valid_targets, data.allowed)
    fields = identity_fields(cfg)
    if teacher:
        fields["teacher"] = teacher
    if cfg.draft_head == "none":
        # Settings of a head this retriever does not have: leaving them out keeps the
        # fingerprints of retrievers trained before they existed.
        del fields["draft_head"], fields["draft"]
    return fingerprint(fields, arrays=arrays)


def train_and_evaluate(
    cfg: SeqModelConfig,
    workdir: Path | str,
    data: RetrieverData,
    *,
    stop_after: int | None = None,
    mesh: Mesh | None = None,
    show_progress: bool = True,
    teacher_dirs: Sequence[Path | str] = (),
    next_items: NextItemTopK | None = None,
) -> TrainResult:
    """Trains (resuming from workdir/checkpoints), validates Recall@K, early-stops, checkpoints.

    `stop_after` ends the run after that many steps in total, as a kill would (tests of resume).
    `teacher_dirs`: trained retrievers' work directories, the mean of whose best checkpoints'
    distributions this one distils (seqmodel.distill_teachers of them, exactly when
    cfg.self_distill > 0). `next_items`: a trained SASRec's next items over data.train
    (seqmodel.sasrec_teacher.next_item_topk), exactly when cfg.sasrec_teacher > 0.
    """
    if bool(teacher_dirs) != (cfg.self_distill > 0):
        raise ValueError("seqmodel.self_distill > 0 needs a teacher retriever, and only it")
    if teacher_dirs and len(teacher_dirs) != cfg.distill_teachers:
        raise ValueError(
            f"seqmodel.distill_teachers={cfg.distill_teachers}, but {len(teacher_dirs)} "
            "teacher retrievers given"
        )
    loaded = [load_described_retriever(d, read_only=True) for d in teacher_dirs]
    teachers = [model for model, _ in loaded]
    # One teacher's key is its inputs fingerprint (the keys of earlier students hold).
    teacher_key = "+".join(info["inputs"] for _, info in loaded)
    if next_items is not None:  # a key of its own beside the retrievers' (earlier keys hold)
        teacher_key += f"|sasrec:{next_items.key}"
    workdir = Path(workdir)
    mesh = sharding.make_mesh() if mesh is None else mesh
    sharding.check_batch_size(cfg.batch_size, mesh)
    V = data.codebook_size
    space = TokenSpace(num_levels=data.sids.shape[1], codebook_size=V)
    item_tokens = sid_tokens(data.sids, V)
    iterator, steps_per_epoch = training_batches(cfg, data, item_tokens, next_items)
    total = cfg.max_steps or cfg.num_epochs * steps_per_epoch

    graphdef, tx, state = new_train_state(cfg, space, total)
    # seqmodel.item_softmax's catalog: the items the training split may target, each once.
    catalog = item_tokens[np.flatnonzero(data.allowed)] if cfg.item_softmax else None
    trainer = make_trainer(graphdef, tx, cfg.seed, total, mesh, teachers, catalog)
    run = Run(
        workdir,
        MODEL_FILE,
        {
            "seqmodel": dataclasses.asdict(cfg),
            "num_levels": space.num_levels,
            "codebook_size": V,
            "inputs": inputs_fingerprint(cfg, data, teacher_key),
            **({"teacher": teacher_key} if teacher_key else {}),
        },
        what="config, SIDs or split",
        patience_change=PatienceChange(
            "seqmodel",
            cfg.patience,
            lambda p: inputs_fingerprint(dataclasses.replace(cfg, patience=p), data, teacher_key),
        ),
    )
    # The index is replicated on every device (STATIC appendix A.3), passed as an argument.
    constraint = jax.device_put(
        StaticConstraint(StaticIndex.build(data.sids[data.allowed], vocab_size=V)),
        sharding.replicated(mesh),
    )
    # Beams come back replicated, so that every process can read them (several hosts).
    decode_fn = retriever_decoder(
        graphdef,
        space.num_levels,
        constraint,
        beam_size=cfg.eval_beam_size,
        out_sharding=sharding.replicated(mesh),
        item_rank=item_rank_of(cfg),
    )

    valid_tokens = encode_histories(item_tokens, data.valid_histories, cfg.max_history)
    valid_sids = data.sids[data.valid_targets]
    eval_batch = max(len(jax.devices()), min(256, cfg.batch_size))
    score = f"valid_recall@{cfg.eval_beam_size}"

    def validate(state: TrainState) -> dict:
        params = eval_params(state)
        recall = recall_at_k(
            decode_fn, params, valid_tokens, valid_sids, batch_size=eval_batch, mesh=mesh
        )
        return {score: recall}

    fitted = trainer.fit(
        state,
        iterator,
        run,
        Schedule(
            total=total, eval_every=cfg.eval_every, patience=cfg.patience, stop_after=stop_after
        ),
        validate=validate,
        score=score,
        row=_host_row,
        desc="train",
        show_progress=show_progress,
    )
    summary = {
        **fitted.summary(),
        "steps_per_epoch": steps_per_epoch,
        "tokens_per_s_this_run": fitted.tokens_per_s,
        "devices": int(mesh.devices.size),
        "environment": environment(),
    }
    if jax.process_index() == 0:
        atomic.write_json(workdir / SUMMARY_FILE, summary)
    return TrainResult(state=fitted.state, summary=summary)


def _host_row(m: dict) -> dict:
    """A step's metrics row: loss, gradient norm, its non-PAD tokens (for throughput), the
    joint draft head's NLL and the item softmax's (seqmodel.item_softmax)."""
    row = {"loss": float(m["loss"]), "grad_norm": float(m["grad_norm"]), "tokens": int(m["tokens"])}
    if "draft_nll_sum" in m:
        row["draft_nll"] = float(m["draft_nll_sum"]) / max(float(m["draft_count"]), 1.0)
    if "item_softmax" in m:
        row["item_softmax"] = float(m["item_softmax"])
    return row
