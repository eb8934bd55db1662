"""Containers for item catalogs and time-ordered user histories, shared by every stage."""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Histories:
    """Ragged per-user item sequences in CSR form: user u owns items[offsets[u]:offsets[u + 1]].

    Items are catalog indices (int32), times are unix seconds (int64), each user's entries in
    time order with ties kept in file order.
    """

    items: np.ndarray
    times: np.ndarray
    offsets: np.ndarray

    def __post_init__(self):
        if self.offsets.ndim != 1 or self.offsets[0] != 0 or self.offsets[-1] != len(self.items):
            raise ValueError("Histories.offsets must start at 0 and end at len(items)")
        if len(self.items) != len(self.times):
            raise ValueError("Histories.items and Histories.times differ in length")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, u: int) -> np.ndarray:
        return self.items[self.offsets[u] : self.offsets[u + 1]]

    def times_of(self, u: int) -> np.ndarray:
        return self.times[self.offsets[u] : self.offsets[u + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def target_offsets(self) -> np.ndarray:
        """int64[U + 1]: where each history's targets (its positions 1 .. n - 1) start in one
        flat table of them; history u's are rows out[u] .. out[u + 1] - 1."""
        return np.concatenate([[0], np.cumsum(np.maximum(self.lengths() - 1, 0))]).astype(np.int64)

    @classmethod
    def from_lists(cls, items: list, times: list | None = None) -> "Histories":
        """Builds from per-user lists; times default to positions (for tests)."""
        lengths = np.array([len(x) for x in items], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.concatenate([np.asarray(x, np.int32) for x in items]) if items else np.zeros(0)
        if times is None:
            flat_t = (
                np.concatenate([np.arange(n, dtype=np.int64) for n in lengths]) if items else []
            )
        else:
            flat_t = np.concatenate([np.asarray(t, np.int64) for t in times])
        return cls(
            items=np.asarray(flat, np.int32),
            times=np.asarray(flat_t, np.int64),
            offsets=offsets,
        )


@dataclasses.dataclass(frozen=True)
class Catalog:
    """Items in index order: asin, text for the embedder, leaf category, first-review time."""

    asins: np.ndarray  # str [N]
    texts: list[str]  # [N]
    leaf_categories: list[str]  # [N]; "" where unknown
    first_time: np.ndarray  # int64 [N], unix seconds of the item's oldest review

    def __len__(self) -> int:
        return len(self.asins)


@dataclasses.dataclass(frozen=True)
class InteractionData:
    """A loaded dataset: catalog, users and their time-ordered histories, and a load report."""

    name: str
    user_ids: np.ndarray  # str [U]
    catalog: Catalog
    histories: Histories
    report: dict = dataclasses.field(default_factory=dict)
