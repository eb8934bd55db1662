"""Reader for your own data: a folder with interactions.csv and, optionally, items.csv.

interactions.csv (or .tsv, .csv.gz, .tsv.gz): one interaction per row, after a header row that
names the columns, in any order; other columns are ignored.
    user       user id (non-empty)
    item       item id (non-empty)
    timestamp  unix seconds, an integer
items.csv (optional; same variants): one row per item.
    item       item id, as in interactions.csv
    text       text for the item embedder (title, brand, description, ...)
    category   optional column: the item's leaf category
Files are UTF-8 (a byte-order mark is allowed), comma- (.csv) or tab-separated (.tsv), quoted as
Python's csv module reads them (Excel's dialect); spaces around values are stripped.

The dataset is built as from the Amazon files (rawio.build_interactions): a repeated (user, item)
keeps its earliest row, five_core keeps the 5-core, histories are sorted by timestamp with ties
kept in file order, and an item's first_time is its oldest interaction. Items with no text get
their id as text; items.csv rows for items not in the dataset are ignored and counted
(item_lines_ignored). A bad row is an InputError (a ValueError) naming file:line, or with
skip_bad_lines is skipped and counted.
"""

import csv
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from data import rawio
from data.errors import InputError
from data.types import InteractionData

_SUFFIXES = ("csv", "tsv", "csv.gz", "tsv.gz")
INTERACTIONS_FILES = tuple(f"interactions.{s}" for s in _SUFFIXES)
ITEMS_FILES = tuple(f"items.{s}" for s in _SUFFIXES)
_INT64 = np.iinfo(np.int64)


def _find_one(raw_dir: Path, names: tuple[str, ...]) -> Path | None:
    hits = [raw_dir / n for n in names if (raw_dir / n).is_file()]
    if len(hits) > 1:
        raise InputError(f"{raw_dir}: {' and '.join(p.name for p in hits)} are here; keep one")
    return hits[0] if hits else None


def find_raw_files(raw_dir: str | os.PathLike) -> tuple[Path, Path | None]:
    """Returns (interactions.csv, items.csv or None) inside raw_dir, whichever variants exist."""
    raw_dir = rawio.raw_folder(raw_dir)
    interactions = _find_one(raw_dir, INTERACTIONS_FILES)
    if interactions is None:
        raise FileNotFoundError(f"{raw_dir}: expected interactions.csv (or .tsv, .csv.gz, .tsv.gz)")
    return interactions, _find_one(raw_dir, ITEMS_FILES)


def _rows(
    path: Path, required: tuple[str, ...], optional: tuple[str, ...], bad: rawio.BadLines
) -> Iterator[tuple[int, list[str]]]:
    """Yields (line, values of the required then optional columns) per non-blank row.

    An optional column missing from the header reads as "" in every row.
    """
    delimiter = "\t" if path.name.endswith((".tsv", ".tsv.gz")) else ","
    # newline="" lets csv see quoted line breaks; utf-8-sig drops a byte-order mark.
    lines = rawio.read_lines(path, newline="", encoding="utf-8-sig")
    reader = csv.reader(lines, delimiter=delimiter)
    try:
        header = [name.strip() for name in next(reader, [])]
    except csv.Error as e:
        raise InputError(f"{path}:1: malformed header row ({e})") from e
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(
            f"{path}: missing column {', '.join(missing)} in the header row "
            f"(found: {', '.join(header) or 'nothing'})"
        )
    twice = sorted({c for c in (*required, *optional) if header.count(c) > 1})
    if twice:
        raise InputError(f"{path}: column {', '.join(twice)} appears twice in the header row")
    cols = [header.index(c) if c in header else None for c in (*required, *optional)]
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            bad(reader.line_num, f"malformed CSV ({e})")
            continue
        if not any(field.strip() for field in row):
            continue
        if len(row) != len(header):
            bad(reader.line_num, f"expected {len(header)} fields as in the header, got {len(row)}")
            continue
        yield reader.line_num, [row[c].strip() if c is not None else "" for c in cols]


def read_interactions(path: str | os.PathLike, *, skip_bad_lines: bool = False):
    """Returns (users, items, times, report) in file order, one entry per valid row."""
    path = Path(path)
    bad = rawio.BadLines(path, skip_bad_lines)
    users, items, times = [], [], []
    for lineno, (u, i, t) in _rows(path, ("user", "item", "timestamp"), (), bad):
        if not (u and i):
            bad(lineno, "user and item must be non-empty")
            continue
        if "\x00" in u or "\x00" in i:
            bad(lineno, "user and item must not contain a NUL byte")
            continue
        try:
            t = int(t)
        except ValueError:
            bad(lineno, f"timestamp must be an integer (unix seconds), got {t!r}")
            continue
        if not _INT64.min <= t <= _INT64.max:
            bad(lineno, f"timestamp {t} is out of the int64 range")
            continue
        users.append(u)
        items.append(i)
        times.append(t)
    if not users:
        raise InputError(f"{path}: no valid interaction rows")
    report = {"interaction_lines": len(users) + bad.count, "bad_interaction_lines": bad.count}
    if bad.first:
        report["first_bad_interaction_line"] = bad.first
    return users, items, np.asarray(times, np.int64), report


def read_items(path: str | os.PathLike, wanted: set[str], *, skip_bad_lines: bool = False):
    """Returns ({item: (text, category)} for the wanted items, report)."""
    path = Path(path)
    bad = rawio.BadLines(path, skip_bad_lines)
    found: dict[str, tuple[str, str]] = {}
    first_line: dict[str, int] = {}
    ignored = 0
    for lineno, (item, text, category) in _rows(path, ("item", "text"), ("category",), bad):
        if not item:
            bad(lineno, "item must be non-empty")
            continue
        if item in first_line:
            bad(lineno, f"item {item!r} already has a row (line {first_line[item]})")
            continue
        first_line[item] = lineno
        if item not in wanted:
            ignored += 1
            continue
        found[item] = (text, category)
    report = {"item_lines": len(first_line) + bad.count, "bad_item_lines": bad.count}
    if bad.first:
        report["first_bad_item_line"] = bad.first
    report["item_lines_ignored"] = ignored
    return found, report


def read_raw_dir(
    raw_dir: str | os.PathLike, *, five_core: bool = True, skip_bad_lines: bool = False
) -> InteractionData:
    """Reads find_raw_files(raw_dir); the dataset's name is the folder's name."""
    interactions, items_path = find_raw_files(raw_dir)
    users, items, times, report = read_interactions(interactions, skip_bad_lines=skip_bad_lines)

    def describe(item_ids: list[str]) -> tuple[list[str], list[str], dict]:
        found, described = {}, {}
        if items_path is not None:
            found, described = read_items(items_path, set(item_ids), skip_bad_lines=skip_bad_lines)
        pairs = [found.get(i, ("", "")) for i in item_ids]
        described["items_without_text"] = sum(not text for text, _ in pairs)
        texts = [text or i for i, (text, _) in zip(item_ids, pairs, strict=True)]
        return texts, [category for _, category in pairs], described

    return rawio.build_interactions(
        users,
        items,
        times,
        name=Path(raw_dir).resolve().name,
        source=interactions,
        five_core=five_core,
        report=report,
        describe=describe,
    )
