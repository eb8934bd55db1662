"""The README's two label-decoding examples, run as written there: only labels come out."""

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks() -> list[str]:
    section = README.read_text().split("## Decoding over label sets", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _run(code: str, name: str) -> dict:
    scope: dict = {}
    exec(compile(code, f"{README}:{name}", "exec"), scope)  # noqa: S102
    return scope


def test_readme_jax_example_returns_labels(capsys):
    scope = _run(_blocks()[0], "label example (JAX)")
    res, labels = scope["result"], scope["labels"]
    valid, ids = np.asarray(res.valid), np.asarray(res.labels)
    assert ids.shape == (2, 3, 2) and valid.all()
    for b, k in zip(*np.nonzero(valid), strict=True):
        got = [i for i in ids[b, k].tolist() if i >= 0]
        assert got and len(set(got)) == len(got) and max(got) < len(labels)
        assert b == 0 or 0 not in got, "row 1 may not say 'New York'"


def test_readme_transformers_example_returns_labels(capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    scope = _run(_blocks()[1], "label example (transformers)")
    tok, out, prompt = scope["tok"], scope["out"], scope["prompt"]
    text = tok.decode(out[0, prompt.shape[1] :].tolist())
    body = text.split("<eos>")[0] if "<eos>" in text else text
    parts = [p.strip() for p in body.split(";")]
    assert all(p in scope["labels"] for p in parts), f"not labels: {text!r}"
    assert len(set(parts)) == len(parts) <= 2
