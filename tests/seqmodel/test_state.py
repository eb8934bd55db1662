"""The retriever's optimizer with its schedule length as an argument of the compiled step: the
same learning rates and updates, to the last bit, as with the length as a constant; optax's
schedule and AdamW to float32 rounding."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from seqmodel.config import SeqModelConfig
from seqmodel.state import (
    TrainState,
    init_model,
    make_optimizer,
    traced_warmup_cosine,
    warmup_cosine,
)
from seqmodel.tokens import TokenizeExample, TokenSpace, sid_tokens
from seqmodel.train import step_arguments, train_step
from tests.seqmodel.test_train import CFG, V, _data


def _bits(tree) -> list[np.ndarray]:
    return [np.atleast_1d(np.asarray(x)).view(np.uint8) for x in jax.tree.leaves(tree)]


def _fixed_rates(cfg: SeqModelConfig, total: int, counts: jax.Array) -> np.ndarray:
    # lax.map: one scalar step at a time, as in a train step.
    return np.asarray(jax.jit(lambda c: jax.lax.map(warmup_cosine(cfg, total), c))(counts))


def _traced_rates(cfg: SeqModelConfig, total: int, counts: jax.Array) -> np.ndarray:
    rates = jax.jit(lambda c, t: jax.lax.map(lambda x: traced_warmup_cosine(cfg, x, t), c))
    return np.asarray(rates(counts, jnp.int32(total)))


def _constant_rates(cfg: SeqModelConfig, total: int, counts: jax.Array) -> np.ndarray:
    rates = jax.jit(lambda c: jax.lax.map(lambda x: traced_warmup_cosine(cfg, x, total), c))
    return np.asarray(rates(counts))


@pytest.mark.parametrize("warmup", [0, 1, 50])
def test_traced_schedule_gives_optax_learning_rates_at_every_step(warmup):
    for lr in (2e-3, 3e-4):
        cfg = SeqModelConfig(learning_rate=lr, warmup_steps=warmup)
        for total in (1, 2, 50, 51, 352, 356, 1000):
            counts = jnp.arange(total + 3, dtype=jnp.int32)
            fixed = _fixed_rates(cfg, total, counts)
            traced = _traced_rates(cfg, total, counts)
            np.testing.assert_array_equal(_constant_rates(cfg, total, counts), traced)
            np.testing.assert_allclose(traced, fixed, rtol=2e-6, atol=1e-12)
            # The peak at the warmup's end (a shorter one in a run shorter than the warmup).
            np.testing.assert_allclose(fixed[min(warmup, total - 1)], lr, rtol=1e-6)


def _run(tx, steps: int, total_steps=None):
    params = {"w": jax.random.normal(jax.random.key(0), (24, 8)), "b": jnp.zeros(8)}

    @jax.jit
    def step(p, s, i, t):
        g = jax.tree.map(lambda x: jnp.sin(x * (i + 1.0)), p)
        extra = {} if t is None else {"total_steps": t}
        u, s = tx.update(g, s, p, **extra)
        return optax.apply_updates(p, u), s

    p, s = params, tx.init(params)
    for i in range(steps):
        p, s = step(p, s, jnp.float32(i), total_steps)
    return p, s


@pytest.mark.parametrize("total", [7, 130])
def test_optimizer_is_adamw_with_the_schedule_and_takes_its_length_at_update(total):
    cfg = dataclasses.replace(CFG, warmup_steps=50, weight_decay=0.05)
    reference = optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(warmup_cosine(cfg, total), weight_decay=cfg.weight_decay),
    )
    want = _run(reference, total)
    fixed = _run(make_optimizer(cfg, total), total)
    # Built for another length, told the real one at each update.
    traced = _run(make_optimizer(cfg, 3), total, jnp.int32(total))
    # The same state structure as optax's: checkpoints of either restore into the other.
    assert jax.tree.structure(want) == jax.tree.structure(fixed) == jax.tree.structure(traced)
    for a, b in zip(_bits(fixed), _bits(traced), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(fixed), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    # The length matters: told a wrong one, the updates differ.
    other = _run(make_optimizer(cfg, total), total, jnp.int32(total + 40))
    assert any((a != b).any() for a, b in zip(_bits(want), _bits(other), strict=True))


def test_train_step_with_seed_and_length_as_arguments_replays_the_constant_program():
    data = _data()
    space = TokenSpace(num_levels=data.sids.shape[1], codebook_size=V)
    tf = TokenizeExample(sid_tokens(data.sids, V), CFG.max_history, "causal")
    rows = [tf.map({"items": data.train[u]}) for u in range(8)]
    batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    seed, total = 3, 6
    results = []
    for args in (None, step_arguments(seed, total)):
        graphdef, params = nnx.split(init_model(CFG, space))
        tx = make_optimizer(CFG, total if args is None else 1)
        state = TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))
        if args is None:
            fn = jax.jit(functools.partial(train_step, graphdef, tx, seed))
        else:
            base = jax.jit(functools.partial(train_step, graphdef, tx))
            fn = functools.partial(base, args["seed"], total_steps=args["total_steps"])
        for _ in range(3):
            state, metrics = fn(state, batch)
        results.append((state, metrics["loss"]))
    for a, b in zip(_bits(results[0]), _bits(results[1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_step_arguments_keep_a_seed_outside_int32_a_constant():
    assert step_arguments(2**31, 10) is None and step_arguments(-1, 10) is None
    args = step_arguments(7, 10)
    assert args["seed"].dtype == jnp.int32 and int(args["total_steps"]) == 10
