"""Splits: cold-start (STATIC section 6), leave-one-out (TIGER) and a seeded last-item holdout."""

import dataclasses
import math

import numpy as np
from jaxtyping import Bool, Int

from data.errors import ArgumentError
from data.types import Histories, InteractionData


@dataclasses.dataclass(frozen=True)
class ColdStartSplit:
    """Training histories without cold items; one (history, first cold item) case per test user."""

    fraction: float
    cold_mask: np.ndarray  # bool [N]
    cold_items: np.ndarray  # int32 [C]
    train: Histories  # every user, cold items removed, user order kept
    test_users: np.ndarray  # int32 [T]
    test_histories: Histories  # [T]: everything before the user's first cold item
    test_targets: np.ndarray  # int32 [T]: the user's first cold item


@dataclasses.dataclass(frozen=True)
class LeaveOneOutSplit:
    """All but the last two items for training; second-to-last validates, last tests."""

    train: Histories  # every user; all but the last two items where there are >= 3
    users: np.ndarray  # int32 [M]: users with at least 3 items (valid/test rows)
    valid_histories: Histories
    valid_targets: np.ndarray  # int32 [M]
    test_histories: Histories
    test_targets: np.ndarray  # int32 [M]

    def validation_as_test(self) -> "LeaveOneOutSplit":
        """The same split whose test cases are the validation ones (the tuning protocol: every
        user's second-to-last item, never trained on), for code that evaluates `test_*`."""
        return dataclasses.replace(
            self, test_histories=self.valid_histories, test_targets=self.valid_targets
        )


# STATIC's protocol holds out the newest p of items; past one half no "warm" majority is left to
# learn from. Every command checks this one rule before any work starts.
MAX_COLD_FRACTION = 0.5


def check_fraction(fraction, arg: str = "--cold-start") -> float:
    """The cold-start fraction p must lie in (0, 0.5]; returns it as a float."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float | np.floating):
        raise ArgumentError(f"{arg}: expected a fraction in (0, 0.5], got {fraction!r}")
    if not 0.0 < fraction <= MAX_COLD_FRACTION:
        raise ArgumentError(f"{arg}: expected a fraction in (0, 0.5], got {fraction:g}")
    return float(fraction)


def cold_start_items(first_time: Int[np.ndarray, " N"], fraction: float) -> Bool[np.ndarray, " N"]:
    """The newest `fraction` of items by first review, items tied with the k-th newest included."""
    check_fraction(fraction)
    first_time = np.asarray(first_time)
    if first_time.ndim != 1 or len(first_time) == 0:
        raise ValueError(f"first_time must be a non-empty 1-D array, got shape {first_time.shape}")
    # k = ceil(p * N); on Beauty (N = 12,101) both ceil and round give the published 243 (2%)
    # and 606 (5%), because the day ties at the threshold fill the gap.
    k = max(1, math.ceil(fraction * len(first_time) - 1e-9))
    threshold = np.sort(first_time)[::-1][k - 1]
    return first_time >= threshold


def _prefixes(h: Histories, users: np.ndarray, ends: np.ndarray) -> Histories:
    """Histories of `users`, each cut to its first ends[j] items."""
    starts = h.offsets[users]
    offsets = np.concatenate([[0], np.cumsum(ends)]).astype(np.int64)
    take = np.repeat(starts - offsets[:-1], ends) + np.arange(offsets[-1])
    return Histories(items=h.items[take], times=h.times[take], offsets=offsets)


def _remove(h: Histories, drop: np.ndarray) -> Histories:
    """h with the entries where drop is True removed, user order kept."""
    keep = ~drop
    user_of = np.repeat(np.arange(len(h)), h.lengths())
    counts = np.bincount(user_of[keep], minlength=len(h))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Histories(items=h.items[keep], times=h.times[keep], offsets=offsets)


def cold_start_split(
    ds: InteractionData, fraction: float, *, exclude: Bool[np.ndarray, " N"] | None = None
) -> ColdStartSplit:
    """Cold set = newest items; a test user has >= 1 item before its first cold one.

    Items in `exclude` are removed from every history and never join the cold set, which is then
    the newest `fraction` of the remaining items (see validation_split).
    """
    first_time = np.asarray(ds.catalog.first_time)
    h = ds.histories
    if exclude is None:
        cold_mask = cold_start_items(first_time, fraction)
    else:
        exclude = np.asarray(exclude, bool)
        if exclude.shape != first_time.shape:
            raise ValueError(f"exclude: expected shape {first_time.shape}, got {exclude.shape}")
        cold_mask = np.zeros(len(first_time), bool)
        cold_mask[~exclude] = cold_start_items(first_time[~exclude], fraction)
        h = _remove(h, exclude[h.items])
    is_cold = cold_mask[h.items]
    user_of = np.repeat(np.arange(len(h)), h.lengths())
    pos = np.arange(len(h.items)) - h.offsets[user_of]
    first_cold = np.full(len(h), -1, np.int64)
    # Reversed assignment leaves the smallest position per user.
    idx = np.flatnonzero(is_cold)[::-1]
    first_cold[user_of[idx]] = pos[idx]
    test_users = np.flatnonzero(first_cold >= 1).astype(np.int32)
    ends = first_cold[test_users]
    return ColdStartSplit(
        fraction=fraction,
        cold_mask=cold_mask,
        cold_items=np.flatnonzero(cold_mask).astype(np.int32),
        train=_remove(h, is_cold),
        test_users=test_users,
        test_histories=_prefixes(h, test_users, ends),
        test_targets=h.items[h.offsets[test_users] + ends].astype(np.int32),
    )


def validation_split(ds: InteractionData, fraction: float) -> ColdStartSplit:
    """The cold-start protocol moved into the training period, for tuning without test targets.

    The real cold items are removed from every history; the newest `fraction` of the remaining
    items become a pseudo cold set, with its own training histories and test cases.
    """
    return cold_start_split(ds, fraction, exclude=cold_start_items(ds.catalog.first_time, fraction))


def leave_one_out(ds: InteractionData | Histories) -> LeaveOneOutSplit:
    """Last item tests, second-to-last validates (users with >= 3 items)."""
    h = ds.histories if isinstance(ds, InteractionData) else ds
    n = h.lengths()
    users = np.flatnonzero(n >= 3).astype(np.int32)
    end = h.offsets[users] + n[users]
    return LeaveOneOutSplit(
        train=_prefixes(h, np.arange(len(h)), np.where(n >= 3, n - 2, n)),
        users=users,
        valid_histories=_prefixes(h, users, n[users] - 2),
        valid_targets=h.items[end - 2].astype(np.int32),
        test_histories=_prefixes(h, users, n[users] - 1),
        test_targets=h.items[end - 1].astype(np.int32),
    )


def holdout_rows(num_users: int, size: int, seed: int) -> Int[np.ndarray, " M"]:
    """A seeded sample of up to `size` of `num_users` rows: the first `size` of a seeded
    permutation, sorted. Samples of one seed are nested: a smaller one lies inside a larger one."""
    return np.sort(np.random.default_rng(seed).permutation(num_users)[:size])


def outside_holdouts(users: Int[np.ndarray, " U"], *holdouts: np.ndarray) -> Int[np.ndarray, " M"]:
    """The positions in `users` (row numbers of one split) of the users in none of `holdouts`
    (row arrays such as holdout_rows gives): the users on whom no early stop chose its checkpoint,
    whose numbers carry no bias from that choice."""
    chosen = np.concatenate([np.zeros(0, np.int64), *map(np.asarray, holdouts)])
    return np.flatnonzero(~np.isin(users, chosen))


def holdout_last(
    h: Histories, *, max_users: int, seed: int, min_length: int = 3
) -> tuple[Histories, Histories, Int[np.ndarray, " M"]]:
    """A seeded sample of up to max_users users (>= min_length items) loses its last item.

    Returns (train, valid_histories, valid_targets): train is every user with the sampled users'
    last items removed; valid rows follow increasing user index.
    """
    if max_users < 0 or min_length < 2:
        raise ValueError(
            f"holdout_last: need max_users >= 0, min_length >= 2 (got {max_users}, {min_length})"
        )
    n = h.lengths()
    eligible = np.flatnonzero(n >= min_length)
    chosen = eligible[holdout_rows(len(eligible), max_users, seed)]
    last = h.offsets[chosen] + n[chosen] - 1
    drop = np.zeros(len(h.items), bool)
    drop[last] = True
    return _remove(h, drop), _prefixes(h, chosen, n[chosen] - 1), h.items[last].astype(np.int32)
