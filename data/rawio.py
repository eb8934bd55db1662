"""Shared by the raw-file readers: text of plain or gzip files, the bad-line policy, and the step
from (user, item, time) rows in file order to an InteractionData."""

import gzip
import io
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from data.errors import ArgumentError, InputError, os_reason
from data.types import Catalog, Histories, InteractionData

# What a truncated or corrupt gzip stream, or bytes that are not UTF-8, raise while reading.
_READ_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError)


def raw_folder(raw_dir: str | os.PathLike) -> Path:
    """`raw_dir` as a Path, once it is known to be a folder: else FileNotFoundError where there is
    nothing, or an ArgumentError naming --raw-dir and what is there or what the system said."""
    raw_dir = Path(raw_dir)
    try:
        mode = raw_dir.stat().st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"--raw-dir {raw_dir}: no such directory") from None
    except OSError as e:  # a symlink loop, a name too long, a folder without permission
        raise ArgumentError(f"--raw-dir {raw_dir}: {os_reason(e)}") from None
    if not stat.S_ISDIR(mode):
        raise ArgumentError(f"--raw-dir {raw_dir}: not a directory (a file)")
    return raw_dir


def open_text(
    path: str | os.PathLike, *, newline: str | None = None, encoding: str = "utf-8"
) -> io.TextIOBase:
    """Opens a plain or gzip file (detected from its first bytes) for reading text."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: file is empty")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding=encoding, newline=newline)
    return open(path, encoding=encoding, newline=newline)


def _why(e: Exception) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text ({e.reason})"
    if isinstance(e, EOFError):
        return "the gzip stream ends early (truncated file?)"
    return f"corrupt gzip data ({e})"


def read_lines(
    path: str | os.PathLike, *, newline: str | None = None, encoding: str = "utf-8"
) -> Iterator[str]:
    """Yields the lines of open_text(path); an unreadable file is an InputError naming it.

    Text is decoded in chunks, so the line reported is the last one read whole: the damage lies
    after it, not necessarily on the next line.
    """
    path = Path(path)
    lineno = 0
    with open_text(path, newline=newline, encoding=encoding) as f:
        try:
            for line in f:
                lineno += 1
                yield line
        except _READ_ERRORS as e:
            raise InputError(f"{path}: cannot read past line {lineno}: {_why(e)}") from e


class BadLines:
    """Raises on the first bad line, or counts bad lines when skipping is on."""

    def __init__(self, path: Path, skip: bool):
        self.path, self.skip, self.count, self.first = path, skip, 0, None

    def __call__(self, lineno: int, reason: str) -> None:
        msg = f"{self.path}:{lineno}: {reason} (use --skip-bad-lines to skip such lines)"
        if not self.skip:
            raise InputError(msg)
        self.count += 1
        self.first = self.first or msg


def _index(keys) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes in order of first appearance, and the distinct keys in that order."""
    uniq, first, inv = np.unique(np.asarray(keys), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inv.ravel()], uniq[order]


def k_core(user: np.ndarray, item: np.ndarray, k: int = 5) -> tuple[np.ndarray, int]:
    """Mask of interactions kept by k-core filtering repeated until stable, and the round count."""
    keep = np.ones(len(user), bool)
    rounds = 0
    while True:
        uc = np.bincount(user[keep], minlength=user.max() + 1)
        ic = np.bincount(item[keep], minlength=item.max() + 1)
        new = keep & (uc[user] >= k) & (ic[item] >= k)
        rounds += 1
        if new.sum() == keep.sum():
            return new, rounds
        keep = new


# Given the catalog's item ids: their texts, leaf categories, and entries for the load report.
Describe = Callable[[list[str]], tuple[list[str], list[str], dict]]


def build_interactions(
    users: list[str],
    items: list[str],
    times: np.ndarray,
    *,
    name: str,
    source: Path,
    five_core: bool,
    report: dict,
    describe: Describe,
) -> InteractionData:
    """Rows in file order -> dedup (earliest kept), optional 5-core, stable time sort per user.

    `report` (the reader's counts so far) is extended in place and becomes the dataset's report;
    `source` names the file in the error raised when nothing is left.
    """
    u_all, user_ids = _index(users)
    i_all, item_ids = _index(items)
    line = np.arange(len(times))
    # Duplicate (user, item): keep the earliest row, file order breaking time ties.
    order = np.lexsort((line, times, i_all, u_all))
    pair = u_all[order].astype(np.int64) * (i_all.max() + 1) + i_all[order]
    first = np.ones(len(order), bool)
    first[1:] = pair[1:] != pair[:-1]
    keep = np.zeros(len(order), bool)
    keep[order[first]] = True
    report["duplicates_removed"] = int(len(order) - first.sum())
    if five_core:
        core, rounds = k_core(u_all[keep], i_all[keep])
        report["five_core_removed"] = int(len(core) - core.sum())
        report["five_core_rounds"] = rounds
        idx = np.flatnonzero(keep)
        keep[idx[~core]] = False
    if not keep.any():
        raise InputError(f"{source}: no interactions left after filtering")
    # Re-number users and items densely in order of first appearance among the kept rows.
    u, u_old = _index(u_all[keep])
    i, i_old = _index(i_all[keep])
    user_ids, item_ids = user_ids[u_old], item_ids[i_old]
    t, line = times[keep], line[keep]
    order = np.lexsort((line, t, u))
    counts = np.bincount(u, minlength=len(user_ids))
    histories = Histories(
        items=i[order].astype(np.int32),
        times=t[order],
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )
    first_time = np.full(len(item_ids), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_time, i, t)
    texts, leaves, described = describe(item_ids.tolist())
    report.update(described)
    report.update(users=len(user_ids), items=len(item_ids), interactions=int(len(i)))
    catalog = Catalog(asins=item_ids, texts=texts, leaf_categories=leaves, first_time=first_time)
    return InteractionData(
        name=name, user_ids=user_ids, catalog=catalog, histories=histories, report=report
    )
