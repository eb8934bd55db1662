"""All orbax calls of the tokenizer (manager, save, restore with fallback), and what both trainers
share: damaged checkpoints moved aside in one logged line, Ctrl-C held while a save is in flight."""

import contextlib
import logging
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from tqdm.auto import tqdm

DAMAGED = "damaged"  # <checkpoints>/damaged/<name>-<step>: checkpoints that did not restore


def log_to_stderr(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Holds a Ctrl-C until the block ends; a second one interrupts at once.

    A KeyboardInterrupt inside orbax's save or wait leaves its writer threads running into
    interpreter shutdown, and each logs a traceback (about 100 lines per Ctrl-C) and may leave a
    half-written step behind. Finishing the save first costs milliseconds to seconds.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    held = []

    def hold(signum, frame):
        if held:
            previous(signum, frame)
        held.append((signum, frame))

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            previous(*held[0])  # default handler: raises KeyboardInterrupt here


@contextlib.contextmanager
def quiet_orbax() -> Iterator[None]:
    """Silences orbax's own ERROR/WARNING logs of a damaged file; the caller reports one line."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _one_line(error: BaseException) -> str:
    # TensorStore errors carry a multi-line JSON spec; the first line names the failure.
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first[:120]}"


def set_aside(
    mngr: ocp.CheckpointManager,
    step: int,
    dest: Path,
    error: BaseException,
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
        log(f"{src}: cannot restore ({_one_line(error)}); moved to {target}; {then}")
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
    with deferred_interrupt():
        mngr.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
        )


def close(mngr: ocp.CheckpointManager) -> None:
    """Finishes the save in flight (even on Ctrl-C) and closes the manager."""
    with deferred_interrupt():
        mngr.wait_until_finished()
        mngr.close()


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
        then = f"trying step {steps[i + 1]}" if i + 1 < len(steps) else "starting from step 0"
        dest = Path(mngr.directory) / DAMAGED / f"step-{step}"
        try:
            with quiet_orbax():
                meta = restore_meta(mngr, step)
        except Exception as e:  # orbax, tensorstore and json raise many types
            set_aside(mngr, step, dest, e, then=then, log=log)
            continue
        check_meta(meta)
        try:
            with quiet_orbax():
                return step, restore_state(mngr, step, abstract_state)
        except Exception as e:
            set_aside(mngr, step, dest, e, then=then, log=log)
    return None
