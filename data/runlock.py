"""One training process per run directory: an advisory lock that a second process is refused.

Two processes resuming the same run would both write its checkpoints and metrics log (each
validation's row twice, saves racing). The lock is `flock` on the directory itself, so it leaves
no file behind and the kernel drops it when its holder exits, killed or not: a stale lock cannot
exist. It is advisory: it binds only processes that take it (the training loops, via
`seqmodel.trainer.start_or_resume`); reading a run (evaluations, reports) takes none.

A filesystem that cannot lock (some NFS mounts answer ENOLCK or EOPNOTSUPP) gets a warning and no
lock: the run goes on as it did before locks existed, and the user is told that nothing stops a
second process there.
"""

import errno
import fcntl
import os
import warnings
from pathlib import Path

from data.errors import BusyError

_held: dict[Path, int] = {}
# what a filesystem without lock support answers flock with
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def hold(directory: str | os.PathLike) -> None:
    """Locks `directory` (made if missing) for this process until it exits or `release` is called.

    A process that holds it already returns at once (one `release` then frees it). BusyError (one
    line naming the directory) when another process holds it.
    """
    directory = Path(directory).resolve()
    if directory in _held:
        return
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException as e:
        os.close(fd)  # no lock, whatever went wrong
        if isinstance(e, BlockingIOError):
            raise BusyError(
                f"{directory}: another process is training this run now; wait for it to end (or "
                "stop it) and run this again: it resumes from the last checkpoint"
            ) from None
        if not (isinstance(e, OSError) and e.errno in _NO_LOCKS):
            raise
        warnings.warn(
            f"{directory}: this filesystem cannot lock ({os.strerror(e.errno)}); training goes on "
            "unlocked, so make sure no other process trains this run at the same time",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    _held[directory] = fd


def release(directory: str | os.PathLike) -> None:
    """Drops this process's lock on `directory`; nothing if it holds none."""
    fd = _held.pop(Path(directory).resolve(), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the flock
