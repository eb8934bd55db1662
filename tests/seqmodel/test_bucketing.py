"""The bucketed layout: one user per row as in the causal layout, each batch drawn from users of
similar history length and cut to its bucket's width."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from data.pipeline import BucketedBatches, HistorySource, bucket_widths
from data.types import Histories
from seqmodel.state import init_model
from seqmodel.tokens import PAD, TokenizeExample, TokenSpace, sid_tokens
from seqmodel.train import loss_fn
from tests.seqmodel.conftest import random_unique_sids
from tests.seqmodel.test_train import CFG, LEVELS, N, V, _data, assert_resumes_exactly

SPACE = TokenSpace(num_levels=LEVELS, codebook_size=V)
BUCKETED = dataclasses.replace(CFG, layout="bucketed")


def _source(num_users=50, max_len=9, seed=0):
    rng = np.random.default_rng(seed)
    lists = [rng.choice(N, rng.integers(1, max_len + 1), replace=False) for _ in range(num_users)]
    h = Histories.from_lists(lists)
    tok = sid_tokens(random_unique_sids(N, LEVELS, V), V)
    return h, tok


def _batches(h, tok, max_history, batch_size, seed=0):
    lengths = np.minimum(h.lengths(), max_history)
    widths = bucket_widths(lengths)
    src = BucketedBatches(
        HistorySource(h),
        TokenizeExample(tok, max_history, "causal"),
        lengths,
        widths,
        batch_size=batch_size,
        seed=seed,
        unit=LEVELS,
    )
    return src, lengths, widths


def test_an_epoch_holds_each_user_at_most_once_all_but_each_buckets_remainder():
    h, tok = _source()
    src, lengths, widths = _batches(h, tok, max_history=6, batch_size=4)
    for epoch in (0, 1):
        ids = np.concatenate(src.plan(epoch))
        assert len(ids) == len(set(ids.tolist())) == src.steps_per_epoch * 4
        bucket = np.searchsorted(widths, lengths)
        left = np.bincount(bucket[np.setdiff1d(np.arange(len(h)), ids)], minlength=len(widths))
        assert (left < 4).all(), "a bucket left a whole batch out of the epoch"
    assert not all(np.array_equal(a, b) for a, b in zip(src.plan(0), src.plan(1), strict=True)), (
        "every epoch in the same order"
    )


def test_each_row_is_the_causal_row_cut_to_the_batch_width_without_losing_a_token():
    h, tok = _source()
    src, lengths, widths = _batches(h, tok, max_history=6, batch_size=4)
    full = TokenizeExample(tok, 6, "causal")
    seen_widths = set()
    for i in range(2 * src.steps_per_epoch):
        batch = src[i]
        ids = src.plan(i // src.steps_per_epoch)[i % src.steps_per_epoch]
        T = batch["inputs"].shape[1]
        assert T % LEVELS == 0 and T // LEVELS in widths
        assert (lengths[ids] <= T // LEVELS).all()
        seen_widths.add(T)
        for row, u in enumerate(ids):
            ref = full.map({"items": h[int(u)]})
            for k in ("inputs", "targets", "weights"):
                np.testing.assert_array_equal(batch[k][row], ref[k][-T:])
            # What is cut is padding: no input token and no weighted target (the target left of
            # BOS is BOS itself, unweighted).
            assert not ref["inputs"][:-T].any() and not ref["weights"][:-T].any()
    assert len(seen_widths) > 1, "one width only: nothing was bucketed"


def test_a_cut_row_has_the_loss_of_the_full_row():
    """Left padding is masked and rotary positions are relative: cutting padding changes nothing."""
    data = _data()
    tf = TokenizeExample(sid_tokens(data.sids, V), CFG.max_history, "causal")
    short = [u for u in range(len(data.train)) if len(data.train[u]) == 2][:4]
    assert len(short) == 4
    ex = [tf.map({"items": data.train[u]}) for u in short]
    full = {k: jnp.asarray(np.stack([e[k] for e in ex])) for k in ex[0]}
    cut = {k: v[:, -2 * LEVELS :] for k, v in full.items()}
    assert int((full["inputs"][:, : -2 * LEVELS] != PAD).sum()) == 0
    graphdef, params = nnx.split(init_model(CFG, SPACE))
    loss = jax.jit(loss_fn, static_argnums=1)
    a, _ = loss(params, graphdef, full, None)
    b, _ = loss(params, graphdef, cut, None)
    np.testing.assert_allclose(float(a), float(b), rtol=1e-5)


def test_widths_follow_the_length_quantiles():
    assert bucket_widths([3] * 50 + [4] * 30 + [20] * 20) == [3, 4, 20]
    with pytest.raises(ValueError, match="exceeds every width"):
        BucketedBatches(
            HistorySource(Histories.from_lists([[1, 2, 3]])),
            lambda r: r,
            [3],
            [2],
            batch_size=1,
            seed=0,
            unit=LEVELS,
        )


@pytest.mark.slow
def test_bucketed_training_resumes_exactly(tmp_path):
    assert assert_resumes_exactly(BUCKETED, tmp_path, _data()).resumed.summary["steps"] == 4


def test_every_batch_divides_its_loss_by_the_mean_row_weight_of_the_epoch():
    """A token weighs the same in a batch of short histories as in one of long ones."""
    h, tok = _source()
    src, _, _ = _batches(h, tok, max_history=6, batch_size=4)
    full = TokenizeExample(tok, 6, "causal")
    mean = np.mean([full.map({"items": h[u]})["weights"].sum() for u in range(len(h))])
    sums = set()
    for i in range(src.steps_per_epoch):
        batch = src[i]
        np.testing.assert_allclose(batch["norm"], mean, rtol=1e-6)
        sums.add(float(batch["weights"].sum()))
    assert len(sums) > 1, "every batch had the same weight: the test shows nothing"
    data = _data()
    graphdef, params = nnx.split(init_model(CFG, SPACE))
    tf = TokenizeExample(sid_tokens(data.sids, V), CFG.max_history, "causal")
    ex = [tf.map({"items": data.train[u]}) for u in range(4)]
    batch = {k: jnp.asarray(np.stack([e[k] for e in ex])) for k in ex[0]}
    plain, aux = loss_fn(params, graphdef, batch, None)
    normed, _ = loss_fn(params, graphdef, {**batch, "norm": jnp.full(4, 10.0)}, None)
    np.testing.assert_allclose(float(normed), float(aux["nll_sum"]) / 40.0, rtol=1e-5)
    np.testing.assert_allclose(float(plain), float(aux["nll_sum"] / aux["count"]), rtol=1e-5)
