"""A small causal text LM (prompt -> continuation) on the retriever's blocks; KV-cache decoding.

Layout: a prompt left-padded to P tokens, then the continuation from slot P on. Positions are
slot indices (pads included), in training and in decoding alike, so the cache steps see exactly
the positions the model was trained with.
"""

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from seqmodel.config import SeqModelConfig
from seqmodel.model import DecoderBlock, RMSNorm, _causal_mask


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextLMConfig:
    """Shape of the LM; `pad_id` marks prompt padding (never attended to)."""

    vocab_size: int
    pad_id: int
    num_layers: int = 2
    d_model: int = 128  # D
    num_heads: int = 4  # H
    mlp_dim: int = 384
    dropout: float = 0.1
    seed: int = 0

    def block_config(self) -> SeqModelConfig:
        """The retriever's config type, which sizes `DecoderBlock` (and checks the head split)."""
        return SeqModelConfig(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout=self.dropout,
        )


@flax.struct.dataclass
class TextCache:
    """Keys/values of every layer over P + max_new slots; leaves lead with B (or B, K)."""

    k: jax.Array  # [B, layers, S, H, d]
    v: jax.Array  # [B, layers, S, H, d]
    key_valid: jax.Array  # bool [B, S]: real prompt tokens and every continuation slot
    prompt_len: int = flax.struct.field(pytree_node=False)  # P: static, survives tree maps


class TextLM(nnx.Module):
    """Token embedding, DecoderBlocks, final norm and a vocabulary head."""

    def __init__(self, cfg: TextLMConfig, *, rngs: nnx.Rngs):
        block_cfg = cfg.block_config()
        self.cfg = cfg
        self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([DecoderBlock(block_cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.d_model, rngs=rngs)
        self.head = nnx.Linear(
            cfg.d_model,
            cfg.vocab_size,
            use_bias=False,
            kernel_init=nnx.initializers.normal(0.02),
            rngs=rngs,
        )

    def hidden(
        self, tokens: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> Float[Array, "B T D"]:
        """Final-norm states of a left-padded prompt + continuation (teacher forcing)."""
        B, T = tokens.shape
        positions = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
        mask = _causal_mask(tokens != self.cfg.pad_id)
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            key = None if dropout_key is None else jax.random.fold_in(dropout_key, i)
            x, _ = block(x, positions, mask, key)
        return self.norm(x)

    def logits_at(self, h_BTD: Float[Array, "B T D"]) -> Float[Array, "B T V"]:
        return self.head(h_BTD)

    def prefill(
        self, prompt: Int[Array, "B P"], max_new: int
    ) -> tuple[Float[Array, "B V"], TextCache]:
        """Logits of the first continuation token and a cache with room for `max_new` more."""
        B, P = prompt.shape
        S = P + max_new
        positions = jnp.broadcast_to(jnp.arange(P)[None, :], (B, P))
        valid = prompt != self.cfg.pad_id
        key_valid = jnp.concatenate([valid, jnp.ones((B, max_new), bool)], axis=1)
        # Prompt queries never see the (still empty) continuation slots.
        mask = jnp.concatenate([_causal_mask(valid), jnp.zeros((B, P, max_new), bool)], axis=2)
        x = self.embed(prompt)
        H, d = self.cfg.num_heads, self.cfg.d_model // self.cfg.num_heads
        empty = jnp.zeros((B, S, H, d), x.dtype)
        ks, vs = [], []
        for block in self.blocks:
            x, (k, v) = block(x, positions, mask, None, (empty, empty), 0)
            ks.append(k)
            vs.append(v)
        logits = self.head(self.norm(x[:, -1]))
        cache = TextCache(k=jnp.stack(ks, 1), v=jnp.stack(vs, 1), key_valid=key_valid, prompt_len=P)
        return logits, cache

    def step(
        self, tokens: Int[Array, "B K"], step: int | Int[Array, ""], cache: TextCache
    ) -> tuple[Float[Array, "B K V"], TextCache]:
        """Feeds continuation token `step - 1` (slot P + step - 1) of each row; cache [B, K, ..]."""
        B, K = tokens.shape
        S = cache.key_valid.shape[-1]
        flat = jax.tree.map(lambda a: a.reshape(B * K, *a.shape[2:]), cache)
        pos = cache.prompt_len + step - 1
        positions = jnp.full((B * K, 1), pos, jnp.int32)
        mask = (flat.key_valid & (jnp.arange(S)[None, :] <= pos))[:, None, :]
        x = self.embed(tokens.reshape(B * K, 1))
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            x, (k, v) = block(x, positions, mask, None, (flat.k[:, i], flat.v[:, i]), pos)
            ks.append(k)
            vs.append(v)
        logits = self.head(self.norm(x[:, 0]))
        new = dataclasses.replace(flat, k=jnp.stack(ks, 1), v=jnp.stack(vs, 1))
        new = jax.tree.map(lambda a: a.reshape(B, K, *a.shape[1:]), new)
        return logits.reshape(B, K, -1), new
