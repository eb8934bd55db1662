"""Checks that RUN reproduces RECORD (one preset and seed): every number of every results/*.json
that both hold (timings, latencies, their ratios and the environment left out), the tokenizer's
SIDs, and for each retriever its training summary and every logged loss and holdout metric. Prints
what it compared and each difference; exits 0 when all are equal, 1 when not, 2 on bad input.

RECORD is a work directory or a fingerprint of one: `--write FILE` stores a work directory's
fingerprint (every results number and training summary in full, the SIDs and each metrics.jsonl
as a SHA-256 of their values; a few kilobytes), so a record outlives its work directory and can be
committed (docs/records/). A difference in a metrics.jsonl is then named by its count and digest,
not by its first differing step.

Usage: python docs/scripts/same_run.py RECORD RUN
       python docs/scripts/same_run.py WORKDIR --write FILE
(a preset run from an empty work directory gives its record's numbers to the digit on the record's
kind of processor: docs/guide/reproducibility.md, docs/records/README.md)
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from data import atomic
from data.environment import environment, machine_differences, package_differences
from data.errors import ArgumentError
from experiments.pipeline.layout import RunLayout
from seqmodel import files as retriever_files

FORMAT = 1
# Keys whose values are measurements of the machine, not of the model.
_TIMING = ("latency", "seconds", "per_s", "wall", "overhead_ratio", "environment")


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


def _json_numbers(path: Path) -> dict:
    return dict(_numbers(json.loads(path.read_text())))


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


def _equal(a, b) -> bool:
    """Equal numbers, NaN equal to NaN (a logged NaN loss reproduces as NaN)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


def _digest(numbers: dict) -> str:
    """SHA-256 of (key, value) pairs; floats are written exactly (shortest round-trip repr)."""
    return hashlib.sha256(json.dumps(sorted(numbers.items())).encode()).hexdigest()


def fingerprint(workdir: Path) -> dict:
    """What `compare` checks of a work directory, small enough to commit."""
    lay = RunLayout(workdir)
    fp = {"format": FORMAT, "results": {}, "sids": None, "retrievers": {}}
    for path in sorted(lay.results.glob("*.json")):
        fp["results"][path.name] = _json_numbers(path)
    if lay.sids.exists():
        sids = np.ascontiguousarray(np.load(lay.sids, allow_pickle=False))
        raw = sids.dtype.str.encode() + str(sids.shape).encode() + sids.tobytes()
        fp["sids"] = {"shape": list(sids.shape), "sha256": hashlib.sha256(raw).hexdigest()}
    for folder in sorted(p for p in workdir.glob("retriever_*") if p.is_dir()):
        entry = {}
        summary = folder / retriever_files.SUMMARY_FILE
        if summary.exists():
            entry["summary"] = _json_numbers(summary)
        metrics = folder / retriever_files.METRICS_FILE
        if metrics.exists():
            numbers = _jsonl(metrics)
            entry["metrics"] = {"count": len(numbers), "sha256": _digest(numbers)}
        fp["retrievers"][folder.name] = entry
    warm = lay.results / "warm.json"
    env = json.loads(warm.read_text()).get("environment") if warm.exists() else None
    fp["environment"] = env or environment()
    return fp


def compare(
    rec: dict, new: dict, record_dir: Path | None = None, run_dir: Path | None = None
) -> tuple[list[str], list[str]]:
    """(lines saying what was compared, lines naming each difference) of two fingerprints; with
    both work directories given, a differing metrics.jsonl is named step by step."""
    done, diffs = [], []
    run_name = str(run_dir) if run_dir else "RUN"

    def same(label: str, a: dict, b: dict) -> None:
        keys = sorted(set(a) | set(b))
        bad = [k for k in keys if not _equal(a.get(k, "absent"), b.get(k, "absent"))]
        done.append(f"{label}: {len(keys)} numbers, {len(bad)} differ")
        diffs.extend(f"{label} {k}: {a.get(k, 'absent')} vs {b.get(k, 'absent')}" for k in bad[:5])
        if len(bad) > 5:
            diffs.append(f"{label}: and {len(bad) - 5} more")

    for name, numbers in rec["results"].items():
        if name in new["results"]:
            same(f"results/{name}", numbers, new["results"][name])
        else:  # e.g. validation_warm.json, written by a separate eval-warm --validation
            done.append(f"results/{name}: not in {run_name} (not compared)")
    sids = "tokenizer SIDs"
    if rec["sids"] is not None or new["sids"] is not None:
        equal = rec["sids"] == new["sids"]
        done.append(f"{sids}: {'equal' if equal else 'differ'}")
        if not equal:
            missing = "missing in RECORD" if rec["sids"] is None else f"missing in {run_name}"
            either_missing = rec["sids"] is None or new["sids"] is None
            diffs.append(f"{sids} {missing if either_missing else 'differ'}")
    for name, entry in rec["retrievers"].items():
        other = new["retrievers"].get(name, {})
        for part in ("summary", "metrics"):
            label = f"{name}/" + (
                retriever_files.SUMMARY_FILE if part == "summary" else retriever_files.METRICS_FILE
            )
            if part not in entry:
                continue
            if part not in other:
                done.append(f"{label}: not in {run_name}")
                diffs.append(f"{label} missing in {run_name}")
            elif part == "summary":
                same(label, entry[part], other[part])
            elif record_dir is not None and run_dir is not None:
                if entry[part] == other[part]:  # equal digests: no second read of both files
                    done.append(f"{label}: {entry[part]['count']} numbers, 0 differ")
                else:  # name the steps that differ
                    a, b = (d / name / retriever_files.METRICS_FILE for d in (record_dir, run_dir))
                    same(label, _jsonl(a), _jsonl(b))
            else:
                count, equal = entry[part]["count"], entry[part] == other[part]
                done.append(f"{label}: {count} numbers, digest {'equal' if equal else 'differs'}")
                if not equal:
                    theirs = other[part]["count"]
                    diffs.append(f"{label}: {count} vs {theirs} numbers, digest differs")
    env_rec, env_new = rec.get("environment"), new.get("environment")
    # The acceptance is on the record's machine: say when it is not.
    if machine := machine_differences(env_rec, env_new):
        done.append("machines differ: " + "; ".join(machine))
    if packages := package_differences(env_rec, env_new):
        done.append(f"{len(packages)} package versions differ")
    return done, diffs


def _work_dir(d: Path) -> str | None:
    """Why `d` is not a finished work directory, or None."""
    try:
        finished = RunLayout(d).results.is_dir()
    except ArgumentError as e:  # a file where a work directory should be
        return str(e)
    return None if finished else f"{d}: no results/ folder (not a finished work directory)"


def _read_record(path: Path) -> dict:
    try:
        fp = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a fingerprint ({e})") from None
    if not isinstance(fp, dict) or fp.get("format") != FORMAT:
        raise ValueError(f"{path}: not a fingerprint of format {FORMAT} (same_run.py --write)")
    return fp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "record", type=Path, help="the work directory of record, or its fingerprint (.json)"
    )
    parser.add_argument("run", type=Path, nargs="?", help="the work directory to check")
    parser.add_argument(
        "--write", type=Path, metavar="FILE", help="store RECORD's fingerprint in FILE and exit"
    )
    args = parser.parse_args(argv)
    if (args.run is None) == (args.write is None):
        parser.error("give RUN to compare with, or --write FILE (not both)")
    record_is_file = args.record.is_file() and args.write is None
    for d in [args.run] if record_is_file else [args.record, args.run]:
        if d is not None and (why := _work_dir(d)):
            print(f"error: {why}", file=sys.stderr)
            return 2
    try:
        if args.write is not None:
            text = json.dumps(fingerprint(args.record), indent=1, sort_keys=True) + "\n"
            atomic.write_text(args.write, text)
            print(f"wrote {args.write}")
            return 0
        rec = _read_record(args.record) if record_is_file else fingerprint(args.record)
        record_dir = None if record_is_file else args.record
        done, diffs = compare(rec, fingerprint(args.run), record_dir, args.run)
    except (OSError, ValueError) as e:  # a damaged JSON or SIDs file
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(done))
    print("\n".join(diffs) if diffs else "all equal")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
