"""Retriever checkpoints: best is not latest, a damaged one is moved aside in one line and the next
one tried, a killed run whose newest checkpoint is damaged resumes exactly, Ctrl-C waits; an
evaluation that falls back from a damaged best records the step it evaluated, the report names
it and the pipeline's ledger runs the evaluation again."""

import dataclasses
import json
import signal

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from data.errors import ArtifactError
from experiments import cli
from experiments.config import load_json
from experiments.evaluation.report import write_report
from experiments.pipeline.artifacts import load_json_result, load_retriever
from experiments.pipeline.layout import RunLayout, Split
from experiments.pipeline.ledger import Ledger, Stage
from seqmodel.checkpoint import Checkpoints
from seqmodel.train import train_and_evaluate
from tests.experiments.evaluation.test_cold_start import TRAIN_FAST, workdir  # noqa: F401
from tests.rqvae.test_checkpoint_recovery import damage
from tests.seqmodel.test_train import CFG, _data, _logged, _params

# A checkpoint that does not restore must cost one line: nothing printed later either (orbax's
# abandoned reads end up in sys.unraisablehook, which pytest turns into this warning).
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


def _iterator():
    return iter(grain.MapDataset.range(64).batch(4).to_iter_dataset())


def _state(step: int) -> dict:
    # Random weights, so that the array data (not its JSON metadata) is the largest file.
    w = np.random.default_rng(step).normal(size=(64, 64)).astype(np.float32)
    return {"w": jnp.asarray(w), "step": jnp.array(step, jnp.int32)}


def _saved(tmp_path, steps: dict[int, bool]) -> tuple[Checkpoints, list[str]]:
    """Checkpoints of _state(step) at each step, marked best or not; also the logged lines."""
    lines = []
    ckpts = Checkpoints(tmp_path / "ck", log=lines.append)
    it = _iterator()
    for step, best in steps.items():
        next(it)
        progress = {"best_step": step, "position": step}
        ckpts.save(step, _state(step), it, progress, best=best)
    return ckpts, lines


ABSTRACT = jax.eval_shape(lambda: _state(0))


def test_best_params_are_the_best_checkpoint_not_the_latest(tmp_path):
    ckpts, lines = _saved(tmp_path, {1: True, 2: False})
    assert ckpts.latest_step() == 2
    got = ckpts.restore_best_params(ABSTRACT)
    assert int(got["step"]) == 1, "restore_best_params returned the latest, not the best"
    np.testing.assert_array_equal(got["w"], _state(1)["w"])
    ckpts.close()
    assert lines == []


def test_damaged_latest_falls_back_to_the_older_one_in_one_line(tmp_path):
    ckpts, lines = _saved(tmp_path, {1: True, 2: False, 3: False})
    assert sorted(ckpts.latest.all_steps()) == [2, 3]  # the two newest
    damage(tmp_path / "ck" / "latest" / "3", "truncate")
    it = _iterator()
    state, progress = ckpts.restore_latest(ABSTRACT, it)
    assert int(state["step"]) == 2 and progress["position"] == 2
    assert next(it)[0] == 8, "the iterator is not at step 2's position"
    assert len(lines) == 1 and "latest/3: cannot restore" in lines[0]
    assert lines[0].endswith("trying latest step 2")
    assert ckpts.latest_step() == 2
    assert (tmp_path / "ck" / "damaged" / "latest-3").is_dir()
    ckpts.close()
    # A new manager over the same directory sees the same: the damaged step is gone for good.
    assert Checkpoints(tmp_path / "ck").latest_step() == 2


def test_nothing_restores_returns_none_and_leaves_the_iterator_at_the_start(tmp_path):
    ckpts, lines = _saved(tmp_path, {1: False, 2: True})
    damage(tmp_path / "ck" / "latest" / "2", "delete")
    damage(tmp_path / "ck" / "latest" / "1", "truncate")
    it = _iterator()
    assert ckpts.restore_latest(ABSTRACT, it) is None
    assert next(it)[0] == 0
    assert len(lines) == 2 and lines[-1].endswith("starting from step 0")
    assert ckpts.latest_step() is None
    # The best checkpoint belongs to the abandoned run: training starts over without it.
    assert ckpts.best.all_steps() == []
    ckpts.close()


def test_best_params_step_is_the_step_restore_best_params_reads(tmp_path):
    ckpts, _ = _saved(tmp_path, {1: True, 2: False})
    assert ckpts.best_params_step() == 1
    damage(tmp_path / "ck" / "best" / "1", "truncate")
    assert int(ckpts.restore_best_params(ABSTRACT)["step"]) == 2
    assert ckpts.best_params_step() == 2, "not the step the fallback restored"
    ckpts.close()
    assert Checkpoints(tmp_path / "empty").best_params_step() is None


def test_damaged_best_falls_back_to_latest_then_fails_in_one_line(tmp_path):
    ckpts, lines = _saved(tmp_path, {1: True, 2: False})
    damage(tmp_path / "ck" / "best" / "1", "truncate")
    assert int(ckpts.restore_best_params(ABSTRACT)["step"]) == 2
    assert len(lines) == 1 and lines[0].endswith("trying latest step 2")
    for step in ckpts.latest.all_steps():
        damage(tmp_path / "ck" / "latest" / str(step), "delete")
    with pytest.raises(FileNotFoundError, match="no usable checkpoint, none restores") as e:
        ckpts.restore_best_params(ABSTRACT)
    assert str(tmp_path / "ck") in str(e.value) and "\n" not in str(e.value)
    ckpts.close()
    with pytest.raises(FileNotFoundError, match="none saved"):
        Checkpoints(tmp_path / "empty").restore_best_params(ABSTRACT)


def test_ctrl_c_during_save_finishes_the_checkpoint_then_interrupts(tmp_path):
    ckpts, _ = _saved(tmp_path, {1: True})
    real_wait = ckpts.latest.wait_until_finished

    def wait_after_ctrl_c():
        signal.raise_signal(signal.SIGINT)  # as if pressed while orbax writes
        real_wait()

    ckpts.latest.wait_until_finished = wait_after_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        ckpts.save(2, _state(2), _iterator(), {"position": 2}, best=True)
    ckpts.latest.wait_until_finished = real_wait
    ckpts.close()
    again = Checkpoints(tmp_path / "ck")
    assert again.latest_step() == 2 and again.best.all_steps() == [2]
    assert int(again.restore_best_params(ABSTRACT)["step"]) == 2


CFG6 = dataclasses.replace(CFG, max_steps=6)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted 6-step run: its work directory and result."""
    directory = tmp_path_factory.mktemp("straight")
    return directory, train_and_evaluate(CFG6, directory, _data(), show_progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_killed_run_with_damaged_newest_checkpoint_resumes_exactly(tmp_path, capsys, straight, how):
    data = _data()
    train_and_evaluate(CFG6, tmp_path, data, stop_after=4, show_progress=False)
    damage(tmp_path / "checkpoints" / "latest" / "4", how)
    capsys.readouterr()

    resumed = train_and_evaluate(CFG6, tmp_path, data, show_progress=False)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 2 and lines[1] == "resumed from step 2 of 6", lines
    assert "latest/4: cannot restore" in lines[0] and lines[0].endswith("trying latest step 2")
    directory, result = straight
    assert resumed.summary["steps"] == 6
    assert resumed.summary["best_step"] == result.summary["best_step"]
    assert _logged(tmp_path) == _logged(directory), "falling back changed losses or recalls"
    for a, b in zip(_params(result), _params(resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_killed_run_with_every_latest_checkpoint_damaged_starts_over(tmp_path, capsys, straight):
    data = _data()
    train_and_evaluate(CFG6, tmp_path, data, stop_after=4, show_progress=False)
    damage(tmp_path / "checkpoints" / "latest" / "4", "truncate")
    damage(tmp_path / "checkpoints" / "latest" / "2", "delete")
    capsys.readouterr()

    resumed = train_and_evaluate(CFG6, tmp_path, data, show_progress=False)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 2 and lines[-1].endswith("starting from step 0"), lines
    assert resumed.summary["steps"] == 6
    assert _logged(tmp_path) == _logged(straight[0]), "starting over is not a fresh run"


def _evaluated(layout: RunLayout) -> tuple:
    r = json.loads(layout.warm_result.read_text())
    return r["retriever"], r["evaluated_step"], r["best_step"], r["fallback"]


@pytest.mark.slow
def test_an_evaluation_falling_back_from_a_damaged_best_says_so(workdir, capsys):  # noqa: F811
    w, layout = str(workdir), RunLayout(workdir)
    assert cli.main(["train-retriever", "--workdir", w, "--split", "loo", *TRAIN_FAST]) == 0
    assert cli.main(["eval-warm", "--workdir", w, "--no-progress"]) == 0
    rdir = layout.retriever(Split("loo"))
    best = json.loads((rdir / "train_summary.json").read_text())["best_step"]
    assert _evaluated(layout) == (rdir.name, best, best, False)  # relative to the work directory
    # The pipeline's evaluation stage, as workflow.build_stages checks it.
    ledger, lines = Ledger(workdir / "stages.json"), []
    check = lambda: load_json_result(layout.warm_result)  # noqa: E731
    stage = Stage("eval_warm", (), (layout.warm_result,), lambda: None, check=check)
    ledger.record(stage, "key", 1.0)
    assert ledger.up_to_date(stage, "key", lines.append)

    # The best checkpoint, and a latest one of the same step, no longer restore.
    ckpts = rdir / "checkpoints"
    for step_dir in (ckpts / "best" / str(best), ckpts / "latest" / str(best)):
        if step_dir.is_dir():
            damage(step_dir, "truncate")
    # The retriever stage's check (a reader would refuse): it sets the damaged ones aside.
    load_retriever(layout, Split("loo"), read_only=False)
    fallback = max(int(p.name) for p in (ckpts / "latest").iterdir() if p.name.isdigit())
    assert fallback != best
    assert not ledger.up_to_date(stage, "key", lines.append), "the stale evaluation is kept"
    assert len(lines) == 1 and "rerunning" in lines[0], lines
    assert (
        f"evaluated step {best} of {rdir.resolve()}, which now restores step {fallback}" in lines[0]
    )

    capsys.readouterr()
    assert cli.main(["eval-warm", "--workdir", w, "--no-progress"]) == 0
    assert _evaluated(layout) == (rdir.name, fallback, best, True)
    assert ledger.up_to_date(stage, "key", lines.append)
    write_report(load_json(workdir / "config.json"), layout)
    assert (
        f"- Evaluated `retriever_loo` at step {fallback}, not its best: step {best} does not "
        "restore (damaged or missing) (warm.json)."
    ) in layout.report.read_text().splitlines()


def _files(root) -> dict:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))}


def test_read_only_refuses_a_damaged_checkpoint_in_one_line_and_moves_nothing(tmp_path, caplog):
    ckpts, _ = _saved(tmp_path, {1: True, 2: False})
    ckpts.close()
    for f in (tmp_path / "ck").rglob("*"):
        if f.is_file():
            f.write_bytes(b"")  # every file emptied, metadata included
    before = _files(tmp_path)
    caplog.clear()
    lines = []
    reader = Checkpoints(tmp_path / "ck", log=lines.append, read_only=True)
    with pytest.raises(ArtifactError) as e:
        reader.restore_best_params(ABSTRACT)
    reader.close()
    assert "best/1: cannot restore" in str(e.value) and "\n" not in str(e.value)
    assert lines == [], "a read-only reader logged a line besides its refusal"
    assert _files(tmp_path) == before, "a read-only reader changed the checkpoint directory"
    assert not [r for r in caplog.records if r.name == "absl"], "orbax's log lines escaped"


def test_read_only_on_an_empty_directory_creates_nothing(tmp_path):
    (tmp_path / "ck").mkdir()
    reader = Checkpoints(tmp_path / "ck", read_only=True)
    assert reader.best_params_step() is None
    with pytest.raises(FileNotFoundError, match="none saved"):
        reader.restore_best_params(ABSTRACT)
    reader.close()
    assert list((tmp_path / "ck").iterdir()) == []
