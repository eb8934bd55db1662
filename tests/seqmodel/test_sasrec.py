"""SASRec baseline: causality, example layout, a two-step train-and-restore, full ranking."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from data.errors import BusyError
from data.types import Histories
from seqmodel import sasrec
from seqmodel.config import SeqModelConfig, keyed_fields
from seqmodel.trainer import read_metrics
from tests.conftest import locked_by_another_process

CFG = SeqModelConfig(
    num_layers=1,
    d_model=16,
    num_heads=2,
    mlp_dim=32,
    max_history=6,
    batch_size=8,
    eval_every=2,
    max_steps=4,
    warmup_steps=1,
    dropout=0.0,
    eval_users=5,
    patience=10,
)
N = 30


def _model():
    return sasrec.SASRec(CFG, N, rngs=nnx.Rngs(0))


def test_output_at_t_ignores_later_items_and_uses_earlier_ones():
    model = _model()
    items = jnp.array([[0, 0, 3, 7, 9, 12]])
    t = 3
    base = model(items)[0, t]
    later = model(items.at[0, 4].set(20))[0, t]
    earlier = model(items.at[0, 2].set(20))[0, t]
    np.testing.assert_allclose(base, later, atol=1e-6, err_msg="output at t saw a later item")
    assert float(jnp.abs(base - earlier).max()) > 1e-4, "output at t ignores an earlier item"
    assert model(items).shape == (1, 6, N)


def test_capacity_covers_the_real_positions_in_eighths():
    assert sasrec.capacity(0, 160) == 20 and sasrec.capacity(20, 160) == 20
    assert sasrec.capacity(21, 160) == 40 and sasrec.capacity(160, 160) == 160
    assert sasrec.capacity(5, 6) == 5  # slots under eight: one unit per slot
    assert all(real <= sasrec.capacity(real, 100) <= 100 for real in range(101))
    assert len({sasrec.capacity(real, 100) for real in range(101)}) <= 8


def test_loss_over_gathered_positions_equals_the_full_loss():
    """Scoring only the real positions is an optimisation: the loss is the mean over every
    weighted position of the full [B, T, N] logits, at the capacity and at every slot."""
    model = _model()
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(0)
    rows = [sasrec.NextItems(6).map({"items": rng.integers(0, N, n)}) for n in (2, 4, 7, 3)]
    batch = {k: jnp.asarray(np.stack([r[k] for r in rows])) for k in rows[0]}
    logits = np.asarray(model(batch["inputs"]), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    t = np.maximum(np.asarray(batch["targets"]) - 1, 0)
    nll = -np.take_along_axis(logp, t[..., None], -1)[..., 0]
    weights = np.asarray(batch["weights"])
    want = nll[weights].mean()
    real = int(weights.sum())
    for slots in (sasrec.capacity(real, weights.size), weights.size):
        got, aux = sasrec.loss_fn(params, graphdef, batch, None, slots)
        assert int(aux["count"]) == real
        np.testing.assert_allclose(float(got), want, rtol=1e-5, err_msg=f"slots={slots}")


def test_a_bucketed_batch_scores_as_its_full_width_rows():
    """layout=bucketed cuts a batch of short histories to its bucket's width: with rotary
    positions the model's states are those of the full-width rows, and the loss is their summed
    NLL over the batch's `norm` (the mean real positions of a row) instead of its own count."""
    model = _model()
    graphdef, params = nnx.split(model)
    train = _histories(users=64)
    it, steps = sasrec.training_batches(dataclasses.replace(CFG, layout="bucketed"), train)
    assert steps >= 1
    for _ in range(3):
        batch = {k: jnp.asarray(v) for k, v in next(it).items()}
        width = batch["inputs"].shape[1]
        full = {
            k: jnp.pad(v, ((0, 0), (CFG.max_history - width, 0)))
            for k, v in batch.items()
            if k != "norm"
        }
        count = int(batch["weights"].sum())
        assert count == int(full["weights"].sum()) and width <= CFG.max_history
        want, _ = sasrec.loss_fn(params, graphdef, full, None, full["weights"].size)
        got, aux = sasrec.loss_fn(params, graphdef, batch, None, batch["weights"].size)
        np.testing.assert_allclose(
            float(got) * float(batch["norm"].sum()), float(want) * count, rtol=1e-5
        )
        # What the metrics log shows: the mean NLL per real position, whatever the layout.
        np.testing.assert_allclose(float(aux["mean_nll"]), float(want), rtol=1e-5)


def test_the_harness_refuses_a_layout_it_cannot_train():
    with pytest.raises(ValueError, match=r"sasrec.layout='packed'"):
        sasrec.training_batches(dataclasses.replace(CFG, layout="packed"), _histories())


def test_dropout_reaches_the_input_embeddings():
    model = sasrec.SASRec(dataclasses.replace(CFG, dropout=0.5), N, rngs=nnx.Rngs(0))
    for block in model.blocks:
        block.rate = 0.0  # only the embedding dropout can make the keyed pass differ
    items = jnp.array([[1, 2, 3, 4, 5, 6]])
    dropped = model.hidden(items, jax.random.key(0))
    assert not np.allclose(dropped, model.hidden(items))


def test_next_items_example_layout():
    ex = sasrec.NextItems(4).map({"items": np.array([5, 6, 7], np.int32)})
    # ids are item + 1; inputs predict the following item; left padding carries no weight
    assert ex["inputs"].tolist() == [0, 0, 6, 7]
    assert ex["targets"].tolist() == [0, 0, 7, 8]
    assert ex["weights"].tolist() == [False, False, True, True]
    long = sasrec.NextItems(2).map({"items": np.arange(10, dtype=np.int32)})
    assert long["inputs"].tolist() == [8, 9] and long["targets"].tolist() == [9, 10]


def _histories(seed=0, users=40):
    rng = np.random.default_rng(seed)
    # Learnable: every user walks i, i+1, i+2, ... (mod N).
    starts = rng.integers(0, N, users)
    lengths = rng.integers(3, 8, users)
    return Histories.from_lists(
        [[(s + j) % N for j in range(n)] for s, n in zip(starts, lengths, strict=True)]
    )


@pytest.mark.slow
@pytest.mark.parametrize("negatives", [0, 8])  # the full softmax, a sampled one
def test_two_steps_then_restore_equals_four_straight(tmp_path, negatives):
    cfg = dataclasses.replace(CFG, sampled_negatives=negatives)
    train = _histories()
    valid_h, valid_t = _histories(1, 5), np.arange(5, dtype=np.int32)
    args = (train, valid_h, valid_t, N)
    _, straight, s1 = sasrec.train_and_evaluate(cfg, tmp_path / "a", *args, show_progress=False)
    sasrec.train_and_evaluate(cfg, tmp_path / "b", *args, stop_after=2, show_progress=False)
    _, resumed, s2 = sasrec.train_and_evaluate(cfg, tmp_path / "b", *args, show_progress=False)
    assert s1["steps"] == s2["steps"] == 4
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # One log row per validation, none written twice by the resume; the same losses and recalls.
    logs = [read_metrics(tmp_path / d / "metrics.jsonl") for d in "ab"]
    for rows in logs:
        assert [r["step"] for r in rows] == [2, 4]
        for r in rows:
            del r["train_seconds"]
    assert logs[0] == logs[1]


@pytest.mark.slow
def test_bucketed_training_resumes_exactly(tmp_path):
    cfg = dataclasses.replace(CFG, layout="bucketed")
    train = _histories(users=64)
    args = (train, _histories(1, 5), np.arange(5, dtype=np.int32), N)
    _, straight, _ = sasrec.train_and_evaluate(cfg, tmp_path / "a", *args, show_progress=False)
    sasrec.train_and_evaluate(cfg, tmp_path / "b", *args, stop_after=2, show_progress=False)
    _, resumed, summary = sasrec.train_and_evaluate(cfg, tmp_path / "b", *args, show_progress=False)
    assert summary["steps"] == 4
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_top_k_is_the_full_ranking_of_the_last_position():
    model = _model()
    graphdef, params = nnx.split(model)
    items = sasrec.encode_items(Histories.from_lists([[1, 2, 3], [4]]), CFG.max_history)
    got = sasrec.top_k(graphdef, params, items, k=5, batch_size=4)
    want = np.argsort(-np.asarray(model(jnp.asarray(items))[:, -1]), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(got, want)


def test_changed_config_retrains_instead_of_resuming(tmp_path, capsys):
    train = _histories()
    args = (train, _histories(1, 5), np.arange(5, dtype=np.int32), N)
    sasrec.train_and_evaluate(CFG, tmp_path, *args, stop_after=2, show_progress=False)
    other = dataclasses.replace(CFG, learning_rate=CFG.learning_rate / 2)
    _, _, summary = sasrec.train_and_evaluate(
        other, tmp_path, *args, stop_after=1, show_progress=False
    )
    assert summary["steps"] == 1, "resumed a checkpoint trained with another config"
    assert "retraining it" in capsys.readouterr().out


def test_a_run_that_another_process_trains_is_refused_and_left_as_it_was(tmp_path):
    args = (_histories(), _histories(1, 5), np.arange(5, dtype=np.int32), N)
    sasrec.train_and_evaluate(CFG, tmp_path, *args, stop_after=2, show_progress=False)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    other = dataclasses.replace(CFG, learning_rate=CFG.learning_rate / 2)  # would start over
    with locked_by_another_process(tmp_path):
        with pytest.raises(BusyError, match="another process is training this run"):
            sasrec.train_and_evaluate(other, tmp_path, *args, show_progress=False)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [2]
    # Its own finished runs free the lock: another process can take it.
    sasrec.train_and_evaluate(CFG, tmp_path, *args, show_progress=False)
    with locked_by_another_process(tmp_path):
        pass


@pytest.mark.slow
def test_a_stopped_run_goes_on_under_a_larger_patience(tmp_path, capsys):
    args = (_histories(), _histories(1, 5), np.arange(5, dtype=np.int32), N)
    # Too small a learning rate to change the ranking: no validation after the first gains.
    still = dataclasses.replace(CFG, learning_rate=1e-12, max_steps=8, eval_every=2, patience=1)
    _, _, first = sasrec.train_and_evaluate(still, tmp_path, *args, show_progress=False)
    assert first["early_stopped"] and first["steps"] == 4
    longer = dataclasses.replace(still, patience=5)
    _, _, resumed = sasrec.train_and_evaluate(longer, tmp_path, *args, show_progress=False)
    assert "patience 1 -> 5; resuming the same run" in capsys.readouterr().out
    assert resumed["steps"] == 8 and not resumed["early_stopped"]
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [2, 4, 6, 8]


def _sampled_case(seed=0, positions=9):
    model = _model()
    rng = np.random.default_rng(seed)
    h = jnp.asarray(rng.normal(size=(positions, CFG.d_model)), jnp.float32)
    items = jnp.asarray(rng.integers(0, N, positions), jnp.int32)
    return model, h, items


def test_sampled_softmax_over_the_whole_catalog_is_the_full_softmax():
    model, h, items = _sampled_case()
    everything = jnp.asarray(np.random.default_rng(1).permutation(N), jnp.int32)
    np.testing.assert_allclose(
        model.sampled_nll(h, items, everything), model.next_item_nll(h, items), rtol=1e-5
    )


def test_sampled_softmax_against_a_loop_over_positions():
    """Each position: its target's score against the drawn items' scores raised by log(N / K),
    the drawn copy of its own target left out."""
    model, h, items = _sampled_case(seed=2)
    negatives = np.asarray([int(items[0]), *[j for j in range(N) if j != int(items[0])][:6]])
    table = np.asarray(model.embed.embedding[1:], np.float64)
    hh, got = np.asarray(h, np.float64), model.sampled_nll(h, items, jnp.asarray(negatives))
    for s, t in enumerate(np.asarray(items)):
        scores = [hh[s] @ table[t]] + [
            hh[s] @ table[j] + np.log(N / len(negatives)) for j in negatives if j != t
        ]
        want = np.log(np.exp(scores).sum()) - scores[0]
        np.testing.assert_allclose(float(got[s]), want, rtol=1e-5, err_msg=f"position {s}")


def test_training_loss_draws_distinct_negatives_from_the_step_key():
    cfg = dataclasses.replace(CFG, sampled_negatives=7)
    model = sasrec.SASRec(cfg, N, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(0)
    rows = [sasrec.NextItems(6).map({"items": rng.integers(0, N, n)}) for n in (2, 4, 7, 3)]
    batch = {k: jnp.asarray(np.stack([r[k] for r in rows])) for k in rows[0]}
    slots = batch["weights"].size
    key = jax.random.key(3)
    got, aux = sasrec.loss_fn(params, graphdef, batch, key, slots)
    negatives = jax.random.choice(
        jax.random.fold_in(key, sasrec.NEGATIVES_STREAM), N, (7,), replace=False
    )
    assert len(set(np.asarray(negatives).tolist())) == 7
    h = model.hidden(batch["inputs"], key).reshape(-1, cfg.d_model)
    w = np.asarray(batch["weights"]).reshape(-1)
    t = np.maximum(np.asarray(batch["targets"]).reshape(-1) - 1, 0)
    want = np.asarray(model.sampled_nll(h[w], jnp.asarray(t[w]), negatives)).mean()
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    full, _ = sasrec.loss_fn(params, graphdef, batch, None, slots)  # no key: the full softmax
    assert abs(float(full) - float(got)) > 1e-3


def test_sampled_negatives_are_refused_where_they_cannot_apply():
    with pytest.raises(ValueError, match="sampled_negatives must be >= 0"):
        dataclasses.replace(CFG, sampled_negatives=-1)
    args = (_histories(), _histories(1, 5), np.arange(5, dtype=np.int32), N)
    with pytest.raises(ValueError, match=f"sampled_negatives={N} must be under the catalog's"):
        sasrec.train_and_evaluate(dataclasses.replace(CFG, sampled_negatives=N), "unused", *args)
    assert "sampled_negatives" not in keyed_fields(CFG)
    assert keyed_fields(dataclasses.replace(CFG, sampled_negatives=5))["sampled_negatives"] == 5
