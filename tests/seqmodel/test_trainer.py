"""The one training loop on a toy regression: steps, validation points, early stopping, rows,
extra saves, rows on disk before their checkpoint, exact resume and its clock, argument order,
the transfer guard and a refused run."""

import json

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from data.errors import ArgumentError
from seqmodel.checkpoint import Checkpoints
from seqmodel.state import TrainState
from seqmodel.trainer import Run, Schedule, Trainer, read_metrics

W = np.array([1.0, -2.0, 0.5], np.float32)


def _step(tx, scale, state: TrainState, batch: dict, shift: jax.Array):
    """Least squares on y = x W + shift, the loss scaled by a bound constant."""

    def loss_fn(params):
        pred = batch["x"] @ params["w"] + shift
        return scale * jnp.mean((pred - batch["y"]) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads)}
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


def _row(i: int) -> dict:
    x = np.random.default_rng(i).normal(size=3).astype(np.float32)
    return {"x": x, "y": np.float32(x @ W)}


def _batches():
    ds = grain.MapDataset.range(64).seed(0).shuffle().repeat(None).map(_row).batch(4)
    return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=2)))


def _fit(workdir, schedule, *, lr=0.1, validate=None, score="fit", **kw):
    tx = optax.sgd(lr)
    params = {"w": jnp.zeros(3, jnp.float32)}
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    trainer = Trainer(_step, tx, 1.0, args={"shift": jnp.float32(0.0)})
    run = Run(workdir, "toy.json", {"inputs": f"lr={lr}"}, what="the toy", **kw.pop("run", {}))

    def fit(state: TrainState) -> dict:
        # In (0, 1], as a recall: the early-stopping record starts from a best of -1.
        return {"fit": 1 / (1 + float(np.abs(jax.device_get(state.params["w"]) - W).sum()))}

    return trainer.fit(
        state,
        _batches(),
        run,
        schedule,
        validate=validate or fit,
        score=score,
        show_progress=False,
        **kw,
    )


def _logged(workdir) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "train_seconds"} for r in read_metrics(workdir)]


def test_fit_learns_validates_on_schedule_and_logs_each_step(tmp_path):
    fitted = _fit(tmp_path, Schedule(total=7, eval_every=3, patience=5))
    assert fitted.step == 7 and fitted.start == 0 and not fitted.early_stopped
    rows = read_metrics(tmp_path / "metrics.jsonl")
    # Every step's row, then a validation row at 3, 6 and the last step, 7.
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 8))
    assert [r["step"] for r in rows if "fit" in r] == [3, 6, 7]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < losses[0], "the toy regression did not learn"
    assert fitted.progress["best_step"] == 7
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints" / "latest").iterdir()) == [6, 7]
    info = json.loads((tmp_path / "toy.json").read_text())
    assert info["inputs"] == "lr=0.1" and info["environments"]


def test_early_stopping_ends_the_run_after_patience_validations_without_gain(tmp_path):
    # A zero learning rate never gains: the first validation is the best, two more stop the run.
    fitted = _fit(tmp_path, Schedule(total=20, eval_every=2, patience=2), lr=0.0)
    assert fitted.early_stopped and fitted.step == 6
    assert fitted.progress["best_step"] == 2 and fitted.progress["bad_evals"] == 2


def test_one_row_per_save_when_steps_are_not_logged(tmp_path):
    _fit(tmp_path, Schedule(total=6, eval_every=3, save_every=2), log_steps=False)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    # Saves at 2, 3, 4 and 6; validations at 3 and 6 add their fields to that save's row.
    assert [r["step"] for r in rows] == [2, 3, 4, 6]
    assert ["fit" in r for r in rows] == [False, True, False, True]
    assert all("loss" in r and "train_seconds" in r for r in rows)
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints" / "latest").iterdir()) == [4, 6]


@pytest.mark.parametrize("log_steps", [True, False])
def test_a_saves_rows_are_on_disk_before_its_checkpoint(tmp_path, monkeypatch, log_steps):
    """A kill or a held Ctrl-C as a save ends must not take the rows of the step it committed."""
    logged_at_save = {}
    save = Checkpoints.save

    def looked(self, step, *args, **kwargs):
        rows = read_metrics(tmp_path / "metrics.jsonl")
        logged_at_save[step] = max((r["step"] for r in rows), default=0)
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Checkpoints, "save", looked)
    _fit(tmp_path, Schedule(total=6, eval_every=3, save_every=2), log_steps=log_steps)
    assert logged_at_save == {2: 2, 3: 3, 4: 4, 6: 6}, "rows are written after their checkpoint"


def test_rows_past_the_checkpoint_resumed_are_written_once_again(tmp_path, monkeypatch):
    """Killed between a save's rows and its checkpoint: the rerun drops them and logs them anew."""
    schedule = Schedule(total=7, eval_every=3, patience=5)
    straight = _fit(tmp_path / "a", schedule)
    save = Checkpoints.save

    def killed_at_6(self, step, *args, **kwargs):
        if step == 6:
            raise KeyboardInterrupt
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Checkpoints, "save", killed_at_6)
    with pytest.raises(KeyboardInterrupt):
        _fit(tmp_path / "b", schedule)
    # Step 6's rows are on disk, its checkpoint is not: the newest one is step 3's.
    assert read_metrics(tmp_path / "b" / "metrics.jsonl")[-1]["step"] == 6
    monkeypatch.undo()
    resumed = _fit(tmp_path / "b", schedule)
    assert resumed.start == 3 and resumed.step == straight.step
    assert _logged(tmp_path / "a" / "metrics.jsonl") == _logged(tmp_path / "b" / "metrics.jsonl")


def test_a_stopped_run_resumes_to_the_uninterrupted_result(tmp_path):
    schedule = Schedule(total=7, eval_every=3, patience=5)
    straight = _fit(tmp_path / "a", schedule)
    # Stopped where the straight run validates too (a stop validates), so the logs match.
    first = _fit(tmp_path / "b", Schedule(total=7, eval_every=3, patience=5, stop_after=3))
    assert first.step == 3
    resumed = _fit(tmp_path / "b", schedule)
    assert resumed.start == 3 and resumed.step == 7
    np.testing.assert_array_equal(
        jax.device_get(straight.state.params["w"]), jax.device_get(resumed.state.params["w"])
    )
    assert _logged(tmp_path / "a" / "metrics.jsonl") == _logged(tmp_path / "b" / "metrics.jsonl")
    # The summary's clock counts the whole run: the first call's seconds and the resumed ones.
    before = first.summary()["train_seconds"]
    assert 0 < before == first.train_seconds
    assert resumed.summary()["train_seconds"] == pytest.approx(before + resumed.train_seconds)
    # Entering the finished run again trains nothing and keeps the whole run's seconds.
    again = _fit(tmp_path / "b", schedule)
    assert again.start == again.step == 7 and again.train_seconds == 0.0
    assert again.summary()["train_seconds"] == pytest.approx(resumed.summary()["train_seconds"])


def test_a_run_of_other_inputs_starts_over_or_is_refused(tmp_path, capsys):
    _fit(tmp_path, Schedule(total=2, eval_every=2))
    other = _fit(tmp_path, Schedule(total=1, eval_every=1), lr=0.2, log=print)
    assert other.start == 0 and other.step == 1
    assert "the toy changed since it was trained" in capsys.readouterr().out
    with pytest.raises(ArgumentError, match="holds another run"):
        _fit(tmp_path, Schedule(total=1, eval_every=1), run={"refuse": "holds another run"})


def test_an_implicit_transfer_in_the_loop_is_an_error(tmp_path):
    def implicit(state: TrainState) -> dict:
        return {"fit": 1 / (1 + float(jnp.abs(state.params["w"] - W).sum()))}  # numpy operand

    with pytest.raises(Exception, match="host-to-device transfer"):
        _fit(tmp_path, Schedule(total=2, eval_every=1), validate=implicit)


def test_step_arguments_keep_the_step_functions_order_and_compile_once():
    traced = []

    def step(bound, seed, state, batch, total):
        traced.append(1)
        return state + batch.sum() * bound + seed * 10 + total * 100, {"loss": state}

    trainer = Trainer(step, 2.0, args={"seed": jnp.float32(1.0), "total": jnp.float32(3.0)})
    state = trainer.replicate(jnp.float32(0.0))
    for _ in range(3):
        state, _ = trainer.step(state, trainer.put(np.ones(4, np.float32)))
    assert float(state) == 3 * (8 + 10 + 300) and len(traced) == 1


def test_static_arguments_compile_once_per_value():
    traced = []

    def step(state, batch, width):
        traced.append(width)
        return state + batch[:width].sum(), {"loss": state}

    trainer = Trainer(step, static_argnames=("width",))
    batch = trainer.put(np.arange(4, dtype=np.float32))
    state = trainer.replicate(jnp.float32(0.0))
    for width in (2, 2, 3):
        state, _ = trainer.step(state, batch, width=width)
    assert float(state) == 1 + 1 + 3 and traced == [2, 3]
