"""A Ctrl-C that lands where Python cannot raise it (a garbage-collector callback, as JAX
registers one) still interrupts the command instead of being printed and lost."""

import gc
import sys
import time

import pytest

from experiments import cli


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
