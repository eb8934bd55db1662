"""All orbax calls of the tokenizer (manager, save, restore with fallback), and what both trainers
share: damaged checkpoints moved aside in one logged line, Ctrl-C held while a save is in flight,
a save that the disk refuses made one line with nothing half-written left behind."""

import contextlib
import inspect
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import jax
import orbax.checkpoint as ocp
from tqdm.auto import tqdm

from data.errors import WriteError, causes, os_reason

T = TypeVar("T")
DAMAGED = "damaged"  # <checkpoints>/damaged/<name>-<step>: checkpoints that did not restore
TMP_MARK = ".orbax-checkpoint-tmp"  # in the name of what orbax writes before the commit
# How long a failed save waits for orbax's threads of that save to end before removing its
# temporary folders (they end within seconds: each one's write fails or its wait is cancelled).
_THREADS_S = 30.0


def log_to_stderr(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Holds a Ctrl-C until the block ends; a second one interrupts at once.

    A KeyboardInterrupt inside orbax's save or wait leaves its writer threads running into
    interpreter shutdown, and each logs a traceback (about 100 lines per Ctrl-C) and may leave a
    half-written step behind. Finishing the save first costs milliseconds to seconds.

    Where SIGTERM has a Python handler (`genret`, cli.stop_on_sigterm; a pipeline's stage worker,
    for its pipeline's request to stop), it is held as well, also where Ctrl-C is ignored (a
    background job), but never counts as the second Ctrl-C: a pipeline sends it a few seconds after
    the Ctrl-C that reached both, while the save may still run.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: h for s in (signal.SIGINT, signal.SIGTERM) if callable(h := signal.getsignal(s))}
    if not previous:
        yield
        return
    held = []

    def hold(signum, frame):
        if signum == signal.SIGINT and any(s == signal.SIGINT for s, _ in held):
            previous[signum](signum, frame)
        held.append((signum, frame))

    for s in previous:
        signal.signal(s, hold)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if held:
            signum, frame = held[0]
            previous[signum](signum, frame)  # a Ctrl-C's handler: raises KeyboardInterrupt here


@contextlib.contextmanager
def quiet_orbax() -> Iterator[None]:
    """Silences orbax's own log lines about a checkpoint it fails to read."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def attempt(restore: Callable[[], T]) -> tuple[T | None, str | None]:
    """(restore(), None), or (None, the error in one line) when the checkpoint does not restore.

    Any exception counts: orbax, tensorstore, grain and json raise many types for one truncated
    or missing file, each with a traceback of hundreds of lines (tensorstore's JSON spec).
    """
    _drop_failed_read_noise()
    with quiet_orbax():
        try:
            return restore(), None
        except Exception as e:
            return None, _one_line(e)


def _is_failed_read_noise(u) -> bool:
    # When one read of a restore fails, the others are abandoned: their coroutines complain when
    # collected, and tensorstore later calls back into orbax's closed event loop.
    if inspect.iscoroutine(u.object):
        return "orbax" in u.object.cr_code.co_filename
    return u.object is None and "Event loop is closed" in str(u.exc_value)


def _drop_failed_read_noise() -> None:
    """Filters that noise out of sys.unraisablehook for good: it comes at any later time."""
    hook = sys.unraisablehook
    if getattr(hook, "drops_failed_read_noise", False):
        return

    def filtered(u) -> None:
        if not _is_failed_read_noise(u):
            hook(u)

    filtered.drops_failed_read_noise = True
    sys.unraisablehook = filtered


def _one_line(error: BaseException) -> str:
    while error.__cause__ is not None:  # orbax wraps tensorstore's error, which names the cause
        error = error.__cause__
    first = (str(error).strip().splitlines() or [""])[0]
    # Absolute paths inside the checkpoint, already named by the line: their last part is enough.
    first = re.sub(r'"/[^"]*?([^"/]+/?)"', r'"\1"', first)
    return f"{type(error).__name__}: {first[:240]}"


def set_aside(
    mngr: ocp.CheckpointManager,
    step: int,
    dest: Path,
    error: str,
    *,
    then: str,
    log: Callable[[str], None],
) -> None:
    """Moves checkpoint `step`, which failed to restore with `error`, to `dest` (out of the
    manager's step list), says so in one line ending with `then`, and reloads the manager."""
    src = Path(mngr.directory) / str(step)
    if jax.process_index() == 0:  # several hosts share one directory: one of them moves it
        dest.parent.mkdir(parents=True, exist_ok=True)
        target, n = dest, 1
        while target.exists():  # the same step damaged again in a later run
            target, n = dest.with_name(f"{dest.name}.{n}"), n + 1
        shutil.move(src, target)
        log(f"{src}: cannot restore ({error}); moved to {target}; {then}")
    ocp.multihost.sync_global_processes(f"genret_set_aside:{src}")
    mngr.reload()  # the manager caches its step list


def manager(directory: Path, *, max_to_keep: int = 2) -> ocp.CheckpointManager:
    """A checkpoint manager over `directory` (created if missing)."""
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    with quiet_orbax():
        return ocp.CheckpointManager(
            directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
        )


def save(mngr: ocp.CheckpointManager, step: int, state, meta: dict) -> None:
    """Saves the train state and a JSON description of what it was trained on."""
    with saving(Path(mngr.directory)):
        mngr.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
        )


def close(mngr: ocp.CheckpointManager) -> None:
    """Finishes the save in flight (even on Ctrl-C) and closes the manager."""
    with saving(Path(mngr.directory)):
        try:
            mngr.wait_until_finished()
        finally:
            mngr.close()


@contextlib.contextmanager
def saving(directory: Path) -> Iterator[None]:
    """Around every call that saves into `directory` or waits for a save (orbax raises a failed
    asynchronous write at the next one): holds Ctrl-C (deferred_interrupt), and makes a write
    that the system refuses (a full disk, a read-only folder) one WriteError naming `directory`.
    Orbax's log lines and tracebacks about that write are dropped, its temporary folders under
    `directory` (and one level down) removed; the checkpoints committed before stay as they were.
    """
    _drop_save_failure_logs()
    _drop_failed_read_noise()  # tensorstore calls back into a closed loop after a failed write
    try:
        with deferred_interrupt():
            yield
    except Exception as e:
        code = _system_errno(e)
        if code is None:
            raise
        _discard_unfinished(Path(directory))
        reason = os_reason(OSError(code, os.strerror(code)))
        raise WriteError(f"{reason} while saving the checkpoint to {directory}") from e


def _system_errno(error: BaseException) -> int | None:
    """The errno of a write the system refused: an OSError's, or the one tensorstore names in its
    message ("... No space left on device [os_error_code='28']")."""
    for e in causes(error):
        if isinstance(e, OSError) and e.errno is not None:
            return e.errno
        if found := re.search(r"os_error_code='?(\d+)", str(e)):
            return int(found.group(1))
    return None


def _not_a_failed_write(record: logging.LogRecord) -> bool:
    # Orbax logs a failed write with its traceback once per thread that sees it (three to five
    # tracebacks of 40-100 lines); `saving` raises it as one line instead.
    if record.levelno < logging.ERROR or f"{os.sep}orbax{os.sep}" not in record.pathname:
        return True
    return not record.exc_info or _system_errno(record.exc_info[1]) is None


def _drop_save_failure_logs() -> None:
    """A filter (for good) of the absl logger, which orbax logs to."""
    logger = logging.getLogger("absl")
    if _not_a_failed_write not in logger.filters:
        logger.addFilter(_not_a_failed_write)


def _discard_unfinished(directory: Path) -> None:
    """Once orbax's threads have ended, removes the temporary folders of the saves that failed."""
    deadline = time.monotonic() + _THREADS_S
    for t in threading.enumerate():
        if t is not threading.current_thread() and type(t).__module__.startswith("orbax."):
            # Thread.join itself: orbax's own join re-raises the thread's error.
            threading.Thread.join(t, max(deadline - time.monotonic(), 0))
    if jax.process_index() != 0:  # several hosts share one directory: one of them cleans it
        return
    for pattern in (f"*{TMP_MARK}*", f"*/*{TMP_MARK}*"):
        for path in directory.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)


def latest_step(mngr: ocp.CheckpointManager) -> int | None:
    return mngr.latest_step()


def restore_meta(mngr: ocp.CheckpointManager, step: int) -> dict:
    """The JSON description saved with checkpoint `step`."""
    out = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
    return dict(out["meta"])


def restore_state(mngr: ocp.CheckpointManager, step: int, abstract_state):
    """The train state of checkpoint `step`, shaped like `abstract_state` (jax.eval_shape)."""
    out = mngr.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))
    )
    return out["state"]


def restore_newest(
    mngr: ocp.CheckpointManager,
    abstract_state,
    *,
    check_meta: Callable[[dict], None],
    log: Callable[[str], None] = log_to_stderr,
) -> tuple[int, Any] | None:
    """(step, state) of the newest checkpoint that restores, else None (start over).

    A checkpoint that fails to restore (a truncated or missing file) is moved to
    `<directory>/damaged/step-<step>` with one logged line, and the next older one is tried.
    `check_meta` raises on a checkpoint of other inputs or config: the caller's error, not damage.
    """
    steps = sorted(mngr.all_steps(), reverse=True)
    for i, step in enumerate(steps):
        meta, error = attempt(lambda step=step: restore_meta(mngr, step))
        if meta is not None:
            check_meta(meta)
            state, error = attempt(lambda step=step: restore_state(mngr, step, abstract_state))
            if state is not None:
                return step, state
        then = f"trying step {steps[i + 1]}" if i + 1 < len(steps) else "starting from step 0"
        dest = Path(mngr.directory) / DAMAGED / f"step-{step}"
        set_aside(mngr, step, dest, error, then=then, log=log)
    return None
