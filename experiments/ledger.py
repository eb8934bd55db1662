"""Pipeline stages and their ledger: a stage is skipped while its key and outputs are intact."""

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from data import atomic


def fingerprint(*parts) -> str:
    """A stable hash of JSON-able parts (configs as dicts, upstream keys, file digests)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def file_digest(path: Path) -> str:
    """Content hash of a file, or of every file under a directory (sorted by relative path)."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(path.parent if path.is_file() else path)).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One pipeline step: its key inputs, the outputs that prove it ran, and how to run it."""

    name: str
    key_parts: tuple
    outputs: tuple[Path, ...]
    run: Callable[[], None]
    after: tuple[str, ...] = ()  # stages whose keys enter this one's (default: the previous)


class Ledger:
    """W/stages.json: for each finished stage, the key it finished with and how long it took."""

    def __init__(self, workdir: Path):
        self.path = workdir / "stages.json"
        self.entries = json.loads(self.path.read_text()) if self.path.exists() else {}

    def up_to_date(self, stage: Stage, key: str) -> bool:
        entry = self.entries.get(stage.name)
        return bool(entry) and entry["key"] == key and all(p.exists() for p in stage.outputs)

    def record(self, stage: Stage, key: str, seconds: float) -> None:
        self.entries[stage.name] = {"key": key, "seconds": round(seconds, 2)}
        atomic.write_json(self.path, self.entries)


def run_stages(stages: list[Stage], workdir: Path, log: Callable[[str], None] = print) -> dict:
    """Runs stages in order; a key includes its upstream keys, so upstream changes rerun it."""
    ledger = Ledger(workdir)
    keys: dict[str, str] = {}
    timings = {}
    for i, stage in enumerate(stages):
        after = stage.after or ((stages[i - 1].name,) if i else ())
        key = fingerprint([keys[a] for a in after], stage.name, stage.key_parts)
        keys[stage.name] = key
        if ledger.up_to_date(stage, key):
            log(f"[{stage.name}] up to date, skipped")
            timings[stage.name] = 0.0
            continue
        log(f"[{stage.name}] running")
        start = time.perf_counter()
        stage.run()
        missing = [str(p) for p in stage.outputs if not p.exists()]
        if missing:
            raise FileNotFoundError(f"stage {stage.name} finished without writing {missing}")
        seconds = time.perf_counter() - start
        ledger.record(stage, key, seconds)
        timings[stage.name] = seconds
        log(f"[{stage.name}] done in {seconds:.1f} s")
    return timings
