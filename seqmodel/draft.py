"""The NEZHA draft head: placeholder prompt states, a per-level recurrent head over SID codes, its
teacher-forced loss, and draft decoding (one backbone pass, then a beam search in the head only).

Notation of the paper: prompt = history + <SP_1> .. <SP_L>; one backbone pass gives the context
state c (the hidden state before the placeholders) and h_l (the hidden state at <SP_l>); then per
level l = 1..L
    p_l = softmax(W_l (s_l + h_l)),   s_1 = c,   s_{l+1} = cell_l(embed_l(c_l), s_l).
Levels are 0-based in the code: level l here is the paper's l + 1.
"""

from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from decoding import BeamResult, Constraint, LevelScoring, make_decoder
from seqmodel.config import DraftConfig
from seqmodel.tokens import NUM_SPECIAL, TokenSpace

# (codes [B, K], level, s [B, K, D]) -> (log-probs [B, K, V], s)
StepFn = Callable[..., tuple[Float[Array, "B K V"], Float[Array, "B K D"]]]


@flax.struct.dataclass
class DraftStates:
    """What the one backbone pass gives the head: the context state and the placeholder logits.

    The placeholder states enter p_l only through W_l h_l, which does not depend on the drafted
    codes, so they are kept as their logits (computed once per user, not once per beam).
    """

    context: Float[Array, "B D"]  # s_1 (zeros for NEZHA-1)
    placeholder_logits: Float[Array, "B L V"]  # W_l h_l (zeros for NEZHA-2)


class Transition(nnx.Module):
    """s_{l+1} = cell_l(x, s_l) with its own weights per level: rnn, gru or add (NEZHA-3)."""

    def __init__(self, cell: str, num_steps: int, d_model: int, *, rngs: nnx.Rngs):
        self.cell = cell
        if cell == "add":
            return
        n, D = max(num_steps, 1), d_model
        gates = {"rnn": 1, "gru": 3}[cell]
        init = nnx.initializers.lecun_normal(batch_axis=(0,))
        self.w_x = nnx.Param(init(rngs.params(), (n, D, gates * D)))
        self.w_s = nnx.Param(init(rngs.params(), (n, D, gates * D)))
        self.b = nnx.Param(jnp.zeros((n, gates * D)))

    def __call__(self, level: int | Int[Array, ""], x: jax.Array, s: jax.Array) -> jax.Array:
        if self.cell == "add":
            return s + x
        w_x, w_s, b = self.w_x[...][level], self.w_s[...][level], self.b[...][level]
        b = b.reshape((1,) * (x.ndim - 1) + b.shape)
        if self.cell == "rnn":
            return jnp.tanh(x @ w_x + s @ w_s + b)
        # GRU (Cho et al. 2014): the reset gate r scales the recurrent part of the candidate only.
        xz, xr, xn = jnp.split(x @ w_x + b, 3, axis=-1)
        sz, sr, sn = jnp.split(s @ w_s, 3, axis=-1)
        z, r = jax.nn.sigmoid(xz + sz), jax.nn.sigmoid(xr + sr)
        return (1.0 - z) * jnp.tanh(xn + r * sn) + z * s


class DraftHead(nnx.Module):
    """Placeholder embeddings, per-level code embeddings, transition cells and bias-free W_l."""

    def __init__(self, cfg: DraftConfig, space: TokenSpace, d_model: int, *, rngs: nnx.Rngs):
        L, V, D = space.num_levels, space.codebook_size, d_model
        self.cfg, self.space = cfg, space
        if cfg.placeholder_states:
            # The embeddings of <SP_1> .. <SP_L> (space.placeholder_ids): the backbone's own table
            # stays as trained, so the head can be added to a frozen retriever.
            self.placeholders = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (L, D)))
        self.code_embed = nnx.Param(nnx.initializers.normal(D**-0.5)(rngs.params(), (L, V, D)))
        self.transition = Transition(cfg.cell, L - 1, D, rngs=rngs)
        # Small init as in the retriever's head: near-uniform softmaxes at step 0.
        self.out = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (L, D, V)))

    def states(
        self, backbone: Any, history: Int[Array, "B T"], dropout_key: jax.Array | None = None
    ) -> DraftStates:
        """The one backbone pass over history (+ placeholders); `backbone` is a seqmodel Decoder."""
        B, T = history.shape
        L = self.space.num_levels
        if self.cfg.placeholder_states:
            ids = jnp.broadcast_to(jnp.asarray(self.space.placeholder_ids, history.dtype), (B, L))
            prompt = jnp.concatenate([history, ids], axis=1)
            h = backbone.prompt_states(prompt, self.placeholders[...], dropout_key)
            ph_BLV = jnp.einsum("bld,ldv->blv", h[:, T:], self.out[...])
        else:
            h = backbone.prompt_states(history, None, dropout_key)
            ph_BLV = jnp.zeros((B, L, self.space.codebook_size), h.dtype)
        # Histories are left-padded, so position T - 1 is the last real token (as in prefill).
        context = h[:, T - 1] if self.cfg.context_state else jnp.zeros_like(h[:, T - 1])
        return DraftStates(context=context, placeholder_logits=ph_BLV)

    def _logits(self, level, s: jax.Array, ph_BLV: jax.Array) -> jax.Array:
        """W_l s_l + W_l h_l; s is [B, D] or [B, K, D] (the placeholder term broadcast over K)."""
        ph = jax.lax.dynamic_index_in_dim(ph_BLV, level, axis=1, keepdims=False)
        ph = ph.reshape(ph.shape[:1] + (1,) * (s.ndim - 2) + ph.shape[1:])
        return s @ self.out[...][level] + ph

    def _next(self, level, codes: jax.Array, s: jax.Array) -> jax.Array:
        """s_{level+1} from the code chosen at `level`."""
        return self.transition(level, self.code_embed[...][level][codes], s)

    def log_likelihood(self, states: DraftStates, codes: Int[Array, "B L"]) -> Float[Array, "B L"]:
        """Teacher forcing: log p_l(c_l | c_<l) with the true codes fed to the transitions."""
        L = self.space.num_levels
        s, out = states.context, []
        for level in range(L):
            lp = jax.nn.log_softmax(self._logits(level, s, states.placeholder_logits), axis=-1)
            out.append(jnp.take_along_axis(lp, codes[:, level : level + 1], axis=1)[:, 0])
            if level + 1 < L:
                s = self._next(level, codes[:, level], s)
        return jnp.stack(out, axis=1)

    def first(self, states: DraftStates) -> tuple[Float[Array, "B V"], Float[Array, "B D"]]:
        """(level-0 log-probs, the state s_1) of the one backbone pass's states."""
        first = self._logits(0, states.context, states.placeholder_logits)
        return jax.nn.log_softmax(first, axis=-1), states.context

    def step(
        self, codes: Int[Array, "B K"], level, s: Float[Array, "B K D"], ph_BLV: jax.Array
    ) -> tuple[Float[Array, "B K V"], Float[Array, "B K D"]]:
        """Feeds the codes of level - 1 (the beam search's contract): (level's log-probs, s);
        `level` may be traced (a lax loop), hence dynamic indexing."""
        s = self._next(level - 1, codes, s)
        return jax.nn.log_softmax(self._logits(level, s, ph_BLV), -1), s

    def search_fns(
        self, states: DraftStates
    ) -> tuple[Float[Array, "B V"], Float[Array, "B D"], StepFn]:
        """(level-0 log-probs, the cache s_1, step) for `decoding.beam_search`: every level runs in
        the head, none in the backbone."""

        def step(codes: jax.Array, level, s: jax.Array) -> tuple[jax.Array, jax.Array]:
            return self.step(codes, level, s, states.placeholder_logits)

        return *self.first(states), step


def draft_example(
    batch: dict, space: TokenSpace
) -> tuple[Int[Array, "B T"], Int[Array, "B L"], Float[Array, " B"]]:
    """(history, target codes, weight) of each training example's last item.

    A training row is BOS + items, left-padded, as inputs = seq[:-1] and targets = seq[1:]; its
    last item is the last L targets, and the history before it the inputs up to that item's first
    code. The weight is the last target's (0 for a user with fewer than two items).
    """
    L, V = space.num_levels, space.codebook_size
    inputs, targets = batch["inputs"], batch["targets"]
    history = inputs[:, : inputs.shape[1] - (L - 1)]
    offsets = NUM_SPECIAL + V * jnp.arange(L, dtype=targets.dtype)
    codes = jnp.clip(targets[:, -L:] - offsets[None, :], 0, V - 1)
    return history, codes, batch["weights"][:, -1]


def draft_nll(
    head: DraftHead,
    backbone: Any,
    batch: dict,
    dropout_key: jax.Array | None = None,
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(summed NLL over every level's code, number of weighted codes) of a retriever batch."""
    history, codes, weight = draft_example(batch, head.space)
    ll = head.log_likelihood(head.states(backbone, history, dropout_key), codes)
    return -(ll.sum(axis=1) * weight).sum(), weight.sum() * head.space.num_levels


def _draft_fns(backbone_def: nnx.GraphDef, head_def: nnx.GraphDef) -> tuple[Callable, Callable]:
    """(prefill_fn, step_fn) of `decoding.make_decoder` over params (backbone, head): one
    backbone pass, then every level in the head."""

    def prefill(params, tokens):
        backbone, head = nnx.merge(backbone_def, params[0]), nnx.merge(head_def, params[1])
        states = head.states(backbone, tokens)
        # The placeholder logits are per user, the same for every beam: the decoder's context,
        # not its cache, so they are never copied per beam nor reordered.
        return *head.first(states), states.placeholder_logits

    def step(params, codes, level, s, ph_BLV):
        return nnx.merge(head_def, params[1]).step(codes, level, s, ph_BLV)

    return prefill, step


def draft_decoder(
    backbone_def: nnx.GraphDef,
    head_def: nnx.GraphDef,
    space: TokenSpace,
    constraint: Constraint,
    beam_size: int,
    scoring: LevelScoring | None = None,
    out_sharding: Any = None,
) -> Callable[..., BeamResult]:
    """The `make_decoder` decoder of a draft head on its backbone: `decoder((backbone params,
    head params), tokens [B, T])`."""
    return make_decoder(
        *_draft_fns(backbone_def, head_def),
        constraint,
        beam_size=beam_size,
        num_levels=space.num_levels,
        outputs="log_probs",
        scoring=scoring,
        out_sharding=out_sharding,
    )


def draft_retrieval_fn(
    backbone: Any,
    head: DraftHead,
    constraint: Constraint,
    *,
    beam_size: int,
    scoring: LevelScoring | None = None,
    out_sharding: Any = None,
) -> Callable[..., BeamResult]:
    """A jitted `tokens [B, T] -> BeamResult` by draft decoding (a `seqmodel.inference.Retrieval`
    whose params are the pair (backbone, head)): one backbone pass, then the beam search over the
    head's levels. `constraint` decides what is drafted: `Unconstrained` (NEZHA-4),
    `decoding.HashVerify` (the paper: whole SIDs checked at the last level, before its top-K) or
    `StaticConstraint` (every level masked, valid by construction)."""
    from seqmodel.inference import Retrieval  # seqmodel.model imports this module

    (bdef, bparams), (hdef, hparams) = nnx.split(backbone), nnx.split(head)
    decoder = draft_decoder(bdef, hdef, head.space, constraint, beam_size, scoring, out_sharding)
    return Retrieval(decoder, jax.device_put((bparams, hparams)))
