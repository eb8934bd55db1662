"""Tests of data/splits.py: cold-start, leave-one-out and holdout on hand-built histories."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data import splits
from data.types import Catalog, Histories, InteractionData


def _dataset(items: list[list[int]], first_time: list[int]) -> InteractionData:
    n = len(first_time)
    catalog = Catalog(
        asins=np.array([f"I{i}" for i in range(n)]),
        texts=[f"item {i}" for i in range(n)],
        leaf_categories=[""] * n,
        first_time=np.asarray(first_time, np.int64),
    )
    users = np.array([f"U{u}" for u in range(len(items))])
    return InteractionData("t", users, catalog, Histories.from_lists(items))


def test_cold_start_items_includes_day_ties():
    first_time = np.array([5, 1, 9, 9, 3, 7, 9, 2, 4, 6], np.int64)
    # 10% of 10 items -> k = 1, but three items share the newest day.
    assert splits.cold_start_items(first_time, 0.1).tolist() == [
        False,
        False,
        True,
        True,
        False,
        False,
        True,
        False,
        False,
        False,
    ]
    # 40% -> k = 4: the 4th newest is 7 -> {9, 9, 9, 7}.
    assert np.flatnonzero(splits.cold_start_items(first_time, 0.4)).tolist() == [2, 3, 5, 6]
    # 31% of 10 -> ceil gives 4 (round would give 3: the 9s only).
    assert splits.cold_start_items(first_time, 0.31).sum() == 4


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 2.0])
def test_cold_start_items_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match="fraction"):
        splits.cold_start_items(np.arange(5), fraction)


def test_cold_start_split():
    # Items 4 and 5 are the newest two (cold at 1/3 of 6 items).
    ds = _dataset(
        [[0, 1, 4, 2, 5], [4, 0, 1], [2, 3], [1, 5, 4]],
        first_time=[0, 1, 2, 3, 8, 9],
    )
    s = splits.cold_start_split(ds, 1 / 3)
    assert s.cold_items.tolist() == [4, 5] and s.cold_items.dtype == np.int32
    # Test users 0 and 3 are cut before their targets (user 0's 2 after the cold 4 is gone);
    # user 1, whose history starts cold, keeps its warm items.
    assert s.train.items.tolist() == [0, 1, 0, 1, 2, 3, 1]
    assert s.train.lengths().tolist() == [2, 2, 2, 1]
    # User 1 starts with a cold item (no history before it) and is not a test user.
    assert s.test_users.tolist() == [0, 3]
    assert [s.test_histories[j].tolist() for j in range(2)] == [[0, 1], [1]]
    assert s.test_targets.tolist() == [4, 5]
    assert not s.cold_mask[s.train.items].any()


def test_leave_one_out():
    ds = _dataset([[0, 1, 2, 3], [3, 2, 1], [1, 2]], first_time=[0, 0, 0, 0])
    s = splits.leave_one_out(ds)
    assert s.users.tolist() == [0, 1]
    assert [s.train[u].tolist() for u in range(3)] == [[0, 1], [3], [1, 2]]
    assert [s.valid_histories[j].tolist() for j in range(2)] == [[0, 1], [3]]
    assert s.valid_targets.tolist() == [2, 2]
    assert [s.test_histories[j].tolist() for j in range(2)] == [[0, 1, 2], [3, 2]]
    assert s.test_targets.tolist() == [3, 1]
    v = s.validation_as_test()
    assert [v.test_histories[j].tolist() for j in range(2)] == [[0, 1], [3]]
    assert v.test_targets.tolist() == [2, 2]
    assert v.train is s.train and v.valid_targets is s.valid_targets


def test_holdout_last_is_seeded_and_removes_targets():
    h = Histories.from_lists([[0, 1, 2], [3, 4], [5, 6, 7, 8], [9, 10, 11]])
    train, vh, vt = splits.holdout_last(h, max_users=2, seed=0)
    again = splits.holdout_last(h, max_users=2, seed=0)
    assert vt.tolist() == again[2].tolist() and len(vt) == 2
    assert set(vt.tolist()) <= {2, 8, 11}  # user 1 is too short
    assert not set(vt.tolist()) & set(train.items.tolist())
    assert train.items.size == h.items.size - 2
    for j, target in enumerate(vt.tolist()):
        u = [2, 8, 11].index(target)
        assert vh[j].tolist() == h[[0, 2, 3][u]][:-1].tolist()
    everyone = splits.holdout_last(h, max_users=10, seed=1)[2]
    assert sorted(everyone.tolist()) == [2, 8, 11]


@pytest.mark.real_data
def test_beauty_cold_start_acceptance(amazon_root):
    from data import amazon

    ds = amazon.read_raw_dir(amazon_root / "Beauty")
    for fraction, cold, users in ((0.02, 243, 1548), (0.05, 606, 3493)):
        s = splits.cold_start_split(ds, fraction)
        assert (len(s.cold_items), len(s.test_users)) == (cold, users), fraction
        assert not s.cold_mask[s.train.items].any()
        assert not s.cold_mask[s.test_histories.items].any()
        assert s.cold_mask[s.test_targets].all() and s.test_histories.lengths().min() >= 1


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=8), min_size=1, max_size=12),
    st.lists(st.integers(0, 5), min_size=12, max_size=12),
    st.sampled_from([0.05, 0.2, 0.5]),
)
def test_cold_start_split_invariants(items, first_time, fraction):
    ds = _dataset(items, first_time)
    s = splits.cold_start_split(ds, fraction)
    assert s.cold_mask.sum() >= np.ceil(fraction * 12) and len(s.train) == len(items)
    assert not s.cold_mask[s.train.items].any()
    for j, u in enumerate(s.test_users.tolist()):
        h = ds.histories[u].tolist()
        first = next(k for k, i in enumerate(h) if s.cold_mask[i])
        assert first >= 1 and s.test_targets[j] == h[first]
        assert s.test_histories[j].tolist() == h[:first]
        # Nothing the test user did at or after the target is trained on.
        assert s.train[u].tolist() == h[:first]
    for u in set(range(len(items))) - set(s.test_users.tolist()):
        assert s.train[u].tolist() == [i for i in items[u] if not s.cold_mask[i]]
    expected = [u for u, h in enumerate(items) if any(s.cold_mask[h]) and not s.cold_mask[h[0]]]
    assert s.test_users.tolist() == expected


def test_validation_split_never_sees_real_cold_items(tmp_path):
    from data import amazon, synthetic
    from data.config import SyntheticConfig
    from data.splits import cold_start_split, validation_split

    cfg = SyntheticConfig(num_items=300, num_users=400, num_categories=6)
    synthetic.generate(cfg, tmp_path)
    ds = amazon.read_raw_dir(tmp_path)
    real = cold_start_split(ds, 0.05)
    val = validation_split(ds, 0.05)
    assert not (val.cold_mask & real.cold_mask).any()
    for h in (val.train, val.test_histories):
        assert not real.cold_mask[h.items].any(), "a real cold item leaked into validation"
    assert not real.cold_mask[val.test_targets].any()
    assert val.cold_mask[val.test_targets].all() and not val.cold_mask[val.train.items].any()
    # The pseudo cold items are the newest of the warm ones.
    warm_times = ds.catalog.first_time[~real.cold_mask]
    assert ds.catalog.first_time[val.cold_items].min() >= np.median(warm_times)


def test_holdout_rows_are_nested_prefixes_of_one_seeded_sample():
    small, large = splits.holdout_rows(500, 40, seed=3), splits.holdout_rows(500, 200, seed=3)
    assert len(small) == 40 and len(np.unique(large)) == 200
    assert np.all(np.diff(large) > 0) and large.max() < 500  # sorted rows of the split
    assert np.isin(small, large).all()  # the smaller sample lies inside the larger one
    assert not np.array_equal(splits.holdout_rows(500, 40, seed=4), small)  # the seed draws it
    assert len(splits.holdout_rows(30, 200, seed=3)) == 30  # a sample past the split is all of it


def test_outside_holdouts_gives_the_positions_of_users_in_no_holdout():
    users = np.array([7, 2, 9, 4, 0])  # row numbers of a sampled, unsorted evaluation
    assert splits.outside_holdouts(users, np.array([2, 4]), np.array([4, 8])).tolist() == [0, 2, 4]
    assert splits.outside_holdouts(users).tolist() == [0, 1, 2, 3, 4]  # no holdout: everyone
    rows = splits.holdout_rows(50, 10, seed=1)
    rest = splits.outside_holdouts(np.arange(50), rows)
    assert len(rest) == 40 and not np.isin(rest, rows).any()


def _synthetic(tmp_path, **kw):
    from data import amazon, synthetic
    from data.config import SyntheticConfig

    synthetic.generate(
        SyntheticConfig(num_items=300, num_users=400, num_categories=6, **kw), tmp_path
    )
    return amazon.read_raw_dir(tmp_path)


def _entries(h: Histories) -> set[tuple[int, int, int]]:
    """(user, item, time) of every entry: histories hold no duplicate entries here."""
    user_of = np.repeat(np.arange(len(h)), h.lengths())
    return set(zip(user_of.tolist(), h.items.tolist(), h.times.tolist(), strict=True))


def _after_targets(h: Histories, users, histories) -> set[tuple[int, int, int]]:
    """The entries of `users` from their target (position len(histories[j])) on."""
    out = set()
    for j, u in enumerate(np.asarray(users).tolist()):
        start = len(histories[j])
        for t in range(start, len(h[u])):
            out.add((u, int(h[u][t]), int(h.times_of(u)[t])))
    return out


@pytest.mark.parametrize("fraction", [0.02, 0.05, 0.2])
def test_no_test_interaction_at_or_after_the_cold_target_is_trained_on(tmp_path, fraction):
    """The test split and the cold-val split: training holds no cold item and nothing a test
    user did from their target on; the tokenizer's histories hold neither, for both splits."""
    ds = _synthetic(tmp_path)
    real = splits.cold_start_split(ds, fraction)
    val = splits.validation_split(ds, fraction)
    assert len(real.test_users) > 10 and len(val.test_users) > 10
    leaked = _after_targets(ds.histories, real.test_users, real.test_histories)
    assert leaked, "the fixture has test users with interactions after their targets"
    for split in (real, val):
        assert not split.cold_mask[split.train.items].any()
        assert not real.cold_mask[split.train.items].any()
        assert not _entries(split.train) & leaked
    # The validation split's own test users, on the histories it is built from.
    val_leaked = _after_targets(real.train, val.test_users, val.test_histories)
    assert val_leaked and not _entries(val.train) & val_leaked
    tok = splits.tokenizer_histories(ds, (fraction,))
    assert not real.cold_mask[tok.items].any()
    assert not _entries(tok) & (leaked | val_leaked)
    # The pseudo cold items stay readable for the tokenizer: they are warm items at test time.
    assert val.cold_mask[tok.items].any()


def test_tokenizer_histories_hold_out_the_last_two_items(tmp_path):
    ds = _synthetic(tmp_path)
    loo = splits.leave_one_out(ds)
    tok = splits.tokenizer_histories(ds, ())
    assert [tok[u].tolist() for u in range(len(tok))] == [
        loo.train[u].tolist() for u in range(len(tok))
    ]
    both = splits.tokenizer_histories(ds, (0.02, 0.05))
    assert _entries(both) <= _entries(tok) & _entries(splits.cold_start_split(ds, 0.05).train)


def test_first_times_counts_only_the_given_histories():
    h = Histories.from_lists([[2, 0], [0, 3]], times=[[5, 7], [4, 9]])
    assert splits.first_times(h, 5).tolist() == [
        4,
        np.iinfo(np.int64).max,
        5,
        9,
        np.iinfo(np.int64).max,
    ]
