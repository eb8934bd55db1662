"""The `Constraint` interface, the allow-everything constraint and the STATIC constraint kernel."""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

from decoding.static_index import StaticIndex

Level = int | Int[Array, ""]


class Candidates(NamedTuple):
    """A fixed-width set of C candidate continuations per beam."""

    tokens: Int[Array, "B K C"]
    log_probs: Float[Array, "B K C"]  # the model's log-prob of each candidate token
    valid: Bool[Array, "B K C"]
    aux: object  # constraint-private pytree of [B, K, C] leaves, handed back to `advance`


class Constraint:
    """Initial state; given states and log-probs: candidates with masks; then the next states.

    States are pytrees whose leaves have leading axes [B, K] (init_state: [B]). `candidates` and
    `advance` accept a Python int level, and from level `scan_start` on also a traced int32 level
    with the same output shapes (so the beam search may run those levels in a lax loop).
    """

    vocab_size: int
    num_levels: int
    scan_start: int = 1

    def init_state(self, batch_size: int) -> PyTree:
        return jnp.zeros((batch_size,), jnp.int32)

    def candidates(
        self, level: Level, state: PyTree, log_probs: Float[Array, "B K V"]
    ) -> Candidates:
        raise NotImplementedError

    def advance(
        self, level: Level, state: PyTree, tokens: Int[Array, "B K"], aux: PyTree
    ) -> PyTree:
        return aux


def _all_tokens(log_probs: Float[Array, "B K V"]) -> Candidates:
    B, K, V = log_probs.shape
    tokens = jnp.broadcast_to(jnp.arange(V, dtype=jnp.int32), (B, K, V))
    return Candidates(tokens, log_probs, jnp.ones((B, K, V), bool), tokens)


@dataclasses.dataclass(frozen=True)
class Unconstrained(Constraint):
    """Allows every code at every level (the same beam search, nothing masked)."""

    vocab_size: int
    num_levels: int

    def candidates(
        self, level: Level, state: PyTree, log_probs: Float[Array, "B K V"]
    ) -> Candidates:
        return _all_tokens(log_probs)


jax.tree_util.register_dataclass(
    Unconstrained, data_fields=[], meta_fields=["vocab_size", "num_levels"]
)


@dataclasses.dataclass(frozen=True)
class StaticConstraint(Constraint):
    """STATIC: dense bit masks for the first d levels, then a fixed-width CSR slice per beam."""

    index: StaticIndex

    @property
    def vocab_size(self) -> int:
        return self.index.vocab_size

    @property
    def num_levels(self) -> int:
        return self.index.num_levels

    @property
    def scan_start(self) -> int:
        return max(self.index.dense_levels, 1)

    def _is_dense(self, level: Level) -> bool:
        return isinstance(level, int | np.integer) and level < self.index.dense_levels

    def candidates(
        self, level: Level, state: Int[Array, "B K"], log_probs: Float[Array, "B K V"]
    ) -> Candidates:
        idx = self.index
        if self._is_dense(level):
            # Phase 1, dense level l < d: the state is the beam's prefix as a base-V number
            # (c_0 .. c_{l-1}, 0 at level 0), so its V children are the consecutive codes
            # state * V + t, and code c is bit c & 31 of word c >> 5 of the depth-(l+1) mask.
            V = idx.vocab_size
            code_BKV = state[..., None] * V + _iota(V, state.ndim)
            if V % 32 == 0:
                # Each beam's V bits are whole words: gather V/32 words, not V. The first child
                # state * V is word-aligned, so word j holds children 32j .. 32j+31, child
                # 32j + i at bit i (little-endian, as `np.packbits(bitorder="little")` wrote).
                word_BKW = (state * (V // 32))[..., None] + _iota(V // 32, state.ndim)
                w = jnp.take(idx.dense_words, idx.dense_offsets[level] + word_BKW, mode="clip")
                bits = (w[..., None] >> _iota(32, w.ndim).astype(jnp.uint32)) & 1
                # [.., V/32, 32] -> [.., V] row-major is child 32j + i: token order again.
                valid = bits.reshape(code_BKV.shape).astype(bool)
            else:
                valid = _bit(idx.dense_words, idx.dense_offsets[level], code_BKV)
            # Candidates are all V tokens (slot = token); aux carries each child's code.
            out = _all_tokens(log_probs)
            return out._replace(valid=valid, aux=code_BKV)
        # Phase 3, sparse level l >= d: the state is a CSR node id, its children are the edges
        # row_ptr[s] .. row_ptr[s+1] - 1 (sorted by token), at most `width` of them at this level.
        if isinstance(level, int | np.integer):
            width = idx.capacity.widths[int(level) - idx.dense_levels]
        else:
            # A traced level (the fori_loop) needs one shape for every level: the widest.
            width = max(idx.capacity.widths)
        # Clipping keeps gathers in range for states of dead beams, which `_select` masks anyway.
        # The gathers use mode="clip" (a plain XLA gather): the default mode adds selects that
        # wrap negative indices and fill out-of-range ones (docs/BENCHMARKS.md, "Live
        # constraints"); the comments below say why each gather gets the same entries either way.
        s = jnp.clip(state, 0, idx.capacity.nodes - 1)
        edge_BKW, valid, tok_BKW = self._children(s, width)
        lp_BKW = jnp.take_along_axis(
            log_probs, tok_BKW, axis=-1, mode="clip", wrap_negative_indices=False
        )
        return Candidates(tok_BKW, lp_BKW, valid, edge_BKW)

    def _children(
        self, s: Int[Array, "B K"], width: int
    ) -> tuple[Int[Array, "B K W"], Bool[Array, "B K W"], Int[Array, "B K W"]]:
        """The first `width` edges of CSR rows s (0 <= s < capacity.nodes): their ids, whether
        each is one of the row's, and their tokens (int32; any token in [0, V) where not), in
        either layout; a sharded index answers it across devices."""
        # row_ptr has capacity.nodes + 1 entries and 0 <= s <= nodes - 1, so s and s + 1 are in it.
        start, end = _row_range(self.index, s)
        edge_BKW = start[..., None] + _iota(width, s.ndim)
        valid = edge_BKW < end[..., None]
        # Slot w is edge start + w: its token comes from the edge list, its log-prob (in
        # `candidates`) from the model's V log-probs at that token. Invalid slots (past the
        # node's last edge) may index past the edge list, which the clip keeps in it; every
        # entry, padding included (0), is a token in [0, V), so the log-prob gather is in range.
        return edge_BKW, valid, _edge_tokens(self.index, edge_BKW)

    def advance(
        self,
        level: Level,
        state: Int[Array, "B K"],
        tokens: Int[Array, "B K"],
        aux: Int[Array, "B K"],
    ) -> Int[Array, "B K"]:
        idx = self.index
        if self._is_dense(level):
            # The child's prefix code is the next dense level's state as is; after the last dense
            # level it becomes a CSR node id (phase 2).
            if level + 1 < idx.dense_levels:
                return aux
            return _rank(idx, aux)
        # Children are numbered like edges, shifted by the depth-d nodes that precede them:
        # edge e leads to node e + num_dense_nodes (see static_index's layout), so no next-state
        # array is stored or gathered.
        return aux + idx.num_dense_nodes


jax.tree_util.register_dataclass(StaticConstraint, data_fields=["index"], meta_fields=[])


def _iota(n: int, lead: int) -> Int[Array, "..."]:
    return jnp.arange(n, dtype=jnp.int32).reshape((1,) * lead + (n,))


def _row_range(idx: StaticIndex, s: Int[Array, "..."]) -> tuple[Int[Array, "..."], ...]:
    """First and one-past-last edge of CSR row s (0 <= s < capacity.nodes), in either layout."""
    if idx.layout == "csr":
        return _take(idx.row_ptr, s), _take(idx.row_ptr, s + 1)
    # Compact: row_ptr[s] is row_base[s >> 5] plus the stored offset of row s. Row s + 1 has the
    # same base unless s ends its block of ROW_BLOCK = 32; row_base has one entry more than there
    # are blocks, so both bases come from one 2-wide window, as do both offsets.
    d0, d1 = _pair(idx.row_ptr, s)
    b0, b1 = _pair(idx.row_base, s >> 5)
    return b0 + d0.astype(jnp.int32), jnp.where((s & 31) == 31, b1, b0) + d1.astype(jnp.int32)


def _edge_tokens(idx: StaticIndex, e: Int[Array, "..."]) -> Int[Array, "..."]:
    """The token of edge e, in either layout; some token in [0, V) for e past the real edges."""
    if idx.layout == "csr":
        return _take(idx.tokens, e)
    # Compact: 32 tokens of b bits fill b words, so token e starts at bit (e & 31) * b of the
    # block at word (e >> 5) * b; no product e * b, which would leave int32 past 2**31 / b edges.
    b = idx.token_bits
    pos = (e & 31) * b
    shift = (pos & 31).astype(jnp.uint32)
    # Its high bits spill into the next word when shift + b > 32; one zero word follows the last
    # block, so a real edge's next word exists. Shifting by 1, then by 31 - shift, moves them in
    # place with no shift by 32 (which XLA defines as 0, but C leaves undefined) at shift 0.
    lo, hi = _pair(idx.tokens, (e >> 5) * b + (pos >> 5))
    tok = (((hi << 1) << (31 - shift)) | (lo >> shift)) & jnp.uint32((1 << b) - 1)
    # Past the real edges the window is clipped and b bits may exceed V - 1 (V not a power of 2).
    return jnp.minimum(tok.astype(jnp.int32), idx.vocab_size - 1)


def _take(a: ArrayLike, i: Int[Array, "..."]) -> Int[Array, "..."]:
    return jnp.take(a, i, mode="clip").astype(jnp.int32)


def _pair(a: ArrayLike, i: Int[Array, "..."]) -> tuple[Array, Array]:
    """a[i] and a[i + 1] from one gather of a 2-wide window (clipped to fit in `a`)."""
    dims = jax.lax.GatherDimensionNumbers(
        offset_dims=(i.ndim,), collapsed_slice_dims=(), start_index_map=(0,)
    )
    w = jax.lax.gather(a, i[..., None], dims, slice_sizes=(2,), mode="clip")
    return w[..., 0], w[..., 1]


def _bit(words: ArrayLike, offset: int, code: Int[Array, "..."]) -> Bool[Array, "..."]:
    """Bit `code` of the mask starting at word `offset` (bit c & 31 of word c >> 5)."""
    w = jnp.take(words, offset + (code >> 5), mode="clip")
    return ((w >> (code & 31).astype(jnp.uint32)) & 1).astype(bool)


def _rank(idx: StaticIndex, code: Int[Array, "B K"]) -> Int[Array, "B K"]:
    """Node id of a depth-d prefix code: set bits before it in the depth-d mask."""
    # Phase 2: depth-d nodes are numbered in lexicographic order, which for base-V codes is
    # numeric order, so a node's id is the count of allowed codes below its own: the set bits
    # of the earlier words (`rank`, precomputed) plus those below its bit in its own word.
    off = idx.dense_offsets[-1]
    w = jnp.take(idx.dense_words, off + (code >> 5), mode="clip")
    # (1 << i) - 1 keeps bits 0 .. i-1; i < 32, so the shift never overflows.
    below = w & ((jnp.uint32(1) << (code & 31).astype(jnp.uint32)) - jnp.uint32(1))
    r = jnp.take(idx.rank, code >> 5, mode="clip")
    return r + jax.lax.population_count(below).astype(jnp.int32)


def contains(index: StaticIndex, sids: Int[ArrayLike, "Q L"]) -> Bool[Array, " Q"]:
    """Membership of whole SIDs in the index (e.g. to verify drafted or hashed candidates)."""
    Q, L = sids.shape
    if L != index.num_levels:
        raise ValueError(f"sids: expected {index.num_levels} levels, got shape {sids.shape}")
    sids = jnp.asarray(sids, jnp.int32)
    d, V = index.dense_levels, index.vocab_size
    state = jnp.zeros((Q,), jnp.int32)
    # Out-of-range codes are clipped for the walk below, which would then test another SID.
    ok = jnp.all((sids >= 0) & (sids < V), axis=1)
    # The same walk as the beam search with one fixed token per level; once `ok` is False the
    # state may be garbage, and the clips only keep its gathers in range.
    for level in range(L):
        t = jnp.clip(sids[:, level], 0, V - 1)
        if level < d:
            # Dense: the state is the prefix code, its child code state * V + t (candidates).
            code = state * V + t
            ok &= _bit(index.dense_words, index.dense_offsets[level], code)
            state = code if level + 1 < d else _rank(index, code[:, None])[:, 0]
            continue
        # Sparse: scan the node's (at most `width`) edges for the token t.
        width = index.capacity.widths[level - d]
        s = jnp.clip(state, 0, index.capacity.nodes - 1)
        # In range as in `candidates` (row_ptr has nodes + 1 entries, s <= nodes - 1).
        start, end = _row_range(index, s)
        edge_QW = start[:, None] + _iota(width, 1)
        tok_QW = _edge_tokens(index, edge_QW)
        match_QW = (edge_QW < end[:, None]) & (tok_QW == t[:, None])
        ok &= match_QW.any(axis=1)
        # Tokens are distinct per node, so argmax finds the one match; its edge e leads to node
        # e + num_dense_nodes, as in `advance`.
        state = start + jnp.argmax(match_QW, axis=1).astype(jnp.int32) + index.num_dense_nodes
    return ok
