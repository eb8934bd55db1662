"""Hypothesis: under random label sets, subsets and logits, every finished output of every mode
is a label, or separator-joined distinct labels of the row's subset; beam search is exact."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoding.label_decoder import make_label_decoder
from decoding.label_index import LabelCapacity, LabelIndex
from decoding.labels import LabelConstraint

V, EOS, SEP = 12, 0, (10, 11)  # label tokens are 1..9
B, T = 3, 40
# narrow=2: steps switch between the narrow and the wide children slots (`by_width`).
CAP = LabelCapacity(nodes=64, edges=64, labels=32, width=16, narrow=2)
MODES = [("greedy", 1), ("sample", 3), ("beam", 4)]


def _prefill(params, inputs):
    return params["table"][:, 0], {"row": inputs}


def _step(params, tokens, step, cache):
    """Logits depend on the row, the step and the previous token."""
    return params["table"][cache["row"], step] + params["prev"][tokens], cache


@functools.cache
def _decoder(mode: str, K: int, multi: bool, top: bool):
    c = _spec([[1]], multi)
    kw = {"top_k": 3, "top_p": 0.8, "temperature": 0.7} if top else {}
    return make_label_decoder(_prefill, _step, c, mode=mode, beam_size=K, **kw)


def _spec(labels, multi: bool) -> LabelConstraint:
    idx = LabelIndex.build(labels, vocab_size=V, capacity=CAP)
    if multi:
        return LabelConstraint.build(idx, eos_id=EOS, separator=SEP, max_labels=3, max_steps=T)
    return LabelConstraint.build(idx, eos_id=EOS, max_steps=T)


@st.composite
def problems(draw):
    token_lists = st.lists(st.integers(1, 9), min_size=1, max_size=4)
    labels = draw(st.lists(token_lists, min_size=1, max_size=8, unique_by=tuple))
    # Prefixes of drawn labels, so that labels ending inside others are common.
    extra = [lab[:k] for lab in labels for k in range(1, len(lab))]
    labels += draw(st.lists(st.sampled_from(extra), max_size=3)) if extra else []
    labels = [list(t) for t in dict.fromkeys(map(tuple, labels))]
    allowed = np.array(
        draw(
            st.lists(
                st.lists(st.booleans(), min_size=len(labels), max_size=len(labels)),
                min_size=B,
                max_size=B,
            )
        )
    )
    allowed[0] = True  # one row with the whole set
    # Every row allows a label (an empty subset is refused: tests/decoding/test_label_refusals.py).
    allowed[
        np.arange(B), draw(st.lists(st.integers(0, len(labels) - 1), min_size=B, max_size=B))
    ] = True
    return labels, allowed, draw(st.integers(0, 2**16))


def _params(seed: int):
    rng = np.random.default_rng(seed)
    # Large logits: the model often prefers tokens the grammar forbids.
    return {
        "table": jnp.asarray(rng.normal(size=(B, T, V)) * 4, jnp.float32),
        "prev": jnp.asarray(rng.normal(size=(V, V)), jnp.float32),
    }


def _parse(tokens: list[int]) -> list[tuple[int, ...]] | None:
    """Labels of a finished output `l SEP l ... EOS`; None if it is not of that form."""
    if not tokens or tokens[-1] != EOS or EOS in tokens[:-1]:
        return None
    parts, cur, body, i = [], [], tokens[:-1], 0
    while i < len(body):
        if tuple(body[i : i + len(SEP)]) == SEP:
            parts.append(tuple(cur))
            cur, i = [], i + len(SEP)
        else:
            cur.append(body[i])
            i += 1
    parts.append(tuple(cur))
    return parts


def _check(res, labels, allowed, multi: bool, mode: str):
    tokens, lengths = np.asarray(res.tokens), np.asarray(res.lengths)
    valid, ids = np.asarray(res.valid), np.asarray(res.labels)
    index_of = {tuple(lab): i for i, lab in enumerate(labels)}
    for b, k in itertools.product(range(tokens.shape[0]), range(tokens.shape[1])):
        if not valid[b, k]:
            assert mode == "beam" and k > 0, f"{mode}: row {b} did not finish"
            continue
        parts = _parse(tokens[b, k, : lengths[b, k]].tolist())
        assert parts is not None, f"not label (SEP label)* EOS: {tokens[b, k].tolist()}"
        got = [index_of.get(p) for p in parts]
        assert None not in got, f"{parts} holds a token sequence that is not a label"
        assert len(set(got)) == len(got), f"a label repeats in {parts}"
        assert all(allowed[b, g] for g in got), "a label outside the row's subset"
        assert len(got) <= (3 if multi else 1)
        assert ids[b, k, : len(got)].tolist() == got and (ids[b, k, len(got) :] == -1).all()


@pytest.mark.slow
@pytest.mark.parametrize("mode, K", MODES)
@settings(max_examples=20, deadline=None)
@given(problem=problems(), multi=st.booleans(), top=st.booleans())
def test_every_finished_output_is_labels(mode, K, problem, multi, top):
    labels, allowed, seed = problem
    if mode != "sample":
        top = False  # top-k/top-p/temperature only shape sampling
    dec = _decoder(mode, K, multi, top)
    res = dec(
        _params(seed),
        jnp.arange(B),
        rng=jax.random.key(seed),
        allowed=allowed,
        constraint=jax.device_put(_spec(labels, multi)),
    )
    _check(res, labels, allowed, multi, mode)


def _label_score(params, b: int, label: list[int]) -> float:
    """log p(label EOS) under `_step`'s model."""
    table, prev = np.asarray(params["table"]), np.asarray(params["prev"])
    toks = [*label, EOS]
    total, last = 0.0, None
    for t, tok in enumerate(toks):
        logits = table[b, t] + (prev[last] if t else 0.0)
        total += float(jax.nn.log_softmax(logits)[tok])
        last = tok
    return total


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(problem=problems())
def test_beam_search_is_exact_when_beams_cover_the_labels(problem):
    labels, allowed, seed = problem
    K = 12  # >= the labels drawn: the search keeps every live prefix, hence is exhaustive
    dec = _decoder("beam", K, False, False)
    params = _params(seed)
    res = dec(
        params, jnp.arange(B), allowed=allowed, constraint=jax.device_put(_spec(labels, False))
    )
    for b in range(B):
        want = sorted(
            ((_label_score(params, b, lab), i) for i, lab in enumerate(labels) if allowed[b, i]),
            key=lambda x: -x[0],
        )
        n = len(want)
        assert np.asarray(res.valid[b, :n]).all() and not np.asarray(res.valid[b, n:]).any()
        assert np.asarray(res.labels[b, :n, 0]).tolist() == [i for _, i in want]
        np.testing.assert_allclose(np.asarray(res.scores[b, :n]), [s for s, _ in want], rtol=1e-4)
