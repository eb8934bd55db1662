"""A Ctrl-C that lands where Python cannot raise it (a garbage-collector callback, as JAX
registers one) still interrupts the command instead of being printed and lost."""

import gc
import sys
import time

import pytest

from experiments import cli
from tests.experiments.helpers import wait_for_checkpoint


def _raise_in_gc(phase, info):
    if phase == "start":
        raise KeyboardInterrupt


def test_a_ctrl_c_inside_a_gc_callback_interrupts(monkeypatch, capsys):
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # restored after the test
    cli.keep_interrupts()
    gc.callbacks.append(_raise_in_gc)
    try:
        with pytest.raises(KeyboardInterrupt):
            gc.collect()  # Python reports the callback's KeyboardInterrupt as unraisable
            time.sleep(5)  # the interrupt handed back ends this sleep
    finally:
        gc.callbacks.remove(_raise_in_gc)
    assert "Exception ignored" not in capsys.readouterr().err


def test_other_unraisable_exceptions_reach_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))
    cli.keep_interrupts()

    class Finalized:
        def __del__(self):
            raise ValueError("in a finalizer")

    Finalized()  # dropped at once: its __del__'s error is unraisable
    assert seen == [ValueError]


def _raise_terminated_in_gc(phase, info):
    if phase == "start":
        raise cli.Terminated


def test_a_sigterm_inside_a_gc_callback_comes_back_as_sigterm(monkeypatch):
    """stop_on_sigterm's interrupt, landing where Python cannot raise, is handed back as SIGTERM
    (exit 143), not as a Ctrl-C (130), and not lost where Ctrl-C is ignored."""
    import signal

    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    previous = signal.signal(signal.SIGTERM, cli._terminated)
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's
    cli.keep_interrupts()
    gc.callbacks.append(_raise_terminated_in_gc)
    try:
        with pytest.raises(cli.Terminated):
            gc.collect()
            time.sleep(5)
    finally:
        gc.callbacks.remove(_raise_terminated_in_gc)
        signal.signal(signal.SIGINT, ignored)
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_stops_a_command_as_ctrl_c_does(tmp_path):
    """`kill` (SIGTERM) to a training `genret` command: one line, exit 143, its checkpoints kept
    (that a kept checkpoint resumes exactly: tests/rqvae); without stop_on_sigterm the process
    would die at once, mid-save too, and say nothing."""
    import signal
    import subprocess

    genret = [sys.executable, "-m", "experiments.cli"]
    workdir = str(tmp_path / "w")
    prepare = [*genret, "prepare", "--dataset", "synthetic", "--config", "tiny"]
    subprocess.run([*prepare, "--workdir", workdir, "--no-progress"], check=True)
    train = [*genret, "train-tokenizer", "--workdir", workdir, "--no-progress"]
    command = subprocess.Popen(
        [*train, "--set", "rqvae.num_steps=1000000"], stderr=subprocess.PIPE, text=True
    )
    checkpoints = tmp_path / "w" / "tokenizer" / "checkpoints"

    def running():
        assert command.poll() is None, command.stderr.read()

    try:
        wait_for_checkpoint(checkpoints, running)
        command.send_signal(signal.SIGTERM)
        code = command.wait(timeout=60)
        assert code == 143, command.stderr.read()
    finally:
        command.kill()
    lines = command.stderr.read().strip().splitlines()
    assert lines[-1].startswith("genret train-tokenizer: stopped by SIGTERM"), lines
    steps = sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit())
    assert steps
