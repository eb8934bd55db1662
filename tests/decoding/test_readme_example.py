"""The README's example of decoding with your own model, run as written there: it compiles, and
returns only allowed SIDs, best first."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_example() -> dict:
    """Runs the python block of README's "Decoding with your own model" (our own file)."""
    text = README.read_text()
    section = text.split("## Decoding with your own model", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, f"{README}:decoding example", "exec"), scope)  # noqa: S102
    return scope


def test_readme_example_returns_allowed_sids(capsys):
    scope = _readme_example()
    sids, result = scope["sids"], scope["result"]
    allowed = set(map(tuple, np.asarray(sids).tolist()))
    tokens, valid = np.asarray(result.tokens), np.asarray(result.valid)
    assert tokens.shape == (2, 4, 3)
    assert valid.all(), "100 allowed SIDs leave enough for 4 beams"
    beams = [tuple(t) for t in tokens.reshape(-1, 3).tolist()]
    assert all(b in allowed for b in beams), "a returned beam is not an allowed SID"
    scores = np.asarray(result.scores)
    assert np.isfinite(scores).all() and (np.diff(scores, axis=1) <= 0).all()
