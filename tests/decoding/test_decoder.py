"""make_decoder: outputs handling and checks, one compilation, params as arguments, exports."""

import functools
import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import decoding
from decoding import CpuTrie, StaticConstraint, StaticIndex, beam_search, make_decoder

V, L, D, K, B = 8, 3, 16, 4, 2
SIDS = np.random.default_rng(0).integers(0, V, (30, L))
HISTORY = jnp.array([[1, 2, 3], [4, 5, 6]], jnp.int32)


def _params(seed):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    return {
        "embed": jax.random.normal(k1, (10, D)),
        "codes": jax.random.normal(k2, (L, V, D)),
        "out": jax.random.normal(k3, (L, D, V)),
    }


def prefill_logits(params, history):
    h = params["embed"][history].mean(axis=1)
    return h @ params["out"][0], {"h": h}


def step_logits(params, codes, level, cache):
    # The next distribution depends on the prefix through the cache, as in a real model.
    h = jnp.tanh(cache["h"] + params["codes"][level - 1][codes])
    return h @ params["out"][level], {"h": h}


def prefill_log_probs(params, history):
    out, cache = prefill_logits(params, history)
    return jax.nn.log_softmax(out.astype(jnp.float32), axis=-1), cache


def step_log_probs(params, codes, level, cache):
    out, cache = step_logits(params, codes, level, cache)
    return jax.nn.log_softmax(out.astype(jnp.float32), axis=-1), cache


def _constraint():
    return StaticConstraint(StaticIndex.build(SIDS, vocab_size=V))


def _decoder(prefill, step, outputs, **kw):
    return make_decoder(
        prefill, step, _constraint(), beam_size=K, num_levels=L, outputs=outputs, **kw
    )


@pytest.mark.parametrize("unroll", [True, False])
def test_logits_and_log_probs_give_the_same_beams_as_beam_search(unroll):
    params = _params(0)
    from_logits = _decoder(prefill_logits, step_logits, "logits", unroll=unroll)(params, HISTORY)
    from_lp = _decoder(prefill_log_probs, step_log_probs, "log_probs", unroll=unroll)(
        params, HISTORY
    )

    @jax.jit
    def direct(params, history, constraint):
        lp, cache = prefill_log_probs(params, history)
        step = functools.partial(step_log_probs, params)
        return beam_search(step, lp, cache, constraint, beam_size=K, num_levels=L, unroll=unroll)

    want = direct(params, HISTORY, _constraint())
    for got in (from_logits, from_lp):
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.scores, want.scores)
        np.testing.assert_array_equal(got.valid, want.valid)
    allowed = set(map(tuple, SIDS.tolist()))
    assert all(tuple(s) in allowed for s in np.asarray(want.tokens).reshape(-1, L).tolist())


def test_raw_logits_declared_as_log_probs_raise_naming_the_function():
    params = _params(0)
    both = _decoder(prefill_logits, step_logits, "log_probs")
    with pytest.raises(ValueError, match=r"prefill_logits.*step_logits.*outputs='logits'"):
        both(params, HISTORY)
    only_step = _decoder(prefill_log_probs, step_logits, "log_probs")
    with pytest.raises(ValueError, match="step_fn step_logits") as err:
        only_step(params, HISTORY)
    assert "prefill_log_probs" not in str(err.value), "a normalized prefill was blamed"


def test_outputs_is_required_and_checked():
    with pytest.raises(TypeError, match="outputs"):
        make_decoder(prefill_logits, step_logits, _constraint(), beam_size=K, num_levels=L)
    # Either the runtime type check (tests run with jaxtyping + beartype) or our own ValueError.
    with pytest.raises((ValueError, TypeError), match="outputs|logit"):
        _decoder(prefill_logits, step_logits, "logit")


def test_wrong_step_shape_is_a_clear_error():
    def flat_step(params, codes, level, cache):  # returns [B*K, V], as some ports do
        out, cache = step_logits(params, codes, level, cache)
        return out.reshape(-1, V), cache

    with pytest.raises(ValueError, match=r"step_fn .*flat_step.*\[B, K, V\]"):
        _decoder(prefill_logits, flat_step, "logits")(_params(0), HISTORY)


@pytest.mark.parametrize("outputs", ["logits", "log_probs"])
def test_compiles_once_and_takes_params_as_arguments(outputs):
    traces = []

    def prefill(params, history):
        traces.append(1)  # runs only while jax traces the program
        return (prefill_logits if outputs == "logits" else prefill_log_probs)(params, history)

    step = step_logits if outputs == "logits" else step_log_probs
    decode = _decoder(prefill, step, outputs)
    first = decode(_params(0), HISTORY)
    second = decode(_params(1), HISTORY)  # new values, same shapes: no new compilation
    assert len(traces) == 1, f"traced {len(traces)} times for one shape"
    fresh = _decoder(prefill, step, outputs)(_params(1), HISTORY)
    np.testing.assert_array_equal(second.tokens, fresh.tokens)
    np.testing.assert_array_equal(second.scores, fresh.scores)
    assert not np.array_equal(first.scores, second.scores), "params were not used as arguments"


def test_a_cpu_trie_built_inline_outlives_the_call():
    decode = make_decoder(
        prefill_logits,
        step_logits,
        CpuTrie.build(SIDS, vocab_size=V),  # no other reference: the decoder must keep it
        beam_size=K,
        num_levels=L,
        outputs="logits",
    )
    gc.collect()
    got = decode(_params(0), HISTORY)
    want = _decoder(prefill_logits, step_logits, "logits")(_params(0), HISTORY)
    np.testing.assert_array_equal(got.tokens, want.tokens)


def test_membership_and_baselines_are_exported():
    from decoding import baselines, constraints

    assert decoding.contains is constraints.contains
    for name in ("CpuTrie", "PPVExact", "PPVApprox", "HashBitmap"):
        assert getattr(decoding, name) is getattr(baselines, name)
    for name in ("contains", "make_decoder", "CpuTrie", "PPVExact", "PPVApprox", "HashBitmap"):
        assert name in decoding.__all__
