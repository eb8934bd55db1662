"""The parallel-codes retriever: scores and loss against numpy, heads at init, causality, the
SASRec harness's train-and-restore with a codes table, and its config checks."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from data.types import Histories
from seqmodel import parallel, sasrec
from seqmodel.config import ParallelCodesConfig
from seqmodel.trainer import read_metrics

CFG = ParallelCodesConfig(
    num_layers=1,
    d_model=16,
    num_heads=2,
    mlp_dim=32,
    max_history=6,
    batch_size=8,
    eval_every=2,
    max_steps=4,
    warmup_steps=1,
    dropout=0.0,
    eval_users=5,
    patience=10,
    num_codes=4,
    codebook_size=8,
    pca_dim=8,
)
N = 30
CODES = np.random.default_rng(0).integers(0, 8, (N, 4)).astype(np.int32)


def _model(codes=CODES, cfg=CFG):
    model = parallel.ParallelCodes(cfg, codes, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    # Non-zero heads, so the residual-SiLU path enters the brute-force checks.
    model.head_kernel[...] = jnp.asarray(0.3 * rng.normal(size=(4, 16, 16)), jnp.float32)
    model.head_bias[...] = jnp.asarray(0.3 * rng.normal(size=(4, 16)), jnp.float32)
    return model


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _code_logits_np(model, h):
    """The heads in float64 numpy: x_j = h + SiLU(W_j h + b_j), cos(x_j, E_j) / T."""
    W = np.asarray(model.head_kernel[...], np.float64)
    b = np.asarray(model.head_bias[...], np.float64)
    E = np.asarray(model.code_embed[...], np.float64)
    y = np.einsum("nd,mde->nme", h, W) + b[None]
    x = h[:, None, :] + y / (1 + np.exp(-y))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    E = E / np.linalg.norm(E, axis=-1, keepdims=True)
    return np.einsum("nmd,mvd->nmv", x, E) / CFG.temperature


def test_scores_are_the_mean_code_log_probability_of_every_item():
    model = _model()
    h = np.random.default_rng(2).normal(size=(3, 16))
    logp = _log_softmax(_code_logits_np(model, h))  # [3, M, V]
    want = np.stack([[logp[u, np.arange(4), CODES[i]].mean() for i in range(N)] for u in range(3)])
    got = np.asarray(model.scores(jnp.asarray(h, jnp.float32)))
    assert got.shape == (3, N)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_heads_start_as_the_state_itself():
    model = parallel.ParallelCodes(CFG, CODES, rngs=nnx.Rngs(0))
    h = jnp.asarray(np.random.default_rng(3).normal(size=(2, 16)), jnp.float32)
    E = model.code_embed[...]
    want = jnp.einsum(
        "nd,mvd->nmv",
        h / jnp.linalg.norm(h, axis=-1, keepdims=True),
        E / jnp.linalg.norm(E, axis=-1, keepdims=True),
    )
    np.testing.assert_allclose(model.code_logits(h) * CFG.temperature, want, atol=1e-5)


def test_loss_is_the_mean_per_code_cross_entropy():
    model = _model()
    graphdef, params, consts = nnx.split(model, nnx.Param, ...)
    rng = np.random.default_rng(4)
    rows = [sasrec.NextItems(6).map({"items": rng.integers(0, N, n)}) for n in (2, 4, 7)]
    batch = {k: jnp.asarray(np.stack([r[k] for r in rows])) for k in rows[0]}
    h = np.asarray(model.hidden(batch["inputs"]), np.float64)
    weights = np.asarray(batch["weights"])
    items = np.asarray(batch["targets"])[weights] - 1
    logp = _log_softmax(_code_logits_np(model, h[weights]))
    nll = -np.stack([logp[s, np.arange(4), CODES[i]] for s, i in enumerate(items)])
    want = nll.mean()  # over positions and codes alike: every position has M codes
    real = int(weights.sum())
    got, aux = sasrec.loss_fn(params, graphdef, batch, None, sasrec.capacity(real, 18), consts)
    assert int(aux["count"]) == real
    np.testing.assert_allclose(float(got), want, rtol=1e-4)


def test_input_is_the_mean_code_embedding_and_padding_is_zero():
    model = _model()
    x = np.asarray(model.item_vectors(jnp.array([[0, 5]])))
    E = np.asarray(model.code_embed[...])
    np.testing.assert_allclose(x[0, 0], 0.0)
    np.testing.assert_allclose(x[0, 1], E[np.arange(4), CODES[4]].mean(0), rtol=1e-5)


def test_output_at_t_ignores_later_items_and_uses_earlier_ones():
    model = _model()
    items = jnp.array([[0, 0, 3, 7, 9, 12]])
    base = model(items)[0, 3]
    later = model(items.at[0, 4].set(20))[0, 3]
    earlier = model(items.at[0, 2].set(20))[0, 3]
    np.testing.assert_allclose(base, later, atol=1e-5, err_msg="output at t saw a later item")
    assert float(jnp.abs(base - earlier).max()) > 1e-4, "output at t ignores an earlier item"


def test_top_k_ranks_by_the_scores():
    model = _model()
    graphdef, variables = nnx.split(model)
    items = sasrec.encode_items(Histories.from_lists([[1, 2, 3], [4]]), CFG.max_history)
    got = sasrec.top_k(graphdef, variables, items, k=5, batch_size=4)
    want = np.argsort(-np.asarray(model(jnp.asarray(items))[:, -1]), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(got, want)


def _histories(seed=0, users=40):
    rng = np.random.default_rng(seed)
    starts, lengths = rng.integers(0, N, users), rng.integers(3, 8, users)
    return Histories.from_lists(
        [[(s + j) % N for j in range(n)] for s, n in zip(starts, lengths, strict=True)]
    )


@pytest.mark.slow
def test_two_steps_then_restore_equals_four_straight(tmp_path):
    args = (_histories(), _histories(1, 5), np.arange(5, dtype=np.int32), N)
    spec = parallel.parallel_spec(CFG, CODES)
    kw = dict(model=spec, show_progress=False)
    _, straight, s1 = sasrec.train_and_evaluate(CFG, tmp_path / "a", *args, **kw)
    sasrec.train_and_evaluate(CFG, tmp_path / "b", *args, stop_after=2, **kw)
    _, resumed, s2 = sasrec.train_and_evaluate(CFG, tmp_path / "b", *args, **kw)
    assert s1["steps"] == s2["steps"] == 4
    # The returned variables hold the codes beside the trained parameters.
    np.testing.assert_array_equal(resumed["codes"][...], CODES)
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    logs = [read_metrics(tmp_path / d / "metrics.jsonl") for d in "ab"]
    for rows in logs:
        assert [r["step"] for r in rows] == [2, 4]
        assert all(np.isfinite(r["loss"]) for r in rows if "loss" in r)
        for r in rows:
            del r["train_seconds"]
    assert logs[0] == logs[1]


def test_other_codes_retrain_instead_of_resuming(tmp_path, capsys):
    args = (_histories(), _histories(1, 5), np.arange(5, dtype=np.int32), N)
    spec = parallel.parallel_spec(CFG, CODES)
    sasrec.train_and_evaluate(CFG, tmp_path, *args, model=spec, stop_after=2, show_progress=False)
    other = parallel.parallel_spec(CFG, (CODES + 1) % 8)
    _, _, summary = sasrec.train_and_evaluate(
        CFG, tmp_path, *args, model=other, stop_after=1, show_progress=False
    )
    assert summary["steps"] == 1, "resumed a checkpoint trained on other codes"
    assert "retraining it" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"pca_dim": 10}, "parallel.pca_dim=10 must be a multiple of parallel.num_codes=4"),
        ({"temperature": 0.0}, "parallel.temperature"),
        ({"codebook_size": 1}, "parallel.codebook_size"),
        ({"d_model": 18, "num_heads": 4}, "parallel.d_model=18 must split"),
    ],
)
def test_bad_config_is_one_line(kw, message):
    with pytest.raises(ValueError, match=message) as e:
        dataclasses.replace(CFG, **kw)
    assert "\n" not in str(e.value)


def test_codes_of_the_wrong_shape_or_range_are_refused():
    with pytest.raises(ValueError, match="parallel.num_codes"):
        parallel.ParallelCodes(CFG, CODES[:, :3], rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="parallel.codebook_size"):
        parallel.ParallelCodes(CFG, CODES + 8, rngs=nnx.Rngs(0))


COLD = np.array([29, 3, 11, 7, 0], np.int32)  # a cold set in no particular order


def test_scores_among_a_cold_set_are_the_brute_force_ones():
    model = _model()
    h = np.random.default_rng(4).normal(size=(3, 16))
    logp = _log_softmax(_code_logits_np(model, h))  # [3, M, V]
    want = np.stack([[logp[u, np.arange(4), CODES[i]].mean() for i in COLD] for u in range(3)])
    got = np.asarray(model.scores_among(jnp.asarray(h, jnp.float32), jnp.asarray(COLD)))
    assert got.shape == (3, len(COLD))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    full = np.asarray(model.scores(jnp.asarray(h, jnp.float32)))[:, COLD]
    np.testing.assert_allclose(got, full, rtol=1e-6, atol=1e-6)


def test_top_k_among_ranks_the_whole_cold_set_by_the_brute_force_scores():
    model = _model()
    graphdef, variables = nnx.split(model)
    items = sasrec.encode_items(Histories.from_lists([[1, 2, 3], [4], [5, 6]]), CFG.max_history)
    h = np.asarray(model.hidden(jnp.asarray(items))[:, -1], np.float64)
    logp = _log_softmax(_code_logits_np(model, h))
    brute = np.stack([[logp[u, np.arange(4), CODES[i]].mean() for i in COLD] for u in range(3)])
    got = parallel.top_k_among(graphdef, variables, items, COLD, k=3, batch_size=2)
    assert got.shape == (3, 3)
    np.testing.assert_array_equal(got[:, 0], COLD[brute.argmax(1)])
    np.testing.assert_array_equal(got, COLD[np.argsort(-brute, axis=1)[:, :3]])
    # Past the cold set's size the columns are padding.
    wide = parallel.top_k_among(graphdef, variables, items, COLD, k=7, batch_size=2)
    np.testing.assert_array_equal(np.sort(wide[:, :5], axis=1), np.tile(np.sort(COLD), (3, 1)))
    assert (wide[:, 5:] == -1).all()


def test_load_trained_restores_the_run_and_refuses_other_inputs(tmp_path):
    from data.errors import ArtifactError

    args = (_histories(), _histories(1, 5), np.arange(5, dtype=np.int32), N)
    spec = parallel.parallel_spec(CFG, CODES)
    with pytest.raises(ArtifactError, match="no finished parallel run; train it: `make it`"):
        sasrec.load_trained(CFG, tmp_path, *args, model=spec, rebuild="make it")
    _, trained, _ = sasrec.train_and_evaluate(CFG, tmp_path, *args, model=spec, show_progress=False)
    _, loaded = sasrec.load_trained(CFG, tmp_path, *args, model=spec, rebuild="make it")
    for a, b in zip(jax.tree.leaves(trained), jax.tree.leaves(loaded), strict=True):
        np.testing.assert_array_equal(a, b)
    other = parallel.parallel_spec(CFG, (CODES + 1) % 8)
    with pytest.raises(ArtifactError, match="inputs fingerprint differs"):
        sasrec.load_trained(CFG, tmp_path, *args, model=other, rebuild="make it")
    with pytest.raises(ArtifactError, match="retrain it: `make it`"):
        sasrec.load_trained(
            dataclasses.replace(CFG, temperature=0.5),
            tmp_path,
            *args,
            model=spec,
            rebuild="make it",
        )
