"""The run lock: one training process per run directory, none left behind by a dead one."""

import errno
import fcntl

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


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_filesystem_that_cannot_lock_warns_and_runs_unlocked(tmp_path, monkeypatch, code):
    def no_locks(fd, op):
        raise OSError(code, "no locks here")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.warns(RuntimeWarning, match="nfs_run: this filesystem cannot lock"):
        runlock.hold(tmp_path / "nfs_run")
    assert (tmp_path / "nfs_run").is_dir()
    runlock.release(tmp_path / "nfs_run")  # holds nothing: nothing to free, no error


def test_other_lock_errors_still_stop_the_run(tmp_path, monkeypatch):
    def broken(fd, op):
        raise OSError(errno.EBADF, "bad descriptor")

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(OSError, match="bad descriptor"):
        runlock.hold(tmp_path / "run")
    runlock.release(tmp_path / "run")  # nothing was held
