"""Grain input pipelines over per-user records: random-access sources, padding, seeded batches."""

import dataclasses
from collections.abc import Iterator

import grain
import numpy as np

from data.types import Histories


class HistorySource:
    """Random-access source of {"user": int32, "items": int32[n]} records, one per user."""

    def __init__(self, h: Histories, users: np.ndarray | None = None):
        self._h = h
        self._users = np.arange(len(h), dtype=np.int32) if users is None else np.asarray(users)
        if len(self._users) != len(h):
            raise ValueError(f"HistorySource: {len(self._users)} user ids for {len(h)} histories")

    def __len__(self) -> int:
        return len(self._h)

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self._h):
            raise IndexError(f"HistorySource index {i} out of range [0, {len(self._h)})")
        return {"user": np.int32(self._users[i]), "items": self._h[i]}

    def __repr__(self) -> str:
        return f"HistorySource(users={len(self._h)}, items={len(self._h.items)})"


@dataclasses.dataclass(frozen=True)
class PadHistory:
    """Keeps a record's last max_len items, right-padded with pad_id, plus its true length.

    Fixed shapes mean one compiled step for every batch.
    """

    max_len: int
    pad_id: int = 0

    def __call__(self, record: dict) -> dict:
        items = np.asarray(record["items"], np.int32)[-self.max_len :]
        out = np.full(self.max_len, self.pad_id, np.int32)
        out[: len(items)] = items
        return {"user": np.int32(record["user"]), "items": out, "length": np.int32(len(items))}


def batches(
    source,
    transform,
    *,
    batch_size: int,
    seed: int,
    shuffle: bool = True,
    num_epochs: int | None = None,
    num_threads: int = 2,
    prefetch: int = 16,
) -> grain.IterDataset:
    """Seeded shuffle (a new order each epoch), transform, fixed-size batches (remainder dropped).

    num_threads/prefetch: grain's read threads and buffered records (its defaults, 16 threads and
    hundreds of records, only slow small CPU jobs down). The returned dataset's iterators
    support get_state/set_state, so they can be saved with grain.checkpoint.CheckpointSave and
    resume exactly.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(source) < batch_size:
        raise ValueError(f"batch_size={batch_size} exceeds the {len(source)} records of {source}")
    ds = grain.MapDataset.source(source)
    if shuffle:
        ds = ds.seed(seed).shuffle()
    ds = ds.repeat(num_epochs).map(transform).batch(batch_size, drop_remainder=True)
    options = grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch)
    return ds.to_iter_dataset(options)


def packed_batches(
    source,
    transform,
    *,
    row_length: int,
    batch_size: int,
    seed: int,
    num_threads: int = 2,
    prefetch: int = 16,
) -> grain.IterDataset:
    """Like `batches`, with several records per row: grain's first-fit packing of the
    variable-length {"inputs", "targets", "weights"} records `transform` makes into rows of
    `row_length` tokens, one packing round of `batch_size` rows per batch (so a batch never mixes
    epochs more than one round does). Adds "segments" [B, T]: 1, 2, ... per record in its row,
    0 on padding; checkpointable as `batches` is."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ds = grain.MapDataset.source(source).seed(seed).shuffle().repeat(None).map(transform)
    options = grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch)
    packed = grain.experimental.FirstFitPackIterDataset(
        ds.to_iter_dataset(options),
        length_struct={k: row_length for k in ("inputs", "targets", "weights")},
        num_packing_bins=batch_size,
        seed=seed,
        shuffle_bins=True,
    )
    return packed.map(_segments).batch(batch_size, drop_remainder=True)


def _segments(row: dict) -> dict:
    return {
        "inputs": row["inputs"],
        "targets": row["targets"],
        "weights": row["weights"],
        "segments": row["inputs_segment_ids"],
    }


def pad_rows(x: np.ndarray, multiple: int) -> np.ndarray:
    """x with its last row repeated until len(x) is a multiple of `multiple` (one jit shape)."""
    n = -(-len(x) // multiple) * multiple
    return np.concatenate([x, np.repeat(x[-1:], n - len(x), axis=0)])


def padded_batches(*arrays: np.ndarray, batch_size: int) -> Iterator[tuple[np.ndarray, ...]]:
    """Fixed-size batches over the arrays' shared leading axis; the last is padded by repeating
    its final row, so every batch has one compiled shape. Callers trim results to the true length.

    With one array, yields arrays; with several, tuples of arrays.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(arrays[0])
    if n == 0 or any(len(a) != n for a in arrays):
        raise ValueError(f"padded_batches: expected non-empty arrays of one length, got {n}")
    padded = [pad_rows(np.asarray(a), batch_size) for a in arrays]
    for start in range(0, len(padded[0]), batch_size):
        parts = tuple(a[start : start + batch_size] for a in padded)
        yield parts if len(parts) > 1 else parts[0]
