"""Tests of data/pipeline.py: seeded shuffles, fixed-shape batches, resumable iterators."""

import pickle

import numpy as np
import pytest

from data import pipeline, prepared
from data.config import DataConfig
from data.types import Histories

H = Histories.from_lists([[u] * (u % 4 + 1) for u in range(10)])


def _take(it, n):
    return [next(it) for _ in range(n)]


def test_history_source_records():
    src = pipeline.HistorySource(H)
    assert len(src) == 10
    r = src[3]
    assert r["user"] == 3 and r["items"].tolist() == [3, 3, 3, 3] and r["items"].dtype == np.int32
    with pytest.raises(IndexError):
        src[10]


def test_pad_history_keeps_the_newest_items():
    pad = pipeline.PadHistory(max_len=3, pad_id=-1)
    out = pad({"user": 7, "items": np.array([1, 2, 3, 4, 5])})
    assert out["items"].tolist() == [3, 4, 5] and out["length"] == 3
    out = pad({"user": 7, "items": np.array([9])})
    assert out["items"].tolist() == [9, -1, -1] and out["length"] == 1
    assert pickle.loads(pickle.dumps(pad)) == pad


def test_batches_are_fixed_size_seeded_and_reshuffled_per_epoch():
    src, pad = pipeline.HistorySource(H), pipeline.PadHistory(max_len=4)
    ds = pipeline.batches(src, pad, batch_size=4, seed=0, num_epochs=2)
    got = list(ds)
    assert len(got) == 5  # 20 records, remainder dropped
    assert all(b["items"].shape == (4, 4) and b["user"].shape == (4,) for b in got)
    users = np.concatenate([b["user"] for b in got])
    assert sorted(users[:10].tolist()) == list(range(10))  # epoch 1 is a permutation
    assert users[:10].tolist() != users[10:].tolist()  # epoch 2 is another order
    again = np.concatenate(
        [b["user"] for b in pipeline.batches(src, pad, batch_size=4, seed=0, num_epochs=2)]
    )
    other = np.concatenate(
        [b["user"] for b in pipeline.batches(src, pad, batch_size=4, seed=1, num_epochs=2)]
    )
    assert users.tolist() == again.tolist() and users.tolist() != other.tolist()
    plain = list(pipeline.batches(src, pad, batch_size=5, seed=0, shuffle=False, num_epochs=1))
    assert np.concatenate([b["user"] for b in plain]).tolist() == list(range(10))


def test_iterator_state_resumes_exactly():
    ds = pipeline.batches(
        pipeline.HistorySource(H), pipeline.PadHistory(max_len=4), batch_size=3, seed=5
    )
    it = iter(ds)
    _take(it, 4)
    state = it.get_state()
    expected = _take(it, 3)
    resumed = iter(ds)
    resumed.set_state(state)
    for a, b in zip(expected, _take(resumed, 3), strict=True):
        assert np.array_equal(a["items"], b["items"]) and np.array_equal(a["user"], b["user"])


def test_batch_size_errors():
    with pytest.raises(ValueError, match="batch_size"):
        pipeline.batches(pipeline.HistorySource(H), pipeline.PadHistory(4), batch_size=11, seed=0)


def test_tfds_source_feeds_the_same_pipeline(tiny_raw, tmp_path):
    cfg = DataConfig(dataset="amazon2014", five_core=False)
    out = prepared.prepare(cfg, tiny_raw, tmp_path / "p")
    src = prepared.data_source(out, "users")
    batch = next(
        iter(
            pipeline.batches(
                src, pipeline.PadHistory(max_len=4), batch_size=3, seed=0, num_epochs=1
            )
        )
    )
    order = np.argsort(batch["user"])
    assert batch["items"][order].tolist() == [[1, 0, 2, 0], [1, 0, 0, 0], [3, 0, 0, 0]]


def test_orbax_checkpoint_of_the_iterator(tmp_path):
    import grain
    import orbax.checkpoint as ocp

    ds = pipeline.batches(
        pipeline.HistorySource(H), pipeline.PadHistory(max_len=4), batch_size=3, seed=5
    )
    it = iter(ds)
    _take(it, 4)
    mngr = ocp.CheckpointManager(
        tmp_path, item_handlers={"data": grain.checkpoint.CheckpointHandler()}
    )
    mngr.save(4, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(it)))
    mngr.wait_until_finished()
    expected = [b["user"].tolist() for b in _take(it, 3)]
    resumed = iter(ds)
    mngr.restore(4, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(resumed)))
    assert [b["user"].tolist() for b in _take(resumed, 3)] == expected


def test_pad_rows_repeats_the_last_row():
    from data.pipeline import pad_rows

    x = np.arange(10).reshape(5, 2)
    out = pad_rows(x, 4)
    assert out.shape == (8, 2)
    np.testing.assert_array_equal(out[:5], x)
    assert (out[5:] == x[-1]).all()
    assert pad_rows(x, 5) is not x and len(pad_rows(x, 5)) == 5
