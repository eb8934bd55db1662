"""The decoder-only retriever: pre-norm rotary attention blocks, gated MLP, KV-cache decoding."""

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from seqmodel.config import SeqModelConfig
from seqmodel.draft import DraftHead
from seqmodel.tokens import NUM_SPECIAL, PAD, TokenSpace


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
    """Inverted dropout of `x` at `rate`; the identity without a key (evaluation)."""
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def _rope(x_BTHd: jax.Array, positions_BT: jax.Array) -> jax.Array:
    half = x_BTHd.shape[-1] // 2
    freqs = 10000.0 ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles_BTf = positions_BT[:, :, None].astype(jnp.float32) * freqs[None, None, :]
    sin, cos = jnp.sin(angles_BTf)[:, :, None, :], jnp.cos(angles_BTf)[:, :, None, :]
    x1, x2 = x_BTHd[..., :half], x_BTHd[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class RMSNorm(nnx.Module):
    """Root-mean-square normalisation with a learned scale."""

    def __init__(self, dim: int, *, rngs: nnx.Rngs):
        del rngs
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        var = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
        scale = self.scale[...].reshape((1,) * (x.ndim - 1) + (-1,))
        return x * jax.lax.rsqrt(var + 1e-6) * scale


class Attention(nnx.Module):
    """Multi-head causal self-attention with rotary positions; optionally writes into a KV cache."""

    def __init__(self, cfg: SeqModelConfig, *, rngs: nnx.Rngs):
        D, self.num_heads = cfg.d_model, cfg.num_heads
        self.qkv = nnx.Linear(D, 3 * D, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(D, D, use_bias=False, rngs=rngs)

    def __call__(self, x_BTD, positions_BT, mask_BTS, cache_kv=None, write_index=None):
        B, T, D = x_BTD.shape
        q, k, v = jnp.split(self.qkv(x_BTD).reshape(B, T, 3 * self.num_heads, -1), 3, axis=2)
        # Keys are cached after RoPE: a key's rotation depends only on its own position, so it
        # never needs recomputing when later queries arrive.
        q, k = _rope(q, positions_BT), _rope(k, positions_BT)
        if cache_kv is not None:
            # Write the T new keys/values into the fixed S-slot buffers at `write_index` (0 in
            # prefill, the fed token's slot in a step); attention then reads all S slots, and
            # `mask_BTS` hides the ones not written yet. Fixed S keeps one compiled shape.
            k = jax.lax.dynamic_update_slice_in_dim(cache_kv[0], k, write_index, axis=1)
            v = jax.lax.dynamic_update_slice_in_dim(cache_kv[1], v, write_index, axis=1)
        y = jax.nn.dot_product_attention(q, k, v, mask=mask_BTS[:, None, :, :])
        return self.out(y.reshape(B, T, D)), (k, v)


class DecoderBlock(nnx.Module):
    """Pre-norm residual block: attention then a SiLU-gated MLP."""

    def __init__(self, cfg: SeqModelConfig, *, rngs: nnx.Rngs):
        D, F = cfg.d_model, cfg.mlp_dim
        self.rate = cfg.dropout
        self.norm1 = RMSNorm(D, rngs=rngs)
        self.attn = Attention(cfg, rngs=rngs)
        self.norm2 = RMSNorm(D, rngs=rngs)
        self.gate = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.up = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.down = nnx.Linear(F, D, use_bias=False, rngs=rngs)

    def __call__(self, x, positions, mask, key=None, cache_kv=None, write_index=None):
        k1, k2 = jax.random.split(key) if key is not None else (None, None)
        y, kv = self.attn(self.norm1(x), positions, mask, cache_kv, write_index)
        x = x + dropout(y, self.rate, k1)
        h = self.norm2(x)
        y = self.down(jax.nn.silu(self.gate(h)) * self.up(h))
        return x + dropout(y, self.rate, k2), kv


@flax.struct.dataclass
class KVCache:
    """Keys/values of every layer and which positions hold real tokens; every leaf leads with B.

    Plain annotations: beam search tiles the leaves to [B, K, ...], so their rank varies.
    """

    k: jax.Array  # [B, layers, S, H, d]
    v: jax.Array  # [B, layers, S, H, d]
    key_valid: jax.Array  # bool [B, S]


class Decoder(nnx.Module):
    """Token embedding, a stack of DecoderBlocks, and one head of V codes per SID level."""

    def __init__(self, cfg: SeqModelConfig, space: TokenSpace, *, rngs: nnx.Rngs):
        self.cfg, self.space = cfg, space
        self.context = space.context_length(cfg.max_history)
        self.embed = nnx.Embed(space.vocab_size, cfg.d_model, rngs=rngs)
        self.blocks = nnx.List([DecoderBlock(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.d_model, rngs=rngs)
        # Small output init: near-uniform code softmaxes at step 0 (loss ~ ln V), calmer start.
        self.head = nnx.Linear(
            cfg.d_model,
            space.num_levels * space.codebook_size,
            use_bias=False,
            kernel_init=nnx.initializers.normal(0.02),
            rngs=rngs,
        )
        if cfg.draft_head == "joint":
            # Built last, so the retriever's own parameters draw the same random numbers as
            # without a head; a retriever without one has no `draft` attribute at all.
            self.draft = DraftHead(cfg.draft, space, cfg.d_model, rngs=rngs)

    def _logits(self, x_BTD: jax.Array) -> jax.Array:
        B, T, _ = x_BTD.shape
        out = self.head(self.norm(x_BTD))
        return out.reshape(B, T, self.space.num_levels, self.space.codebook_size)

    def __call__(
        self,
        tokens: Int[Array, "B T"],
        dropout_key: jax.Array | None = None,
        segments: Int[Array, "B T"] | None = None,
    ) -> Float[Array, "B T L V"]:
        """Logits of every level's codes at every position."""
        return self._logits(self._hidden(tokens, dropout_key, segments))

    def _hidden(
        self, tokens: jax.Array, dropout_key: jax.Array | None, segments: jax.Array | None = None
    ) -> jax.Array:
        return run_blocks(self.blocks, self.embed(tokens), tokens != PAD, dropout_key, segments)

    def prompt_states(
        self,
        prompts: Int[Array, "B P"],
        placeholders: Float[Array, "L D"] | None = None,
        dropout_key: jax.Array | None = None,
    ) -> Float[Array, "B P D"]:
        """Final-norm hidden states of a draft prompt (a history, then optionally <SP_1..L>).

        Placeholder ids (`space.placeholder_ids`) take their embeddings from `placeholders`, the
        draft head's table, so this works for a retriever trained without them.
        """
        V0 = self.space.vocab_size
        x = self.embed(jnp.minimum(prompts, V0 - 1))
        if placeholders is not None:
            slot = jnp.clip(prompts - V0, 0, placeholders.shape[0] - 1)
            x = jnp.where((prompts >= V0)[..., None], placeholders[slot].astype(x.dtype), x)
        return self.norm(run_blocks(self.blocks, x, prompts != PAD, dropout_key))

    def target_logits(
        self,
        inputs: Int[Array, "B T"],
        dropout_key: jax.Array | None = None,
        segments: Int[Array, "B T"] | None = None,
    ) -> Float[Array, "B T V"]:
        """Logits of only the level each position predicts (training: 1/(L+1) of the head's work).

        Training inputs are BOS + whole items, left-padded by whole items (or packed users, each
        n * (L+1) tokens long, `segments` telling them apart), so position t always predicts
        level t mod (L+1); T must be a multiple of L+1.
        """
        B, T = inputs.shape
        L1, V = self.space.num_levels, self.space.codebook_size
        if T % L1:
            raise ValueError(f"inputs: length {T} is not a multiple of {L1} tokens per item")
        x = self._hidden(inputs, dropout_key, segments)
        x = self.norm(x).reshape(B, T // L1, L1, -1)
        kernel = self.head.kernel[...].reshape(-1, L1, V)
        return jnp.einsum("bnld,dlv->bnlv", x, kernel).reshape(B, T, V)

    def prefill(self, tokens: Int[Array, "B T"]) -> tuple[Float[Array, "B V"], KVCache]:
        """Level-0 log-probs after a left-padded history, and the cache for the remaining steps."""
        B, T = tokens.shape
        if T > self.context:
            raise ValueError(
                f"histories: {T} tokens exceed the model's context of {self.context} "
                f"(max_history={self.cfg.max_history} items x {self.space.num_levels} tokens + BOS)"
            )
        # S slots: the T history tokens, then the L-1 codes the beam search feeds back (the
        # codes of levels 0..L-2; the last level's code is predicted, never fed).
        S = T + self.space.num_levels - 1
        # Positions count PAD slots too, exactly as in training (`_hidden`), so a left-padded
        # history gets the same rotary positions here as it did there.
        positions = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
        # The L-1 future slots are marked valid now; `step` keeps them causal by also masking
        # slots after the fed token's position.
        key_valid = jnp.concatenate(
            [tokens != PAD, jnp.ones((B, self.space.num_levels - 1), bool)], axis=1
        )
        mask = _causal_mask(tokens != PAD)
        # History queries never see the (still empty) future slots.
        mask_BTS = jnp.concatenate([mask, jnp.zeros((B, T, S - T), bool)], axis=2)
        x = self.embed(tokens)
        H, d = self.cfg.num_heads, self.cfg.d_model // self.cfg.num_heads
        empty = jnp.zeros((B, S, H, d), x.dtype)
        ks, vs = [], []
        for block in self.blocks:
            x, (k, v) = block(x, positions, mask_BTS, None, (empty, empty), 0)
            ks.append(k)
            vs.append(v)
        # Histories are left-padded, so the last position is real; it predicts the next item's
        # level 0.
        log_probs = jax.nn.log_softmax(self._logits(x[:, -1:, :])[:, 0, 0, :], axis=-1)
        return log_probs, KVCache(k=jnp.stack(ks, 1), v=jnp.stack(vs, 1), key_valid=key_valid)

    def step(
        self, codes: Int[Array, "B K"], level: int | Int[Array, ""], cache: KVCache
    ) -> tuple[Float[Array, "B K V"], KVCache]:
        """Feeds the codes chosen at `level - 1`; returns log-probs over level `level`'s codes."""
        B, K = codes.shape
        S = cache.key_valid.shape[-1]
        # Each beam is its own sequence: fold K into the batch ([B, K, ...] -> [B*K, ...]); the
        # beam search has already gathered every beam's cache from its parent.
        flat = jax.tree.map(lambda a: a.reshape(B * K, *a.shape[2:]), cache)
        # The level-(level-1) code goes to slot T + level - 1 = S - L + level, right after the
        # history and the codes fed at earlier steps; its RoPE position is the slot index, as
        # the history's positions are their slot indices.
        pos = S - self.space.num_levels + level  # the slot of the fed token
        # Each level's codes have their own V token ids (the training vocabulary's layout).
        tokens = NUM_SPECIAL + (level - 1) * self.space.codebook_size + codes.reshape(B * K, 1)
        positions = jnp.full((B * K, 1), pos, jnp.int32)
        # Real history tokens, the codes fed so far and this one; not the later (empty) slots.
        mask = (flat.key_valid & (jnp.arange(S)[None, :] <= pos))[:, None, :]
        x = self.embed(tokens)
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            kv = (flat.k[:, i], flat.v[:, i])
            x, (k, v) = block(x, positions, mask, None, kv, pos)
            ks.append(k)
            vs.append(v)
        # The head scores all L levels; the fed level-(level-1) code predicts level `level`
        # (`level` may be traced inside the search's loop, hence a dynamic index).
        logits = jax.lax.dynamic_index_in_dim(self._logits(x)[:, 0], level, axis=1, keepdims=False)
        new = KVCache(k=jnp.stack(ks, 1), v=jnp.stack(vs, 1), key_valid=flat.key_valid)
        # Back to [B, K, ...]: the beam search reorders this cache by parent beam next.
        new = jax.tree.map(lambda a: a.reshape(B, K, *a.shape[1:]), new)
        return jax.nn.log_softmax(logits, axis=-1).reshape(B, K, -1), new


def run_blocks(
    blocks,
    x: jax.Array,
    valid_BT: jax.Array,
    dropout_key: jax.Array | None,
    segments: jax.Array | None = None,
) -> jax.Array:
    """The DecoderBlocks over x [B, T, D], causal over the valid positions (no cache)."""
    B, T = valid_BT.shape
    # Rotary positions are relative, so one arange serves left-padded rows and packed rows
    # alike (a packed user's attention never crosses its segment).
    positions = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
    mask = _causal_mask(valid_BT, segments)
    for i, block in enumerate(blocks):
        key = None if dropout_key is None else jax.random.fold_in(dropout_key, i)
        x, _ = block(x, positions, mask, key)
    return x


def _causal_mask(valid_BT: jax.Array, segments_BT: jax.Array | None = None) -> jax.Array:
    """Causal mask over real tokens, within each token's segment when rows are packed; a PAD
    query sees itself so its softmax stays finite."""
    T = valid_BT.shape[1]
    causal = jnp.tril(jnp.ones((T, T), bool))[None, :, :]
    eye = jnp.eye(T, dtype=bool)[None, :, :]
    mask = causal & valid_BT[:, None, :]
    if segments_BT is not None:
        mask &= segments_BT[:, :, None] == segments_BT[:, None, :]
    return mask | eye


def token_log_likelihood(
    logits: Float[Array, "B T L V"] | Float[Array, "B T V"],
    targets: Int[Array, "B T"],
    space: TokenSpace,
) -> Float[Array, "B T"]:
    """log p(target) under its own level's softmax; PAD/BOS targets give 0 (mask them by weight).

    Takes all levels' logits [B, T, L, V] or only each target's level (`target_logits`).
    """
    code_ids = jnp.maximum(targets - NUM_SPECIAL, 0)
    level = code_ids // space.codebook_size
    code = code_ids % space.codebook_size
    if logits.ndim == 4:
        logits = jnp.take_along_axis(logits, level[:, :, None, None], axis=2)[:, :, 0, :]
    logits_BTV = logits
    log_probs = jax.nn.log_softmax(logits_BTV, axis=-1)
    return jnp.take_along_axis(log_probs, code[:, :, None], axis=2)[:, :, 0]
