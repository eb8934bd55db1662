"""SASRec as a second teacher for the retriever's soft targets (`seqmodel.sasrec_teacher`).

The co-occurrence teacher (seqmodel.cooc_teacher) knows which items follow the last one; a
trained SASRec (seqmodel.sasrec) knows which follow the whole history. `next_item_topk` keeps
SASRec's k most probable next items, with their probabilities, at every position of every
training history. At the row of the target's SID level l, `SasrecTeacher.targets` gives the
level-l codes of those items whose codes before level l equal the target's, weighted by their
probabilities; seqmodel.cooc_teacher.join_targets puts them beside the co-occurrence teacher's
codes, scaled so that both teachers carry the same total weight in that row (SASRec's alone
where the co-occurrence teacher has none). The loss (seqmodel.train.teacher_mix) and decoding
are unchanged.
"""

import dataclasses
import functools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int
from tqdm import tqdm

from data import atomic
from data.errors import ArtifactError
from data.pipeline import bucket_widths, pad_rows
from data.types import Histories
from seqmodel.cooc_teacher import level_targets
from seqmodel.sasrec import encode_items


@dataclasses.dataclass(frozen=True)
class NextItemTopK:
    """A next-item model's k best next items at every position of a set of histories: the
    prediction for position t >= 1 of history u (from its items before t) is row
    offsets[u] + t - 1; probabilities 0 where the model has no state for it (a position before
    its last max_history items). `key` names the model and the histories."""

    offsets: Int[np.ndarray, " U1"]
    items: Int[np.ndarray, "R k"]
    probs: Float[np.ndarray, "R k"]
    key: str

    def save(self, path: Path) -> None:
        with atomic.atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, offsets=self.offsets, items=self.items, probs=self.probs, key=self.key)

    @classmethod
    def load(cls, path: Path, key: str) -> "NextItemTopK | None":
        """The table saved at `path` under `key`; None where there is none, or another key's."""
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["key"]) != key:
                    return None
                return cls(z["offsets"], z["items"], z["probs"], key)
        except (OSError, ValueError, KeyError):
            return None


@functools.partial(jax.jit, static_argnums=0, static_argnames="k")
def _topk_all_positions(graphdef: nnx.GraphDef, variables: Any, batch: Int[Array, "B T"], *, k):
    model = nnx.merge(graphdef, variables)
    scores = model.scores(model.hidden(batch)).astype(jnp.float32)  # [B, T, N]
    values, items = jax.lax.top_k(scores, k)
    return items, jnp.exp(values - jax.nn.logsumexp(scores, axis=-1, keepdims=True))


def next_item_topk(
    graphdef: nnx.GraphDef,
    variables: Any,
    h: Histories,
    *,
    max_history: int,
    k: int,
    key: str,
    batch_size: int = 64,
    show_progress: bool = False,
) -> NextItemTopK:
    """SASRec's (`graphdef`, `variables`) k most probable next items and their softmax
    probabilities at every position t >= 1 of every history of `h`, read from its state after
    the items before t within the history's last `max_history` items.

    Histories are scored in buckets of similar length (data.pipeline.bucket_widths), each cut
    to its bucket's width W with about batch_size * max_history positions a call: SASRec's
    rotary positions make the left padding it drops invisible, and most histories are far
    shorter than max_history."""
    lengths = h.lengths()
    offsets = h.target_offsets()
    items = np.zeros((offsets[-1], k), np.int32)
    probs = np.zeros((offsets[-1], k), np.float32)
    T = max_history
    encoded = encode_items(h, T)
    kept = np.minimum(lengths, T)
    widths = bucket_widths(np.maximum(kept, 1))
    bucket = np.searchsorted(widths, np.maximum(kept, 1))  # the first width >= each length
    groups = []
    for b, W in enumerate(widths):
        users = np.flatnonzero((bucket == b) & (lengths > 1))  # one item: no target
        rows = max(batch_size, batch_size * T // W)
        groups += [(W, users[i : i + rows], rows) for i in range(0, len(users), rows)]
    bar = tqdm(
        groups,
        desc="sasrec next items",
        unit="batch",
        leave=False,
        disable=not show_progress,
    )
    for W, users, rows in bar:
        batch = pad_rows(encoded[users, T - W :], rows)
        top, p = jax.device_get(_topk_all_positions(graphdef, variables, batch, k=k))
        n, m = lengths[users], kept[users]
        cols = np.arange(W)
        # Column c holds item n - W + c, so its state predicts position n - W + c + 1: real for
        # columns W - m .. W - 2 (the last column's prediction is past the history).
        real = (cols[None] >= (W - m)[:, None]) & (cols[None] <= W - 2)
        at = offsets[users, None] + (n - W)[:, None] + cols[None]
        items[at[real]] = top[: len(users)][real]
        probs[at[real]] = p[: len(users)][real]
    return NextItemTopK(offsets, items, probs, key)


@dataclasses.dataclass(frozen=True)
class SasrecTeacher:
    """Soft targets from a NextItemTopK over the training histories (their user indices);
    `weight`: their total in a row, as a multiple of the first teacher's (join_targets' ratio)."""

    sids: Int[np.ndarray, "N L"]
    top: NextItemTopK
    weight: float = 1.0

    def targets(
        self, user: int, n: int, items: Int[np.ndarray, " m"], length: int
    ) -> tuple[Int[np.ndarray, "T K"], Float[np.ndarray, "T K"]]:
        """(codes, weights) for a training row of `length` targets whose last m items are
        `items`, the last m of user `user`'s n-item history: at the row of level l of item
        j >= 1, the level-l codes of the model's top items for that position and their
        probabilities where their codes before level l are item j's."""
        items = np.asarray(items, np.int64)
        m = len(items)
        rows = self.top.offsets[user] + n - m + np.arange(1, m) - 1
        top = self.top.items[rows]
        return level_targets(self.sids[top], self.sids[items[1:]], self.top.probs[rows], length)


def check_histories(top: NextItemTopK, h: Histories, what: str) -> None:
    """An ArtifactError unless `top` covers exactly `h`'s positions."""
    if not np.array_equal(top.offsets, h.target_offsets()):
        raise ArtifactError(f"{what}: its next-item table covers other histories than these")
