"""Tokenizer checkpoints that do not restore: fall back to the older one or start over, one line
each, and still end with the codes of an uninterrupted run; a Ctrl-C waits for the save."""

import dataclasses
import json
import os
import signal

import numpy as np
import pytest

from rqvae import checkpoint, load_sids
from tests.rqvae.test_train import CFG, _run

# A checkpoint that does not restore must cost one line: nothing printed later either (orbax's
# abandoned reads end up in sys.unraisablehook, which pytest turns into this warning).
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


def _kill_at(step):
    def on_step(done):
        if done == step:
            raise KeyboardInterrupt

    return on_step


def damage(step_dir, how: str) -> None:
    """Truncates to half, or deletes, the largest file of a checkpoint (its array data)."""
    largest = max((p for p in step_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    if how == "truncate":
        os.truncate(largest, largest.stat().st_size // 2)
    else:
        largest.unlink()


def _stderr_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """SIDs and metrics of an uninterrupted run."""
    tmp = tmp_path_factory.mktemp("full")
    _run(tmp, "full")
    return load_sids(tmp / "full")[0], json.loads((tmp / "full" / "metrics.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_damaged_newest_checkpoint_falls_back_to_the_older_one(tmp_path, capsys, full_run, how):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "run", on_step=_kill_at(5))
    ckpts = tmp_path / "run" / "checkpoints"
    assert sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) == [2, 4]
    damage(ckpts / "4", how)
    capsys.readouterr()

    m = _run(tmp_path, "run")
    lines = _stderr_lines(capsys)
    assert len(lines) == 1, lines
    assert "checkpoints/4: cannot restore" in lines[0] and "trying step 2" in lines[0]
    assert (ckpts / "damaged" / "step-4").is_dir()
    assert m["resumed_from_step"] == 2
    sids, full = full_run
    np.testing.assert_array_equal(load_sids(tmp_path / "run")[0], sids)
    assert m["reconstruction_loss"] == full["reconstruction_loss"]


@pytest.mark.slow
def test_every_checkpoint_damaged_starts_over(tmp_path, capsys, full_run):
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "run", on_step=_kill_at(5))
    ckpts = tmp_path / "run" / "checkpoints"
    damage(ckpts / "4", "truncate")
    damage(ckpts / "2", "delete")
    capsys.readouterr()

    m = _run(tmp_path, "run")
    lines = _stderr_lines(capsys)
    assert len(lines) == 2, lines
    assert lines[0].endswith("trying step 2") and lines[1].endswith("starting from step 0")
    assert m["resumed_from_step"] == 0
    np.testing.assert_array_equal(load_sids(tmp_path / "run")[0], full_run[0])


@pytest.mark.slow
def test_changed_config_is_retrained_not_damage(tmp_path, capsys):
    _run(tmp_path, "run")
    capsys.readouterr()
    m = _run(tmp_path, "run", cfg=dataclasses.replace(CFG, latent_dim=5))
    assert m["resumed_from_step"] == 0
    (line,) = _stderr_lines(capsys)
    assert "rqvae config differs" in line and "retraining the tokenizer" in line
    assert not (tmp_path / "run" / "checkpoints" / "damaged").exists()


def test_ctrl_c_during_a_save_is_held_until_it_ends():
    order = []
    with pytest.raises(KeyboardInterrupt):
        with checkpoint.deferred_interrupt():
            signal.raise_signal(signal.SIGINT)
            order.append("save finished")
    assert order == ["save finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_interrupts_at_once():
    order = []
    with pytest.raises(KeyboardInterrupt):
        with checkpoint.deferred_interrupt():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            order.append("not reached")
    assert order == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.fixture
def sigterm_as_ctrl_c():
    """SIGTERM handled as a pipeline's stage worker handles it: a KeyboardInterrupt."""

    def request(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, request)
    yield request
    signal.signal(signal.SIGTERM, previous)


INT, TERM = signal.SIGINT, signal.SIGTERM


@pytest.mark.parametrize(
    "signals, finished",
    [
        ((INT, TERM), True),  # Ctrl-C to the worker and its pipeline, the pipeline's SIGTERM after
        ((TERM,), True),  # the pipeline's request alone (a stage beside it failed)
        ((TERM, INT), True),  # then the first Ctrl-C: held too
        ((TERM, INT, INT), False),  # a second Ctrl-C: at once
        ((INT, TERM, INT), False),
    ],
)
def test_the_pipelines_request_is_held_and_never_a_second_ctrl_c(
    sigterm_as_ctrl_c, signals, finished
):
    """A stage worker's SIGTERM during a save: held like the first Ctrl-C, then one
    KeyboardInterrupt; only a second Ctrl-C interrupts the save."""
    order = []
    with pytest.raises(KeyboardInterrupt):
        with checkpoint.deferred_interrupt():
            for signum in signals:
                signal.raise_signal(signum)
            order.append("save finished")
    assert order == (["save finished"] if finished else [])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is sigterm_as_ctrl_c


def test_sigterm_is_held_where_ctrl_c_is_ignored(sigterm_as_ctrl_c):
    """A `genret` run as a background job (SIGINT ignored) that gets SIGTERM mid-save."""
    order = []
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt):
            with checkpoint.deferred_interrupt():
                signal.raise_signal(signal.SIGINT)  # ignored
                signal.raise_signal(signal.SIGTERM)
                order.append("save finished")
        assert order == ["save finished"]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is sigterm_as_ctrl_c
    finally:
        signal.signal(signal.SIGINT, ignored)
