"""Label strings to continuation-form tokens: round trip and start-of-text segmentation checks."""

import pytest

from decoding.label_index import LabelIndex
from decoding.label_tokens import tokenize_labels
from tests.decoding.label_helpers import CATEGORIES, train_tokenizer


def test_trained_tokenizer_round_trips_and_reports_start_of_text_splits():
    pytest.importorskip("tokenizers")
    tok = train_tokenizer()
    out = tokenize_labels(CATEGORIES, tok)
    assert out.ok and not out.roundtrip_errors
    for label, ids in zip(CATEGORIES, out.token_ids, strict=True):
        assert tok.decode(ids) == " " + label
        assert ids == tok.encode(" " + label).ids
    # The corpus has "Beauty" only after a space: at the start of a text it splits elsewhere.
    differs = {label: (a, b) for _, label, a, b in out.start_differs}
    assert "Beauty" in differs, "a word seen only after a space should segment differently"
    start, cont = differs["Beauty"]
    assert "".join(start) == "".join(cont) == "Beauty" and start != cont
    # The index built from these tokens holds exactly the labels (the build-time proof).
    index = LabelIndex.build(out.token_ids, vocab_size=tok.get_vocab_size())
    index.verify(out.token_ids)


class _Lowercasing:
    """A tokenizer whose decode does not give the text back."""

    def encode(self, text):
        return [ord(c) for c in text.lower()]

    def decode(self, ids):
        return "".join(map(chr, ids))


def test_round_trip_failures_are_reported():
    out = tokenize_labels(["Beauty", "toys"], _Lowercasing())
    assert not out.ok
    assert out.roundtrip_errors == [(0, "Beauty", " beauty")]
    # The space is a token of its own here: the continuation form differs from the start.
    assert out.start_differs[1] == (1, "toys", list("toys"), ["", *"toys"])


@pytest.mark.parametrize(
    "labels, match",
    [(["a", ""], r"labels\[1\] is empty"), (["Toys", "toys"], "same tokens"), ("abc", "strings")],
)
def test_bad_labels(labels, match):
    with pytest.raises(ValueError, match=match):
        tokenize_labels(labels, _Lowercasing())
