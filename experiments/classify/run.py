"""`genret classify`: train a small causal LM from item text to category paths, then decode the
test items unconstrained and under `LabelConstraint` (single- and multi-label) and score them."""

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import decoding
from data import atomic
from data.errors import ArgumentError
from data.fingerprint import fingerprint
from experiments.classify import data as cd
from seqmodel.files import METRICS_FILE
from seqmodel.state import TrainState
from seqmodel.textlm import TextLM, TextLMConfig
from seqmodel.trainer import Run, Schedule, Trainer, read_metrics

_INFO_FILE = "classifier.json"  # the run's settings and inputs key, beside its checkpoints
# Settings that change the trained model: a checkpoint made with others is not resumed.
_TRAIN_FIELDS = (
    "meta_path", "max_items", "test_fraction", "val_fraction", "max_words", "prompt_len",
    "target_len", "num_layers", "d_model", "num_heads", "mlp_dim", "dropout", "batch_size",
    "epochs", "learning_rate", "warmup_steps", "weight_decay", "seed",
)  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClassifyConfig:
    """Data, model, training and decoding settings of one classification run."""

    dataset: str
    meta_path: str
    max_items: int = 0  # 0: every item; else a seeded sample of that many
    skip_bad_lines: bool = False
    test_fraction: float = 0.1
    val_fraction: float = 0.05  # of the non-test items: validation loss, never the test set
    max_words: int = 4000  # word pieces in the vocabulary (bytes cover the rest)
    prompt_len: int = 40  # tokens of "title brand" + PROMPT_END
    target_len: int = 32  # tokens of "label SEP label ... EOS" in training
    max_labels: int = 4  # multi-label decoding: labels per output, at most
    num_layers: int = 2
    d_model: int = 128
    num_heads: int = 4
    mlp_dim: int = 384
    dropout: float = 0.1
    batch_size: int = 64
    epochs: int = 6
    learning_rate: float = 2e-3
    warmup_steps: int = 100
    weight_decay: float = 0.05
    checkpoint_every: int = 200  # steps
    eval_batch: int = 64
    beam_size: int = 4
    latency_items: int = 32  # test items decoded one at a time (B=1) for the latency figure
    seed: int = 0

    def __post_init__(self):
        check_settings(dataclasses.asdict(self))


def check_settings(values: dict, spell: Callable[[str, Any], str] = "{}={}".format) -> None:
    """An ArgumentError naming the first of a ClassifyConfig's `values` out of range, spelled
    by `spell(field, value)` (the command spells its flag: `--max-labels 0`)."""

    def refuse(name: str, why: str):
        raise ArgumentError(f"{spell(name, values[name])}: {why}")

    for name in ("test_fraction", "val_fraction", "dropout", "learning_rate", "weight_decay"):
        if not math.isfinite(values[name]):
            refuse(name, "must be a finite number")
    for name in ("prompt_len", "target_len"):
        if values[name] < 2:
            refuse(name, "must be >= 2")
    for name in ("max_labels", "batch_size", "epochs", "eval_batch", "beam_size"):
        if values[name] < 1:
            refuse(name, "must be >= 1")
    for name in ("checkpoint_every", "num_layers", "d_model", "num_heads", "mlp_dim"):
        if values[name] < 1:
            refuse(name, "must be >= 1")
    for name in ("max_items", "latency_items", "warmup_steps"):
        if values[name] < 0:
            refuse(name, "must be >= 0")
    if not 0 < values["test_fraction"] < 1:
        refuse("test_fraction", "must be in (0, 1)")
    for name in ("val_fraction", "dropout"):
        if not 0 <= values[name] < 1:
            refuse(name, "must be in [0, 1)")
    if not values["learning_rate"] > 0:
        refuse("learning_rate", "must be > 0")
    if values["weight_decay"] < 0:
        refuse("weight_decay", "must be >= 0")


def result_path(workdir: Path, dataset: str) -> Path:
    return Path(workdir) / "results" / f"classify_{dataset}.json"


def run_dir(workdir: Path, dataset: str) -> Path:
    return Path(workdir) / "classify" / dataset


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Items, split, vocabulary, the train label set and the encoded arrays."""

    catalog: cd.Catalog
    split: dict[str, np.ndarray]
    vocab: cd.WordPieces
    labels: list[str]  # the label set: every path of a training item, sorted
    label_ids: list[list[int]]  # their tokens
    prompts: np.ndarray  # int32 [N, prompt_len], all items
    report: dict


def prepare(cfg: ClassifyConfig) -> Prepared:
    """Reads the meta file, samples, splits and encodes; the vocabulary sees training items only."""
    catalog = cd.read_items(cfg.meta_path, skip_bad_lines=cfg.skip_bad_lines)
    items = catalog.items
    if cfg.max_items and cfg.max_items < len(items):
        keep = np.sort(np.random.default_rng(cfg.seed).permutation(len(items))[: cfg.max_items])
        items = [items[i] for i in keep]
        catalog = dataclasses.replace(catalog, items=items)
    if len(items) < 3:
        raise ArgumentError(f"{cfg.meta_path}: {len(items)} usable items; need at least 3")
    split = cd.split_items(len(items), test=cfg.test_fraction, val=cfg.val_fraction, seed=cfg.seed)
    train = [items[i] for i in split["train"]]
    labels = sorted({p for it in train for p in it.paths})
    vocab = cd.WordPieces.fit([it.text for it in train], labels, max_words=cfg.max_words)
    label_ids = [vocab.encode(lb) for lb in labels]
    prompts = cd.encode_prompts(vocab, [it.text for it in items], cfg.prompt_len)
    known = set(labels)
    test = [items[i] for i in split["test"]]
    report = {
        **catalog.report,
        "items_used": len(items),
        "train_items": len(train),
        "val_items": int(len(split["val"])),
        "test_items": len(test),
        "train_labels": len(labels),
        "label_tokens_max": max(map(len, label_ids)),
        "vocab_size": vocab.vocab_size,
        "prompt_truncated_share": float(np.mean(prompts[:, 0] != cd.PAD)),
        "test_leaf_unseen_share": float(np.mean([it.paths[0] not in known for it in test])),
        "test_path_unseen_share": float(np.mean([p not in known for it in test for p in it.paths])),
        "test_multi_path_share": float(np.mean([len(it.paths) > 1 for it in test])),
    }
    return Prepared(catalog, split, vocab, labels, label_ids, prompts, report)


def _targets(cfg: ClassifyConfig, prep: Prepared, part: str) -> tuple[np.ndarray, np.ndarray]:
    """Prompts and multi-label targets of a split, rows whose first label fits only."""
    idx = prep.split[part]
    paths = [prep.catalog.items[i].paths for i in idx]
    # Val items may hold labels outside the train set: encode every path of the part.
    names = sorted({p for ps in paths for p in ps})
    pos = {n: j for j, n in enumerate(names)}
    ids = [prep.vocab.encode(n) for n in names]
    targets, kept = cd.encode_targets(ids, [[pos[p] for p in ps] for ps in paths], cfg.target_len)
    return prep.prompts[idx][kept > 0], targets[kept > 0]


def _model_config(cfg: ClassifyConfig, vocab_size: int) -> TextLMConfig:
    return TextLMConfig(
        vocab_size=vocab_size,
        pad_id=cd.PAD,
        num_layers=cfg.num_layers,
        d_model=cfg.d_model,
        num_heads=cfg.num_heads,
        mlp_dim=cfg.mlp_dim,
        dropout=cfg.dropout,
        seed=cfg.seed,
    )


def _loss(graphdef, params, batch, key):
    """Mean NLL of the target tokens (EOS included); the prompt's tokens carry no loss."""
    prompt, target = batch
    model = nnx.merge(graphdef, params)
    tokens = jnp.concatenate([prompt, target], axis=1)
    P = prompt.shape[1]
    # Position P - 1 (PROMPT_END) predicts the first target token.
    h = model.hidden(tokens[:, :-1], key)[:, P - 1 :]
    logp = jax.nn.log_softmax(model.logits_at(h).astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
    w = (target != cd.PAD).astype(jnp.float32)
    return (nll * w).sum() / jnp.maximum(w.sum(), 1.0), w.sum()


def _train_step(graphdef, tx, state: TrainState, batch, key):
    key = jax.random.fold_in(key, state.step)
    (loss, _), grads = jax.value_and_grad(_loss, argnums=1, has_aux=True)(
        graphdef, state.params, batch, key
    )
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), {"loss": loss}


def _eval_loss(graphdef, params, batch):
    loss, n = _loss(graphdef, params, batch, None)
    return loss * n, n


def _batch_at(step: int, *, data: tuple[np.ndarray, np.ndarray], per_epoch: int, B: int, seed: int):
    """Step `step`'s rows: its epoch's seeded permutation of the training items, cut into B."""
    epoch, i = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(len(data[0]))
    rows = order[i * B : (i + 1) * B]
    return data[0][rows], data[1][rows]


def train(
    cfg: ClassifyConfig, prep: Prepared, directory: Path, *, log: Callable[[str], None]
) -> tuple[nnx.GraphDef, Any, dict]:
    """Trains (resuming from the newest checkpoint in `directory`); returns graphdef, params and
    the training record (validation loss per epoch, seconds)."""
    prompts, targets = _targets(cfg, prep, "train")
    val = _targets(cfg, prep, "val") if len(prep.split["val"]) else None
    B = min(cfg.batch_size, len(prompts))
    per_epoch = len(prompts) // B
    total = per_epoch * cfg.epochs
    mcfg = _model_config(cfg, prep.vocab.vocab_size)
    graphdef, params = nnx.split(nnx.jit(lambda: TextLM(mcfg, rngs=nnx.Rngs(cfg.seed)))())
    schedule = optax.warmup_cosine_decay_schedule(
        0.0,
        cfg.learning_rate,
        min(cfg.warmup_steps, total - 1),
        max(total, cfg.warmup_steps + 1),
        cfg.learning_rate * 0.1,
    )
    tx = optax.chain(
        optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=cfg.weight_decay)
    )
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    trainer = Trainer(_train_step, graphdef, tx, args={"key": jax.random.key(cfg.seed)})
    if B % trainer.mesh.shape["data"]:
        raise ArgumentError(f"batch_size={B} does not split across {trainer.mesh.size} devices")
    # Steps index their batches, so a resumed run reads the rows the uninterrupted one would.
    at = functools.partial(
        _batch_at, data=(prompts, targets), per_epoch=per_epoch, B=B, seed=cfg.seed
    )
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=16)
    batches = iter(grain.MapDataset.range(total).map(at).to_iter_dataset(options))
    config = {f: getattr(cfg, f) for f in _TRAIN_FIELDS}
    run = Run(
        directory,
        _INFO_FILE,
        {"classify": config, "inputs": fingerprint(config, prep.vocab.words)},
        what="settings",
        refuse="holds a run with other settings; use another --workdir or delete that folder",
    )
    loss_fn = jax.jit(functools.partial(_eval_loss, graphdef))

    def validate(state: TrainState) -> dict:
        loss = _mean_loss(loss_fn, state.params, val, B, trainer.put)
        epoch = int(jax.device_get(state.step)) // per_epoch
        log(f"epoch {epoch}/{cfg.epochs}: val loss {loss:.4f}")
        return {"val_loss": loss}

    fitted = trainer.fit(
        state,
        batches,
        run,
        Schedule(total=total, eval_every=per_epoch, save_every=cfg.checkpoint_every),
        validate=None if val is None else validate,
        row=lambda m: {"loss": float(m["loss"])},
        desc="classify train",
        log=log,
    )
    rows = read_metrics(Path(directory) / METRICS_FILE)
    record = {
        "steps": total,
        "steps_per_epoch": per_epoch,
        "val_loss": [r["val_loss"] for r in rows if "val_loss" in r],
        "train_seconds": fitted.run_seconds,
    }
    return graphdef, fitted.state.params, record


def _mean_loss(loss_fn, params, data: tuple[np.ndarray, np.ndarray], B: int, put) -> float:
    total = count = 0.0
    for rows, real in _batches(len(data[0]), B):
        # Padding rows get all-PAD targets: no weight in the loss.
        target = np.where(real[:, None], data[1][rows], cd.PAD)
        nll, n = jax.device_get(loss_fn(params, put((data[0][rows], target))))
        total, count = total + float(nll), count + float(n)
    return total / max(count, 1.0)


def _batches(n: int, B: int):
    """(row indices [B], real [B]) covering 0..n-1; the last batch repeats row 0 as padding, so
    every call has the same shape (one compilation)."""
    for s in range(0, n, B):
        rows = np.arange(s, s + B)
        real = rows < n
        yield np.where(real, rows, 0), real


# A decode callable: (params, prompts [B, P], key) -> output tokens [B, T] (the best beam's).
Decode = Callable[[Any, jax.Array, jax.Array], jax.Array]


def _greedy(graphdef: nnx.GraphDef, max_new: int) -> Decode:
    """Unconstrained greedy decoding with the KV cache, until EOS or `max_new` tokens."""

    def decode(params, prompt, key):
        del key
        model = nnx.merge(graphdef, params)
        logits, cache = model.prefill(prompt, max_new)
        cache = jax.tree.map(lambda x: x[:, None], cache)
        token = _argmax(logits)
        out = jnp.full((prompt.shape[0], max_new), cd.EOS, jnp.int32).at[:, 0].set(token)

        def body(c):
            step, out, done, cache, token = c
            logits, cache = model.step(token[:, None], step, cache)
            token = jnp.where(done, cd.EOS, _argmax(logits[:, 0]))
            out = jax.lax.dynamic_update_index_in_dim(out, token, step, axis=1)
            return step + 1, out, done | (token == cd.EOS), cache, token

        def running(c):
            return (c[0] < max_new) & ~jnp.all(c[2])

        init = (jnp.int32(1), out, token == cd.EOS, cache, token)
        return jax.lax.while_loop(running, body, init)[1]

    return jax.jit(decode)


def _argmax(logits: jax.Array) -> jax.Array:
    # top_k(1), as the label decoder's greedy pick: XLA's CPU argmax is several times slower.
    return jax.lax.top_k(logits, 1)[1][..., 0]


def _constrained(
    graphdef: nnx.GraphDef, constraint: decoding.LabelConstraint, mode: str, beam_size: int
) -> Decode:
    max_new = constraint.max_steps

    def prefill(params, prompt):
        return nnx.merge(graphdef, params).prefill(prompt, max_new)

    def step(params, tokens, step, cache):
        return nnx.merge(graphdef, params).step(tokens, step, cache)

    dec = decoding.make_label_decoder(prefill, step, constraint, mode=mode, beam_size=beam_size)

    def decode(params, prompt, key):
        return dec(params, prompt, rng=key).tokens[:, 0]

    return decode


def _run(decode: Decode, params, prompts: np.ndarray, B: int, seed: int) -> tuple[np.ndarray, dict]:
    """Output tokens of every prompt, and the latency per batch of B (after one warm-up call)."""
    outs, times = [], []
    key = jax.random.key(seed)
    batches = list(_batches(len(prompts), B))
    jax.block_until_ready(decode(params, jax.device_put(prompts[batches[0][0]]), key))
    for b, (rows, real) in enumerate(batches):
        x = jax.device_put(prompts[rows])
        t0 = time.perf_counter()
        out = jax.block_until_ready(decode(params, x, jax.random.fold_in(key, b)))
        times.append(time.perf_counter() - t0)
        outs.append(np.asarray(out)[real])
    ms = np.asarray(times) * 1e3
    timing = {
        "batch": B,
        "batch_ms_median": float(np.median(ms)),
        "batch_ms_p90": float(np.percentile(ms, 90)),
        "item_ms_median": float(np.median(ms) / B),
    }
    return np.concatenate(outs), timing


def _parse(row: np.ndarray, vocab: cd.WordPieces) -> tuple[list[str], bool]:
    """The labels an output names (text between separators) and whether it is well formed:
    ended by EOS, no empty label, no stray special token."""
    toks = row.tolist()
    finished = cd.EOS in toks
    toks = toks[: toks.index(cd.EOS)] if finished else toks
    parts, cur = [], []
    for t in [*toks, cd.LABEL_SEP]:
        if t == cd.LABEL_SEP:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    clean = finished and all(p for p in parts) and not ({cd.PAD, cd.PROMPT_END} & set(toks))
    return [vocab.decode(p) for p in parts], clean


def _score(
    outputs: np.ndarray, gold: list[tuple[str, ...]], known: set[str], vocab, *, single: bool
) -> dict:
    """Validity, exact match, micro P/R/F1 and repeats of decoded outputs against gold paths."""
    valid = exact = repeats = tp = n_pred = n_gold = 0
    for row, g in zip(outputs, gold, strict=True):
        names, clean = _parse(row, vocab)
        target = {g[0]} if single else set(g)
        ok = clean and all(n in known for n in names) and (len(names) == 1 or not single)
        valid += ok
        repeats += len(set(names)) < len(names)
        pred = set(names) if clean else set()
        exact += pred == target and (len(names) == 1 or not single)
        tp, n_pred, n_gold = tp + len(pred & target), n_pred + len(pred), n_gold + len(target)
    n = len(gold)
    p, r = tp / max(n_pred, 1), tp / max(n_gold, 1)
    return {
        "items": n,
        "valid_share": valid / n,
        "exact_match": exact / n,
        "precision": p,
        "recall": r,
        "f1": 2 * p * r / max(p + r, 1e-12),
        "repeated_label_share": repeats / n,
        "labels_per_output": n_pred / n,
    }


def evaluate(
    cfg: ClassifyConfig, prep: Prepared, graphdef, params, *, log: Callable[[str], None]
) -> dict:
    """Scores of every task x decoding method on the test items, with latency."""
    test = prep.split["test"]
    prompts = prep.prompts[test]
    gold = [prep.catalog.items[i].paths for i in test]
    known = set(prep.labels)
    index = decoding.LabelIndex.build(prep.label_ids, vocab_size=prep.vocab.vocab_size)
    index.verify(prep.label_ids)
    constraints = {
        "single": decoding.LabelConstraint.build(index, eos_id=cd.EOS, max_labels=1),
        "multi": decoding.LabelConstraint.build(
            index, eos_id=cd.EOS, separator=[cd.LABEL_SEP], max_labels=cfg.max_labels
        ),
    }
    # One unconstrained run serves both tasks, with the longer (multi-label) token budget.
    free = _greedy(graphdef, constraints["multi"].max_steps)
    methods = {
        "unconstrained greedy": lambda c: free,
        "constrained greedy": lambda c: _constrained(graphdef, c, "greedy", 1),
        f"constrained beam{cfg.beam_size}": lambda c: _constrained(
            graphdef, c, "beam", cfg.beam_size
        ),
        "constrained sample": lambda c: _constrained(graphdef, c, "sample", 1),
    }
    params = jax.device_put(params)
    cache: dict = {}
    results: dict = {}
    for task, constraint in constraints.items():
        results[task] = {}
        for name, make in methods.items():
            log(f"decoding: {task}-label, {name}")
            key = name if name.startswith("unconstrained") else (task, name)
            if key not in cache:
                decode = make(constraint)
                outs, timing = _run(decode, params, prompts, cfg.eval_batch, cfg.seed)
                one = (
                    cfg.latency_items
                    and _run(decode, params, prompts[: cfg.latency_items], 1, cfg.seed)[1]
                )
                cache[key] = outs, {"throughput": timing, "single_item": one or None}
            outs, timing = cache[key]
            scores = _score(outs, gold, known, prep.vocab, single=task == "single")
            results[task][name] = {**scores, "latency": timing}
    return results


def run_classify(cfg: ClassifyConfig, workdir: Path, *, log: Callable[[str], None]) -> dict:
    """Prepares, trains (or resumes), evaluates and writes results/classify_<dataset>.json."""
    t0 = time.perf_counter()
    prep = prepare(cfg)
    log(json.dumps(prep.report))
    graphdef, params, record = train(cfg, prep, run_dir(workdir, cfg.dataset), log=log)
    results = evaluate(cfg, prep, graphdef, params, log=log)
    out = {
        "dataset": cfg.dataset,
        "config": dataclasses.asdict(cfg),
        "data": prep.report,
        "training": record,
        "results": results,
        "backend": jax.default_backend(),
        "wall_seconds": time.perf_counter() - t0,
    }
    atomic.write_json(result_path(workdir, cfg.dataset), out)
    return out


def markdown_table(result: dict) -> str:
    """One row per task x method: validity, accuracy, multi-label P/R/F1, repeats, latency."""
    B = result["config"]["eval_batch"]
    lines = [
        f"| task | method | valid % | exact % | P | R | F1 | repeated % | ms/item (B={B}) "
        "| ms/item (B=1) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, methods in result["results"].items():
        for name, m in methods.items():
            one = m["latency"]["single_item"]
            tail = f"{one['batch_ms_median']:.1f}" if one else "-"
            lines.append(
                f"| {task} | {name} | {100 * m['valid_share']:.1f} | {100 * m['exact_match']:.1f}"
                f" | {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f}"
                f" | {100 * m['repeated_label_share']:.1f}"
                f" | {m['latency']['throughput']['item_ms_median']:.2f} | {tail} |"
            )
    return "\n".join(lines)
