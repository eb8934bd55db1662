"""The item-level retriever (`seqmodel.arch=item`): one backbone position per history item, and a
recurrent head that writes the next item's SID code by code.

The token-level `Decoder` spends L+1 backbone positions on every history item. Here an item's
input is the sum of its codes' embeddings (one position), so a history of n items costs n
positions, not 1 + n (L+1); the next item's codes come from a GRU over the levels started at the
backbone's state (as in the NEZHA draft head, whose decoding this is):
    s_0 = h,   p_l = softmax(W_l norm(s_l)),   s_{l+1} = GRU_l(embed(c_l), s_l).
The token layout of histories, training rows, weights and targets is the token-level model's, so
every layout but `packed`, the losses, checkpoints and `decoding.beam_search` serve both; the
beam search's cache is the GRU state [B, D] instead of a KV cache.
"""

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from seqmodel.config import SeqModelConfig
from seqmodel.draft import Transition
from seqmodel.model import DecoderBlock, RMSNorm, run_blocks
from seqmodel.tokens import PAD, TokenSpace, level_tokens


class ItemDecoder(nnx.Module):
    """Code embeddings, a stack of DecoderBlocks over item positions, a GRU over SID levels and
    one bias-free output projection per level."""

    def __init__(self, cfg: SeqModelConfig, space: TokenSpace, *, rngs: nnx.Rngs):
        self.cfg, self.space = cfg, space
        self.context = space.context_length(cfg.max_history)
        D, L, V = cfg.d_model, space.num_levels, space.codebook_size
        self.embed = nnx.Embed(space.vocab_size, D, rngs=rngs)
        if cfg.item_embed_buckets:
            self.item_embed = nnx.Embed(cfg.item_embed_buckets, D, rngs=rngs)
        self.blocks = nnx.List([DecoderBlock(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(D, rngs=rngs)
        self.transition = Transition("gru", L - 1, D, rngs=rngs)
        self.head_norm = RMSNorm(D, rngs=rngs)
        # Small output init: near-uniform code softmaxes at step 0, as in the token-level head.
        self.head = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (L, D, V)))
        if cfg.item_softmax:
            # The item query (seqmodel.item_softmax): scores items by their input vectors.
            self.item_query = nnx.Linear(D, D, use_bias=False, rngs=rngs)
        if cfg.node_head_dim:
            # Level 1's logit of code c under code c0 also gets node_proj(norm(s)) . nodes[c0, c]:
            # zero at init, so the model starts as the one without it.
            self.node_proj = nnx.Linear(D, cfg.node_head_dim, use_bias=False, rngs=rngs)
            self.nodes = nnx.Param(jnp.zeros((V, V, cfg.node_head_dim)))

    def _item_states(self, tokens: jax.Array, dropout_key: jax.Array | None) -> jax.Array:
        """Final-norm backbone states [B, G, D], one per group of L+1 tokens.

        `tokens` is a training row's inputs (BOS + items, minus the last token: G = T / (L+1)
        groups) or a history to prefill (BOS + items: G = n + 1). Group g ends with token
        g (L+1), which is BOS or an item's last code, so its input is the L+1 tokens up to and
        including that one: BOS alone, or one whole item. Its state predicts the next item.
        """
        windows = self._windows(tokens)
        real = windows != PAD
        x = self.item_inputs(windows, real)
        # A group is real where its last token is (BOS or an item's last code).
        return self.norm(run_blocks(self.blocks, x, real[:, :, -1], dropout_key))

    def _windows(self, tokens: Int[Array, "B T"]) -> Int[Array, "B G L"]:
        """Each group's L tokens: those up to and including token g L (padding before BOS)."""
        B, T = tokens.shape
        L = self.space.num_levels
        G = -(-T // L)
        windows = jnp.concatenate([jnp.full((B, L - 1), PAD, tokens.dtype), tokens], axis=1)
        return windows[:, : G * L].reshape(B, G, L)

    def _item_bucket(self, windows: Int[Array, "*B L"]) -> Int[Array, "*B"]:
        """Row of each window's item in `item_embed`: a multiplicative hash of the SID read as one
        mixed-radix integer (uint32 arithmetic wraps; BOS and padding windows give some row that
        the caller masks out)."""
        V = self.space.codebook_size
        codes = jnp.clip(self._raw(windows, _levels_of(windows)), 0, V - 1).astype(jnp.uint32)
        key = jnp.zeros(windows.shape[:-1], jnp.uint32)
        for level in range(windows.shape[-1]):
            key = key * jnp.uint32(V) + codes[..., level]
        key = key * jnp.uint32(0x9E3779B1)  # Knuth's multiplicative hash (golden ratio)
        return (key % jnp.uint32(self.cfg.item_embed_buckets)).astype(jnp.int32)

    def _level_logits(self, level, s: jax.Array, before=None) -> jax.Array:
        """W_level norm(s), plus at level 1 the node vectors under `before` (the code chosen at
        level 0, raw, shaped as s without D; needed with seqmodel.node_head_dim > 0). `level`
        may be traced (the beam search's loop)."""
        w = jax.lax.dynamic_index_in_dim(self.head[...], level, axis=0, keepdims=False)
        x = self.head_norm(s)
        logits = x @ w
        if not hasattr(self, "nodes") or (isinstance(level, int) and level != 1):
            return logits
        if before is None:
            raise ValueError("seqmodel.node_head_dim > 0: level 1's logits need level 0's code")

        def with_nodes():
            nodes = self.nodes[...][jnp.clip(before, 0, self.space.codebook_size - 1)]
            extra = jnp.einsum("...r,...vr->...v", self.node_proj(x), nodes)
            return logits + extra.astype(logits.dtype)

        if isinstance(level, int):
            return with_nodes()
        # A traced level (the beam search's loop): gather the node vectors at level 1 only.
        return jax.lax.cond(level == 1, with_nodes, lambda: logits)

    def _raw(self, tokens: jax.Array, level) -> jax.Array:
        """Raw codes of level-offset token ids of `level` (BOS and padding give some code)."""
        return tokens - level_tokens(0, level, self.space.codebook_size)

    def _next(self, level, tokens: jax.Array, s: jax.Array) -> jax.Array:
        """s_{level+1} from the level-offset token id of the code chosen at `level`."""
        return self.transition(level, self.embed(tokens), s)

    def target_logits(
        self,
        inputs: Int[Array, "B T"],
        dropout_key: jax.Array | None = None,
        segments: Int[Array, "B T"] | None = None,
    ) -> Float[Array, "B T V"]:
        """Logits of the level each position predicts, teacher-forced (cf. `Decoder`).

        Position g (L+1) + l predicts level l of the item after group g; the codes it is
        conditioned on, levels 0..l-1 of that item, are the inputs at g (L+1) + 1 .. + l.
        """
        if segments is not None:
            raise ValueError("seqmodel.arch=item does not take packed rows (seqmodel.layout)")
        return self._teacher_forced(inputs, self._row_states(inputs, dropout_key))

    def target_and_repeat_logits(
        self, inputs: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> tuple[Float[Array, "B T V"], Float[Array, "B G"]]:
        """`target_logits`, and from the same backbone states the log-probability of a repeat:
        for each group g, log p(item g | state g), the item the state has just read predicted as
        the next one (teacher-forced through the head; any value for BOS and padding groups, whose
        windows are not items). seqmodel.unlikelihood trains it down."""
        logits, states = self.target_logits_and_states(inputs, dropout_key)
        return logits, self._repeat_log_probs(inputs, states)

    def target_logits_and_states(
        self, inputs: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> tuple[Float[Array, "B T V"], Float[Array, "B G D"]]:
        """`target_logits`, and the backbone states [B, G, D] they come from: group g's state
        is the one that predicts the item after group g (seqmodel.item_contrast reads it)."""
        states = self._row_states(inputs, dropout_key)
        return self._teacher_forced(inputs, states), states

    def item_vectors(self, tokens: Int[Array, "... L"]) -> Float[Array, "... D"]:
        """Items' input vectors, the sum of their L codes' embeddings (as `_item_states` reads a
        whole item), from their level-offset token ids."""
        return self.embed(tokens).sum(axis=-2)

    def item_inputs(
        self, tokens: Int[Array, "*B L"], real: Bool[Array, "*B L"] | None = None
    ) -> Float[Array, "*B D"]:
        """The backbone's input vector of each window of L level-offset tokens: the embeddings of
        its `real` tokens (all by default: whole items) plus, with seqmodel.item_embed_buckets and
        all L real, its item's hashed row."""
        if real is None:
            x = self.item_vectors(tokens)
        else:
            x = (self.embed(tokens) * real[..., None]).sum(axis=-2)
        if hasattr(self, "item_embed"):
            row = self.item_embed(self._item_bucket(tokens))
            x = x + (row if real is None else row * real.all(-1)[..., None])
        return x

    def item_scores(
        self, s: Float[Array, "B D"], codes: Int[Array, "B K L"]
    ) -> Float[Array, "B K"]:
        """The item query's score of each row's K items, given by their raw codes
        (seqmodel.item_softmax): the query of the backbone state `s` dotted with each item's
        input vector."""
        o = self.item_inputs(level_tokens(codes, _levels_of(codes), self.space.codebook_size))
        q = self.item_query(s)
        return jnp.einsum("bd,bkd->bk", q.astype(jnp.float32), o.astype(jnp.float32))

    def _row_states(self, inputs: Int[Array, "B T"], dropout_key: jax.Array | None) -> jax.Array:
        """The backbone states [B, G, D] of a training row of G whole groups of L tokens."""
        T, L = inputs.shape[1], self.space.num_levels
        if T % L:
            raise ValueError(f"inputs: length {T} is not a multiple of {L} tokens per item")
        return self._item_states(inputs, dropout_key)

    def _teacher_forced(self, inputs: Int[Array, "B T"], s: jax.Array) -> Float[Array, "B T V"]:
        """The head's logits of each position's level, fed the row's own next codes."""
        B, T = inputs.shape
        L = self.space.num_levels
        fed_BGL = inputs.reshape(B, T // L, L)
        out = []
        for level in range(L):
            before = self._raw(fed_BGL[:, :, level], level - 1) if level else None
            out.append(self._level_logits(level, s, before))
            if level + 1 < L:
                s = self._next(level, fed_BGL[:, :, level + 1], s)
        return jnp.stack(out, axis=2).reshape(B, T, -1)

    def _repeat_log_probs(self, inputs: Int[Array, "B T"], s: jax.Array) -> Float[Array, "B G"]:
        """log p(item g | state g) for every group g, the head fed item g's own codes."""
        L, V = self.space.num_levels, self.space.codebook_size
        # Group g's window is item g's L tokens; BOS and padding give codes outside [0, V),
        # clipped here and masked by the caller.
        seen_BGL = self._windows(inputs)
        repeat = jnp.zeros(s.shape[:2], jnp.float32)
        for level in range(L):
            code = jnp.clip(self._raw(seen_BGL[..., level], level), 0, V - 1)
            before = self._raw(seen_BGL[..., level - 1], level - 1) if level else None
            logits = self._level_logits(level, s, before)
            lp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
            repeat = repeat + jnp.take_along_axis(lp, code[..., None], axis=-1)[..., 0]
            if level + 1 < L:
                s = self._next(level, seen_BGL[..., level], s)
        return repeat

    def prefill(self, tokens: Int[Array, "B T"]) -> tuple[Float[Array, "B V"], jax.Array]:
        """Level-0 log-probs after a left-padded history, and the GRU state as the cache."""
        B, T = tokens.shape
        L = self.space.num_levels
        if T > self.context or T % L != 1 % L:
            raise ValueError(
                f"histories: {T} tokens is not BOS + whole items of {L} tokens within the "
                f"model's context of {self.context}"
            )
        s = self._item_states(tokens, None)[:, -1]
        return jax.nn.log_softmax(self._level_logits(0, s), axis=-1), s

    def step(
        self, codes: Int[Array, "B K"], level: int | Int[Array, ""], s: Float[Array, "B K D"]
    ) -> tuple[Float[Array, "B K V"], jax.Array]:
        """Feeds the codes chosen at `level - 1`; returns log-probs over level `level`'s codes."""
        tokens = level_tokens(codes, level - 1, self.space.codebook_size)
        s = self._next(level - 1, tokens, s)
        return jax.nn.log_softmax(self._level_logits(level, s, codes), axis=-1), s

    def prompt_states(self, *args, **kwargs):
        raise ValueError(
            "NEZHA draft heads need the token-level retriever (seqmodel.arch=token); the "
            "item-level retriever (seqmodel.arch=item) already decodes in its own head"
        )


def _levels_of(x: Int[Array, "*B L"]) -> Int[Array, "..."]:
    """0 .. L-1 shaped to broadcast along the last (level) axis of `x`."""
    return jnp.arange(x.shape[-1], dtype=x.dtype).reshape((1,) * (x.ndim - 1) + (-1,))
