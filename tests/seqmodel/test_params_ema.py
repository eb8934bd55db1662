"""The parameters' moving average (`seqmodel.ema_decay`): its arithmetic, that validation and the
loaded retriever use it, that it resumes, and that it leaves other runs' fingerprints alone."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from seqmodel.config import SeqModelConfig, identity_fields
from seqmodel.inference import load_retriever
from seqmodel.state import ParamsEMA, TrainState, eval_params, track_params_ema
from tests.seqmodel.test_train import CFG, _data, assert_resumes_exactly

EMA_CFG = dataclasses.replace(CFG, ema_decay=0.9)


def test_average_follows_the_warmed_up_rate_by_hand():
    decay = 0.5
    tx = optax.chain(optax.sgd(1.0), track_params_ema(decay))
    params = {"w": jnp.array([1.0, -2.0])}
    state = tx.init(params)
    ema = np.array([1.0, -2.0])
    for t, g in enumerate(([0.5, 0.5], [1.0, -1.0], [-2.0, 0.25])):
        updates, state = tx.update({"w": jnp.array(g)}, state, params)
        params = optax.apply_updates(params, updates)
        rate = min(decay, (1 + t) / (10 + t))  # 0.1, 2/11, 0.25
        ema = rate * ema + (1 - rate) * np.asarray(params["w"])
        np.testing.assert_allclose(state[1].ema["w"], ema, rtol=1e-6)
    assert int(state[1].count) == 3
    # The average lags the parameters: it is not a copy of them.
    assert not np.allclose(state[1].ema["w"], params["w"])


def test_eval_params_reads_the_average_only_where_one_is_kept():
    params = {"w": jnp.ones(2)}
    plain = TrainState(step=0, params=params, opt_state=(optax.EmptyState(), ()))
    assert eval_params(plain) is params
    ema = ParamsEMA(jnp.zeros((), jnp.int32), {"w": jnp.zeros(2)})
    kept = TrainState(step=0, params=params, opt_state=((), ema))
    assert eval_params(kept) is ema.ema


def test_decay_is_validated_and_in_the_fingerprint():
    with pytest.raises(ValueError, match="seqmodel.ema_decay"):
        SeqModelConfig(ema_decay=1.0)
    with pytest.raises(ValueError, match="seqmodel.ema_decay"):
        SeqModelConfig(ema_decay=-0.1)
    assert identity_fields(CFG)["ema_decay"] == CFG.ema_decay != 0.9
    assert identity_fields(EMA_CFG)["ema_decay"] == 0.9


@pytest.mark.slow
def test_trained_retriever_decodes_with_the_average_and_resumes_exactly(tmp_path):
    cfg = dataclasses.replace(EMA_CFG, eval_every=4)  # one validation, at the last step
    data = _data(cfg=cfg)

    def averaged(result):
        return jax.tree.leaves(eval_params(result.state))

    # The stop at step 2 validates, the straight run does not: their logs differ by that row.
    run = assert_resumes_exactly(cfg, tmp_path, data, params=averaged, same_log=False)
    straight = run.straight

    # The loaded model holds the best (= final) checkpoint's average, not its raw parameters.
    assert straight.summary["best_step"] == 4
    loaded = jax.tree.leaves(nnx.state(load_retriever(tmp_path / "a"), nnx.Param))
    want = jax.tree.leaves(eval_params(straight.state))
    raw = jax.tree.leaves(straight.state.params)
    for got, w in zip(loaded, want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-6)
    assert any(not np.allclose(g, r) for g, r in zip(loaded, raw, strict=True))
