"""The packed layout: several users per training row, each attending only to itself, with the
loss of the causal layout."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from data.pipeline import HistorySource, packed_batches
from data.types import Histories
from seqmodel.model import token_log_likelihood
from seqmodel.state import init_model
from seqmodel.tokens import (
    TokenizeExample,
    TokenSpace,
    packed_example,
    sid_tokens,
    training_example,
)
from seqmodel.train import loss_fn, packed_tokens, row_length
from tests.seqmodel.conftest import random_unique_sids
from tests.seqmodel.test_train import CFG, LEVELS, N, V, _data, assert_resumes_exactly

SPACE = TokenSpace(num_levels=LEVELS, codebook_size=V)
PACKED = dataclasses.replace(CFG, layout="packed", dropout=0.0)


def test_packed_example_is_the_causal_example_without_its_padding():
    tok = sid_tokens(random_unique_sids(N, LEVELS, V), V)
    for items in ([3], [3, 7], [1, 2, 3, 4, 5, 6]):
        inputs, targets, weights = packed_example(tok, np.array(items), 4)
        pad_in, pad_tg, pad_w = training_example(tok, np.array(items), 4, "causal")
        n = len(inputs)
        assert n == min(len(items), 4) * LEVELS
        np.testing.assert_array_equal(pad_in[-n:], inputs)
        np.testing.assert_array_equal(pad_tg[-n:], targets)
        np.testing.assert_array_equal(pad_w[-n:], weights)
        assert pad_w[:-n].sum() == 0


def test_a_packed_row_scores_each_user_as_its_own_row_would():
    """Segment masking: the log-likelihoods of two users packed into one row equal those of
    each user alone in a left-padded row (rotary positions are relative)."""
    tok = sid_tokens(random_unique_sids(N, LEVELS, V), V)
    model = init_model(PACKED, SPACE)
    users = [np.array([5, 9]), np.array([11, 4])]
    T = row_length(PACKED, SPACE)
    parts = [packed_example(tok, u, PACKED.max_history) for u in users]
    inputs = np.zeros(T, np.int32)
    targets = np.zeros(T, np.int32)
    segments = np.zeros(T, np.int32)
    at = 0
    for s, (i, t, _) in enumerate(parts, start=1):
        inputs[at : at + len(i)], targets[at : at + len(i)], segments[at : at + len(i)] = i, t, s
        at += len(i)
    logits = model.target_logits(jnp.asarray(inputs[None]), None, jnp.asarray(segments[None]))
    packed_ll = np.asarray(token_log_likelihood(logits, jnp.asarray(targets[None]), SPACE))[0]
    at = 0
    for u in users:
        i, t, _ = training_example(tok, u, PACKED.max_history, "causal")
        alone = model.target_logits(jnp.asarray(i[None]))
        ll = np.asarray(token_log_likelihood(alone, jnp.asarray(t[None]), SPACE))[0]
        n = len(u) * LEVELS
        np.testing.assert_allclose(packed_ll[at : at + n], ll[-n:], rtol=1e-5, atol=1e-5)
        at += n
    # Without the segments the second user would attend to the first: the scores differ.
    mixed = model.target_logits(jnp.asarray(inputs[None]))
    mixed_ll = np.asarray(token_log_likelihood(mixed, jnp.asarray(targets[None]), SPACE))[0]
    n0 = len(users[0]) * LEVELS
    assert not np.allclose(mixed_ll[n0:at], packed_ll[n0:at], atol=1e-4)


def test_packed_batches_hold_every_user_once_per_round_with_fewer_rows():
    tok = sid_tokens(random_unique_sids(N, LEVELS, V), V)
    rng = np.random.default_rng(0)
    lists = [rng.choice(N, rng.integers(2, 5), replace=False) for _ in range(40)]
    h = Histories.from_lists(lists)
    cfg = dataclasses.replace(PACKED, max_history=8)  # rows of 24 tokens, users of 6 to 12
    T = row_length(cfg, SPACE)
    ds = packed_batches(
        HistorySource(h),
        TokenizeExample(tok, cfg.max_history, "packed"),
        row_length=T,
        batch_size=4,
        seed=0,
    )
    it = iter(ds)
    weighted, tokens, rows = 0.0, 0, 0
    while tokens < packed_tokens(h, cfg.max_history, SPACE):
        b = next(it)
        assert set(b) == {"inputs", "targets", "weights", "segments"}
        assert b["inputs"].shape == (4, T)
        # Padding is segment 0 and carries no weight; every segment starts on an item boundary
        # (BOS at a multiple of L), so position t predicts level t mod L.
        assert (b["weights"][b["segments"] == 0] == 0).all()
        starts = (b["segments"] != np.pad(b["segments"], ((0, 0), (1, 0)))[:, :-1]) & (
            b["segments"] > 0
        )
        assert (np.nonzero(starts)[1] % LEVELS == 0).all()
        assert (b["inputs"][starts] == 1).all()
        weighted += float(b["weights"].sum())
        tokens += int((b["segments"] > 0).sum())
        rows += 4
    # One user per row would take 40 rows; packing needs far fewer (about 2.5 users per row).
    assert rows <= 24
    assert weighted > 0


def test_packed_loss_counts_the_same_targets_as_causal_rows():
    data = _data()
    model = init_model(PACKED, SPACE)
    graphdef, params = nnx.split(model)
    tok = sid_tokens(data.sids, V)
    users = [data.train[u] for u in range(3)]
    T = 3 * row_length(PACKED, SPACE)  # room for three full users
    tf = TokenizeExample(tok, PACKED.max_history, "packed")
    parts = [tf.map({"items": u}) for u in users]
    row = {k: np.zeros(T, np.float32 if k == "weights" else np.int32) for k in parts[0]}
    row["segments"] = np.zeros(T, np.int32)
    at = 0
    for s, p in enumerate(parts, start=1):
        n = len(p["inputs"])
        for k in p:
            row[k][at : at + n] = p[k]
        row["segments"][at : at + n] = s
        at += n
    assert at <= T
    packed = {k: jnp.asarray(v[None]) for k, v in row.items()}
    causal_tf = TokenizeExample(tok, PACKED.max_history, "causal")
    ex = [causal_tf.map({"items": u}) for u in users]
    causal = {k: jnp.asarray(np.stack([e[k] for e in ex])) for k in ex[0]}
    lp, ap = loss_fn(params, graphdef, packed, None)
    lc, ac = loss_fn(params, graphdef, causal, None)
    assert float(ap["count"]) == float(ac["count"]) > 0
    np.testing.assert_allclose(float(lp), float(lc), rtol=1e-5)


def test_packed_layout_rejects_a_joint_draft_head():
    with pytest.raises(ValueError, match="packed"):
        dataclasses.replace(PACKED, draft_head="joint")


@pytest.mark.slow
def test_packed_training_resumes_exactly(tmp_path):
    cfg = dataclasses.replace(PACKED, dropout=0.1)
    assert assert_resumes_exactly(cfg, tmp_path, _data()).resumed.summary["steps"] == 4
