"""Tiny retriever fixtures: random unique SIDs, a small model config and its token space."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from seqmodel.config import SeqModelConfig
from seqmodel.model import Decoder
from seqmodel.tokens import TokenSpace

V = 8
NUM_LEVELS = 3  # L + 1


def random_unique_sids(n: int, num_levels: int, v: int, seed: int = 0) -> np.ndarray:
    """n distinct rows of codes in [0, v)."""
    rng = np.random.default_rng(seed)
    flat = rng.choice(v**num_levels, size=n, replace=False)
    return np.stack([(flat // v**i) % v for i in reversed(range(num_levels))], 1).astype(np.int32)


@pytest.fixture(scope="session")
def tiny_cfg() -> SeqModelConfig:
    return SeqModelConfig(
        num_layers=2, d_model=16, num_heads=2, mlp_dim=32, max_history=4, batch_size=4, dropout=0.0
    )


@pytest.fixture(scope="session")
def space() -> TokenSpace:
    return TokenSpace(num_levels=NUM_LEVELS, codebook_size=V)


@pytest.fixture(scope="session")
def model(tiny_cfg, space) -> Decoder:
    # Built under jit: eager init dispatches (and compiles) every random op one by one.
    return nnx.jit(lambda: Decoder(tiny_cfg, space, rngs=nnx.Rngs(0)))()


class JittedModel:
    """jit-compiled forward/prefill/step of a Decoder (eager nnx calls are slow in tests)."""

    def __init__(self, model: Decoder):
        graphdef, self.state = nnx.split(model)
        self._fwd = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t))
        self._prefill = jax.jit(lambda s, t: nnx.merge(graphdef, s).prefill(t))
        self._step = jax.jit(lambda s, c, lv, cache: nnx.merge(graphdef, s).step(c, lv, cache))

    def __call__(self, tokens):
        return self._fwd(self.state, tokens)

    def prefill(self, tokens):
        return self._prefill(self.state, tokens)

    def step(self, codes, level, cache):
        return self._step(self.state, codes, jnp.int32(level), cache)
