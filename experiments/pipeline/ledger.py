"""Pipeline stages and their ledger: a stage is skipped while its key matches and its outputs
still load."""

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from data import atomic
from data.errors import GenretError, StageError
from data.fingerprint import fingerprint


@dataclasses.dataclass(frozen=True)
class Stage:
    """One pipeline step: its key inputs, the outputs that prove it ran, and how to run it."""

    name: str
    key_parts: tuple
    outputs: tuple[Path, ...]
    run: Callable[[], object]
    # Stages whose keys enter this one's; None: the previous stage's; (): none.
    after: tuple[str, ...] | None = None
    # Raises when an output exists but no longer loads (a truncated file, a damaged checkpoint).
    check: Callable[[], None] | None = None
    # Runs with no other stage beside it, in this process, also when run_stages' jobs > 1: a
    # stage that times itself (latency per user: a stage beside it would take the cores it is
    # timed on), or one too small for a process of its own.
    alone: bool = False


class Ledger:
    """stages.json: for each finished stage, the key it finished with and how long it took."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.entries = json.loads(self.path.read_text()) if self.path.exists() else {}
        except json.JSONDecodeError:
            self.entries = {}  # a damaged ledger only costs a rerun of every stage

    def up_to_date(self, stage: Stage, key: str, log: Callable[[str], None]) -> bool:
        entry = self.entries.get(stage.name)
        if not entry or entry.get("key") != key:
            return False
        missing = [str(p) for p in stage.outputs if not p.exists()]
        if missing:
            log(f"[{stage.name}] {missing[0]} is missing; rerunning")
            return False
        if stage.check is not None:
            try:
                stage.check()
            except Exception as e:  # whatever a damaged file raises: the stage reruns
                log(f"[{stage.name}] an output no longer loads ({_one_line(e)}); rerunning")
                return False
        return True

    def record(self, stage: Stage, key: str, seconds: float) -> None:
        self.entries[stage.name] = {"key": key, "seconds": round(seconds, 2)}
        atomic.write_json(self.path, self.entries)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


class StageProcess(Protocol):
    """A stage running in its own process (`run_stages(..., launch=)`)."""

    def poll(self) -> int | None:
        """Its exit code once it ended, else None."""

    def interrupt(self) -> None:
        """Asks it to stop as Ctrl-C would (a training stage keeps its last checkpoint)."""

    def wait(self) -> int:
        """Waits for its end; its exit code."""

    def error(self) -> str:
        """After a non-zero exit: why, on one line."""


def _keys(stages: list[Stage]) -> tuple[dict, dict]:
    """Each stage's upstream stages and its key; a key includes the upstream keys, so an
    upstream change reruns everything below it."""
    after, keys = {}, {}
    for i, stage in enumerate(stages):
        up = stage.after if stage.after is not None else ((stages[i - 1].name,) if i else ())
        after[stage.name] = up
        keys[stage.name] = fingerprint([keys[a] for a in up], stage.name, stage.key_parts)
    return after, keys


def _finished(stage: Stage, ledger: Ledger, key: str, seconds: float, on_done, log) -> None:
    missing = [str(p) for p in stage.outputs if not p.exists()]
    if missing:
        raise StageError(f"stage {stage.name} finished without writing {missing}")
    ledger.record(stage, key, seconds)
    if on_done is not None:
        on_done(stage)
    log(f"[{stage.name}] done in {seconds:.1f} s")


def run_stages(
    stages: list[Stage],
    ledger_path: Path,
    log: Callable[[str], None] = print,
    on_done: Callable[[Stage], None] | None = None,
    *,
    jobs: int = 1,
    launch: Callable[[Stage], StageProcess] | None = None,
) -> dict:
    """Runs the stages that are out of date; returns each stage's seconds (0 when skipped).

    In list order, one at a time, in this process; or, with `launch` and `jobs` > 1, up to
    `jobs` at once, each in the process `launch(stage)` starts, a stage starting once every
    stage it comes after has finished (the first ready in list order first; a stage `alone`
    only while no other runs, in this process, and none beside it). The ledger is
    written by this process alone, one entry as each stage finishes. A stage's failure is
    raised as a StageError naming the stage (its cause chained); a stage running beside it is
    interrupted first. `on_done(stage)` runs after each stage that ran and finished.
    """
    ledger = Ledger(ledger_path)
    after, keys = _keys(stages)
    apart = launch is not None and jobs > 1
    timings: dict[str, float] = {}
    waiting = list(stages)
    running: dict[str, tuple[Stage, StageProcess, float]] = {}
    try:
        while waiting or running:
            # Start what is ready, the first in list order first (one at a time: the next in
            # list order); a stage `alone` only when nothing runs, here, so nothing beside it.
            while len(running) < jobs:
                ready = [s for s in waiting if all(a in timings for a in after[s.name])]
                ready = [s for s in ready if not (s.alone and running)]
                if not ready:
                    break
                stage = ready[0]
                waiting.remove(stage)
                key = keys[stage.name]
                if ledger.up_to_date(stage, key, log):
                    log(f"[{stage.name}] up to date, skipped")
                    timings[stage.name] = 0.0
                elif stage.alone or not apart:
                    timings[stage.name] = _run_here(stage, ledger, key, log, on_done)
                else:
                    log(f"[{stage.name}] running (in its own process)")
                    running[stage.name] = (stage, launch(stage), time.perf_counter())
            if not running:  # all left were skipped or ran here (an `after` names an earlier stage)
                break
            stage, process, start = running.pop(_first_to_end(running))
            if process.poll() != 0:
                raise StageError(f"stage {stage.name}: {process.error()}")
            seconds = time.perf_counter() - start
            _finished(stage, ledger, keys[stage.name], seconds, on_done, log)
            timings[stage.name] = seconds
    finally:  # a failure or Ctrl-C here: the stages still running stop as Ctrl-C stops them
        for _, process, _ in running.values():
            if process.poll() is None:
                process.interrupt()
        for _, process, _ in running.values():
            process.wait()
    return timings


def _run_here(stage: Stage, ledger: Ledger, key: str, log, on_done) -> float:
    """Runs a stage in this process; its seconds."""
    log(f"[{stage.name}] running")
    start = time.perf_counter()
    try:
        stage.run()
    except GenretError as e:
        raise StageError(f"stage {stage.name}: {e}") from e
    except (ValueError, OSError, MemoryError) as e:
        raise StageError(f"stage {stage.name}: {_one_line(e)}") from e
    seconds = time.perf_counter() - start
    _finished(stage, ledger, key, seconds, on_done, log)
    return seconds


def _first_to_end(running: dict, interval: float = 0.05) -> str:
    """The name of a running stage whose process has ended (waits for one)."""
    while True:
        for name, (_, process, _) in running.items():
            if process.poll() is not None:
                return name
        time.sleep(interval)
