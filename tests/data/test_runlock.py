"""The run lock: one training process per run directory, none left behind by a dead one."""

import pytest

from data import runlock
from data.errors import BusyError
from tests.conftest import locked_by_another_process


def test_a_directory_held_by_another_process_is_refused_then_free_once_it_exits(tmp_path):
    run = tmp_path / "retriever_loo"
    with locked_by_another_process(run):
        with pytest.raises(BusyError, match="retriever_loo: another process is training"):
            runlock.hold(run)
    runlock.hold(run)  # the holder exited: the kernel dropped its lock
    try:
        assert list(run.iterdir()) == [], "the lock left a file in the run directory"
    finally:
        runlock.release(run)


def test_reentrant_in_one_process_and_free_for_others_after_release(tmp_path):
    runlock.hold(tmp_path / "new")  # made if missing
    runlock.hold(tmp_path / "new")
    runlock.release(tmp_path / "new")
    runlock.release(tmp_path / "new")  # holding none: nothing
    with locked_by_another_process(tmp_path / "new"):
        pass  # the other process got it, so this one let it go
