"""The NEZHA draft head: hand-computed teacher-forced loss, prompt states, joint head layout,
draft decoding against exhaustive scoring."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from decoding import HashSet, HashVerify, StaticConstraint, StaticIndex, Unconstrained
from seqmodel.config import DraftConfig, SeqModelConfig
from seqmodel.draft import DraftHead, DraftStates, draft_example, draft_nll, draft_retrieval_fn
from seqmodel.model import Decoder
from seqmodel.tokens import TokenSpace, encode_history, sid_tokens, training_example
from tests.decoding.helpers import all_sids, distinct_sids, exhaustive_top
from tests.seqmodel.conftest import NUM_LEVELS, V

D = 16


def _head(cfg: DraftConfig, space: TokenSpace, d: int = D, seed: int = 1) -> DraftHead:
    return nnx.jit(lambda: DraftHead(cfg, space, d, rngs=nnx.Rngs(seed)))()


def _ll(head: DraftHead, states: DraftStates, codes) -> jax.Array:
    """head.log_likelihood under jit (eager NNX dispatches every small op on its own)."""
    graphdef, params = nnx.split(head)
    fn = jax.jit(lambda p, st, c: nnx.merge(graphdef, p).log_likelihood(st, c))
    return fn(params, states, jnp.asarray(codes))


def _states(head: DraftHead, model, tokens) -> DraftStates:
    hdef, hp = nnx.split(head)
    mdef, mp = nnx.split(model)
    fn = jax.jit(lambda a, b, t: nnx.merge(hdef, a).states(nnx.merge(mdef, b), t))
    return fn(hp, mp, jnp.asarray(tokens))


def _history(B: int, T: int, seed: int = 0) -> np.ndarray:
    """Encoded, left-padded histories of 1..3 random items."""
    rng = np.random.default_rng(seed)
    item_tokens = sid_tokens(rng.integers(0, V, (10, NUM_LEVELS)), V)
    users = [rng.choice(10, 1 + b % 3, replace=False) for b in range(B)]
    return np.stack([encode_history(item_tokens, u, (T - 1) // NUM_LEVELS) for u in users])


def test_teacher_forced_loss_matches_hand_computation():
    # L = 2 levels, V = 2 codes, D = 2, additive transition; W_0 = W_1 = identity.
    space = TokenSpace(num_levels=2, codebook_size=2)
    head = _head(DraftConfig(cell="add"), space, d=2)
    head.out[...] = jnp.stack([jnp.eye(2), jnp.eye(2)])
    head.code_embed[...] = jnp.array([[[0.0, 0.0], [0.0, 2.0]], [[0.0, 0.0], [0.0, 0.0]]])
    # s_1 = c = [1, 0]; W_0 h_0 = [0, 1], W_1 h_1 = [0, 0].
    states = DraftStates(
        context=jnp.array([[1.0, 0.0]]), placeholder_logits=jnp.array([[[0.0, 1.0], [0.0, 0.0]]])
    )
    ll = _ll(head, states, [[1, 0]])
    # Level 0: logits [1, 1] -> log 1/2. s_2 = [1, 0] + embed_0[1] = [1, 2]; level 1: logits
    # [1, 2], code 0 -> 1 - log(e + e^2) = -log(1 + e).
    expected = [-np.log(2.0), -np.log(1.0 + np.e)]
    np.testing.assert_allclose(
        ll[0], expected, rtol=1e-6, err_msg="teacher-forced log-likelihood off the paper's formula"
    )


def _numpy_log_likelihood(head: DraftHead, context, ph_logits, codes) -> np.ndarray:
    """The paper's recursion in numpy, for every cell."""
    p = jax.tree.map(np.asarray, nnx.state(head, nnx.Param))
    out_w, emb = p["out"], p["code_embed"]
    s, rows = np.asarray(context, np.float64), []
    L = out_w.shape[0]
    for level in range(L):
        logits = s @ out_w[level] + ph_logits[:, level]
        lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
        rows.append(logits[np.arange(len(codes)), codes[:, level]] - lse)
        if level + 1 == L:
            break
        x = emb[level][codes[:, level]]
        cell = head.cfg.cell
        if cell == "add":
            s = s + x
            continue
        t = p["transition"]
        wx, ws, b = t["w_x"][level], t["w_s"][level], t["b"][level]
        if cell == "rnn":
            s = np.tanh(x @ wx + s @ ws + b)
        else:
            xz, xr, xn = np.split(x @ wx + b, 3, axis=-1)
            sz, sr, sn = np.split(s @ ws, 3, axis=-1)
            z, r = 1 / (1 + np.exp(-(xz + sz))), 1 / (1 + np.exp(-(xr + sr)))
            s = (1 - z) * np.tanh(xn + r * sn) + z * s
    return np.stack(rows, 1)


@pytest.mark.parametrize("cell", ["rnn", "gru", "add"])
def test_log_likelihood_matches_numpy_recursion(cell, space):
    head = _head(DraftConfig(cell=cell), space)
    rng = np.random.default_rng(0)
    context = rng.normal(size=(2, D)).astype(np.float32)
    ph = rng.normal(size=(2, NUM_LEVELS, V)).astype(np.float32)
    codes = rng.integers(0, V, (2, NUM_LEVELS))
    got = _ll(head, DraftStates(jnp.asarray(context), jnp.asarray(ph)), codes)
    want = _numpy_log_likelihood(head, context, ph, codes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_prompt_states_without_placeholders_give_the_retrievers_level0_logits(model):
    tokens = jnp.asarray(_history(2, model.context))
    graphdef, state = nnx.split(model)

    @jax.jit
    def both(s, t):
        m = nnx.merge(graphdef, s)
        h = m.prompt_states(t)[:, -1]
        level0 = (h @ m.head.kernel[...]).reshape(2, NUM_LEVELS, V)[:, 0]
        return jax.nn.log_softmax(level0, -1), m.prefill(t)[0]

    ours, prefill = both(state, tokens)
    np.testing.assert_allclose(ours, prefill, rtol=1e-5, atol=1e-5)


def test_context_state_does_not_see_the_placeholders(model, space):
    """Causality: the context state is the hidden state *before* the placeholders."""
    tokens = jnp.asarray(_history(2, model.context))
    T = tokens.shape[1]
    prompt = jnp.concatenate(
        [tokens, jnp.broadcast_to(jnp.asarray(space.placeholder_ids), (2, 3))], 1
    )
    ph = jax.random.normal(jax.random.key(0), (NUM_LEVELS, D))
    mdef, mp = nnx.split(model)

    @jax.jit
    def grads(p):
        def at(i):
            return lambda q: nnx.merge(mdef, mp).prompt_states(prompt, q)[:, i].sum()

        return jax.grad(at(T - 1))(p), jax.grad(at(T))(p)

    before, after = grads(ph)
    assert np.all(before == 0.0), "the context state must not depend on the placeholders"
    # <SP_1>'s state sees its own embedding, not those of <SP_2> .. <SP_L>.
    assert np.any(after[0] != 0.0) and np.all(after[1:] == 0.0)


@pytest.mark.parametrize(
    "cfg",
    [
        DraftConfig(context_state=False),  # NEZHA-1
        DraftConfig(placeholder_states=False),  # NEZHA-2
        DraftConfig(cell="add"),  # NEZHA-3
    ],
)
def test_ablations_have_their_shapes(cfg, model, space):
    head = _head(cfg, space)
    st = _states(head, model, _history(2, model.context))
    assert st.context.shape == (2, D) and st.placeholder_logits.shape == (2, NUM_LEVELS, V)
    if not cfg.context_state:
        assert not np.any(st.context)
    if not cfg.placeholder_states:
        assert not hasattr(head, "placeholders") and not np.any(st.placeholder_logits)


def test_config_rejects_a_head_that_sees_nothing():
    with pytest.raises(ValueError, match="cannot both be false"):
        DraftConfig(context_state=False, placeholder_states=False)
    with pytest.raises(ValueError, match="cell"):
        DraftConfig(cell="lstm")
    with pytest.raises(ValueError, match="draft_head"):
        SeqModelConfig(draft_head="rnn")
    # A retriever.json stores the head's config as a dict.
    cfg = SeqModelConfig(draft=dataclasses.asdict(DraftConfig(cell="gru")))
    assert cfg.draft == DraftConfig(cell="gru")


def test_placeholders_follow_every_token_id(space):
    assert space.placeholder_ids == tuple(range(space.vocab_size, space.vocab_size + NUM_LEVELS))
    assert space.vocab_size == 2 + NUM_LEVELS * V  # unchanged: old retrievers still load


def test_joint_head_leaves_the_retriever_unchanged(tiny_cfg, space, model):
    joint = nnx.jit(
        lambda: Decoder(dataclasses.replace(tiny_cfg, draft_head="joint"), space, rngs=nnx.Rngs(0))
    )()
    ours = nnx.state(joint, nnx.Param)
    theirs = nnx.state(model, nnx.Param)
    del ours["draft"]
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not hasattr(model, "draft")


def test_draft_example_reads_each_rows_last_item(space):
    rng = np.random.default_rng(0)
    item_tokens = sid_tokens(rng.integers(0, V, (10, NUM_LEVELS)), V)
    rows = [training_example(item_tokens, np.array(u), 4, "causal") for u in ([3, 5, 7], [2])]
    batch = {
        k: jnp.asarray(np.stack([r[i] for r in rows]))
        for i, k in enumerate(("inputs", "targets", "weights"))
    }
    history, codes, weight = draft_example(batch, space)
    # Row 0: the history is BOS + items 3, 5 (left-padded), the target item 7's codes.
    np.testing.assert_array_equal(history[0], encode_history(item_tokens, np.array([3, 5]), 3))
    np.testing.assert_array_equal(codes[0], item_tokens[7] - 2 - V * np.arange(NUM_LEVELS))
    assert weight.tolist() == [1.0, 0.0]  # a one-item user has no target


def test_draft_nll_counts_weighted_codes(model, space):
    head = _head(DraftConfig(), space)
    rng = np.random.default_rng(1)
    item_tokens = sid_tokens(rng.integers(0, V, (10, NUM_LEVELS)), V)
    rows = [training_example(item_tokens, rng.choice(10, 3), 4, "causal") for _ in range(2)]
    batch = {
        k: jnp.asarray(np.stack([r[i] for r in rows]))
        for i, k in enumerate(("inputs", "targets", "weights"))
    }
    hdef, hp = nnx.split(head)
    mdef, mp = nnx.split(model)
    fn = jax.jit(lambda a, b, x: draft_nll(nnx.merge(hdef, a), nnx.merge(mdef, b), x))
    nll_sum, count = fn(hp, mp, batch)
    assert count == 2 * NUM_LEVELS
    assert 0 < nll_sum / count < 2 * np.log(V)


@functools.cache
def _catalog():
    return distinct_sids(np.random.default_rng(3), 20, V, NUM_LEVELS)


@pytest.mark.slow
@pytest.mark.parametrize("constraint", ["static", "hash_all_prefixes"])
def test_draft_beam_search_equals_exhaustive_scoring(constraint, model, space):
    head = _head(DraftConfig(), space)
    tokens = jnp.asarray(_history(2, model.context))
    sids = _catalog()
    if constraint == "static":
        # K >= N: the constrained search can keep every allowed SID, so it is exact.
        K, c = len(sids), StaticConstraint(StaticIndex.build(sids, vocab_size=V))
    else:
        # K = V**(L-1): every prefix survives, and the last level sees all of the catalog.
        K, c = V ** (NUM_LEVELS - 1), HashVerify(HashSet.build(sids, vocab_size=V))
    res = draft_retrieval_fn(model, head, c, beam_size=K)(np.asarray(tokens))
    lp0, s1, step = head.search_fns(_states(head, model, tokens))
    step = jax.jit(step, static_argnums=1)
    want_sids, want_scores = exhaustive_top(step, lp0, s1, sids, K)
    n = min(K, len(sids))
    np.testing.assert_array_equal(np.asarray(res.tokens)[:, :n], want_sids[:, :n])
    np.testing.assert_allclose(np.asarray(res.scores)[:, :n], want_scores[:, :n], rtol=1e-5)
    assert not np.asarray(res.valid)[:, n:].any()


@pytest.mark.slow
def test_unverified_drafts_score_like_exhaustive_scoring_of_every_sid(model, space):
    head = _head(DraftConfig(cell="gru"), space)
    tokens = jnp.asarray(_history(2, model.context))
    K = V ** (NUM_LEVELS - 1)
    res = draft_retrieval_fn(model, head, Unconstrained(V, NUM_LEVELS), beam_size=K)(
        np.asarray(tokens)
    )
    lp0, s1, step = head.search_fns(_states(head, model, tokens))
    step = jax.jit(step, static_argnums=1)
    want_sids, want_scores = exhaustive_top(step, lp0, s1, all_sids(V, NUM_LEVELS), K)
    np.testing.assert_allclose(np.asarray(res.scores)[:, :8], want_scores[:, :8], rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(res.tokens)[:, :8], want_sids[:, :8])


def test_draft_decoder_is_the_beam_search_over_the_heads_step(model, space):
    # make_decoder's program (placeholder logits as the prefill's context, params a pair) gives
    # the beams of the plain beam search over search_fns, to the last bit; the trainer's
    # decoder too, and new head parameters reuse the compiled program.
    from decoding import beam_search
    from seqmodel.draft import draft_decoder

    head = _head(DraftConfig(cell="gru"), space)
    tokens = jnp.asarray(_history(3, model.context))
    c = StaticConstraint(StaticIndex.build(_catalog(), vocab_size=V))
    K = 4
    run = draft_retrieval_fn(model, head, c, beam_size=K)
    got = run(np.asarray(tokens))

    @jax.jit
    def direct(hp, mp, t, c):
        h, m = nnx.merge(hdef, hp), nnx.merge(mdef, mp)
        lp0, s1, step = h.search_fns(h.states(m, t))
        return beam_search(step, lp0, s1, c, beam_size=K, num_levels=NUM_LEVELS)

    (hdef, hp), (mdef, mp) = nnx.split(head), nnx.split(model)
    want = direct(hp, mp, tokens, c)
    trainers = draft_decoder(mdef, hdef, space, c, K)((mp, hp), tokens)
    for res in (got, trainers):
        np.testing.assert_array_equal(res.tokens, want.tokens)
        np.testing.assert_array_equal(res.scores, want.scores)
        np.testing.assert_array_equal(res.valid, want.valid)
    other = nnx.split(_head(DraftConfig(cell="gru"), space, seed=2))[1]
    moved = run.decoder((run.params[0], other), tokens)
    assert run.decoder.program._cache_size() == 1
    assert not np.array_equal(moved.scores, got.scores), "the head's params were not arguments"
