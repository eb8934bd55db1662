"""A sequential model that reads and scores items by their text alone, on a cold-start split: does
a learned text model rank the cold set better than the content neighbour?

Each item's vector is a learned projection of its text (the preset's TF-IDF rows reduced by a
truncated SVD, fitted on every item's text, which the protocol allows). A SASRec-style stack of
causal DecoderBlocks reads a user's history as those vectors; the state after the last item
scores every item by its dot product with the item's vector (tied input and output, as SASRec).
It trains on the split's training histories by a softmax over the items they hold (no cold item
is ever a target or a negative), so a cold item is scored only through its text. With
`--id-inputs` each history item's input also gets an id embedding (history items are warm); the
scores stay text only. With `--residual` the model trains as a correction of the content
neighbour: its logits are its score plus a learned weight times the neighbour's cosines to the
warm items at that position (the same text profile); it ranks the cold set the same way.

Prints Recall@1 / Recall@10 (%) over the cold set after each `--every` epochs: the model alone,
the content neighbour alone, and their sum with each score standardized per user at a few
weights. Reads the cold-val split by default (`--test`: the test split).
Usage: python docs/scripts/cold_text_sasrec.py WORKDIR FRACTION [--epochs N] [--id-inputs]
    [--residual] [--test]
"""

import argparse
import dataclasses
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

# The sibling script (this directory is on the path of a script run from it).
from cold_text_views import load_cold_text, recalls, standardized
from flax import nnx
from sklearn.decomposition import TruncatedSVD

from data.errors import GenretError
from data.types import Histories
from experiments import config as config_lib
from experiments.evaluation.baselines import content_queries, cosines
from seqmodel.model import DecoderBlock, RMSNorm
from seqmodel.sasrec import PAD_ITEM, encode_items, item_states

FUSION_WEIGHTS = (0.3, 0.5, 1.0, 2.0)  # weight of the model's standardized score


class TextSASRec(nnx.Module):
    """Item vectors = norm(W f_i) from fixed text features f; causal blocks over the history's
    vectors; scores = state . item vectors."""

    def __init__(self, cfg, feature_dim: int, id_rows: int = 0, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.proj = nnx.Linear(feature_dim, cfg.d_model, rngs=rngs)
        if id_rows:  # --id-inputs: an id embedding beside the text on the input side only
            self.ids = nnx.Embed(id_rows, cfg.d_model, rngs=rngs)
        # --residual: the weight of the neighbour's cosine beside the model's score
        self.beta = nnx.Param(jnp.asarray(10.0))
        self.item_norm = RMSNorm(cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([DecoderBlock(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.d_model, rngs=rngs)

    def item_vectors(self, features):
        return self.item_norm(self.proj(features))

    def hidden(self, vectors, items, valid, key=None):
        """States [B, T, D] after each position of `items` (indices into `vectors`)."""
        x = vectors[items]
        if hasattr(self, "ids"):
            x = x + self.ids(items)
        return item_states(self.blocks, self.norm, x, valid, self.cfg.dropout, key)


def windows(histories: Histories, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(items [U, max_len + 1], valid): each history's last max_len + 1 items, left-padded
    (`encode_items`' rows, back to item ids, padding as item 0 where `valid` is false)."""
    ids = encode_items(histories, max_len + 1)
    valid = ids != PAD_ITEM
    return np.where(valid, ids - 1, 0).astype(np.int32), valid


def softmax_columns(train: Histories, num_items: int) -> tuple[np.ndarray, np.ndarray]:
    """(the training softmax's items: those `train` holds, each item's column there or -1): a
    cold item, which training never holds, is neither a target nor a negative."""
    warm = np.unique(train.items)
    col = np.full(num_items, -1, np.int32)
    col[warm] = np.arange(len(warm))
    return warm, col


def profile_band(width: int, recent: int, decay: float) -> np.ndarray:
    """[width, width]: row t weights position t' by decay**(t - t') for the `recent` positions
    up to t (the content profile's weights before each row is scaled to sum to 1)."""
    gap = np.arange(width)[:, None] - np.arange(width)[None, :]
    return np.where((gap >= 0) & (gap < recent), decay ** np.maximum(gap, 0), 0.0)


def length_batches(lengths: np.ndarray, batch: int, rng: np.random.Generator) -> list:
    """One epoch's batches of row indices, in random order: rows sorted by length (ties broken at
    random), cut into batches of `batch`, so that a batch's rows have similar lengths."""
    order = np.lexsort((rng.random(len(lengths)), lengths))
    out = [order[i : i + batch] for i in range(0, len(order), batch)]
    return [out[i] for i in rng.permutation(len(out))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("fraction", type=float)
    ap.add_argument("--test", action="store_true", help="the test split (default: cold-val)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--every", type=int, default=2, help="evaluate every N epochs")
    ap.add_argument("--svd", type=int, default=256, help="text feature dimension")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.3)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--residual",
        action="store_true",
        help="train on the model's score plus a learned weight times the neighbour's cosine",
    )
    ap.add_argument(
        "--id-inputs",
        action="store_true",
        help="add an id embedding to each history item's input (scores stay text only)",
    )
    args = ap.parse_args()
    data = load_cold_text(args.workdir, args.fraction, args.test)
    split, profile, texts, rows = data.split, data.profile, data.texts, data.rows
    cands, targets, histories = split.cold_items, split.test_targets, split.test_histories
    unit, queries = content_queries(rows, histories, profile)
    neighbour = cosines(queries, unit[cands].T)

    svd = TruncatedSVD(args.svd, random_state=args.seed).fit_transform(rows)
    feats = svd / np.maximum(np.linalg.norm(svd, axis=1, keepdims=True), 1e-12)
    feats = jnp.asarray(feats, jnp.float32)
    warm, col = softmax_columns(split.train, len(texts))

    mcfg = dataclasses.replace(
        config_lib.SASREC,
        d_model=args.d_model,
        mlp_dim=4 * args.d_model,
        dropout=args.dropout,
        seed=args.seed,
    )
    id_rows = len(texts) if args.id_inputs else 0
    model = TextSASRec(mcfg, feats.shape[1], id_rows, rngs=nnx.Rngs(args.seed))
    graphdef, params = nnx.split(model)
    train_items, train_valid = windows(split.train, mcfg.max_history)
    keep = train_valid.sum(axis=1) >= 2
    train_items, train_valid = train_items[keep], train_valid[keep]
    total = -(-len(train_items) // args.batch) * args.epochs
    warmup = min(100, total // 10)  # linear warmup, then cosine decay to a tenth
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.lr, warmup, total, args.lr * 0.1)
    tx = optax.adamw(schedule, weight_decay=0.0)
    opt = tx.init(params)
    warm_j = jnp.asarray(warm)

    def loss_fn(params, items, valid, key, to_warm):
        m = nnx.merge(graphdef, params)
        vecs = m.item_vectors(feats)
        h = m.hidden(vecs, items[:, :-1], valid[:, :-1], key)
        logits = (h @ vecs[warm_j].T).astype(jnp.float32)
        if args.residual:  # the neighbour at every position: its profile's cosines to the warm
            band = jnp.asarray(profile_band(items.shape[1] - 1, profile.recent, profile.decay))
            band = band[None] * valid[:, None, :-1]
            band = band / jnp.maximum(band.sum(-1, keepdims=True), 1e-12)
            near = jnp.einsum("btu,bun->btn", band, to_warm[items[:, :-1]])
            logits = logits + m.beta[...] * near
        y = jnp.asarray(col)[items[:, 1:]]
        w = (valid[:, :-1] & valid[:, 1:]).astype(jnp.float32)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(y, 0))
        return (nll * w).sum() / jnp.maximum(w.sum(), 1.0)

    # --residual: every item's cosine to each warm item ([N, W], an argument, not a constant)
    to_warm = jnp.asarray(cosines(unit, unit[warm].T), jnp.float32) if args.residual else None

    @jax.jit
    def step(params, opt, items, valid, key, to_warm):
        loss, grads = jax.value_and_grad(loss_fn)(params, items, valid, key, to_warm)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, loss

    test_items, test_valid = windows(histories, mcfg.max_history - 1)

    @jax.jit
    def last_scores(params, items, valid):
        m = nnx.merge(graphdef, params)
        vecs = m.item_vectors(feats)
        return m.hidden(vecs, items, valid)[:, -1] @ vecs[jnp.asarray(cands)].T

    def evaluate(epoch: int) -> None:
        s = np.concatenate(
            [
                np.asarray(last_scores(params, test_items[i : i + 512], test_valid[i : i + 512]))
                for i in range(0, len(test_items), 512)
            ]
        )
        base = standardized(neighbour)
        if args.residual:  # the model's own ranking includes the neighbour at its weight
            s = s + float(nnx.merge(graphdef, params).beta[...]) * neighbour
        z = standardized(s)
        cells = [recalls(s, cands, targets)] + [
            recalls(base + w * z, cands, targets) for w in FUSION_WEIGHTS
        ]
        print(f"| {epoch} | " + " | ".join(cells) + " |", flush=True)

    print(
        f"{len(targets)} users, {len(cands)} cold items, {len(warm)} warm items, "
        f"{'test' if args.test else 'cold-val'}; content neighbour "
        f"{recalls(neighbour, cands, targets)}"
    )
    print("| epoch | model | " + " | ".join(f"+ {w} x model" for w in FUSION_WEIGHTS) + " |")
    print("|---|---|" + "---|" * len(FUSION_WEIGHTS))
    rng = np.random.default_rng(args.seed)
    key = jax.random.key(args.seed)
    lengths = train_valid.sum(axis=1)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        for idx in length_batches(lengths, args.batch, rng):
            # Left-padded rows: keep the batch's last columns, its longest row rounded up to 8.
            width = min(train_items.shape[1], -(-int(lengths[idx].max()) // 8) * 8)
            key, sub = jax.random.split(key)
            params, opt, _ = step(
                params, opt, train_items[idx, -width:], train_valid[idx, -width:], sub, to_warm
            )
        if epoch % args.every == 0 or epoch == args.epochs:
            evaluate(epoch)
    print(f"trained in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    try:
        main()
    except GenretError as e:  # bad input: one line, no traceback
        sys.exit(f"cold_text_sasrec: {e}")
