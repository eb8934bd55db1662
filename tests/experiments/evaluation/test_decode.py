"""Evaluation engine: interleaved decoding with padding, per-method metrics, the random baseline."""

import jax.numpy as jnp
import numpy as np
import pytest

from decoding import BeamResult
from experiments.evaluation import decode as evaluate
from experiments.evaluation import metrics

SIDS = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])


def _decoder(first_code):
    """A fake decode_batch: beam 0 = (first_code, history[0] % 2), beam 1 invalid."""

    def fn(batch):
        B = len(batch)
        tokens = np.zeros((B, 2, 2), np.int32)
        tokens[:, 0, 0] = first_code
        tokens[:, 0, 1] = batch[:, 0] % 2
        scores = np.tile(np.array([-1.0, -np.inf], np.float32), (B, 1))
        valid = np.tile(np.array([True, False]), (B, 1))
        return BeamResult(jnp.asarray(tokens), jnp.asarray(scores), jnp.asarray(valid))

    return fn


def test_decode_interleaved_pads_and_trims():
    inputs = np.arange(7)[:, None].astype(np.int32)  # 7 users, batch 3 -> one padded batch
    out = evaluate.decode_interleaved(
        {"a": _decoder(0), "b": _decoder(1)}, inputs, metrics.SIDLookup(SIDS, 2), batch_size=3
    )
    assert out["a"].items.shape == (7, 2)
    np.testing.assert_array_equal(out["a"].items[:, 0], np.arange(7) % 2)
    np.testing.assert_array_equal(out["b"].items[:, 0], 2 + np.arange(7) % 2)
    assert not out["a"].valid[:, 1].any()
    assert len(out["a"].seconds_per_user) == 3


def test_method_metrics_ignores_invalid_beams():
    decoded = evaluate.Decoded(
        items=np.array([[2, 3], [1, 0]]),
        scores=np.zeros((2, 2), np.float32),
        valid=np.array([[True, False], [True, True]]),
        seconds_per_user=np.array([0.001]),
    )
    m = evaluate.method_metrics(
        decoded, np.array([3, 1]), np.array([False, False, True, True]), allowed_key="cold_rate"
    )
    # User 0's hit is on an invalid beam and must not count.
    assert m["recall@1"] == 0.5 and m["recall@5"] == 0.5
    assert m["valid_rate"] == 1.0 and m["cold_rate"] == pytest.approx(1 / 3)
    assert m["latency_ms_median"] == pytest.approx(1.0)


def test_random_metrics_reports_sample_and_expectation():
    allowed = np.arange(10, 30)
    targets = np.random.default_rng(0).choice(allowed, 5000)
    m = evaluate.random_metrics(allowed, targets, beam_size=20, seed=0)
    assert m["expected_recall@1"] == pytest.approx(1 / 20)
    assert abs(m["recall@1"] - 1 / 20) < 0.015
    assert m["recall@10"] == pytest.approx(0.5, abs=0.03)
