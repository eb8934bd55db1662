"""The parallel-codes retriever (RPG, Hou et al., KDD 2025): an item is the mean of its M code
embeddings; M heads predict the next item's M codes at once, each a cosine softmax over its own
code table; an item's score is its codes' mean log-probability, over the whole catalog."""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Float, Int

from data.pipeline import padded_batches
from seqmodel.config import ParallelCodesConfig
from seqmodel.model import DecoderBlock, RMSNorm
from seqmodel.sasrec import PAD_ITEM, ModelSpec, item_states


class CodeTable(nnx.Variable):
    """The items' codes: a constant of the model, never trained (not an nnx.Param)."""


def _unit(x: jax.Array) -> jax.Array:
    # rsqrt(|x|^2 + eps), not x / |x|: a PAD position's state can be exactly 0, and the norm's
    # gradient there is 0/0, a NaN that a zero loss weight does not remove.
    return x * jax.lax.rsqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True) + 1e-12)


class ParallelCodes(nnx.Module):
    """Code embeddings (M tables of V x D, input and output tied), causal DecoderBlocks over
    the item sequence, and M residual heads x_j = h + SiLU(W_j h + b_j) (zero-initialised, so
    x_j = h at the start) whose logits are cos(x_j, E_j[v]) / temperature."""

    def __init__(self, cfg: ParallelCodesConfig, codes: Int[np.ndarray, "N M"], *, rngs: nnx.Rngs):
        M, V, D = cfg.num_codes, cfg.codebook_size, cfg.d_model
        if codes.ndim != 2 or codes.shape[1] != M:
            raise ValueError(f"codes: expected [N, {M}] (parallel.num_codes), got {codes.shape}")
        if codes.size and (codes.min() < 0 or codes.max() >= V):
            raise ValueError(f"codes: values must be in [0, {V}) (parallel.codebook_size)")
        self.cfg = cfg
        self.codes = CodeTable(jnp.asarray(codes, jnp.int32))
        self.code_embed = nnx.Param(nnx.initializers.normal(D**-0.5)(rngs.params(), (M, V, D)))
        self.blocks = nnx.List([DecoderBlock(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(D, rngs=rngs)
        self.head_kernel = nnx.Param(jnp.zeros((M, D, D), jnp.float32))
        self.head_bias = nnx.Param(jnp.zeros((M, D), jnp.float32))

    def item_vectors(self, items: Int[Array, "B T"]) -> Float[Array, "B T D"]:
        """Each item's mean code embedding; PAD (id 0) gives the zero vector."""
        codes_BTM = self.codes[...][jnp.maximum(items - 1, 0)]
        E_MVD = self.code_embed[...]
        M = E_MVD.shape[0]
        # One [B, T, D] gather per code: gathering all M at once would hold [B, T, M, D].
        x_BTD = sum(E_MVD[j][codes_BTM[..., j]] for j in range(M)) / M
        return jnp.where((items != PAD_ITEM)[..., None], x_BTD, 0.0)

    def hidden(
        self, items: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> Float[Array, "B T D"]:
        """The normed state after each position, from which every item is scored."""
        x = self.item_vectors(items)
        valid = items != PAD_ITEM
        return item_states(self.blocks, self.norm, x, valid, self.cfg.dropout, dropout_key)

    def code_logits(self, h: Float[Array, "*B D"]) -> Float[Array, "*B M V"]:
        """Each head's logits over its V codes: cosine of its state and the code embeddings,
        divided by the temperature."""
        b_MD = self.head_bias[...]
        y_BMD = jnp.einsum("...d,mde->...me", h, self.head_kernel[...])
        y_BMD = y_BMD + b_MD.reshape((1,) * (h.ndim - 1) + b_MD.shape)
        x_BMD = h[..., None, :] + jax.nn.silu(y_BMD)
        cos_BMV = jnp.einsum("...md,mvd->...mv", _unit(x_BMD), _unit(self.code_embed[...]))
        return cos_BMV / self.cfg.temperature

    def scores(self, h: Float[Array, "*B D"]) -> Float[Array, "*B N"]:
        """Every catalog item's score: the mean over the heads of log p(the item's code)."""
        logp_BMV = jax.nn.log_softmax(self.code_logits(h).astype(jnp.float32), axis=-1)
        codes_NM = self.codes[...]
        M = codes_NM.shape[1]
        # One [*B, N] gather per head, not a [*B, N, M] array.
        return sum(logp_BMV[..., j, :][..., codes_NM[:, j]] for j in range(M)) / M

    def scores_among(
        self, h: Float[Array, "*B D"], items: Int[Array, " C"]
    ) -> Float[Array, "*B C"]:
        """`scores(h)[..., items]`, gathering the codes of `items` (catalog indices) alone: a
        cold set's scores cost C gathers per head, not N."""
        logp_BMV = jax.nn.log_softmax(self.code_logits(h).astype(jnp.float32), axis=-1)
        codes_CM = self.codes[...][items]
        M = codes_CM.shape[1]
        return sum(logp_BMV[..., j, :][..., codes_CM[:, j]] for j in range(M)) / M

    def next_item_nll(self, h: Float[Array, "S D"], items: Int[Array, " S"]) -> Float[Array, " S"]:
        """The mean over the heads of -log p(the item's code): RPG's loss."""
        logp_SMV = jax.nn.log_softmax(self.code_logits(h).astype(jnp.float32), axis=-1)
        target_SM = self.codes[...][items]
        return -jnp.take_along_axis(logp_SMV, target_SM[..., None], axis=-1)[..., 0].mean(-1)

    def __call__(
        self, items: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> Float[Array, "B T N"]:
        """Scores of every catalog item as the next item, at every position."""
        return self.scores(self.hidden(items, dropout_key))


def parallel_spec(cfg: ParallelCodesConfig, codes: Int[np.ndarray, "N M"]) -> ModelSpec:
    """ParallelCodes over these items' codes, configured by the `parallel` section; the codes
    enter the run's inputs fingerprint."""
    codes = np.ascontiguousarray(codes, np.int32)
    return ModelSpec("parallel", lambda rngs: ParallelCodes(cfg, codes, rngs=rngs), (codes,))


@functools.partial(jax.jit, static_argnums=0, static_argnames="k")
def _rank_among(
    graphdef: nnx.GraphDef,
    variables: Any,
    batch: Int[Array, "B T"],
    items: Int[Array, " C"],
    *,
    k: int,
) -> Int[Array, "B k"]:
    # The last position's state alone, as sasrec._rank.
    model = nnx.merge(graphdef, variables)
    return jax.lax.top_k(model.scores_among(model.hidden(batch)[:, -1], items), k)[1]


def top_k_among(
    graphdef: nnx.GraphDef,
    variables: Any,
    histories: Int[np.ndarray, "U T"],
    items: Int[np.ndarray, " C"],
    *,
    k: int,
    batch_size: int,
) -> Int[np.ndarray, "U k"]:
    """The k best-scored of `items` (catalog indices, such as a cold set) after each encoded
    history (sasrec.encode_items), exact over the whole set, as catalog indices; -1 pads the
    columns past C."""
    items = np.asarray(items, np.int32)
    if items.ndim != 1 or not len(items):
        raise ValueError(f"items: expected a non-empty 1-D array, got shape {items.shape}")
    kk = min(k, len(items))
    on_device = jax.device_put(items)
    pos = [
        jax.device_get(_rank_among(graphdef, variables, jax.device_put(b), on_device, k=kk))
        for b in padded_batches(histories, batch_size=batch_size)
    ]
    out = np.full((len(histories), k), -1, np.int64)
    out[:, :kk] = items[np.concatenate(pos)[: len(histories)]]
    return out
