"""The item-level retriever: its teacher-forced training logits are its decoding log-probs, it is
causal over items, and it trains, resumes and decodes through the same code as the token model."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seqmodel.config import SeqModelConfig
from seqmodel.item_model import ItemDecoder
from seqmodel.tokens import TokenizeExample, encode_history, sid_tokens
from tests.seqmodel.conftest import NUM_LEVELS, V, random_unique_sids
from tests.seqmodel.test_train import CFG, _data, assert_resumes_exactly

L = NUM_LEVELS


# Codes' embeddings alone; plus a hashed item embedding, few rows so that items collide; plus
# level 1's node vectors (random, not their zero init, so that they change every level-1 logit).
@pytest.fixture(
    scope="module", params=[(0, 0), (7, 0), (0, 4)], ids=["codes", "hashed_ids", "nodes"]
)
def item_model(tiny_cfg, space, request):
    buckets, node_dim = request.param
    cfg = dataclasses.replace(
        tiny_cfg, arch="item", item_embed_buckets=buckets, node_head_dim=node_dim
    )
    model = nnx.jit(lambda: ItemDecoder(cfg, space, rngs=nnx.Rngs(0)))()
    if node_dim:
        model.nodes[...] = jax.random.normal(jax.random.key(1), model.nodes.shape)
    return model


def _fns(model):
    graphdef, state = nnx.split(model)
    train = jax.jit(lambda s, t: nnx.merge(graphdef, s).target_logits(t))
    prefill = jax.jit(lambda s, t: nnx.merge(graphdef, s).prefill(t))
    step = jax.jit(lambda s, c, lv, cache: nnx.merge(graphdef, s).step(c, lv, cache))
    return (
        lambda t: train(state, t),
        lambda t: prefill(state, t),
        lambda c, lv, cache: step(state, c, lv, cache),
    )


def _tokens(n_items=10, seed=0):
    return sid_tokens(random_unique_sids(n_items, L, V, seed), V)


def test_teacher_forced_logits_equal_prefill_and_steps(item_model, tiny_cfg):
    """The log-prob of every code of a history's last item is the same in training (one pass,
    teacher-forced) and in decoding (prefill of the items before it, then one step per level)."""
    train, prefill, step = _fns(item_model)
    tok = _tokens()
    for items in (np.array([3, 1, 4, 5]), np.array([7, 2])):
        ex = TokenizeExample(tok, tiny_cfg.max_history, "causal").map({"items": items})
        logits = train(jnp.asarray(ex["inputs"][None]))[0]
        lp_train = jax.nn.log_softmax(logits[-L:], axis=-1)  # the last item's L targets
        history = encode_history(tok, items[:-1], tiny_cfg.max_history - 1)[None]
        codes = tok[items[-1]] - 2 - V * np.arange(L)
        lp, s = prefill(jnp.asarray(history))
        got = [lp[0]]
        s = s[:, None]
        for level in range(1, L):
            lp, s = step(jnp.asarray(codes[level - 1]).reshape(1, 1), level, s)
            got.append(lp[0, 0])
        np.testing.assert_allclose(np.stack(got), lp_train, atol=2e-5)


def _joint_log_prob(prefill, step, history, codes):
    """log p(codes | history) by decoding: the prefill, then one step per level."""
    lp, s = prefill(jnp.asarray(history))
    total, s = float(lp[0, codes[0]]), s[:, None]
    for level in range(1, L):
        lp, s = step(jnp.asarray(codes[level - 1]).reshape(1, 1), level, s)
        total += float(lp[0, 0, codes[level]])
    return total


def test_repeat_log_probs_are_the_decoding_log_probs_of_the_item_just_read(item_model, tiny_cfg):
    """Group g's repeat log-prob is what decoding gives the item it has just read, as the next."""
    _, prefill, step = _fns(item_model)
    graphdef, state = nnx.split(item_model)
    both = jax.jit(lambda s, t: nnx.merge(graphdef, s).target_and_repeat_logits(t))
    tok = _tokens()
    items = np.array([3, 1, 4, 5])
    ex = TokenizeExample(tok, tiny_cfg.max_history, "causal").map({"items": items})
    logits, repeat = both(state, jnp.asarray(ex["inputs"][None]))
    plain = item_model.target_logits(jnp.asarray(ex["inputs"][None]))
    # Jitted against eager float32: XLA's CPU code differs in the last bits between processors
    # (2.1e-6 at a logit of 1.39 on an Intel Xeon).
    np.testing.assert_allclose(logits, plain, rtol=1e-5, atol=1e-5)
    for g in range(1, len(items)):  # group g has read items[:g]; its last is items[g - 1]
        history = encode_history(tok, items[:g], tiny_cfg.max_history - 1)[None]
        codes = tok[items[g - 1]] - 2 - V * np.arange(L)
        want = _joint_log_prob(prefill, step, history, codes)
        assert float(repeat[0, g]) == pytest.approx(want, abs=1e-4)


def test_unlikelihood_adds_its_weight_times_the_mean_repeat_penalty(tiny_cfg, space):
    from seqmodel.train import loss_fn

    tok = _tokens()
    rows = [np.array([3, 1, 4, 5]), np.array([7, 2])]
    exs = [TokenizeExample(tok, tiny_cfg.max_history, "causal").map({"items": r}) for r in rows]
    batch = {
        k: jnp.asarray(np.stack([e[k] for e in exs])) for k in ("inputs", "targets", "weights")
    }
    losses, repeats = [], None
    for a in (0.0, 0.5):
        cfg = dataclasses.replace(tiny_cfg, arch="item", unlikelihood=a)
        model = nnx.jit(lambda cfg=cfg: ItemDecoder(cfg, space, rngs=nnx.Rngs(0)))()
        graphdef, params = nnx.split(model)
        losses.append(float(loss_fn(params, graphdef, batch, None)[0]))
        repeats = model.target_and_repeat_logits(batch["inputs"])[1]
    # The groups that read an item and have a target after it: groups 1-3 of the first row (items
    # 3, 1, 4), group 3 of the second, which is left-padded (group 2 reads BOS, group 3 item 7).
    assert batch["inputs"][1, 6] == 1  # BOS
    p = np.exp(np.concatenate([np.asarray(repeats[0, 1:4]), np.asarray(repeats[1, 3:4])]))
    assert losses[1] - losses[0] == pytest.approx(0.5 * np.mean(-np.log1p(-p)), rel=1e-4)
    with pytest.raises(ValueError, match="unlikelihood"):
        dataclasses.replace(tiny_cfg, unlikelihood=0.5)  # the token-level model has no repeat head


def test_item_contrast_is_an_in_batch_softmax_over_the_target_items(tiny_cfg, space):
    """seqmodel.item_contrast adds its weight times the mean over target items of -log softmax
    of state . item vector over the batch's other target items (copies of the target left out),
    computed here by brute force from the model's own states and code embeddings."""
    from seqmodel.train import loss_fn

    tok = _tokens()
    # Item 1 is a target in both rows (its copy in the other row is left out of each softmax).
    rows = [np.array([3, 1, 4, 5]), np.array([7, 1])]
    exs = [TokenizeExample(tok, tiny_cfg.max_history, "causal").map({"items": r}) for r in rows]
    batch = {
        k: jnp.asarray(np.stack([e[k] for e in exs])) for k in ("inputs", "targets", "weights")
    }
    losses = []
    for a in (0.0, 0.7):
        cfg = dataclasses.replace(tiny_cfg, arch="item", item_contrast=a)
        model = nnx.jit(lambda cfg=cfg: ItemDecoder(cfg, space, rngs=nnx.Rngs(0)))()
        graphdef, params = nnx.split(model)
        losses.append(loss_fn(params, graphdef, batch, None))
    logits, states = model.target_logits_and_states(batch["inputs"])
    np.testing.assert_allclose(logits, model.target_logits(batch["inputs"]), atol=1e-6)
    # The target items (row, group, item): a row's loss is on its items 2..n, so row 0's groups
    # 1-3 predict 1, 4, 5, and row 1 (left-padded: group 2 reads BOS) has one, 1 at group 3.
    targets = [(0, 1, 1), (0, 2, 4), (0, 3, 5), (1, 3, 1)]
    emb = np.asarray(model.embed.embedding[...])
    vec = {item: emb[tok[item]].sum(axis=0) for _, _, item in targets}

    def brute_force(shift):
        """Mean of -log softmax over the other target items, each score minus shift[item]."""
        terms = []
        for r, g, item in targets:
            h = np.asarray(states[r, g])
            others = [j for _, _, j in targets if j != item]
            scores = np.array([h @ vec[j] - shift[j] for j in [item, *others]])
            terms.append(np.log(np.exp(scores - scores.max()).sum()) + scores.max() - scores[0])
        return np.mean(terms)

    want = brute_force(np.zeros(len(tok)))
    assert float(losses[1][1]["item_contrast"]) == pytest.approx(want, rel=1e-4)
    assert float(losses[1][0]) - float(losses[0][0]) == pytest.approx(0.7 * want, rel=1e-4)
    # With the sampling correction each score first loses its item's log share (rows built
    # with `log_q`: each target token carries its item's value).
    log_q = np.log(np.arange(1, 11) / 55.0)
    exs = [
        TokenizeExample(tok, tiny_cfg.max_history, "causal", log_q=log_q).map({"items": r})
        for r in rows
    ]
    np.testing.assert_allclose(exs[0]["target_logq"][-3 * L :], np.repeat(log_q[[1, 4, 5]], L))
    batch["target_logq"] = jnp.asarray(np.stack([e["target_logq"] for e in exs]))
    corrected = loss_fn(params, graphdef, batch, None)[1]["item_contrast"]
    assert float(corrected) == pytest.approx(brute_force(log_q), rel=1e-4)
    with pytest.raises(ValueError, match="item_contrast"):
        dataclasses.replace(tiny_cfg, item_contrast=0.5)  # the token-level model has no item head
    with pytest.raises(ValueError, match="item_contrast_logq"):
        dataclasses.replace(tiny_cfg, arch="item", item_contrast_logq=True)
    with pytest.raises(ValueError, match="one of them"):
        dataclasses.replace(tiny_cfg, arch="item", item_contrast=0.5, unlikelihood=0.5)


def test_left_padding_does_not_change_the_prefill(item_model, space):
    _, prefill, _ = _fns(item_model)
    tok, items = _tokens(), np.array([4, 0, 9])
    short = prefill(jnp.asarray(encode_history(tok, items, 3)[None]))
    padded = prefill(jnp.asarray(encode_history(tok, items, 4)[None]))
    np.testing.assert_allclose(short[0], padded[0], atol=2e-5)
    np.testing.assert_allclose(short[1], padded[1], atol=2e-5)


def test_causal_over_items(item_model, tiny_cfg):
    """Changing item j changes the logits of the items after it, never those before it."""
    train, _, _ = _fns(item_model)
    tok = TokenizeExample(_tokens(), tiny_cfg.max_history, "causal")
    a = train(jnp.asarray(tok.map({"items": np.array([1, 2, 3, 4])})["inputs"][None]))[0]
    b = train(jnp.asarray(tok.map({"items": np.array([1, 2, 8, 4])})["inputs"][None]))[0]
    changed = np.abs(np.asarray(a - b)).reshape(-1, L, V).max(axis=(1, 2)) > 1e-6
    # Groups predict items 1, 2, 3, 4 (after BOS, 1, 2, 3); item 3 (index 2) was changed, so
    # the groups predicting items 1-3 read the same inputs, except that teacher forcing feeds the
    # changed item's own codes inside its group; group 3 (predicting item 4) reads it.
    assert not changed[:2].any(), "an item's logits depend on a later item"
    assert changed[3], "an item's logits ignore an earlier item"


def test_item_arch_rejects_packed_rows_and_draft_heads():
    with pytest.raises(ValueError, match="arch=item"):
        SeqModelConfig(arch="item", layout="packed")
    with pytest.raises(ValueError, match="arch=item"):
        SeqModelConfig(arch="item", draft_head="joint")
    with pytest.raises(ValueError, match="seqmodel.arch"):
        SeqModelConfig(arch="items")
    with pytest.raises(ValueError, match="item_embed_buckets"):
        SeqModelConfig(item_embed_buckets=64)  # the token-level model takes no item embedding
    with pytest.raises(ValueError, match="item_embed_buckets"):
        SeqModelConfig(arch="item", item_embed_buckets=-1)
    with pytest.raises(ValueError, match="node_head_dim"):
        SeqModelConfig(node_head_dim=8)  # the token-level model has no level-1 node vectors


def test_node_vectors_start_at_zero_and_move_level_1_by_its_node_alone(tiny_cfg, space):
    """At init the node head changes no logit; with node (c0, c1)'s vector set, only level-1
    logits of code c1 under c0 change, by exactly its dot with the projected state."""
    cfg = dataclasses.replace(tiny_cfg, arch="item")
    plain = ItemDecoder(cfg, space, rngs=nnx.Rngs(0))
    nodes = ItemDecoder(dataclasses.replace(cfg, node_head_dim=4), space, rngs=nnx.Rngs(0))
    tok = _tokens()
    items = np.array([3, 1, 4, 5, 2])
    ex = TokenizeExample(tok, tiny_cfg.max_history, "causal").map({"items": items})
    inputs = jnp.asarray(ex["inputs"][None])
    base = np.asarray(plain.target_logits(inputs))
    np.testing.assert_allclose(nodes.target_logits(inputs), base, atol=1e-6)
    codes = tok[items] - 2 - V * np.arange(L)  # raw codes [n, L]
    c0, c1 = codes[3, 0], codes[3, 1]  # item 3 of the row, a target
    nodes.nodes[...] = nodes.nodes[...].at[c0, c1].set(1.0)
    got = np.asarray(nodes.target_logits(inputs))[0]
    changed = np.argwhere(~np.isclose(got, base[0], atol=1e-6)).tolist()
    # The row's targets are its items, left-padded, L rows each: level 1 of item j is row
    # T - (n - j) L + 1. Every target whose code 0 is c0 reads node (c0, c1) at column c1.
    T, n = got.shape[0], len(items)
    want = [[T - (n - j) * L + 1, int(c1)] for j in range(n) if codes[j, 0] == c0]
    assert [T - (n - 3) * L + 1, int(c1)] in want
    assert changed == want, (changed, want)


def test_hashed_item_embedding_reads_every_level_and_reaches_the_states(tiny_cfg, space):
    """Every SID gets a row of the table, a change of any one code moves it to another row (the
    hash reads every level), and the embedding reaches the backbone's states."""
    cfg = dataclasses.replace(tiny_cfg, arch="item", item_embed_buckets=1009)
    model = nnx.jit(lambda: ItemDecoder(cfg, space, rngs=nnx.Rngs(0)))()
    tok = _tokens(200, seed=3)
    windows = jnp.asarray(tok[None])  # [1, 200 items, L]
    buckets = np.asarray(model._item_bucket(windows))[0]
    assert buckets.min() >= 0 and buckets.max() < 1009
    # 200 distinct SIDs in 1009 rows: a uniform hash leaves about 200 * (1 - 199/2018) = 180
    # distinct rows; a hash that ignored a level would collapse many more.
    assert len(np.unique(buckets)) >= 160
    for level in range(L):  # changing any one code moves the item to another row
        other = tok.copy()
        other[:, level] = 2 + V * level + (other[:, level] - 2 - V * level + 1) % V
        moved = np.asarray(model._item_bucket(jnp.asarray(other[None])))[0] != buckets
        assert moved.mean() > 0.9, level
    # The embedding reaches the states: zeroing it changes a prefill.
    _, prefill, _ = _fns(model)
    history = jnp.asarray(encode_history(tok, np.array([5, 9, 11]), 4)[None])
    with_ids = np.asarray(prefill(history)[1])
    model.item_embed.embedding[...] = jnp.zeros_like(model.item_embed.embedding[...])
    _, prefill, _ = _fns(model)
    assert np.abs(np.asarray(prefill(history)[1]) - with_ids).max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["causal", "bucketed"])
def test_item_arch_trains_resumes_and_decodes(tmp_path, layout):
    cfg = dataclasses.replace(CFG, arch="item", layout=layout)
    run = assert_resumes_exactly(cfg, tmp_path, _data(cfg=cfg))
    assert run.resumed.summary["steps"] == 4
    rows = run.logged
    losses = [r["loss"] for r in rows if "loss" in r]
    assert all(np.isfinite(losses))
    if layout == "causal":  # bucketed batches divide by the epoch's mean weight, not their own
        assert abs(losses[0] - np.log(V)) < 0.2, "initial loss far from uniform over V codes"
    assert any("valid_recall@4" in r for r in rows)


def test_target_log_shares_count_every_history_item_after_the_first():
    from data.types import Histories
    from seqmodel.train import target_log_shares

    # Users [0, 1, 2], [2], [1, 2]: targets 1, 2, 2 (first items and a lone item are not).
    h = Histories.from_lists([[0, 1, 2], [2], [1, 2]])
    counts = np.array([0, 1, 2, 0]) + 1.0
    np.testing.assert_allclose(np.exp(target_log_shares(h, 4)), counts / counts.sum(), rtol=1e-6)


@pytest.fixture(scope="module")
def softmax_model(tiny_cfg, space):
    """An item-level retriever with the item softmax and a hashed item embedding (few rows, so
    that items collide), its item query and hashed rows random rather than near zero."""
    cfg = dataclasses.replace(
        tiny_cfg, arch="item", item_embed_buckets=7, item_softmax=0.6, item_softmax_rank=0.8
    )
    return nnx.jit(lambda: ItemDecoder(cfg, space, rngs=nnx.Rngs(0)))()


def test_item_softmax_is_a_softmax_over_the_catalog(softmax_model, tiny_cfg):
    """seqmodel.item_softmax adds its weight times the mean over target items of -log softmax
    over the catalog of query . input vector, computed here by brute force from the model's own
    states, query kernel, code embeddings and hashed rows."""
    from seqmodel.train import loss_fn

    model = softmax_model
    tok = _tokens()
    rows = [np.array([3, 1, 4, 5]), np.array([7, 1])]
    exs = [TokenizeExample(tok, tiny_cfg.max_history, "causal").map({"items": r}) for r in rows]
    batch = {
        k: jnp.asarray(np.stack([e[k] for e in exs])) for k in ("inputs", "targets", "weights")
    }
    catalog = tok[[0, 1, 3, 4, 5, 7, 9]]  # every target, and some items never targeted
    graphdef, params = nnx.split(model)
    loss, aux = loss_fn(params, graphdef, {**batch, "catalog": jnp.asarray(catalog)}, None)
    _, states = model.target_logits_and_states(batch["inputs"])
    emb = np.asarray(model.embed.embedding[...])
    rows_h = np.asarray(model.item_embed.embedding[...])
    buckets = np.asarray(model._item_bucket(jnp.asarray(tok)[None]))[0]
    vec = emb[tok].sum(axis=1) + rows_h[buckets]  # [items, D]
    kernel = np.asarray(model.item_query.kernel[...])
    terms = []
    for r, g, item in [(0, 1, 1), (0, 2, 4), (0, 3, 5), (1, 3, 1)]:  # as in item_contrast's test
        q = np.asarray(states[r, g]) @ kernel
        scores = np.array([q @ vec[j] for j in [0, 1, 3, 4, 5, 7, 9]])
        log_z = np.log(np.exp(scores - scores.max()).sum()) + scores.max()
        terms.append(log_z - q @ vec[item])
    assert float(aux["item_softmax"]) == pytest.approx(np.mean(terms), rel=1e-4)
    plain = dataclasses.replace(model.cfg, item_softmax=0.0)
    without = nnx.merge(graphdef, params)
    without.cfg = plain
    g2, p2 = nnx.split(without)
    assert float(loss) - float(loss_fn(p2, g2, batch, None)[0]) == pytest.approx(
        0.6 * np.mean(terms), rel=1e-4
    )
    with pytest.raises(ValueError, match="item_softmax"):
        dataclasses.replace(tiny_cfg, item_softmax=0.5)  # the token-level model has no item query
    with pytest.raises(ValueError, match="one of them"):
        dataclasses.replace(tiny_cfg, arch="item", item_softmax=0.5, unlikelihood=0.5)
    with pytest.raises(ValueError, match="item_softmax_rank"):
        dataclasses.replace(tiny_cfg, arch="item", item_softmax_rank=-1.0)


def test_item_rank_adds_the_query_score_and_ranks_the_beams_again(softmax_model, space):
    """With seqmodel.item_softmax, decoding finds the same K beams as the plain joint
    log-probability, each scored by its joint log-probability plus item_softmax_rank times the
    query's score of its item (by brute force), sorted by that."""
    from decoding import StaticConstraint, StaticIndex
    from seqmodel.inference import item_rank_of, retrieval_fn, retriever_decoder

    model = softmax_model
    sids = random_unique_sids(40, L, V, 3)
    tok = sid_tokens(sids, V)
    c = StaticConstraint(StaticIndex.build(sids, vocab_size=V))
    hist = jnp.asarray(
        np.stack([encode_history(tok, np.array(h), 4) for h in ([3, 1, 4], [7, 2, 9, 5], [0])])
    )
    assert item_rank_of(model.cfg) == 0.8
    ranked = retrieval_fn(model, c, beam_size=6)(hist)
    graphdef, params = nnx.split(model)
    plain = retriever_decoder(graphdef, L, c, beam_size=6)(params, hist)
    _, s = model.prefill(hist)
    kernel = np.asarray(model.item_query.kernel[...])
    vec = np.asarray(model.item_inputs(jnp.asarray(tok)))
    row_of = {tuple(r): i for i, r in enumerate(sids)}
    for b in range(hist.shape[0]):
        q = np.asarray(s[b]) @ kernel
        want = {
            tuple(t): float(sc) + 0.8 * float(q @ vec[row_of[tuple(t)]])
            for t, sc in zip(np.asarray(plain.tokens[b]), np.asarray(plain.scores[b]), strict=True)
        }
        got = [tuple(t) for t in np.asarray(ranked.tokens[b])]
        assert set(got) == set(want)
        np.testing.assert_allclose(ranked.scores[b], [want[t] for t in got], rtol=1e-5)
        assert np.all(np.diff(np.asarray(ranked.scores[b])) <= 0)
    assert not np.array_equal(ranked.tokens, plain.tokens)  # the query's scores reorder


def test_item_softmax_trains_resumes_and_decodes(tmp_path):
    cfg = dataclasses.replace(
        CFG, arch="item", layout="bucketed", item_embed_buckets=7, item_softmax=0.5
    )
    run = assert_resumes_exactly(cfg, tmp_path, _data(cfg=cfg))
    rows = run.logged
    assert all(np.isfinite(r["item_softmax"]) for r in rows if "item_softmax" in r)
    assert any("item_softmax" in r for r in rows)
    assert any("valid_recall@4" in r for r in rows)
