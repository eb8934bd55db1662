"""RQ-VAE training: k-means init, jit step with donated state, dead-code restarts, exact resume."""

import functools
import hashlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from rqvae import checkpoint
from rqvae.config import RQVAEConfig, identity_fields
from rqvae.embed import check_embeddings
from rqvae.model import RQVAE


@flax.struct.dataclass
class TrainState:
    """Everything a resumed run needs; fields are untyped because orbax and jax.tree rebuild it
    with placeholder leaves (ShapeDtypeStruct, metadata) that runtime type checks would reject."""

    step: Any  # int32 []
    params: Any  # nnx.State of the RQVAE's nnx.Param
    opt_state: Any  # optax state
    usage: Any  # int32 [L, V], assignments per code since the last dead-code restart


def _optimizer(cfg: RQVAEConfig) -> optax.GradientTransformation:
    warmup = max(min(cfg.warmup_steps, cfg.num_steps - 1), 0)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0,
        cfg.learning_rate,
        warmup,
        max(cfg.num_steps, warmup + 1),
        end_value=cfg.learning_rate * 0.05,
    )
    return optax.adamw(schedule, weight_decay=cfg.weight_decay)


def _losses(model: RQVAE, x_BE: Float[Array, "B E"], beta: float):
    out = model(x_BE)
    q = out.quantized
    recon = jnp.mean(jnp.sum((out.x_hat - x_BE) ** 2, axis=-1))
    loss = recon + q.codebook_loss + beta * q.commitment_loss
    metrics = {
        "loss": loss,
        "recon": recon,
        "codebook": q.codebook_loss,
        "commitment": q.commitment_loss,
    }
    return loss, (metrics, q.codes)


def train_step(
    graphdef, tx, beta, state: TrainState, data_NE: Float[Array, "N E"], idx_B: Int[Array, " B"]
) -> tuple[TrainState, dict]:
    """One AdamW step on the batch data_NE[idx_B]; counts code usage."""

    def loss_fn(params):
        return _losses(nnx.merge(graphdef, params), data_NE[idx_B], beta)

    (_, (metrics, codes_BL)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    V = state.usage.shape[1]
    counts_LV = jax.vmap(lambda c: jnp.bincount(c, length=V))(codes_BL.T)
    new = TrainState(
        step=state.step + 1,
        params=optax.apply_updates(state.params, updates),
        opt_state=opt_state,
        usage=state.usage + counts_LV.astype(jnp.int32),
    )
    return new, metrics


def restart_dead_codes(
    graphdef, seed: int, state: TrainState, data_NE: Float[Array, "N E"], idx_B: Int[Array, " B"]
) -> tuple[TrainState, Int[Array, " L"]]:
    """Moves codes unused since the last restart onto random current residuals of the batch."""
    model = nnx.merge(graphdef, state.params)
    key = jax.random.fold_in(jax.random.key(seed), state.step)
    residual_BD = model.encoder(data_NE[idx_B])
    restarted = []
    for level_idx, level in enumerate(model.quantizer.levels):
        key, k_pick, k_noise = jax.random.split(key, 3)
        cb_VD = level.codebook[...]
        dead_V = state.usage[level_idx] == 0
        pick_V = jax.random.randint(k_pick, (cb_VD.shape[0],), 0, residual_BD.shape[0])
        # Small noise so that two restarts on the same residual do not stay identical.
        fresh_VD = residual_BD[pick_V] + 1e-3 * jax.random.normal(k_noise, cb_VD.shape)
        cb_VD = jnp.where(dead_V[:, None], fresh_VD, cb_VD)
        level.codebook[...] = cb_VD
        restarted.append(dead_V.sum())
        residual_BD = residual_BD - cb_VD[level(residual_BD)]
    new = state.replace(params=nnx.state(model, nnx.Param), usage=jnp.zeros_like(state.usage))
    return new, jnp.stack(restarted)


def encode(graphdef, params: nnx.State, x_BE: Float[Array, "B E"]) -> dict:
    """Codes of each item, its squared reconstruction error and its last-level residual."""
    out = nnx.merge(graphdef, params)(x_BE)
    return {
        "codes": out.quantized.codes,
        "sq_err": jnp.sum((out.x_hat - x_BE) ** 2, axis=-1),
        "last_residual": out.quantized.residuals[-1],
    }


def _kmeans_init(model: RQVAE, x_NE: np.ndarray, cfg: RQVAEConfig) -> None:
    from sklearn.cluster import KMeans

    residual = np.asarray(model.encoder(jnp.asarray(x_NE)), np.float64)
    for i, level in enumerate(model.quantizer.levels):
        km = KMeans(cfg.codebook_size, n_init=1, max_iter=50, random_state=cfg.seed + i)
        labels = km.fit_predict(residual)
        level.codebook[...] = jnp.asarray(km.cluster_centers_, jnp.float32)
        residual = residual - km.cluster_centers_[labels]


def _new_state(cfg: RQVAEConfig, embed_dim: int, x_fit: np.ndarray | None):
    model = RQVAE(cfg, embed_dim, rngs=nnx.Rngs(cfg.seed))
    if x_fit is not None:
        _kmeans_init(model, x_fit, cfg)
    graphdef, params = nnx.split(model, nnx.Param)
    state = TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=_optimizer(cfg).init(params),
        usage=jnp.zeros((cfg.num_levels, cfg.codebook_size), jnp.int32),
    )
    return graphdef, state


def _validate(cfg: RQVAEConfig, x_fit: np.ndarray) -> None:
    check_embeddings(x_fit, name="embeddings")
    if len(x_fit) < cfg.codebook_size:
        raise ValueError(
            f"rqvae.codebook_size={cfg.codebook_size}: the tokenizer is fit on only {len(x_fit)} "
            "items, fewer than the codes per level k-means must place; set "
            f"--set rqvae.codebook_size=<= {len(x_fit)} or fit on more items"
        )
    for name in ("num_levels", "codebook_size", "latent_dim", "batch_size", "num_steps"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"rqvae.{name} must be >= 1, got {getattr(cfg, name)}")


def _meta(cfg: RQVAEConfig, x_fit: np.ndarray) -> dict:
    return {
        "embed_dim": int(x_fit.shape[1]),
        "num_fit_items": int(x_fit.shape[0]),
        "embeddings_sha256": hashlib.sha256(np.ascontiguousarray(x_fit).tobytes()).hexdigest(),
        "config": {k: v for k, v in json_config(cfg).items() if k not in _RESUMABLE_CHANGES},
    }


# Fields that do not change training, so a resume may change them.
_RESUMABLE_CHANGES = ("dedup_last_level", "checkpoint_every", "fit_on")


def json_config(cfg: RQVAEConfig) -> dict:
    d = identity_fields(cfg)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


class StaleCheckpointError(ValueError):
    """A checkpoint made from other embeddings or another config: not resumed, retrained."""


def _check_meta(saved: dict, want: dict, ckpt_dir: Path) -> None:
    """Raises StaleCheckpointError naming what differs between the checkpoint and this run."""
    if saved.get("embed_dim") != want["embed_dim"]:
        raise StaleCheckpointError(
            f"embedding dimension {want['embed_dim']} differs from the checkpoint's "
            f"(E={saved.get('embed_dim')})"
        )
    if saved.get("config") != want["config"]:
        diff = sorted(
            k for k in want["config"] if saved.get("config", {}).get(k) != want["config"][k]
        )
        raise StaleCheckpointError(f"rqvae config differs from the checkpoint's in {diff}")
    if saved.get("embeddings_sha256") != want["embeddings_sha256"]:
        raise StaleCheckpointError("the checkpoint was trained on different item embeddings")


def _batch_indices(step: int, n: int, batch: int, seed: int, cache: dict) -> np.ndarray:
    # A pure function of (seed, step): a resumed run needs no data-iterator state to see the
    # same batches as an uninterrupted one.
    per_epoch = n // batch
    epoch, pos = divmod(step, per_epoch)
    if cache.get("epoch") != epoch:
        cache["epoch"] = epoch
        cache["perm"] = np.random.default_rng([seed, epoch]).permutation(n).astype(np.int32)
    return cache["perm"][pos * batch : (pos + 1) * batch]


def train(
    cfg: RQVAEConfig,
    x_fit: Float[np.ndarray, "N E"],
    ckpt_dir: Path,
    *,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
    say: Callable[[str], None] = checkpoint.log_to_stderr,
):
    """Trains (or resumes from `ckpt_dir`) for cfg.num_steps; returns (graphdef, state, log).

    A checkpoint made from other embeddings or config is not resumed: one line, then retraining.
    """
    from tqdm.auto import tqdm

    t_init = time.perf_counter()
    _validate(cfg, x_fit)
    x_fit = np.ascontiguousarray(x_fit, np.float32)
    meta = _meta(cfg, x_fit)
    mngr = checkpoint.manager(ckpt_dir)
    restored = None
    if checkpoint.latest_step(mngr) is not None:
        # A damaged newest checkpoint falls back to the older one, else to a fresh start.
        abstract = jax.eval_shape(lambda: _new_state(cfg, x_fit.shape[1], None)[1])
        check = functools.partial(_check_meta, want=meta, ckpt_dir=ckpt_dir)
        try:
            restored = checkpoint.restore_newest(mngr, abstract, check_meta=check)
        except StaleCheckpointError as e:
            # The one policy when inputs change under an artifact: say so, retrain in place.
            say(f"{ckpt_dir}: {e}; retraining the tokenizer from scratch")
            checkpoint.close(mngr)
            shutil.rmtree(ckpt_dir)
            mngr = checkpoint.manager(ckpt_dir)
    if restored is None:
        graphdef, state = _new_state(cfg, x_fit.shape[1], x_fit)
        start = 0
    else:
        start, state = restored
        graphdef, _ = _new_state(cfg, x_fit.shape[1], None)
    tx = _optimizer(cfg)
    step_fn = jax.jit(
        functools.partial(train_step, graphdef, tx, cfg.beta), donate_argnames="state"
    )
    restart_fn = jax.jit(
        functools.partial(restart_dead_codes, graphdef, cfg.seed), donate_argnames="state"
    )
    batch = min(cfg.batch_size, len(x_fit))
    data_NE = jax.device_put(x_fit)
    restart_until = int(cfg.restart_until * cfg.num_steps)
    log = {
        "start_step": start,
        "restarted": np.zeros(cfg.num_levels, np.int64),
        "init_seconds": time.perf_counter() - t_init,
    }
    cache: dict = {}
    pending = None
    bar = tqdm(
        range(start, cfg.num_steps),
        desc="rqvae",
        disable=not progress,
        initial=start,
        total=cfg.num_steps,
    )
    t0 = time.perf_counter()
    try:
        for step in bar:
            idx_B = jax.device_put(_batch_indices(step, len(x_fit), batch, cfg.seed, cache))
            state, metrics = step_fn(state, data_NE, idx_B)
            if pending is not None and (step % 50 == 0):
                log["last"] = {k: float(v) for k, v in jax.device_get(pending).items()}
                bar.set_postfix(
                    loss=f"{log['last']['loss']:.4f}", recon=f"{log['last']['recon']:.4f}"
                )
            pending = metrics
            done = step + 1
            if cfg.restart_every and done % cfg.restart_every == 0 and done <= restart_until:
                state, n_restarted = restart_fn(state, data_NE, idx_B)
                log["restarted"] += jax.device_get(n_restarted)
            if done % cfg.checkpoint_every == 0 or done == cfg.num_steps:
                checkpoint.save(mngr, done, state, meta)
            if on_step is not None:
                on_step(done)
    finally:  # a Ctrl-C still completes the checkpoint in flight
        checkpoint.close(mngr)
    if pending is not None:
        log["last"] = {k: float(v) for k, v in jax.device_get(pending).items()}
    log["train_seconds"] = time.perf_counter() - t0
    log["restarted"] = log["restarted"].tolist()
    return graphdef, state, log


def assign_codes(
    graphdef, params: nnx.State, x_NE: Float[np.ndarray, "N E"], *, chunk: int = 4096
) -> dict:
    """encode() of every row, in fixed-size chunks, as numpy arrays."""
    fn = jax.jit(functools.partial(encode, graphdef))
    n = len(x_NE)
    chunk = min(chunk, n)
    parts = []
    for lo in range(0, n, chunk):
        part = np.asarray(x_NE[lo : lo + chunk], np.float32)
        pad = chunk - len(part)
        if pad:  # one compiled shape for every chunk
            part = np.concatenate([part, np.zeros((pad, part.shape[1]), np.float32)])
        out = jax.device_get(fn(params, jax.device_put(part)))
        parts.append({k: v[: chunk - pad] for k, v in out.items()})
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def train_and_evaluate(
    cfg: RQVAEConfig,
    embeddings: Float[np.ndarray, "N E"],
    out_dir: Path,
    *,
    asins: list[str],
    fit_mask: np.ndarray | None = None,
    leaf_categories: list[str] | None = None,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
) -> dict:
    """Fits the RQ-VAE on embeddings[fit_mask] (default: all), writes SIDs of all items + metrics.

    Writes to `out_dir`: sids.npy, asins.txt, config.json, metrics.json and checkpoints/
    (resumed from on the next call with the same inputs).
    """
    from data import atomic
    from data.environment import environment
    from rqvae import sids

    out_dir = Path(out_dir)
    check_embeddings(embeddings, name="embeddings")
    if len(asins) != len(embeddings):
        raise ValueError(f"asins: {len(asins)} names for {len(embeddings)} embedding rows")
    if cfg.fit_on not in ("all", "warm"):
        raise ValueError(f"rqvae.fit_on: expected 'all' or 'warm', got {cfg.fit_on!r}")
    if fit_mask is None:
        fit_mask = np.ones(len(embeddings), bool)
    fit_mask = np.asarray(fit_mask, bool)
    if fit_mask.shape != (len(embeddings),):
        raise ValueError(f"fit_mask: shape {fit_mask.shape}, expected ({len(embeddings)},)")
    t0 = time.perf_counter()
    graphdef, state, log = train(
        cfg, embeddings[fit_mask], out_dir / "checkpoints", progress=progress, on_step=on_step
    )
    enc = assign_codes(graphdef, state.params, embeddings)
    nearest, sq_err = enc["codes"].astype(np.int32), enc["sq_err"]
    codes = nearest
    if cfg.dedup_last_level:
        last_cb = np.asarray(nnx.merge(graphdef, state.params).quantizer.levels[-1].codebook[...])
        codes = sids.dedup_last_level(nearest, enc["last_residual"], last_cb)
    final = sids.add_collision_level(codes)
    sids.check_unique(final)
    metrics = {
        "num_items": int(len(embeddings)),
        "num_fit_items": int(fit_mask.sum()),
        "embed_dim": int(embeddings.shape[1]),
        "steps": cfg.num_steps,
        "resumed_from_step": log["start_step"],
        "init_seconds": round(log["init_seconds"], 2),
        "train_seconds": round(log["train_seconds"], 2),
        "total_seconds": round(time.perf_counter() - t0, 2),
        "reconstruction_loss": float(sq_err.mean()),
        "reconstruction_loss_fit_items": float(sq_err[fit_mask].mean()),
        "reconstruction_loss_other_items": float(sq_err[~fit_mask].mean())
        if (~fit_mask).any()
        else None,
        "last_batch": log.get("last", {}),
        "dead_codes_restarted_per_level": log["restarted"],
        **sids.code_metrics(codes, vocab_size=cfg.codebook_size),
        "nearest_codes": sids.code_metrics(nearest, vocab_size=cfg.codebook_size),
        "collision_level_max": int(final[:, -1].max()) + 1,
    }
    metrics["semantic_level1"] = (
        None
        if leaf_categories is None
        else sids.semantic_check(codes[:, 0], leaf_categories, seed=cfg.seed)
    )
    atomic.write_text(out_dir / sids.ASINS_FILE, "".join(f"{a}\n" for a in asins))
    atomic.save_npy(out_dir / sids.SIDS_FILE, final)
    atomic.write_json(out_dir / "config.json", json_config(cfg))
    atomic.write_json(out_dir / "metrics.json", {**metrics, "environment": environment()})
    return metrics
