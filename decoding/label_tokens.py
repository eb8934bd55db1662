"""Label strings to token ids, with the checks a label index needs from its tokenizer.

A model writes a label after a prompt, i.e. in its continuation form (" Skin Care", with the
leading space most BPE tokenizers fold into the first token), so the index is built from those
tokens. `tokenize_labels` checks that each label's tokens decode back to that text, and reports
labels whose segmentation differs at the start of a text ("Skin Care" split elsewhere than
" Skin Care"): a model prompted without the space would emit tokens the index does not hold.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class LabelTokens:
    """Continuation-form token ids per label, and what the checks found."""

    token_ids: list[list[int]]
    # (label index, label, decoded text): the tokens do not decode back to prefix + label
    roundtrip_errors: list[tuple[int, str, str]]
    # (label index, label, start-of-text pieces, continuation pieces): different segmentations
    start_differs: list[tuple[int, str, list[str], list[str]]]

    @property
    def ok(self) -> bool:
        """Every label round-trips (segmentation differences are reported, not errors)."""
        return not self.roundtrip_errors


def tokenize_labels(labels: Sequence[str], tokenizer: Any, *, prefix: str = " ") -> LabelTokens:
    """Token ids of `prefix + label` for each label, checked.

    `tokenizer` has `encode(text)` (a list of ids, or an object with `.ids` as `tokenizers`
    returns) and `decode(ids)`; special tokens are not added when the tokenizer takes
    `add_special_tokens`. Empty labels and duplicate tokenizations are a ValueError (the index
    would refuse them anyway, with less to go on).
    """
    if isinstance(labels, str) or not all(isinstance(s, str) for s in labels):
        raise ValueError("labels: expected a sequence of strings")
    ids, errors, differs, seen = [], [], [], {}
    for i, label in enumerate(labels):
        if not label:
            raise ValueError(f"labels[{i}] is empty")
        cont = _encode(tokenizer, prefix + label)
        if not cont:
            raise ValueError(f"labels[{i}] = {label!r} encodes to no tokens")
        if tuple(cont) in seen:
            raise ValueError(
                f"labels[{seen[tuple(cont)]}] and labels[{i}] = {label!r} encode to the same tokens"
            )
        seen[tuple(cont)] = i
        ids.append(cont)
        text = tokenizer.decode(cont)
        if text != prefix + label:
            errors.append((i, label, text))
        start = _encode(tokenizer, label)
        a, b = _pieces(tokenizer, start, ""), _pieces(tokenizer, cont, prefix)
        if a != b:
            differs.append((i, label, a, b))
    return LabelTokens(ids, errors, differs)


def _encode(tokenizer: Any, text: str) -> list[int]:
    try:
        out = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:
        out = tokenizer.encode(text)
    return list(getattr(out, "ids", out))


def _pieces(tokenizer: Any, ids: list[int], prefix: str) -> list[str]:
    """The text each token adds (the first one without `prefix`), from decoded prefixes: robust
    to tokens that are partial UTF-8 characters on their own."""
    cuts = [len(tokenizer.decode(ids[: k + 1])) for k in range(len(ids))]
    text = tokenizer.decode(ids)
    bounds = [len(prefix), *cuts]
    return [text[max(a, len(prefix)) : b] for a, b in zip(bounds, bounds[1:], strict=False)]
