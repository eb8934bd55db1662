"""seqmodel.shuffle_ties: each training history's same-timestamp items in a fresh order per epoch,
deterministic for resumption, and off by default with unchanged fingerprints."""

import dataclasses

import numpy as np
import pytest

from data.pipeline import BucketedBatches, HistorySource, bucket_widths, shuffle_ties
from data.types import Histories
from seqmodel.config import SeqModelConfig, identity_fields
from seqmodel.tokens import TokenizeExample, WindowSource
from seqmodel.train import train_and_evaluate
from tests.seqmodel.test_train import CFG, _data, _logged, assert_resumes_exactly


def test_only_items_of_one_timestamp_change_places():
    items = np.arange(10)
    times = np.array([5, 5, 5, 7, 8, 8, 9, 9, 9, 9])
    runs = [(0, 3), (3, 4), (4, 6), (6, 10)]
    seen = set()
    for seed in range(20):
        out = shuffle_ties(items, times, np.random.default_rng(seed))
        for a, b in runs:  # each run keeps its place and its members
            assert sorted(out[a:b].tolist()) == items[a:b].tolist()
        seen.add(tuple(out.tolist()))
    assert len(seen) > 5, "ties were not shuffled"
    untied = np.arange(4)
    assert shuffle_ties(untied, untied, np.random.default_rng(0)).tolist() == [0, 1, 2, 3]
    assert shuffle_ties(np.array([3]), np.array([1]), np.random.default_rng(0)).tolist() == [3]
    with pytest.raises(ValueError, match="3 items, 2 times"):
        shuffle_ties(np.arange(3), np.arange(2), np.random.default_rng(0))


def test_records_carry_their_times():
    h = Histories.from_lists([[4, 2, 9], [1, 3]], [[10, 10, 12], [1, 2]])
    assert HistorySource(h)[0]["times"].tolist() == [10, 10, 12]
    windows = WindowSource(h, max_history=2)
    assert [windows[i]["times"].tolist() for i in range(len(windows))] == [
        [10, 10],
        [10, 12],
        [1, 2],
    ]


def _bucketed(h, augment):
    lengths = h.lengths()
    tok = np.arange(40).reshape(20, 2) + 3  # item i -> tokens (2i + 3, 2i + 4)
    return BucketedBatches(
        HistorySource(h),
        TokenizeExample(tok, 8, "causal"),
        lengths,
        bucket_widths(lengths),
        batch_size=2,
        seed=0,
        unit=2,
        augment=augment,
    )


def test_bucketed_batches_shuffle_ties_per_epoch_and_repeat_exactly():
    rng = np.random.default_rng(0)
    lists = [rng.choice(20, 6, replace=False).tolist() for _ in range(8)]
    h = Histories.from_lists(lists, [[0, 0, 0, 0, 1, 1]] * 8)  # every history: two tied runs

    def augment(r, g):
        return {**r, "items": shuffle_ties(r["items"], r["times"], g)}

    plain, tied, again = _bucketed(h, None), _bucketed(h, augment), _bucketed(h, augment)
    steps = plain.steps_per_epoch

    def rows(src, i):  # each row's whole sequence: its first input, then its targets
        b = src[i]
        return np.concatenate([b["inputs"][:, :1], b["targets"]], axis=1)

    first = [rows(tied, i) for i in range(2 * steps)]
    for i in range(2 * steps):  # a pure function of (seed, i): resumption repeats it
        np.testing.assert_array_equal(first[i], rows(again, i))
        # Same rows, same multiset of tokens; only the order inside a tie may differ.
        np.testing.assert_array_equal(np.sort(rows(plain, i), axis=1), np.sort(first[i], axis=1))
    assert any(not np.array_equal(rows(plain, i), first[i]) for i in range(steps))
    # A record's order changes from one epoch to the next.
    one = [tied._record(e, 0)["items"].tolist() for e in range(6)]
    assert len({tuple(x) for x in one}) > 1


def test_off_by_default_and_in_the_fingerprint():
    assert SeqModelConfig().shuffle_ties is False
    assert identity_fields(CFG)["shuffle_ties"] is False
    assert identity_fields(dataclasses.replace(CFG, shuffle_ties=True))["shuffle_ties"] is True
    with pytest.raises(ValueError, match="not layout=packed"):
        dataclasses.replace(CFG, layout="packed", shuffle_ties=True)


@pytest.mark.parametrize("layout", ["causal", "bucketed"])
def test_training_with_tied_histories_resumes_exactly(tmp_path, layout):
    cfg = dataclasses.replace(CFG, layout=layout, shuffle_ties=True)
    data = _data(cfg=cfg)
    tr = data.train
    tied = Histories(offsets=tr.offsets, items=tr.items, times=tr.times // 2)  # pairs tie
    data = dataclasses.replace(data, train=tied)
    logged = assert_resumes_exactly(cfg, tmp_path, data).logged
    # The shuffled order is trained on: the losses differ from the same run without it.
    plain = dataclasses.replace(cfg, shuffle_ties=False)
    train_and_evaluate(plain, tmp_path / "c", data, show_progress=False)
    assert _logged(tmp_path / "c") != logged
