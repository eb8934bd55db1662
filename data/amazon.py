"""Reader for Amazon Reviews 2014 files: reviews (strict JSON lines), metadata (Python literals)."""

import ast
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from data import rawio
from data.errors import ArgumentError, InputError
from data.types import InteractionData

_INT64 = np.iinfo(np.int64)

_ASIN_RE = re.compile(r"""['"]asin['"]\s*:\s*['"]([^'"]*)['"]""")
TEXT_FIELDS = ("title", "brand", "categories", "description")


def _categories(raw_dir: Path) -> list[str]:
    """The <Cat> of every reviews_<Cat>_5.json[.gz] in raw_dir."""
    hits = raw_dir.glob("reviews_*_5.json*")
    names = (p.name.split(".json")[0] for p in hits if p.name.endswith((".json", ".json.gz")))
    return sorted({n.removeprefix("reviews_").removesuffix("_5") for n in names})


def find_raw_files(raw_dir: str | os.PathLike, category: str = "") -> tuple[Path, Path]:
    """Returns (reviews_<Cat>_5.json[.gz], meta_<Cat>.json[.gz]) inside raw_dir.

    <Cat> is `category`, or when that is "" the only category the folder holds.
    """
    raw_dir = rawio.raw_folder(raw_dir)
    if category:
        return _find_category(raw_dir, category)
    found = []
    for pattern in ("reviews_*_5.json*", "meta_*.json*"):
        hits = sorted(p for p in raw_dir.glob(pattern) if p.name.endswith((".json", ".json.gz")))
        if len(hits) != 1:
            what = "no" if not hits else f"{len(hits)}"
            hint = "; set data.category to pick one" if len(hits) > 1 else ""
            raise FileNotFoundError(f"{raw_dir}: expected one {pattern} file, found {what}{hint}")
        found.append(hits[0])
    return found[0], found[1]


def _find_category(raw_dir: Path, category: str) -> tuple[Path, Path]:
    if "/" in category or "\\" in category or category.startswith("."):
        raise ArgumentError(f"data.category={category!r}: expected a name like Beauty")
    names = (f"reviews_{category}_5.json", f"meta_{category}.json")
    found, missing = [], []
    for name in names:
        hits = [raw_dir / n for n in (name, name + ".gz") if (raw_dir / n).is_file()]
        if len(hits) > 1:
            raise InputError(f"{raw_dir}: both {name} and {name}.gz are here; keep one")
        if hits:
            found.append(hits[0])
        else:
            missing.append(f"{name}[.gz]")
    if missing:
        here = ", ".join(_categories(raw_dir)) or "none"
        raise FileNotFoundError(
            f"{raw_dir}: category {category!r} needs {names[0]}[.gz] and {names[1]}[.gz]; "
            f"missing {' and '.join(missing)} (categories here: {here})"
        )
    return found[0], found[1]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    for lineno, line in enumerate(rawio.read_lines(path), start=1):
        line = line.strip()
        if line:
            yield lineno, line


def read_reviews(path: str | os.PathLike, *, skip_bad_lines: bool = False):
    """Returns (users, asins, times, report) in file order, one entry per valid review line."""
    path = Path(path)
    bad = rawio.BadLines(path, skip_bad_lines)
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
        if "\x00" in u or "\x00" in a:
            bad(lineno, "reviewerID and asin must not contain a NUL byte")
            continue
        # JSON's Infinity and NaN parse as floats; int() of them raises, of 1e300 overflows int64.
        if (
            isinstance(t, bool)
            or not isinstance(t, int | float)
            or not math.isfinite(t)
            or t != int(t)
        ):
            bad(lineno, f"unixReviewTime must be an integer, got {t!r}")
            continue
        if not _INT64.min <= t <= _INT64.max:
            bad(lineno, f"unixReviewTime {t!r} is out of the int64 range")
            continue
        users.append(u)
        asins.append(a)
        times.append(int(t))
    if not users:
        raise InputError(f"{path}: no valid review lines")
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


def meta_record(line: str) -> dict:
    """One metadata line as a dict with a string 'asin'; ValueError saying what is wrong."""
    try:
        d = _parse_meta_line(line)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise ValueError(f"malformed metadata ({type(e).__name__})") from None
    if not isinstance(d, dict) or not isinstance(d.get("asin"), str):
        raise ValueError("expected a dict with a string 'asin'")
    return d


def read_meta(path: str | os.PathLike, wanted: set[str], *, skip_bad_lines: bool = False):
    """Returns ({asin: metadata dict} for the wanted asins, report); first line per asin wins."""
    path = Path(path)
    bad = rawio.BadLines(path, skip_bad_lines)
    meta: dict[str, dict] = {}
    lines = 0
    for lineno, line in _lines(path):
        lines += 1
        m = _ASIN_RE.search(line)
        # Cheap pre-filter: full metadata files hold far more items than the 5-core reviews.
        if m and (m.group(1) not in wanted or m.group(1) in meta):
            continue
        try:
            d = meta_record(line)
        except ValueError as e:
            bad(lineno, str(e))
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

    def describe(item_asins: list[str]) -> tuple[list[str], list[str], dict]:
        meta, meta_report = read_meta(meta_path, set(item_asins), skip_bad_lines=skip_bad_lines)
        texts = [item_text(a, meta.get(a)) for a in item_asins]
        leaves = [leaf_category(meta.get(a)) for a in item_asins]
        meta_report["items_without_meta"] = int(sum(a not in meta for a in item_asins))
        return texts, leaves, meta_report

    return rawio.build_interactions(
        users,
        asins,
        times,
        name=name,
        source=Path(reviews_path),
        five_core=five_core,
        report=report,
        describe=describe,
    )


def read_raw_dir(
    raw_dir: str | os.PathLike,
    *,
    category: str = "",
    five_core: bool = True,
    skip_bad_lines: bool = False,
) -> InteractionData:
    """read_amazon on find_raw_files(raw_dir, category); the name is <Cat> of reviews_<Cat>_5."""
    reviews, meta = find_raw_files(raw_dir, category)
    name = reviews.name.split(".json")[0].removeprefix("reviews_").removesuffix("_5")
    return read_amazon(reviews, meta, name=name, five_core=five_core, skip_bad_lines=skip_bad_lines)
