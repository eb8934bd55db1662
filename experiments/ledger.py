"""Pipeline stages and their ledger: a stage is skipped while its key matches and its outputs
still load."""

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

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
    # The key parts an earlier release used in place of key_parts: a ledger entry under the key
    # they give (with the upstream stages' earlier keys) still counts as up to date, and is
    # written again under the current key. None: the same as key_parts.
    legacy_key_parts: tuple | None = None


class Ledger:
    """stages.json: for each finished stage, the key it finished with and how long it took."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.entries = json.loads(self.path.read_text()) if self.path.exists() else {}
        except json.JSONDecodeError:
            self.entries = {}  # a damaged ledger only costs a rerun of every stage

    def up_to_date(
        self, stage: Stage, key: str, log: Callable[[str], None], legacy: str | None = None
    ) -> bool:
        entry = self.entries.get(stage.name)
        if not entry or entry.get("key") not in (key, legacy):
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
        if entry["key"] != key:  # up to date under the earlier key: keep it under today's
            self.record(stage, key, entry.get("seconds", 0.0))
        return True

    def record(self, stage: Stage, key: str, seconds: float) -> None:
        self.entries[stage.name] = {"key": key, "seconds": round(seconds, 2)}
        atomic.write_json(self.path, self.entries)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def run_stages(
    stages: list[Stage],
    ledger_path: Path,
    log: Callable[[str], None] = print,
    on_done: Callable[[Stage], None] | None = None,
) -> dict:
    """Runs stages in order; a key includes its upstream keys, so upstream changes rerun it.

    A stage's failure is raised as a StageError naming the stage (its cause chained);
    `on_done(stage)` runs after each stage that ran and finished.
    """
    ledger = Ledger(ledger_path)
    keys: dict[str, str] = {}
    legacy: dict[str, str] = {}  # the keys an earlier release gave (Stage.legacy_key_parts)
    timings = {}
    for i, stage in enumerate(stages):
        after = stage.after if stage.after is not None else ((stages[i - 1].name,) if i else ())
        key = fingerprint([keys[a] for a in after], stage.name, stage.key_parts)
        old_parts = stage.key_parts if stage.legacy_key_parts is None else stage.legacy_key_parts
        old = fingerprint([legacy[a] for a in after], stage.name, old_parts)
        keys[stage.name], legacy[stage.name] = key, old
        if ledger.up_to_date(stage, key, log, legacy=old):
            log(f"[{stage.name}] up to date, skipped")
            timings[stage.name] = 0.0
            continue
        log(f"[{stage.name}] running")
        start = time.perf_counter()
        try:
            stage.run()
        except GenretError as e:
            raise StageError(f"stage {stage.name}: {e}") from e
        except (ValueError, OSError, MemoryError) as e:
            raise StageError(f"stage {stage.name}: {_one_line(e)}") from e
        missing = [str(p) for p in stage.outputs if not p.exists()]
        if missing:
            raise StageError(f"stage {stage.name} finished without writing {missing}")
        seconds = time.perf_counter() - start
        ledger.record(stage, key, seconds)
        if on_done is not None:
            on_done(stage)
        timings[stage.name] = seconds
        log(f"[{stage.name}] done in {seconds:.1f} s")
    return timings
