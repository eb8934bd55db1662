"""RQ-VAE training: artifacts, same seed same codes, exact resume, dead-code restarts, bad input."""

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rqvae import load_sids, train
from rqvae.config import RQVAEConfig

CFG = RQVAEConfig(
    num_levels=3,
    codebook_size=8,
    latent_dim=4,
    hidden_dims=(16,),
    batch_size=16,
    num_steps=6,
    warmup_steps=2,
    restart_every=2,
    checkpoint_every=2,
    learning_rate=1e-2,
)


def _data(n=48, e=8, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(4, e))
    x = centers[rng.integers(0, 4, n)] + 0.3 * rng.normal(size=(n, e))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _run(tmp_path, name, cfg=CFG, x=None, cats=None, **kw):
    x = _data() if x is None else x
    asins = [f"A{i}" for i in range(len(x))]
    cats = [f"c{i % 3}" for i in range(len(x))] if cats is None else cats
    return train.train_and_evaluate(
        cfg, x, tmp_path / name, asins=asins, leaf_categories=cats, progress=False, **kw
    )


@pytest.mark.slow
def test_artifacts_and_unique_sids(tmp_path):
    m = _run(tmp_path, "a")
    sids, asins = load_sids(tmp_path / "a")
    assert sids.shape == (48, 4) and sids.dtype == np.int32
    assert asins[:2] == ["A0", "A1"]
    assert len(np.unique(sids, axis=0)) == 48
    assert sids.min() >= 0 and sids.max() < CFG.codebook_size
    saved = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert saved["collision_level_max"] == m["collision_level_max"] == sids[:, -1].max() + 1
    assert len(saved["levels"]) == 3 and np.isfinite(saved["reconstruction_loss"])
    assert saved["semantic_level1"]["items_with_category"] == 48
    assert json.loads((tmp_path / "a" / "config.json").read_text())["codebook_size"] == 8


@pytest.mark.slow
def test_catalog_without_categories_skips_the_semantic_check(tmp_path):
    # Sports' metadata has keywords only: no leaf category for any item.
    m = _run(tmp_path, "nocat", cats=[""] * 48)
    assert m["semantic_level1"] is None
    assert len(np.unique(load_sids(tmp_path / "nocat")[0], axis=0)) == 48


@pytest.mark.slow
def test_same_seed_same_codes_other_seed_other_codes(tmp_path):
    _run(tmp_path, "a")
    _run(tmp_path, "b")
    _run(tmp_path, "c", cfg=dataclasses.replace(CFG, seed=1))
    a, b, c = (load_sids(tmp_path / n)[0] for n in "abc")
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_codes(tmp_path):
    _run(tmp_path, "full")

    def kill_at_3(step):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "killed", on_step=kill_at_3)
    assert not (tmp_path / "killed" / "sids.npy").exists()
    m = _run(tmp_path, "killed")
    assert m["resumed_from_step"] == 2
    np.testing.assert_array_equal(
        load_sids(tmp_path / "killed")[0], load_sids(tmp_path / "full")[0]
    )
    full = json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert m["reconstruction_loss"] == full["reconstruction_loss"]


@pytest.mark.slow
def test_rerun_after_completion_reuses_the_checkpoint(tmp_path):
    a = _run(tmp_path, "a")
    b = _run(tmp_path, "a")
    assert b["resumed_from_step"] == CFG.num_steps
    assert b["reconstruction_loss"] == a["reconstruction_loss"]


@pytest.mark.slow
def test_changed_embeddings_or_config_retrain_in_one_line_instead_of_resuming(tmp_path, capsys):
    for name, kwargs, why in (
        ("e", {"x": _data(e=6)}, "embedding dimension 6 differs"),
        ("cfg", {"cfg": dataclasses.replace(CFG, latent_dim=3)}, "latent_dim"),
        ("emb", {"x": _data(seed=1)}, "different item embeddings"),
    ):
        _run(tmp_path, name)
        capsys.readouterr()
        m = _run(tmp_path, name, **kwargs)
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and why in lines[0] and "retraining" in lines[0], lines
        assert m["resumed_from_step"] == 0


def test_nan_embeddings_are_an_error(tmp_path):
    x = _data()
    x[5, 2] = np.nan
    with pytest.raises(ValueError, match="row 5"):
        _run(tmp_path, "a", x=x)
    assert not (tmp_path / "a").exists()


def test_fewer_items_than_codes_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="codebook_size=8.*only 6 items"):
        _run(tmp_path, "a", x=_data(n=6))


@pytest.mark.slow
def test_fit_on_warm_items_encodes_the_others(tmp_path):
    mask = np.arange(48) < 40
    m = _run(tmp_path, "a", cfg=dataclasses.replace(CFG, fit_on="warm"), fit_mask=mask)
    assert m["num_fit_items"] == 40 and m["num_items"] == 48
    assert m["reconstruction_loss_other_items"] is not None
    assert len(load_sids(tmp_path / "a")[0]) == 48


def test_restart_moves_only_dead_codes_onto_residuals():
    x = _data()
    graphdef, state = train._new_state(CFG, 8, None)
    usage = np.ones((3, 8), np.int32)
    usage[0, [2, 5]] = 0
    state = state.replace(usage=jnp.asarray(usage))
    before = nnx.merge(graphdef, state.params).quantizer.levels[0].codebook[...]
    restart = jax.jit(functools.partial(train.restart_dead_codes, graphdef, 0))
    new, n = restart(state, jnp.asarray(x), jnp.arange(16))
    after = nnx.merge(graphdef, new.params).quantizer.levels[0].codebook[...]
    np.testing.assert_array_equal(n, [2, 0, 0])
    keep = np.setdiff1d(np.arange(8), [2, 5])
    np.testing.assert_array_equal(after[keep], before[keep])
    z = nnx.merge(graphdef, state.params).encoder(jnp.asarray(x[:16]))
    for code in (2, 5):  # each restarted code sits (up to the noise) on a batch residual
        assert float(jnp.min(jnp.linalg.norm(z - after[code][None], axis=1))) < 1e-2
    assert int(new.usage.sum()) == 0


def test_train_step_needs_no_implicit_transfers(tmp_path):
    x = _data()
    graphdef, state = train._new_state(CFG, 8, None)
    step = jax.jit(
        functools.partial(train.train_step, graphdef, train._optimizer(CFG), 0.25),
        donate_argnames="state",
    )
    data = jax.device_put(x)
    idx = jax.device_put(np.arange(16, dtype=np.int32))
    step(state, data, idx)  # compile outside the guard
    _, state = train._new_state(CFG, 8, None)
    with jax.transfer_guard("disallow"):
        state, metrics = step(state, data, idx)
        got = jax.device_get(metrics)
    assert np.isfinite(got["loss"]) and int(jax.device_get(state.step)) == 1
