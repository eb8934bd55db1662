"""A co-occurrence teacher for the retriever's loss (`seqmodel.cooc_distill`).

The retriever under-ranks rare targets that a count table of adjacent pairs finds: a pair seen
once in training is one example among thousands. The
teacher turns every occurrence of an item X as the last history item into a soft example for all
of X's neighbours: at the target position of SID level l, the codes at level l of X's most frequent
neighbours in the training histories (at most one position apart, both orders) whose codes before
level l equal the target's, weighted by their pair counts. The loss there becomes

    (1 - a) log p(true code) + a sum_k w_k log p(code_k) / sum_k w_k,

and stays the plain log-likelihood where no neighbour shares the target's prefix. Decoding is
unchanged: this is a training target, and the retriever stays decoder-only.
"""

import dataclasses

import numpy as np
from jaxtyping import Float, Int

from data.types import Histories
from rqvae.cooc import cooccurrence_counts


@dataclasses.dataclass(frozen=True)
class CoocTeacher:
    """Each item's `k` most frequent neighbours (ties by the lower index) and their counts."""

    sids: Int[np.ndarray, "N L"]
    neighbour_codes: Int[np.ndarray, "N K L"]  # SIDs of the neighbours (zeros where none)
    counts: Float[np.ndarray, "N K"]  # pair counts (0 where none)

    @classmethod
    def build(cls, train: Histories, sids: np.ndarray, k: int) -> "CoocTeacher":
        if k < 1:
            raise ValueError(f"CoocTeacher: k must be >= 1, got {k}")
        sids = np.asarray(sids, np.int32)
        counts = cooccurrence_counts(train, len(sids), 1).tocsr()
        ids = np.zeros((len(sids), k), np.int64)
        weight = np.zeros((len(sids), k), np.float32)
        for item in range(len(sids)):
            lo, hi = counts.indptr[item], counts.indptr[item + 1]
            cols, vals = counts.indices[lo:hi], counts.data[lo:hi]
            top = np.lexsort((cols, -vals))[:k]
            ids[item, : len(top)], weight[item, : len(top)] = cols[top], vals[top]
        return cls(sids, sids[ids], weight)

    def targets(
        self, items: Int[np.ndarray, " n"], length: int
    ) -> tuple[Int[np.ndarray, "T K"], Float[np.ndarray, "T K"]]:
        """(codes, weights) for a training row of `length` targets whose last n items are
        `items` (left-padded, as `seqmodel.tokens.training_example` lays them out): at the row
        of level l of item j >= 1, the level-l codes of item j-1's neighbours and their counts
        where their codes before level l are item j's; zero weight everywhere else."""
        items = np.asarray(items, np.int64)
        prev = items[:-1]
        return level_targets(
            self.neighbour_codes[prev], self.sids[items[1:]], self.counts[prev], length
        )


def level_targets(
    candidates: Int[np.ndarray, "n K L"],
    targets: Int[np.ndarray, "n L"],
    weights: Float[np.ndarray, "n K"],
    length: int,
) -> tuple[Int[np.ndarray, "T K"], Float[np.ndarray, "T K"]]:
    """A teacher's (codes, weights) rows for the last n items of a training row of `length`
    targets: at the row of level l of target j, the level-l codes of its K candidate items and
    their weights where a candidate's codes before level l equal the target's, zero weight
    where they do not and on every earlier row."""
    n, K, L = candidates.shape
    codes = np.zeros((length, K), np.int32)
    out = np.zeros((length, K), np.float32)
    if n == 0:
        return codes, out
    same = candidates == targets[:, None, :]
    # A candidate counts at level l when it agrees with the target on levels 0..l-1.
    prefix = np.concatenate(
        [np.ones_like(same[..., :1]), np.cumprod(same, axis=-1)[..., :-1]], axis=-1
    )
    w = np.asarray(weights, np.float32)[..., None] * prefix  # [n, K, L]
    rows = n * L
    codes[length - rows :] = candidates.transpose(0, 2, 1).reshape(rows, K)
    out[length - rows :] = w.transpose(0, 2, 1).reshape(rows, K)
    return codes, out


def join_targets(
    codes: Int[np.ndarray, "T K"],
    weights: Float[np.ndarray, "T K"],
    extra_codes: Int[np.ndarray, "T J"],
    extra_weights: Float[np.ndarray, "T J"],
    ratio: float = 1.0,
) -> tuple[Int[np.ndarray, "T KJ"], Float[np.ndarray, "T KJ"]]:
    """Two teachers' rows side by side, the second's scaled to `ratio` times the first's total
    weight in each row where the first has any (at 1, each is half of that row's soft target)."""
    total = weights.sum(-1, keepdims=True)
    extra_total = extra_weights.sum(-1, keepdims=True)
    scale = np.where(total > 0, ratio * total / np.maximum(extra_total, 1e-12), 1.0)
    return (
        np.concatenate([codes, extra_codes], -1),
        np.concatenate([weights, extra_weights * scale], -1).astype(np.float32),
    )
