"""Pipeline stages, their keys and their ledger (stages.json): a stage is skipped while its key
matches and its outputs still load."""

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from data import atomic
from data.errors import ArtifactError
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
        self.entries = _read(self.path) if self.path.exists() else {}

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
                log(f"[{stage.name}] an output no longer loads ({one_line(e)}); rerunning")
                return False
        return True

    def record(self, stage: Stage, key: str, seconds: float) -> None:
        self.entries[stage.name] = {"key": key, "seconds": round(seconds, 2)}
        atomic.write_json(self.path, self.entries)


def _read(path: Path) -> dict:
    """The ledger's entries; a damaged ledger is refused, not reset, so that nothing reruns (and
    rewrites results) without a word."""
    fix = "delete it to rerun every stage"
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: cannot be read ({one_line(e)}); {fix}") from None
    if not isinstance(entries, dict):
        raise ArtifactError(f"{path}: expected an object of stages, got {entries!r:.40}; {fix}")
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise ArtifactError(
                f"{path}: stage {name}: expected an object, got {entry!r:.40}; {fix}"
            )
    return entries


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def stage_keys(stages: list[Stage]) -> tuple[dict, dict]:
    """Each stage's upstream stages and its key; a key includes the upstream keys, so an
    upstream change reruns everything below it."""
    after, keys = {}, {}
    for i, stage in enumerate(stages):
        up = stage.after if stage.after is not None else ((stages[i - 1].name,) if i else ())
        after[stage.name] = up
        keys[stage.name] = fingerprint([keys[a] for a in up], stage.name, stage.key_parts)
    return after, keys
