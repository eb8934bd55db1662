"""Shared by the end-to-end tests that stop a training process."""

import time
from collections.abc import Callable
from pathlib import Path


def wait_for_checkpoint(checkpoints: Path, still_running: Callable[[], None], limit_s=180.0):
    """Returns once `checkpoints` holds a step folder (a training's first save); calls
    `still_running` (which asserts that the process lives) between looks, for `limit_s` at most
    (a loaded CI machine can take minutes to compile and reach the first save)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir()):
            return
        still_running()
        time.sleep(0.01)
    raise AssertionError(f"{checkpoints}: no checkpoint within {limit_s:.0f} s")
