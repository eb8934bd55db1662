"""A new label set of the same size class, or new per-row subsets, reuse the compiled decoder."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from decoding.beam_search import beam_search
from decoding.label_decoder import make_label_decoder
from decoding.label_index import LabelIndex
from decoding.labels import LabelConstraint

V, EOS = 64, 0


def _labels(rng, n):
    out = {tuple(rng.integers(1, V - 1, rng.integers(1, 4)).tolist()) for _ in range(n)}
    return [list(t) for t in out]


def _prefill(params, inputs):
    return params[inputs, 0], {"row": inputs}


def _step(params, tokens, step, cache):
    return params[cache["row"], step] + 0.0 * tokens[..., None], cache


@pytest.mark.slow
def test_same_size_class_label_sets_compile_once():
    rng = np.random.default_rng(0)
    a_labels, b_labels = _labels(rng, 300), _labels(rng, 300)
    a = LabelIndex.build(a_labels, vocab_size=V)
    # The default buckets absorb small differences; capacity= pins a set into a class.
    b = LabelIndex.build(b_labels, vocab_size=V, capacity=a.capacity)
    c = LabelIndex.build(a_labels[:250], vocab_size=V, capacity=a.capacity)

    def spec(idx):
        return LabelConstraint.build(idx, eos_id=EOS, separator=(V - 1,), max_labels=2, max_steps=8)

    dec = make_label_decoder(_prefill, _step, spec(a), mode="beam", beam_size=3)
    params = jnp.asarray(rng.normal(size=(2, 8, V)), jnp.float32)
    x = jnp.arange(2)
    results = [dec(params, x)]
    for idx in (b, c):
        results.append(dec(params, x, constraint=jax.device_put(spec(idx))))
    for idx in (a, c):  # per-row subsets: same shapes for any subset
        allowed = rng.random((2, int(idx.num_labels))) < 0.5
        results.append(dec(params, x, allowed=allowed, constraint=spec(idx)))
    assert dec.program._cache_size() == 2, "one program without subsets, one with"
    assert not np.array_equal(results[0].tokens, results[1].tokens), "the sets were used"
    for r, labels in zip(results, (a_labels, b_labels, a_labels[:250]), strict=False):
        ids = np.asarray(r.labels)[np.asarray(r.valid)]
        assert (ids < len(labels)).all()


def test_label_sets_swap_in_the_project_beam_search_without_recompiling():
    rng = np.random.default_rng(1)
    a = LabelIndex.build(_labels(rng, 100), vocab_size=V)
    b = LabelIndex.build(_labels(rng, 100), vocab_size=V, capacity=a.capacity)
    lp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(2, V)), jnp.float32))

    def step(tokens, level, cache):
        return jnp.broadcast_to(lp[:, None], (*tokens.shape, V)), cache

    search = jax.jit(functools.partial(beam_search, step, beam_size=4, num_levels=4))
    for idx in (a, b):
        search(lp, {}, LabelConstraint.build(idx, eos_id=EOS, max_steps=4))
    assert search._cache_size() == 1
