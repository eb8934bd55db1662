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
    # One trace for the decode; "log_probs" adds one for its normalization check, run once.
    assert len(traces) == (1 if outputs == "logits" else 2)
    traced = len(traces)
    second = decode(_params(1), HISTORY)  # new values, same shapes: no new compilation
    assert len(traces) == traced, f"traced {len(traces) - traced} more times for one shape"
    assert decode.program._cache_size() == 1
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


def test_a_call_swaps_constraint_and_scoring_without_recompiling():
    from decoding import LevelScoring, Unconstrained

    params = _params(0)
    decode = _decoder(prefill_log_probs, step_log_probs, "log_probs")
    other = StaticConstraint(StaticIndex.build(SIDS[:7], vocab_size=V, capacity=_capacity()))
    rng = np.random.default_rng(1)
    scoring = LevelScoring.build(rng.uniform(0.5, 1, L), rng.normal(size=V))
    got = decode(params, HISTORY, constraint=other, scoring=scoring)
    want = make_decoder(
        prefill_log_probs,
        step_log_probs,
        other,
        beam_size=K,
        num_levels=L,
        outputs="log_probs",
        scoring=scoring,
    )(params, HISTORY)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_array_equal(got.scores, want.scores)
    allowed = set(map(tuple, SIDS[:7].tolist()))
    assert all(tuple(s) in allowed for s in np.asarray(got.tokens)[np.asarray(got.valid)].tolist())
    # Another set of the same capacity and another scoring: the same program.
    scoring2 = LevelScoring.build(rng.uniform(0.5, 1, L), rng.normal(size=V))
    third = StaticConstraint(StaticIndex.build(SIDS[7:], vocab_size=V, capacity=_capacity()))
    decode(params, HISTORY, constraint=third, scoring=scoring2)
    assert decode.program._cache_size() == 1
    # None: the decoder's own constraint again (a new structure, so a second program).
    own = decode(params, HISTORY)
    plain = _decoder(prefill_log_probs, step_log_probs, "log_probs")(params, HISTORY)
    np.testing.assert_array_equal(own.tokens, plain.tokens)
    unconstrained = decode(params, HISTORY, constraint=Unconstrained(V, L))
    assert decode.program._cache_size() == 3
    assert np.asarray(unconstrained.valid).all()


def _capacity():
    return StaticIndex.build(SIDS, vocab_size=V).capacity


def test_a_prefill_context_reaches_every_step_unreordered():
    # The same model twice: once carrying a per-row table in its cache (tiled per beam and
    # reordered with the beams), once handing it to the steps as the prefill's context.
    params = _params(0)
    bias_BLV = jax.random.normal(jax.random.key(5), (B, L, V))

    def prefill_cached(params, inputs):
        history, bias = inputs
        lp, cache = prefill_log_probs(params, history)
        return jax.nn.log_softmax(lp + bias[:, 0]), {**cache, "bias": bias}

    def step_cached(params, codes, level, cache):
        lp, new = step_log_probs(params, codes, level, {"h": cache["h"]})
        return jax.nn.log_softmax(lp + cache["bias"][:, :, level]), {**new, "bias": cache["bias"]}

    def prefill_context(params, inputs):
        history, bias = inputs
        lp, cache = prefill_log_probs(params, history)
        return jax.nn.log_softmax(lp + bias[:, 0]), cache, bias

    def step_context(params, codes, level, cache, bias):
        assert bias.shape == (B, L, V), "the context must reach the step as the prefill made it"
        lp, cache = step_log_probs(params, codes, level, cache)
        return jax.nn.log_softmax(lp + bias[:, None, level]), cache

    inputs = (HISTORY, bias_BLV)
    want = _decoder(prefill_cached, step_cached, "log_probs")(params, inputs)
    for unroll in (True, False):
        got = _decoder(prefill_context, step_context, "log_probs", unroll=unroll)(params, inputs)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_allclose(got.scores, want.scores, rtol=1e-6)


def test_a_tuple_of_params_decodes_an_ensemble():
    members = (_params(0), _params(1))

    def prefill(params, history):
        parts = [prefill_log_probs(p, history) for p in params]
        return jax.nn.log_softmax(sum(o for o, _ in parts) / 2), tuple(c for _, c in parts)

    def step(params, codes, level, caches):
        parts = [step_log_probs(p, codes, level, c) for p, c in zip(params, caches, strict=True)]
        return jax.nn.log_softmax(sum(o for o, _ in parts) / 2), tuple(c for _, c in parts)

    decode = _decoder(prefill, step, "log_probs")
    got = decode(members, HISTORY)
    decode((_params(2), _params(3)), HISTORY)  # new members, same shapes: the same program
    assert decode.program._cache_size() == 1
    alone = [_decoder(prefill_log_probs, step_log_probs, "log_probs")(p, HISTORY) for p in members]
    assert not all(np.array_equal(got.scores, a.scores) for a in alone)


def test_prefill_must_return_out_and_cache():
    def bare(params, history):
        return prefill_log_probs(params, history)[0]

    with pytest.raises(ValueError, match=r"prefill_fn .*bare.*\(out, cache\)"):
        _decoder(bare, step_log_probs, "log_probs")(_params(0), HISTORY)


def test_out_sharding_places_the_beams():
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    decode = _decoder(prefill_log_probs, step_log_probs, "log_probs", out_sharding=sharding)
    res = decode(_params(0), HISTORY)
    assert res.tokens.sharding == sharding and res.scores.sharding == sharding


def test_rescored_adds_the_final_scores_and_sorts_valid_beams_first():
    """`rescored` (make_decoder's final_fn): valid beams get the extra score and are sorted by
    the sum, ties in the search's order; invalid beams keep -inf and stay last."""
    from decoding.beam_search import BeamResult
    from decoding.decoder import rescored

    tokens = jnp.arange(2 * 4 * 2).reshape(2, 4, 2)
    scores = jnp.array([[-1.0, -2.0, -3.0, -jnp.inf], [-1.0, -1.5, -jnp.inf, -jnp.inf]])
    valid = scores > -jnp.inf
    extra = jnp.array([[0.0, 1.5, 2.0, 9.0], [0.5, 0.0, 9.0, 9.0]])
    out = rescored(BeamResult(tokens, scores, valid), extra)
    # -1 + 0, -2 + 1.5, -3 + 2: beam 1 first, then 0 and 2 tied in the search's order.
    np.testing.assert_array_equal(out.scores[0], [-0.5, -1.0, -1.0, -jnp.inf])
    np.testing.assert_array_equal(out.tokens[0], np.asarray(tokens[0])[[1, 0, 2, 3]])
    np.testing.assert_array_equal(out.valid[0], [True, True, True, False])
    np.testing.assert_array_equal(out.scores[1], [-0.5, -1.5, -jnp.inf, -jnp.inf])
    np.testing.assert_array_equal(out.tokens[1], np.asarray(tokens[1]))
    np.testing.assert_array_equal(out.valid[1], [True, True, False, False])
