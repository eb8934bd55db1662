"""Fixtures of the data tests: raw folders built from the hand-written files in fixtures/."""

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


@pytest.fixture
def tiny_raw(tmp_path) -> Path:
    return make_raw_dir(tmp_path, "Tiny")
