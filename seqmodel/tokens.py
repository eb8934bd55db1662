"""SID -> level-offset token ids, and histories -> fixed-length left-padded token arrays."""

import dataclasses

import grain
import numpy as np
from jaxtyping import Float, Int

from data.types import Histories
from seqmodel.cooc_teacher import join_targets

PAD = 0
BOS = 1
NUM_SPECIAL = 2


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenSpace:
    """Token ids: PAD, BOS, then one block of `codebook_size` codes per SID level, then the draft
    head's placeholders <SP_1> .. <SP_L> (one per level).

    The placeholders follow every other id, so adding them changes no existing token id; their
    embeddings belong to the draft head (seqmodel.draft), so `vocab_size` (the retriever's
    embedding table) leaves them out and a retriever without a head is unchanged.
    """

    num_levels: int  # L+1: SID columns, collision level included
    codebook_size: int  # V

    @property
    def vocab_size(self) -> int:
        return NUM_SPECIAL + self.num_levels * self.codebook_size

    @property
    def placeholder_ids(self) -> tuple[int, ...]:
        """Token ids of <SP_1> .. <SP_L>."""
        return tuple(range(self.vocab_size, self.vocab_size + self.num_levels))

    def context_length(self, max_history: int) -> int:
        """Prefill length of a full history: BOS + max_history items."""
        return 1 + max_history * self.num_levels


def sid_tokens(sids: Int[np.ndarray, "N L"], codebook_size: int) -> Int[np.ndarray, "N L"]:
    """Level-offset token ids of every item's SID."""
    sids = np.asarray(sids)
    if sids.ndim != 2 or not np.issubdtype(sids.dtype, np.integer):
        raise ValueError(f"sids: expected an integer array [N, L], got {sids.dtype}{sids.shape}")
    if sids.size and (sids.min() < 0 or sids.max() >= codebook_size):
        raise ValueError(
            f"sids: codes must be in [0, {codebook_size}), got [{sids.min()}, {sids.max()}]"
        )
    return level_tokens(sids, np.arange(sids.shape[1]), codebook_size).astype(np.int32)


def level_tokens(codes, level, codebook_size: int):
    """Level-offset token ids of raw `codes` at `level` (broadcast; NumPy or JAX arrays, or a
    traced level); raw codes are tokens minus level_tokens(0, level, codebook_size)."""
    return NUM_SPECIAL + level * codebook_size + codes


def encode_history(
    item_tokens: Int[np.ndarray, "N L"], items: Int[np.ndarray, " n"], max_history: int
) -> Int[np.ndarray, " T"]:
    """BOS + the tokens of the last `max_history` items, left-padded to 1 + max_history * L."""
    L = item_tokens.shape[1]
    kept = np.asarray(items)[-max_history:]
    out = np.full(1 + max_history * L, PAD, np.int32)
    body = item_tokens[kept].reshape(-1)
    out[len(out) - len(body) :] = body
    out[len(out) - len(body) - 1] = BOS
    return out


def encode_histories(
    item_tokens: Int[np.ndarray, "N L"],
    h: Histories,
    max_history: int,
    users: Int[np.ndarray, " U"] | None = None,
) -> Int[np.ndarray, "U T"]:
    """encode_history for every user of `h`, or for `users` only, in that order."""
    rows = range(len(h)) if users is None else users
    return np.stack([encode_history(item_tokens, h[int(u)], max_history) for u in rows])


def training_example(
    item_tokens: Int[np.ndarray, "N L"], items: Int[np.ndarray, " n"], max_history: int, layout: str
) -> tuple[Int[np.ndarray, " T"], Int[np.ndarray, " T"], Float[np.ndarray, " T"]]:
    """(inputs, targets, weights): next-token pairs with the loss on items 2..n or the last item."""
    seq = encode_history(item_tokens, items, max_history)
    L = item_tokens.shape[1]
    n = min(len(items), max_history)
    weights = np.zeros(len(seq) - 1, np.float32)
    # targets[t] = seq[t + 1]; item j (0-based among the kept) occupies the tail block n - j.
    first_target = n - 1 if layout == "causal" else 1
    if n >= 2:
        weights[len(weights) - first_target * L :] = 1.0
    return seq[:-1], seq[1:], weights


def packed_example(
    item_tokens: Int[np.ndarray, "N L"], items: Int[np.ndarray, " n"], max_history: int
) -> tuple[Int[np.ndarray, " T"], Int[np.ndarray, " T"], Float[np.ndarray, " T"]]:
    """The causal layout's (inputs, targets, weights) without padding: BOS + the last
    `max_history` items, n * L tokens each, loss on items 2..n (for packing several users into
    one row; every user's part starts at a multiple of L, so position t still predicts level
    t mod L)."""
    L = item_tokens.shape[1]
    kept = np.asarray(items)[-max_history:]
    seq = np.concatenate([[BOS], item_tokens[kept].reshape(-1)]).astype(np.int32)
    weights = np.zeros(len(seq) - 1, np.float32)
    weights[L:] = 1.0
    return seq[:-1], seq[1:], weights


class TokenizeExample(grain.transforms.Map):
    """grain transform: {"items": int32[n]} -> inputs/targets/weights arrays, of fixed length
    (causal, sliding) or of the user's own length n * L (packed: `data.pipeline.packed_batches`
    fills the rows). With a `teacher` (seqmodel.cooc_teacher.CoocTeacher, fixed-length layouts
    only) each row also holds its targets' teacher codes and weights ("teach_codes",
    "teach_weights", [T, K]); with `next_items` too (seqmodel.sasrec_teacher.SasrecTeacher,
    records of whole histories with their "user" index), its targets join the teacher's. With
    `log_q` (one value per item, fixed-length layouts only) each row also holds "target_logq"
    [T]: log_q of the item each target token belongs to (0 at padding)."""

    def __init__(
        self,
        item_tokens: np.ndarray,
        max_history: int,
        layout: str,
        teacher=None,
        log_q: np.ndarray | None = None,
        next_items=None,
    ):
        if next_items is not None and teacher is None:
            raise ValueError("TokenizeExample: next_items joins a teacher's targets; give both")
        if (teacher is not None or log_q is not None) and layout == "packed":
            raise ValueError(
                "TokenizeExample: a teacher or log_q needs fixed-length rows, not packed"
            )
        self.item_tokens = np.asarray(item_tokens, np.int32)
        self.max_history = max_history
        self.layout = layout
        self.teacher = teacher
        self.next_items = next_items
        self.log_q = None if log_q is None else np.asarray(log_q, np.float32)

    def map(self, element: dict) -> dict:
        if self.layout == "packed":
            example = packed_example(self.item_tokens, element["items"], self.max_history)
        else:
            example = training_example(
                self.item_tokens, element["items"], self.max_history, self.layout
            )
        out = dict(zip(("inputs", "targets", "weights"), example, strict=True))
        kept = np.asarray(element["items"])[-self.max_history :]
        if self.teacher is not None:
            out["teach_codes"], out["teach_weights"] = self.teacher.targets(kept, len(example[1]))
            if self.next_items is not None:
                n = len(element["items"])
                more = self.next_items.targets(int(element["user"]), n, kept, len(example[1]))
                out["teach_codes"], out["teach_weights"] = join_targets(
                    out["teach_codes"], out["teach_weights"], *more, self.next_items.weight
                )
        if self.log_q is not None:
            logq = np.zeros(len(example[1]), np.float32)
            # The targets' last n L tokens are the kept items' (the first has no weight).
            tail = np.repeat(self.log_q[kept], self.item_tokens.shape[1])
            logq[len(logq) - len(tail) :] = tail
            out["target_logq"] = logq
        return out


class WindowSource:
    """Random-access source of sliding windows: one record per (user, target position >= 1)."""

    def __init__(self, h: Histories, max_history: int):
        self._h = h
        self._max_history = max_history
        offsets = h.target_offsets()
        counts = np.diff(offsets)
        users = np.repeat(np.arange(len(h)), counts)
        starts = h.offsets[:-1][users]
        within = np.arange(len(users)) - np.repeat(offsets[:-1], counts)
        self._users = users.astype(np.int32)
        self._ends = (starts + within + 2).astype(np.int64)  # exclusive end: target = ends - 1

    def __len__(self) -> int:
        return len(self._users)

    def __getitem__(self, i: int) -> dict:
        end = int(self._ends[i])
        u = int(self._users[i])
        start = max(int(self._h.offsets[u]), end - self._max_history)
        return {
            "user": np.int32(u),
            "items": self._h.items[start:end],
            "times": self._h.times[start:end],
        }
