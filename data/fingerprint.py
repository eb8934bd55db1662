"""Input fingerprints: one stable hash of configs, upstream keys, arrays and files, so that every
stage can tell whether an artifact was made from the inputs it has now."""

import hashlib
import json
from pathlib import Path

import numpy as np

# Enters every fingerprint. Raise it when a change of the code makes artifacts of an earlier
# version wrong to reuse: every stage then retrains once (CHANGELOG.md says which versions).
FINGERPRINT_VERSION = 3


def fingerprint(*parts, arrays=(), length: int = 16) -> str:
    """sha256 of JSON-able parts (configs as dicts, upstream keys) and of numpy arrays' bytes,
    dtypes and shapes; the first `length` hex digits."""
    versioned = [FINGERPRINT_VERSION, *parts]
    h = hashlib.sha256(json.dumps(versioned, sort_keys=True, default=str).encode())
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:length]


def file_digest(path: Path, length: int = 16) -> str:
    """Content hash of a file, or of every file under a directory (sorted by relative path)."""
    path = Path(path)
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(path.parent if path.is_file() else path)).encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:length]
