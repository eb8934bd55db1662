"""Reader for Amazon Reviews 2014 files: reviews (strict JSON lines), metadata (Python literals)."""

import ast
import gzip
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from data.types import Catalog, Histories, InteractionData

_ASIN_RE = re.compile(r"""['"]asin['"]\s*:\s*['"]([^'"]*)['"]""")
TEXT_FIELDS = ("title", "brand", "categories", "description")


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Opens a plain or gzip file (detected from its first bytes) for reading text."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: file is empty")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def find_raw_files(raw_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Returns (reviews_<Cat>_5.json[.gz], meta_<Cat>.json[.gz]) inside raw_dir."""
    raw_dir = Path(raw_dir)
    if not raw_dir.is_dir():
        raise FileNotFoundError(f"--raw-dir {raw_dir}: no such directory")
    found = []
    for pattern in ("reviews_*_5.json*", "meta_*.json*"):
        hits = sorted(p for p in raw_dir.glob(pattern) if p.name.endswith((".json", ".json.gz")))
        if len(hits) != 1:
            what = "no" if not hits else f"{len(hits)}"
            raise FileNotFoundError(f"{raw_dir}: expected one {pattern} file, found {what}")
        found.append(hits[0])
    return found[0], found[1]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            line = line.strip()
            if line:
                yield lineno, line


class _BadLines:
    """Raises on the first bad line, or counts bad lines when skipping is on."""

    def __init__(self, path: Path, skip: bool):
        self.path, self.skip, self.count, self.first = path, skip, 0, None

    def __call__(self, lineno: int, reason: str) -> None:
        msg = f"{self.path}:{lineno}: {reason} (use --skip-bad-lines to skip such lines)"
        if not self.skip:
            raise ValueError(msg)
        self.count += 1
        self.first = self.first or msg


def read_reviews(path: str | os.PathLike, *, skip_bad_lines: bool = False):
    """Returns (users, asins, times, report) in file order, one entry per valid review line."""
    path = Path(path)
    bad = _BadLines(path, skip_bad_lines)
    users, asins, times = [], [], []
    for lineno, line in _lines(path):
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            bad(lineno, f"malformed JSON ({e.msg})")
            continue
        if not isinstance(r, dict):
            bad(lineno, "expected a JSON object")
            continue
        missing = [k for k in ("reviewerID", "asin", "unixReviewTime") if k not in r]
        if missing:
            bad(lineno, f"missing field(s) {', '.join(missing)}")
            continue
        u, a, t = r["reviewerID"], r["asin"], r["unixReviewTime"]
        if not (isinstance(u, str) and isinstance(a, str) and u and a):
            bad(lineno, "reviewerID and asin must be non-empty strings")
            continue
        if isinstance(t, bool) or not isinstance(t, int | float) or t != int(t):
            bad(lineno, f"unixReviewTime must be an integer, got {t!r}")
            continue
        users.append(u)
        asins.append(a)
        times.append(int(t))
    if not users:
        raise ValueError(f"{path}: no valid review lines")
    report = {"review_lines": len(users) + bad.count, "bad_review_lines": bad.count}
    if bad.first:
        report["first_bad_review_line"] = bad.first
    return users, asins, np.asarray(times, np.int64), report


def _parse_meta_line(line: str):
    """Strict JSON when it parses (fast), else a Python literal as in the original release."""
    if line.startswith('{"'):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            pass
    return ast.literal_eval(line)


def read_meta(path: str | os.PathLike, wanted: set[str], *, skip_bad_lines: bool = False):
    """Returns ({asin: metadata dict} for the wanted asins, report); first line per asin wins."""
    path = Path(path)
    bad = _BadLines(path, skip_bad_lines)
    meta: dict[str, dict] = {}
    lines = 0
    for lineno, line in _lines(path):
        lines += 1
        m = _ASIN_RE.search(line)
        # Cheap pre-filter: full metadata files hold far more items than the 5-core reviews.
        if m and (m.group(1) not in wanted or m.group(1) in meta):
            continue
        try:
            d = _parse_meta_line(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
            bad(lineno, f"malformed metadata ({type(e).__name__})")
            continue
        if not isinstance(d, dict) or not isinstance(d.get("asin"), str):
            bad(lineno, "expected a dict with a string 'asin'")
            continue
        if d["asin"] in wanted and d["asin"] not in meta:
            meta[d["asin"]] = d
    report = {"meta_lines": lines, "bad_meta_lines": bad.count}
    if bad.first:
        report["first_bad_meta_line"] = bad.first
    return meta, report


def _category_paths(d: dict) -> list[list[str]]:
    cats = d.get("categories")
    if not isinstance(cats, list | tuple):
        return []
    return [[str(c) for c in p] for p in cats if isinstance(p, list | tuple) and p]


def item_text(asin: str, d: dict | None) -> str:
    """Text for the embedder from the fields present (title, brand, categories, description)."""
    if not d:
        return asin
    parts = []
    for key in ("title", "brand"):
        if isinstance(d.get(key), str) and d[key].strip():
            parts.append(d[key].strip())
    paths = _category_paths(d)
    seen = dict.fromkeys(c for p in paths for c in p)
    if seen:
        parts.append(" > ".join(seen))
    if isinstance(d.get("description"), str) and d["description"].strip():
        parts.append(d["description"].strip())
    return ". ".join(parts) if parts else asin


def leaf_category(d: dict | None) -> str:
    """Last element of the first category path; "" when there is none."""
    paths = _category_paths(d or {})
    return paths[0][-1] if paths else ""


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


def read_amazon(
    reviews_path: str | os.PathLike,
    meta_path: str | os.PathLike,
    *,
    name: str = "",
    five_core: bool = True,
    skip_bad_lines: bool = False,
) -> InteractionData:
    """Reads one category: dedup (earliest kept), optional 5-core, stable time sort per user."""
    users, asins, times, report = read_reviews(reviews_path, skip_bad_lines=skip_bad_lines)
    u_all, user_ids = _index(users)
    i_all, item_asins = _index(asins)
    line = np.arange(len(times))
    # Duplicate (user, item): keep the earliest review, file order breaking time ties.
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
        raise ValueError(f"{reviews_path}: no interactions left after filtering")
    # Re-number users and items densely in order of first appearance among the kept reviews.
    u, u_old = _index(u_all[keep])
    i, i_old = _index(i_all[keep])
    user_ids, item_asins = user_ids[u_old], item_asins[i_old]
    t, line = times[keep], line[keep]
    order = np.lexsort((line, t, u))
    counts = np.bincount(u, minlength=len(user_ids))
    histories = Histories(
        items=i[order].astype(np.int32),
        times=t[order],
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )
    first_time = np.full(len(item_asins), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_time, i, t)
    meta, meta_report = read_meta(
        meta_path, set(item_asins.tolist()), skip_bad_lines=skip_bad_lines
    )
    report.update(meta_report)
    texts = [item_text(a, meta.get(a)) for a in item_asins.tolist()]
    leaves = [leaf_category(meta.get(a)) for a in item_asins.tolist()]
    report["items_without_meta"] = int(sum(a not in meta for a in item_asins.tolist()))
    report.update(users=len(user_ids), items=len(item_asins), interactions=int(len(i)))
    catalog = Catalog(asins=item_asins, texts=texts, leaf_categories=leaves, first_time=first_time)
    return InteractionData(
        name=name, user_ids=user_ids, catalog=catalog, histories=histories, report=report
    )


def read_raw_dir(
    raw_dir: str | os.PathLike, *, five_core: bool = True, skip_bad_lines: bool = False
) -> InteractionData:
    """read_amazon on the two files found in raw_dir; the name is the <Cat> of reviews_<Cat>_5."""
    reviews, meta = find_raw_files(raw_dir)
    name = reviews.name.split(".json")[0].removeprefix("reviews_").removesuffix("_5")
    return read_amazon(reviews, meta, name=name, five_core=five_core, skip_bad_lines=skip_bad_lines)
