"""Beam scores other than the plain joint log-probability: per-level weights and prefix biases.

A beam's score is sum_l weights[l] * log p(c_l | prefix) + bias_l, where level 0's bias is
`first_bias[c_0]` and level l >= 1's is `bias[l - 1, c_{l-1}, c_l]` (it sees the previous code).
The identity scoring (weights 1, biases 0) is the model's joint log-probability.

Cold-start use (`prior_correction`): a model trained without the cold items ranks them through
the training popularity of their code prefixes, which says nothing about new items; subtracting a
multiple of the log prior of the first codes removes part of that bias, and weights below 1 on the
deep levels cut the say of codes the model never saw under those prefixes.
"""

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from decoding.static_index import ArrayInput

# (tokens [B, K], level, cache) -> (log-probs or level scores [B, K, V], cache)
_StepFn = Callable[..., tuple[Float[Array, "B K V"], PyTree]]


@dataclasses.dataclass(frozen=True)
class LevelScoring:
    """Per-level log-prob weights [L]; additive biases: level 0 [V], levels >= 1 [L-1, V, V]."""

    weights: Float[Array, " L"]
    first_bias: Float[Array, " V"]
    bias: Float[Array, "Lm1 V V"]

    @property
    def num_levels(self) -> int:
        return self.weights.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.first_bias.shape[0]

    @classmethod
    def identity(cls, num_levels: int, vocab_size: int) -> "LevelScoring":
        return cls.build(np.ones(num_levels), np.zeros(vocab_size))

    @classmethod
    def build(
        cls, weights: ArrayInput, first_bias: ArrayInput, bias: ArrayInput | None = None
    ) -> "LevelScoring":
        """From array-likes; `bias` None means zeros. Raises ValueError on inconsistent shapes."""
        w = np.asarray(weights, np.float32)
        b0 = np.asarray(first_bias, np.float32)
        if w.ndim != 1 or w.size < 1 or b0.ndim != 1 or b0.size < 1:
            raise ValueError(
                f"scoring: weights must be [L] and first_bias [V], got {w.shape}, {b0.shape}"
            )
        L, V = w.size, b0.size
        b = np.zeros((L - 1, V, V), np.float32) if bias is None else np.asarray(bias, np.float32)
        if b.shape != (L - 1, V, V):
            raise ValueError(f"scoring: bias must be [{L - 1}, {V}, {V}], got {b.shape}")
        if not (np.isfinite(w).all() and np.isfinite(b0).all() and np.isfinite(b).all()):
            raise ValueError("scoring: weights and biases must be finite")
        return cls(jnp.asarray(w), jnp.asarray(b0), jnp.asarray(b))

    def first(self, log_probs: Float[Array, "B V"]) -> Float[Array, "B V"]:
        """Level 0's scores from the prefill's log-probs."""
        return self.weights[0] * log_probs + self.first_bias[None, :]

    def wrap(self, step_fn: _StepFn) -> _StepFn:
        """`step_fn` with its log-probs [B, K, V] turned into level scores (level may be traced)."""

        def step(
            tokens: Int[Array, "B K"], level: int | Int[Array, ""], cache: PyTree
        ) -> tuple[Float[Array, "B K V"], PyTree]:
            log_probs, cache = step_fn(tokens, level, cache)
            level = jnp.asarray(level)
            scores = self.weights[level] * log_probs + self.bias[level - 1][tokens]
            return scores, cache

        return step


jax.tree_util.register_dataclass(
    LevelScoring, data_fields=["weights", "first_bias", "bias"], meta_fields=[]
)


def prefix_log_prior(
    event_sids: Int[np.ndarray, "M L"], vocab_size: int, *, levels: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """Add-one smoothed log p(c_0) [V] and log p(c_l | c_{l-1}) [L-1, V, V] for l < `levels`
    (zeros for the deeper levels), counted over the SIDs of `M` events (e.g. training targets)."""
    sids = np.asarray(event_sids)
    if sids.ndim != 2 or sids.shape[0] == 0:
        raise ValueError(f"prefix_log_prior: expected a non-empty [M, L] array, got {sids.shape}")
    M, L = sids.shape
    V = vocab_size
    if not 1 <= levels <= L:
        raise ValueError(f"prefix_log_prior: levels must be in [1, {L}], got {levels}")
    n0 = np.bincount(sids[:, 0], minlength=V).astype(np.float64)
    first = np.log((n0 + 1) / (M + V))
    bias = np.zeros((L - 1, V, V))
    for level in range(1, levels):
        prev, cur = sids[:, level - 1], sids[:, level]
        n = np.bincount(prev * V + cur, minlength=V * V).reshape(V, V).astype(np.float64)
        bias[level - 1] = np.log((n + 1) / (n.sum(1, keepdims=True) + V))
    return first.astype(np.float32), bias.astype(np.float32)


def prior_correction(
    event_sids: Int[np.ndarray, "M L"],
    vocab_size: int,
    *,
    prior_weight: float,
    level_weights: ArrayInput = (),
    prior_levels: int = 2,
) -> LevelScoring:
    """Scores sum_l w_l log p(c_l | ...) - prior_weight * log p_prior(first `prior_levels` codes).

    `level_weights` empty means 1 at every level. The prior is counted over `event_sids`.
    """
    L = np.asarray(event_sids).shape[1]
    weights = np.ones(L) if len(level_weights) == 0 else np.asarray(level_weights, np.float64)
    if weights.shape != (L,):
        raise ValueError(f"level weights: expected {L} values (one per level), got {len(weights)}")
    if prior_weight == 0:
        return LevelScoring.build(weights, np.zeros(vocab_size))
    first, bias = prefix_log_prior(event_sids, vocab_size, levels=prior_levels)
    return LevelScoring.build(weights, -prior_weight * first, -prior_weight * bias)
