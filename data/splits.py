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


def _positions(h: Histories) -> tuple[np.ndarray, np.ndarray]:
    """(user, position within the user's history) of every entry of h."""
    user_of = np.repeat(np.arange(len(h)), h.lengths())
    return user_of, np.arange(len(h.items)) - h.offsets[user_of]


def _first_cold(h: Histories, cold_mask: np.ndarray) -> np.ndarray:
    """Per user, the position of the first cold item in h (-1 where none)."""
    user_of, pos = _positions(h)
    first = np.full(len(h), -1, np.int64)
    # Reversed assignment leaves the smallest position per user.
    idx = np.flatnonzero(cold_mask[h.items])[::-1]
    first[user_of[idx]] = pos[idx]
    return first


def _from_target(h: Histories, cold_mask: np.ndarray) -> np.ndarray:
    """The entries of h that a test user (first cold item at position >= 1) made from their
    target, that first cold item, on."""
    first = _first_cold(h, cold_mask)
    user_of, pos = _positions(h)
    return (first[user_of] >= 1) & (pos >= first[user_of])


def _held_out(h: Histories, cold_mask: np.ndarray) -> np.ndarray:
    """The entries of h that a cold-start split keeps out of training."""
    return cold_mask[h.items] | _from_target(h, cold_mask)


def _cold_split(
    h: Histories, first_time: np.ndarray, fraction: float, exclude: np.ndarray
) -> ColdStartSplit:
    """The cold-start split of h, whose cold set is the newest `fraction` of the items outside
    `exclude` (h holds none of `exclude`)."""
    cold_mask = np.zeros(len(first_time), bool)
    cold_mask[~exclude] = cold_start_items(first_time[~exclude], fraction)
    first_cold = _first_cold(h, cold_mask)
    test_users = np.flatnonzero(first_cold >= 1).astype(np.int32)
    ends = first_cold[test_users]
    return ColdStartSplit(
        fraction=fraction,
        cold_mask=cold_mask,
        cold_items=np.flatnonzero(cold_mask).astype(np.int32),
        train=_remove(h, _held_out(h, cold_mask)),
        test_users=test_users,
        test_histories=_prefixes(h, test_users, ends),
        test_targets=h.items[h.offsets[test_users] + ends].astype(np.int32),
    )


def cold_start_split(ds: InteractionData, fraction: float) -> ColdStartSplit:
    """Cold set = newest items; a test user has >= 1 item before its first cold one.

    Training keeps every user's history without the cold items, each test user's cut before
    their target: nothing a test user did at or after it reaches training.
    """
    first_time = np.asarray(ds.catalog.first_time)
    return _cold_split(ds.histories, first_time, fraction, np.zeros(len(first_time), bool))


def validation_split(ds: InteractionData, fraction: float) -> ColdStartSplit:
    """The cold-start protocol moved into the training period, for tuning without test targets.

    It runs on what the test split trains on (real cold items removed, real test users cut
    before their targets): the newest `fraction` of the remaining items become a pseudo cold
    set, with its own training histories and test cases.
    """
    real = cold_start_split(ds, fraction)
    return _cold_split(real.train, np.asarray(ds.catalog.first_time), fraction, real.cold_mask)


def tokenizer_histories(ds: InteractionData, fractions: tuple[float, ...]) -> Histories:
    """The interactions that the tokenizer may read: those that every split trains on.

    Each user's last two items are dropped where leave-one-out holds them out (>= 3 items), and
    for each cold-start fraction what its test split and its validation split hold out (the
    cold items, and each test user's interactions from their target on). The validation
    split's pseudo cold items stay: they are warm items of the test split.
    """
    h = ds.histories
    n = h.lengths()
    user_of, pos = _positions(h)
    drop = (n[user_of] >= 3) & (pos >= n[user_of] - 2)
    first_time = np.asarray(ds.catalog.first_time)
    for fraction in fractions:
        real = cold_start_split(ds, fraction)
        real_drop = _held_out(h, real.cold_mask)
        val = _cold_split(real.train, first_time, fraction, real.cold_mask)  # validation_split's
        val_drop = _from_target(real.train, val.cold_mask)
        # real.train holds the entries of h that real_drop keeps, in order.
        drop |= real_drop
        drop[np.flatnonzero(~real_drop)[val_drop]] = True
    return _remove(h, drop)


def first_times(h: Histories, num_items: int) -> Int[np.ndarray, " N"]:
    """Each item's first interaction time in h; the int64 maximum (the newest) where it has none."""
    out = np.full(num_items, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(out, np.asarray(h.items, np.int64), np.asarray(h.times, np.int64))
    return out


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
