"""Fixtures of the data tests: raw folders from the hand-written files in fixtures/, CSV texts."""

import gzip
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def make_raw_dir(root: Path, name: str, *, gz: bool = False) -> Path:
    """A folder with reviews_<name>_5.json[.gz] and meta_<name>.json[.gz] from fixtures/."""
    out = root / f"raw_{name}_{'gz' if gz else 'plain'}"
    out.mkdir(parents=True, exist_ok=True)
    # Stored as NAME.reviews.txt / NAME.meta.txt so that nothing in git looks like a raw data file.
    for kind, target in (("reviews", f"reviews_{name}_5.json"), ("meta", f"meta_{name}.json")):
        src = FIXTURES / f"{name}.{kind}.txt"
        if gz:
            (out / (target + ".gz")).write_bytes(gzip.compress(src.read_bytes(), mtime=0))
        else:
            shutil.copy(src, out / target)
    return out


def write_truncated_gzip(path: Path, text: str, *, keep: float = 0.0) -> Path:
    """A valid gzip of `text` cut short: to `keep` of its bytes, or (keep=0) by its last 10."""
    data = gzip.compress(text.encode(), mtime=0)
    path.write_bytes(data[: int(len(data) * keep) or -10])
    return path


def make_two_category_dir(root: Path) -> Path:
    """One folder holding the Tiny files (gzip) and the Bad files (plain)."""
    both = root / "both"
    both.mkdir()
    for name, gz in (("Tiny", True), ("Bad", False)):
        for f in make_raw_dir(root, name, gz=gz).iterdir():
            f.rename(both / f.name)
    return both


# The Tiny Amazon fixture as a CSV: a time tie for u1 (i1, i3 at t=100), a repeated (u2, i2).
INTERACTIONS = """user,item,timestamp,rating
u1,i1,100,5
u1,i2,50,4
u1,i3,100,3
u2,i2,200,1
u2,i1,300,1
u2,i2,150,1
u3,i4,400,1
u3,i1,400,1
"""
ITEMS = """item,text,category
i1,"Alpha, ""quoted"" lipstick",Lips
i2,Beta cream,
i9,never interacted,Toys
"""


def make_interactions_dir(root: Path, files: dict[str, str], name: str = "shop") -> Path:
    """A folder `name` holding the given files (gzipped where the name ends in .gz)."""
    out = root / name
    out.mkdir()
    for fname, text in files.items():
        data = text.encode()
        (out / fname).write_bytes(gzip.compress(data, mtime=0) if fname.endswith(".gz") else data)
    return out


@pytest.fixture
def tiny_raw(tmp_path) -> Path:
    return make_raw_dir(tmp_path, "Tiny")
