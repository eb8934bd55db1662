"""Label subsets that leave a row nothing to decode are refused where the subset enters: a
`LabelConstraint.restrict` (bool or packed) and a `LabelDecoder` call, naming the row."""

import jax.numpy as jnp
import numpy as np
import pytest

from decoding.label_decoder import make_label_decoder
from decoding.label_index import LabelIndex, subset_words
from decoding.labels import LabelConstraint

V, EOS = 8, 0
LABELS = [[1], [2], [3], [4, 5], [4, 6, 7]]


def _constraint() -> LabelConstraint:
    return LabelConstraint.build(LabelIndex.build(LABELS, vocab_size=V), eos_id=EOS)


def _allowed(empty_rows=(1,)) -> np.ndarray:
    allowed = np.ones((3, len(LABELS)), bool)
    allowed[list(empty_rows)] = False
    return allowed


def test_restrict_refuses_an_empty_subset_row():
    c = _constraint()
    with pytest.raises(ValueError, match=r"allowed: row 1 allows no label"):
        c.restrict(_allowed())
    packed = subset_words(c.index, _allowed((1, 2)))
    with pytest.raises(ValueError, match=r"allowed: row 1 allows no label \(and 1 more rows\)"):
        c.restrict(packed)
    with pytest.raises(ValueError, match=r"allowed: row 2 allows no label"):
        c.restrict(jnp.asarray(subset_words(c.index, _allowed((2,)))))


def test_restrict_accepts_a_label_per_row():
    c = _constraint().restrict(_allowed(()))
    assert np.asarray(c.subset.total).tolist() == [5, 5, 5]


def _prefill(params, inputs):
    return params[inputs, 0], {"row": inputs}


def _step(params, tokens, step, cache):
    return params[cache["row"], step] + 0.0 * tokens[..., None], cache


def test_label_decoder_refuses_an_empty_subset_row_before_running():
    dec = make_label_decoder(_prefill, _step, _constraint(), mode="greedy")
    params = jnp.zeros((3, 8, V))
    with pytest.raises(ValueError, match=r"allowed: row 1 allows no label"):
        dec(params, jnp.arange(3), allowed=_allowed())
    assert dec.program._cache_size() == 0, "refused before compiling"
