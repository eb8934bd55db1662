"""The embedded synthetic dataset: a seeded generator writing raw files in the Amazon 2014 format.

Catalog: departments -> leaf categories -> series (subtopics); every level has its own vocabulary,
so an item's title tells its category and series. Items arrive over several years. A user has one
or two favourite categories, mostly stays in a series, often buys the series' next item, and
prefers recent arrivals: late (cold-start) items are reviewed soon after they appear, by users
whose earlier items share their category and series words.
"""

import dataclasses
import datetime
import gzip
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data import atomic
from data.config import SyntheticConfig

GENERATOR_VERSION = 1
NAME = "Synthetic"
REVIEWS_FILE = f"reviews_{NAME}_5.json.gz"
META_FILE = f"meta_{NAME}.json.gz"
_STAMP_FILE = "synthetic.json"
_DAY = 86400
_START = datetime.date(2009, 1, 1)
_END = datetime.date(2014, 7, 23)
_SERIES_PER_CATEGORY = 8
_CATEGORIES_PER_DEPARTMENT = 4
_NOUNS = ("kit", "set", "pack", "case", "tool", "guide", "box", "cream", "lamp", "ball", "bag")


@dataclasses.dataclass(frozen=True)
class _Catalog:
    asins: list[str]
    category: np.ndarray  # int [N], leaf category of each item
    series: np.ndarray  # int [N], global series id
    arrival: np.ndarray  # int [N], day index
    meta_lines: list[str]
    series_items: list[np.ndarray]  # per series: item ids sorted by arrival
    category_series: list[np.ndarray]  # per category: its series ids


def _words(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    """n distinct pronounceable pseudo-words not in `taken`."""
    cons, vows = "bcdfghklmnprstvz", "aeiou"
    out: list[str] = []
    while len(out) < n:
        syl = rng.integers(2, 4)
        w = "".join(
            cons[rng.integers(len(cons))] + vows[rng.integers(len(vows))] for _ in range(syl)
        )
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def _make_catalog(cfg: SyntheticConfig, rng: np.random.Generator) -> _Catalog:
    C, N = cfg.num_categories, cfg.num_items
    S = C * _SERIES_PER_CATEGORY
    taken: set[str] = set()
    n_dept = max(1, -(-C // _CATEGORIES_PER_DEPARTMENT))
    dept_names = [w.capitalize() for w in _words(rng, n_dept, taken)]
    cat_words = [_words(rng, 10, taken) for _ in range(C)]
    series_words = [_words(rng, 3, taken) for _ in range(S)]
    brands = [[w.capitalize() + "co" for w in _words(rng, 4, taken)] for _ in range(C)]
    cat_names = [f"{cat_words[c][0].capitalize()} {cat_words[c][1]}" for c in range(C)]

    # Series sizes vary (Dirichlet shares); every series has at least 4 items.
    share = rng.dirichlet(np.full(S, 4.0))
    series = np.concatenate([np.repeat(np.arange(S), 4), rng.choice(S, size=N - 4 * S, p=share)])
    category = series // _SERIES_PER_CATEGORY
    # Arrivals: a quarter of the catalog exists at the start, the rest arrives steadily.
    span = (_END - _START).days
    arrival = np.where(rng.random(N) < 0.25, 0, rng.integers(0, span - 120, N))
    order = np.lexsort((rng.random(N), arrival))  # item ids follow arrival order
    series, category, arrival = series[order], category[order], arrival[order]

    asins, meta_lines = [], []
    for i in range(N):
        c, s = int(category[i]), int(series[i])
        asin = f"S{i:09d}"
        words = list(rng.choice(series_words[s], size=2, replace=False))
        words += list(rng.choice(cat_words[c][2:], size=2, replace=False))
        rng.shuffle(words)
        brand = brands[c][rng.integers(4)]
        title = f"{brand} {' '.join(words)} {_NOUNS[rng.integers(len(_NOUNS))]}"
        d: dict = {"asin": asin, "title": title}
        if rng.random() < 0.5:
            d["price"] = round(float(rng.uniform(2, 80)), 2)
        d["categories"] = [[NAME, dept_names[c // _CATEGORIES_PER_DEPARTMENT], cat_names[c]]]
        if rng.random() < 0.8:
            d["brand"] = brand
        if rng.random() < 0.3:
            d["description"] = " ".join(rng.choice(series_words[s] + cat_words[c], size=5))
        asins.append(asin)
        meta_lines.append(repr(d))
    series_items = [np.flatnonzero(series == s) for s in range(S)]
    category_series = [
        np.arange(c * _SERIES_PER_CATEGORY, (c + 1) * _SERIES_PER_CATEGORY) for c in range(C)
    ]
    return _Catalog(asins, category, series, arrival, meta_lines, series_items, category_series)


def _simulate(cfg: SyntheticConfig, cat: _Catalog, rng: np.random.Generator, progress: bool):
    """Returns per-user lists of (item, day) in review order."""
    C = cfg.num_categories
    span = (_END - _START).days
    pop = rng.lognormal(0.0, 0.5, len(cat.asins))
    cat_pop = rng.dirichlet(np.full(C, 3.0))
    series_arrival = [cat.arrival[ids] for ids in cat.series_items]
    position = np.zeros(len(cat.asins), np.int64)
    for ids in cat.series_items:
        position[ids] = np.arange(len(ids))
    out = []
    for _ in tqdm(
        range(cfg.num_users),
        desc="synthetic users",
        leave=False,
        mininterval=1.0,
        disable=not progress,
    ):
        n = int(min(5 + rng.geometric(1 / 5), 40))
        favs = rng.choice(C, size=1 + int(rng.random() < 0.4), replace=False, p=cat_pop)
        gaps = np.where(rng.random(n) < 0.45, 0, rng.geometric(1 / 20, n))
        gaps[0] = 0
        # Activity grows over the years (density rising linearly), as on the real site.
        day = int(np.sqrt(rng.random()) * max(1, span - int(gaps.sum()))) + np.cumsum(gaps)
        u = rng.random((n, 6))
        seen: set[int] = set()
        hist: list[tuple[int, int]] = []
        c, s, last = int(favs[0]), -1, -1
        for k in range(n):
            t = int(day[k])
            if k == 0 or u[k, 0] < 0.15:
                c = int(favs[int(u[k, 1] * len(favs))]) if u[k, 2] > 0.05 else int(u[k, 1] * C)
                s = -1
            if s < 0 or u[k, 3] > 0.75:
                s = int(cat.category_series[c][int(u[k, 4] * _SERIES_PER_CATEGORY)])
            ids, arr = cat.series_items[s], series_arrival[s]
            avail = int(np.searchsorted(arr, t, side="right"))
            if avail == 0:
                s = -1
                continue
            item = -1
            if last >= 0 and cat.series[last] == s and u[k, 5] < 0.5:
                nxt = position[last] + 1
                if nxt < avail and int(ids[nxt]) not in seen:
                    item = int(ids[nxt])
            if item < 0:
                age = t - arr[:avail]
                w = pop[ids[:avail]] * (1.0 + 10.0 * np.exp(-age / 60.0))
                cdf = np.cumsum(w)
                item = int(ids[min(avail - 1, np.searchsorted(cdf, rng.random() * cdf[-1]))])
                if item in seen:
                    continue
            seen.add(item)
            hist.append((item, t))
            last = item
        out.append(hist)
    return out


def _review_time(day: int) -> tuple[int, str]:
    d = _START + datetime.timedelta(days=day)
    unix = int(datetime.datetime(d.year, d.month, d.day, tzinfo=datetime.UTC).timestamp())
    return unix, f"{d.month:02d} {d.day}, {d.year}"


def generate(
    cfg: SyntheticConfig, raw_dir: str | Path, *, progress: bool = True
) -> tuple[Path, Path]:
    """Writes the two raw files (reviews and meta, gzip) into raw_dir, deterministically."""
    if cfg.num_categories < 1 or cfg.num_users < 1:
        raise ValueError("synthetic: num_categories and num_users must be >= 1")
    if cfg.num_items < 5 * cfg.num_categories * _SERIES_PER_CATEGORY:
        raise ValueError(
            f"synthetic.num_items={cfg.num_items} is too small: need >= "
            f"{5 * cfg.num_categories * _SERIES_PER_CATEGORY} for {cfg.num_categories} categories"
        )
    rng = np.random.default_rng(cfg.seed)
    cat = _make_catalog(cfg, rng)
    histories = _simulate(cfg, cat, rng, progress)
    lines = []
    for u, hist in enumerate(histories):
        uid = f"SU{u:07d}"
        for item, day in hist:
            unix, text = _review_time(day)
            rec = {
                "reviewerID": uid,
                "asin": cat.asins[item],
                "unixReviewTime": unix,
                "reviewTime": text,
            }
            lines.append(json.dumps(rec))
    raw_dir = Path(raw_dir)
    reviews, meta = raw_dir / REVIEWS_FILE, raw_dir / META_FILE
    # mtime=0 keeps the bytes (and so the prepared dataset's content key) reproducible.
    with atomic.atomic_path(reviews) as tmp:
        tmp.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), 6, mtime=0))
    with atomic.atomic_path(meta) as tmp:
        tmp.write_bytes(gzip.compress(("\n".join(cat.meta_lines) + "\n").encode(), 6, mtime=0))
    return reviews, meta


def ensure_raw_files(
    cfg: SyntheticConfig, raw_dir: str | Path, *, progress: bool = True
) -> tuple[Path, Path]:
    """generate() unless raw_dir already holds the files for this exact config (progress: show
    the generator's bar)."""
    raw_dir = Path(raw_dir)
    stamp = {"generator_version": GENERATOR_VERSION, **dataclasses.asdict(cfg)}
    stamp_path = raw_dir / _STAMP_FILE
    files = (raw_dir / REVIEWS_FILE, raw_dir / META_FILE)
    if all(f.is_file() for f in files) and stamp_path.is_file():
        if json.loads(stamp_path.read_text()) == stamp:
            return files
    files = generate(cfg, raw_dir, progress=progress)
    atomic.write_json(stamp_path, stamp)
    return files
