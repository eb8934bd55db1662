"""Checks that RUN reproduces RECORD (two work directories of one preset and seed): every number of
every results/*.json that both hold (timings, latencies and the environment left out), the
tokenizer's SIDs, and for each retriever its training summary and every logged loss and holdout
metric. Prints what it compared and each difference; exits 0 when all are equal, 1 when not.

Usage: python docs/scripts/same_run.py RECORD RUN
(the acceptance of issue 17: a preset from an empty work directory reproduces its record's
numbers to the digit on the record's machine; docs/RESULTS.md)
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from data.errors import ArgumentError
from experiments.layout import RunLayout
from seqmodel import files as retriever_files

# Keys whose values are measurements of the machine, not of the model.
_TIMING = ("latency", "seconds", "per_s", "wall", "environment")


def _numbers(x, prefix=""):
    """(path, value) of every int, float and bool under a parsed JSON value, timings left out."""
    if isinstance(x, dict):
        for k, v in x.items():
            if not any(t in k for t in _TIMING):
                yield from _numbers(v, f"{prefix}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _numbers(v, f"{prefix}[{i}]")
    elif isinstance(x, int | float):  # bool is an int
        yield prefix, x


def _jsonl(path: Path) -> dict:
    """'step N/key' -> value of every logged number of a metrics.jsonl, timings left out."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            step = row.get("step")
            for key, value in _numbers({k: v for k, v in row.items() if k != "step"}):
                out[f"step {step}{key}"] = value
    return out


def compare(record: Path, run: Path) -> tuple[list[str], list[str]]:
    """(lines saying what was compared, lines naming each difference)."""
    done, diffs = [], []
    rec, new = RunLayout(record), RunLayout(run)

    def same(label: str, a: dict, b: dict) -> None:
        keys = sorted(set(a) | set(b))
        bad = [k for k in keys if a.get(k, "absent") != b.get(k, "absent")]
        done.append(f"{label}: {len(keys)} numbers, {len(bad)} differ")
        diffs.extend(f"{label} {k}: {a.get(k, 'absent')} vs {b.get(k, 'absent')}" for k in bad[:5])
        if len(bad) > 5:
            diffs.append(f"{label}: and {len(bad) - 5} more")

    for path in sorted(rec.results.glob("*.json")):
        other = new.results / path.name
        if other.exists():
            a, b = (dict(_numbers(json.loads(p.read_text()))) for p in (path, other))
            same(f"results/{path.name}", a, b)
        else:
            done.append(f"results/{path.name}: not in {run}")
    sids = rec.sids.relative_to(record)
    if rec.sids.exists() and new.sids.exists():
        equal = np.array_equal(np.load(rec.sids), np.load(new.sids))
        done.append(f"{sids}: {'equal' if equal else 'differ'}")
        if not equal:
            diffs.append(f"{sids} differ")
    for folder in sorted(p for p in record.glob("retriever_*") if p.is_dir()):
        readers = ((retriever_files.SUMMARY_FILE, _summary), (retriever_files.METRICS_FILE, _jsonl))
        for name, read in readers:
            a_path, b_path = folder / name, run / folder.name / name
            if a_path.exists() and b_path.exists():
                same(f"{folder.name}/{name}", read(a_path), read(b_path))
            elif a_path.exists():
                done.append(f"{folder.name}/{name}: not in {run}")
                diffs.append(f"{folder.name}/{name} missing in {run}")
    return done, diffs


def _summary(path: Path) -> dict:
    return dict(_numbers(json.loads(path.read_text())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path, help="the work directory of record")
    parser.add_argument("run", type=Path, help="the work directory to check")
    args = parser.parse_args(argv)
    for d in (args.record, args.run):
        try:
            finished = RunLayout(d).results.is_dir()
        except ArgumentError as e:  # a file where a work directory should be
            print(f"error: {e}", file=sys.stderr)
            return 2
        if not finished:
            print(
                f"error: {d}: no results/ folder (not a finished work directory)", file=sys.stderr
            )
            return 2
    try:
        done, diffs = compare(args.record, args.run)
    except (OSError, ValueError) as e:  # a damaged JSON or SIDs file
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(done))
    print("\n".join(diffs) if diffs else "all equal")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
