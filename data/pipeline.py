"""Grain input pipelines over per-user records: random-access sources, padding, seeded batches."""

import dataclasses
import threading
from collections.abc import Iterator

import grain
import numpy as np

from data.types import Histories


def shuffle_ties(items: np.ndarray, times: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`items` with each run of consecutive equal `times` in a random order (the runs stay in
    place): a history's same-day items, whose order the data does not know."""
    items, times = np.asarray(items), np.asarray(times)
    if len(items) != len(times):
        raise ValueError(f"shuffle_ties: {len(items)} items, {len(times)} times")
    if len(items) < 2:
        return items
    run = np.concatenate([[0], np.cumsum(times[1:] != times[:-1])])
    return items[np.lexsort((rng.random(len(items)), run))]


def shuffle_record_ties(record: dict, rng: np.random.Generator) -> dict:
    """A {"items", "times", ...} record with its ties shuffled (`shuffle_ties`)."""
    return {**record, "items": shuffle_ties(record["items"], record["times"], rng)}


class HistorySource:
    """Random-access source of {"user": int32, "items": int32[n], "times": int64[n]} records, one
    per user."""

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
        return {
            "user": np.int32(self._users[i]),
            "items": self._h[i],
            "times": self._h.times_of(i),
        }

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
    augment=None,
) -> grain.IterDataset:
    """Seeded shuffle (a new order each epoch), transform, fixed-size batches (remainder dropped).
    `augment(record, rng)`, when given, changes each record before the transform, with a
    generator that grain seeds per record and epoch (e.g. `shuffle_record_ties`).

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
    ds = ds.repeat(num_epochs)
    if augment is not None:
        ds = ds.random_map(augment, seed=seed)
    ds = ds.map(transform).batch(batch_size, drop_remainder=True)
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


class BucketedBatches:
    """Random-access source of whole batches, one user per row, each batch drawn from one bucket
    of similar history lengths and cut to that bucket's width (for `bucketed_batches`).

    Batch i is batch i mod `steps_per_epoch` of epoch i // `steps_per_epoch`: per epoch a seeded
    shuffle of the records, split by bucket into full batches (each bucket's remainder waits for
    the next epoch's shuffle), the batches in a seeded order. So the i-th batch is a pure function
    of (seed, i), which is what makes the iterator's state a single index.
    """

    def __init__(
        self,
        source,
        transform,
        lengths,
        widths,
        *,
        batch_size: int,
        seed: int,
        unit: int,
        augment=None,
    ):
        lengths = np.asarray(lengths)
        self._widths = np.asarray(sorted(set(int(w) for w in widths)))
        if len(lengths) != len(source):
            raise ValueError(f"BucketedBatches: {len(lengths)} lengths for {len(source)} records")
        if lengths.size and lengths.max() > self._widths[-1]:
            raise ValueError(f"BucketedBatches: a length {lengths.max()} exceeds every width")
        self._source, self._fn = source, getattr(transform, "map", transform)
        self._bucket = np.searchsorted(self._widths, lengths)  # the narrowest width that fits
        self._batch_size, self._seed, self._unit = batch_size, seed, unit
        self._augment = augment
        counts = np.bincount(self._bucket, minlength=len(self._widths))
        self.steps_per_epoch = int((counts // batch_size).sum())
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"batch_size={batch_size} exceeds every length bucket's records {counts.tolist()}"
            )
        self._lock = threading.Lock()
        self._cached: tuple[int, list[np.ndarray]] | None = None
        # The loss divides by the mean weight of a row over all records, not by this batch's
        # own: a token weighs the same in a batch of short histories as in one of long ones, as
        # in the causal layout's random batches (where each batch's count is near the mean).
        total = sum(float(self._fn(source[i])["weights"].sum()) for i in range(len(source)))
        self._row_weight = np.float32(total / max(len(source), 1))

    def __len__(self) -> int:
        return self.steps_per_epoch * 1_000_000  # endless for any real schedule

    def plan(self, epoch: int) -> list[np.ndarray]:
        """The record ids of every batch of `epoch`, in order."""
        with self._lock:
            if self._cached is not None and self._cached[0] == epoch:
                return self._cached[1]
        rng = np.random.default_rng([self._seed, epoch])
        order = rng.permutation(len(self._bucket))
        out = []
        for b in range(len(self._widths)):
            ids = order[self._bucket[order] == b]
            k = len(ids) // self._batch_size
            out.extend(ids[: k * self._batch_size].reshape(k, self._batch_size))
        out = [out[j] for j in rng.permutation(len(out))]
        with self._lock:
            self._cached = (epoch, out)
        return out

    def _record(self, epoch: int, r: int) -> dict:
        record = self._source[r]
        if self._augment is None:
            return record
        return self._augment(record, np.random.default_rng([self._seed, epoch, r]))

    def __getitem__(self, i: int) -> dict:
        epoch, j = divmod(int(i), self.steps_per_epoch)
        ids = self.plan(epoch)[j]
        rows = [self._fn(self._record(epoch, int(u))) for u in ids]
        width = int(self._widths[self._bucket[ids[0]]]) * self._unit
        batch = {k: np.stack([r[k][-width:] for r in rows]) for k in rows[0]}
        batch["norm"] = np.full(len(ids), self._row_weight, np.float32)
        return batch


def bucketed_batches(
    source,
    transform,
    lengths,
    widths,
    *,
    batch_size: int,
    seed: int,
    unit: int,
    num_threads: int = 2,
    prefetch: int = 4,
    augment=None,
) -> tuple[grain.IterDataset, int]:
    """(endless batches of left-padded rows cut to their bucket's width, steps per epoch).

    `lengths[r]` is record r's length in items and `widths` the bucket widths in items; a row of
    `transform`'s output must be left-padded, so its last `width * unit` columns hold every real
    token of a record that fits the width. Fewer padded positions than `batches` at the cost of
    one compiled step per width; checkpointable as `batches` is. `augment` as in `batches`, its
    generator seeded by (seed, epoch, record), so batch i stays a pure function of (seed, i).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    src = BucketedBatches(
        source,
        transform,
        lengths,
        widths,
        batch_size=batch_size,
        seed=seed,
        unit=unit,
        augment=augment,
    )
    options = grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch)
    return grain.MapDataset.source(src).to_iter_dataset(options), src.steps_per_epoch


def bucket_widths(lengths, quantiles=(0.3, 0.55, 0.75, 0.9, 1.0)) -> list[int]:
    """Bucket widths (in items) at the given quantiles of the lengths: at most one compiled shape
    per quantile, and most rows close to their bucket's width."""
    lengths = np.asarray(lengths)
    return sorted(set(int(np.ceil(np.quantile(lengths, q))) for q in quantiles))


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
