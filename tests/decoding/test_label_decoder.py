"""make_label_decoder: output structure, greedy/sampling/beam semantics and argument checks."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from decoding.beam_search import beam_search
from decoding.label_decoder import Sampler, make_label_decoder
from decoding.label_index import LabelCapacity, LabelIndex
from decoding.labels import LabelConstraint

V, EOS = 8, 0
LABELS = [[1], [2], [3], [4, 5], [4, 6, 7]]
CAP = LabelCapacity(nodes=16, edges=16, labels=32, width=4)


def _prefill(params, inputs):
    return params[inputs, 0], {"row": inputs}


def _step(params, tokens, step, cache):
    return params[cache["row"], step] + 0.0 * tokens[..., None], cache


def _constraint(labels=LABELS, **kw):
    idx = LabelIndex.build(labels, vocab_size=V, capacity=CAP)
    return LabelConstraint.build(idx, eos_id=EOS, max_steps=4, **kw)


def _params(seed=0, B=2):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(B, 4, V)) * 3, jnp.float32)


@functools.cache
def _decoder(mode, K=1, **kw):
    return make_label_decoder(_prefill, _step, _constraint(), mode=mode, beam_size=K, **kw)


def test_result_shapes_dtypes_and_labels():
    res = _decoder("beam", 3)(_params(), jnp.arange(2))
    assert res.tokens.shape == (2, 3, 4) and res.tokens.dtype == jnp.int32
    assert res.scores.shape == res.valid.shape == res.lengths.shape == (2, 3)
    assert res.labels.shape == (2, 3, 1) and res.num_labels.shape == (2, 3)
    assert np.asarray(res.valid).all() and np.isfinite(np.asarray(res.scores)).all()
    assert (np.diff(np.asarray(res.scores), axis=1) <= 0).all(), "beams best first"
    for b in range(2):
        for k in range(3):
            n = int(res.lengths[b, k])
            label = LABELS[int(res.labels[b, k, 0])]
            assert np.asarray(res.tokens[b, k, :n]).tolist() == [*label, EOS]
            assert (np.asarray(res.tokens[b, k, n:]) == EOS).all(), "EOS padding after the end"


@pytest.mark.slow
def test_greedy_is_the_best_beam_here_and_top_k_1_sampling_is_greedy():
    params = _params(1)
    greedy = _decoder("greedy")(params, jnp.arange(2))
    sampled = _decoder("sample", 1, top_k=1)(params, jnp.arange(2), rng=jax.random.key(3))
    np.testing.assert_array_equal(greedy.tokens, sampled.tokens)
    np.testing.assert_allclose(greedy.scores, sampled.scores, rtol=1e-6)
    # Greedy picks the best token at every step; here step 0 decides among [1], [2], [3], [4 ..].
    first = np.asarray(params[:, 0, 1:5]).argmax(axis=1) + 1
    np.testing.assert_array_equal(np.asarray(greedy.tokens[:, 0, 0]), first)


@pytest.mark.slow
def test_sampling_follows_the_renormalized_allowed_distribution():
    # One-token labels 1..3 only: p(t) = softmax(logits[1:4] / temperature), EOS next.
    c = _constraint(labels=[[1], [2], [3]])
    logits = jnp.array([[[5.0, 0.0, 1.0, 2.0, 9.0, 9.0, 9.0, 9.0]] * 4])
    K, temp = 4000, 2.0
    dec = make_label_decoder(_prefill, _step, c, mode="sample", beam_size=K, temperature=temp)
    res = dec(logits, jnp.zeros((1,), jnp.int32), rng=jax.random.key(0))
    assert np.asarray(res.valid).all()
    freq = np.bincount(np.asarray(res.tokens[0, :, 0]), minlength=4)[1:4] / K
    want = np.asarray(jax.nn.softmax(logits[0, 0, 1:4] / temp))
    np.testing.assert_allclose(freq, want, atol=0.03, err_msg="not the masked, tempered softmax")
    nucleus = make_label_decoder(_prefill, _step, c, mode="sample", beam_size=500, top_p=0.5)
    res = nucleus(logits, jnp.zeros((1,), jnp.int32), rng=jax.random.key(1))
    assert set(np.asarray(res.tokens[0, :, 0]).tolist()) == {3}, "top-p keeps the best alone"


def test_fewer_labels_than_beams_leaves_invalid_beams():
    c = _constraint(labels=[[1], [2]])
    dec = make_label_decoder(_prefill, _step, c, mode="beam", beam_size=3)
    res = dec(_params(), jnp.arange(2))
    np.testing.assert_array_equal(res.valid, [[True, True, False]] * 2)
    assert np.isneginf(np.asarray(res.scores[:, 2])).all()
    assert (np.asarray(res.labels[:, 2]) == -1).all()


def test_too_few_steps_leaves_outputs_unfinished():
    idx = LabelIndex.build([[4, 6, 7]], vocab_size=V, capacity=CAP)
    c = LabelConstraint.build(idx, eos_id=EOS, max_steps=3)
    res = make_label_decoder(_prefill, _step, c, mode="greedy")(_params(), jnp.arange(2))
    assert not np.asarray(res.valid).any(), "no EOS within max_steps: not a valid output"


def test_label_constraint_runs_in_the_project_beam_search():
    c = _constraint()
    params = _params(2)

    def step(tokens, level, cache):
        return jax.nn.log_softmax(params[:, level][:, None] + 0.0 * tokens[..., None]), cache

    res = jax.jit(functools.partial(beam_search, step, beam_size=3, num_levels=4))(
        jax.nn.log_softmax(params[:, 0]), {}, c
    )
    ours = _decoder("beam", 3)(params, jnp.arange(2))
    np.testing.assert_array_equal(res.tokens, ours.tokens)
    np.testing.assert_allclose(res.scores, ours.scores, rtol=1e-5)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"mode": "nucleus"}, "mode"),
        ({"mode": "greedy", "beam_size": 2}, "beam_size"),
        ({"mode": "sample", "temperature": 0.0}, "temperature"),
        ({"mode": "sample", "top_p": 0.0}, "top_p"),
        ({"mode": "sample", "top_k": -1}, "top_k"),
    ],
)
def test_bad_sampler_settings(kw, match):
    # TypeError: under pytest, jaxtyping's runtime check may reject a wrong mode first.
    with pytest.raises((ValueError, TypeError), match=match):
        Sampler(**kw)


def test_bad_call_arguments():
    with pytest.raises(ValueError, match="rng"):
        _decoder("sample", 1)(_params(), jnp.arange(2))
    with pytest.raises(ValueError, match="allowed: 1 rows"):
        _decoder("greedy")(_params(), jnp.arange(2), allowed=np.ones((1, 5), bool))
    bad = make_label_decoder(lambda p, x: (p[x, 0, :5], {}), _step, _constraint(), mode="greedy")
    with pytest.raises(ValueError, match="prefill_fn"):
        bad(_params(), jnp.arange(2))


def test_narrow_slots_with_a_wide_node_give_the_same_outputs():
    # Label 1 branches 40 ways; the others 1 way: 4 slots suffice unless a row is under 1.
    V2 = 64
    labels = [[1, t] for t in range(2, 42)] + [[50 + i, 60 + i % 3] for i in range(8)]
    params = jnp.asarray(np.random.default_rng(3).normal(size=(2, 4, V2)) * 3, jnp.float32)
    out = {}
    for narrow in (4, 0):
        cap = LabelCapacity(nodes=64, edges=64, labels=64, width=64, narrow=narrow)
        idx = LabelIndex.build(labels, vocab_size=V2, capacity=cap)
        assert idx.capacity.narrow_width == (narrow or 64)
        c = LabelConstraint.build(idx, eos_id=EOS, max_steps=4)
        for mode, K in (("greedy", 1), ("beam", 6)):
            dec = make_label_decoder(_prefill, _step, c, mode=mode, beam_size=K)
            out[narrow, mode] = dec(params, jnp.arange(2))
    for mode in ("greedy", "beam"):
        np.testing.assert_array_equal(out[4, mode].tokens, out[0, mode].tokens)
        np.testing.assert_allclose(out[4, mode].scores, out[0, mode].scores, rtol=1e-6)
    assert np.asarray(out[4, "beam"].valid).all()
