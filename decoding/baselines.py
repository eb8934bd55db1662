"""Baseline constraints behind the same interface: CPU trie, PPV exact/approximate, hash bitmap."""

import dataclasses
import itertools
import weakref
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, UInt32

from decoding.constraints import Candidates, Constraint, Level, _all_tokens
from decoding.static_index import ArrayInput, _check_sids, _sorted_unique_columns, bucket


class _HostTrie:
    """A Python dict trie kept on the host; hashed by identity so jit can key on it."""

    def __init__(self, sids: np.ndarray):
        self.children: list[dict[int, int]] = [{}]
        for row in sids.tolist():
            node = 0
            for t in row:
                nxt = self.children[node].get(t)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][t] = nxt
                    self.children.append({})
                node = nxt

    def query(self, nodes, vocab_size: int) -> np.ndarray:
        """Child node per (beam, token), -1 where the token is not allowed."""
        nodes = np.asarray(nodes)
        out = np.full(nodes.shape + (vocab_size,), -1, np.int32)
        flat_out = out.reshape(-1, vocab_size)
        for i, n in enumerate(nodes.reshape(-1).tolist()):
            if n >= 0:
                for t, c in self.children[n].items():
                    flat_out[i, t] = c
        return out


_TRIE_IDS = itertools.count(1)
_LIVE_TRIES: "weakref.WeakValueDictionary[int, _HostTrie]" = weakref.WeakValueDictionary()


@jax.tree_util.register_pytree_node_class
class CpuTrie(Constraint):
    """A dict trie queried on the host through `jax.pure_callback` at every step.

    The pytree carries only the trie's id (a data leaf), so swapping tries does not recompile;
    the host trie lives as long as the CpuTrie built with it.
    """

    def __init__(
        self, vocab_size: int, num_levels: int, trie_id: Any, trie: _HostTrie | None = None
    ) -> None:
        self.vocab_size, self.num_levels, self.trie_id = vocab_size, num_levels, trie_id
        self.trie = trie

    @classmethod
    def build(cls, sids: ArrayInput, *, vocab_size: int) -> "CpuTrie":
        sids = _check_sids(sids, vocab_size)
        trie, tid = _HostTrie(sids), next(_TRIE_IDS)
        _LIVE_TRIES[tid] = trie
        return cls(vocab_size, sids.shape[1], np.asarray(tid, np.int32), trie)

    def tree_flatten(self) -> tuple[tuple[Any], tuple[int, int]]:
        return (self.trie_id,), (self.vocab_size, self.num_levels)

    @classmethod
    def tree_unflatten(cls, aux: tuple[int, int], children: Iterable[Any]) -> "CpuTrie":
        return cls(*aux, *children)

    def candidates(
        self, level: Level, state: Int[Array, "B K"], log_probs: Float[Array, "B K V"]
    ) -> Candidates:
        spec = jax.ShapeDtypeStruct(log_probs.shape, jnp.int32)
        V = self.vocab_size
        child = jax.pure_callback(
            lambda tid, n: _LIVE_TRIES[int(tid)].query(n, V),
            spec,
            self.trie_id,
            state,
            vmap_method="sequential",
        )
        return _all_tokens(log_probs)._replace(valid=child >= 0, aux=child)


@dataclasses.dataclass(frozen=True)
class PPVExact(Constraint):
    """Sorted distinct SIDs; each beam's state is its row range, narrowed by binary search.

    Every beam searches all V extensions (lower bounds of t and t+1 in column `level` of its range),
    `ceil(log2(N+1))` gather steps each, as in the vectorized binary-search baseline.
    """

    sids: Any  # int32 [capacity, L], sorted distinct rows, then padding rows of V
    num_rows: Any  # int32 scalar: the real rows
    vocab_size: int
    top_k: int = 0  # 0: verify all V tokens; else only each beam's top-k tokens (approximate)

    @property
    def num_levels(self) -> int:
        return self.sids.shape[1]

    @classmethod
    def build(
        cls, sids: ArrayInput, *, vocab_size: int, top_k: int = 0, capacity: int | None = None
    ) -> "PPVExact":
        """Sorts and deduplicates; pads to `capacity` rows (default: bucket(N)) for reuse."""
        sids = _check_sids(sids, vocab_size)
        rows = np.stack(_sorted_unique_columns(sids, vocab_size), axis=1).astype(np.int32)
        M = rows.shape[0]
        capacity = bucket(M) if capacity is None else capacity
        if capacity < M:
            raise ValueError(f"capacity: {capacity} rows < {M} distinct SIDs")
        padded = np.full((capacity, rows.shape[1]), vocab_size, np.int32)
        padded[:M] = rows
        return cls(padded, np.asarray(M, np.int32), vocab_size, top_k)

    def init_state(self, batch_size: int) -> tuple[Int[Array, " B"], Int[Array, " B"]]:
        hi = jnp.broadcast_to(jnp.asarray(self.num_rows, jnp.int32), (batch_size,))
        return (jnp.zeros((batch_size,), jnp.int32), hi)

    def candidates(
        self,
        level: Level,
        state: tuple[Int[Array, "B K"], Int[Array, "B K"]],
        log_probs: Float[Array, "B K V"],
    ) -> Candidates:
        lo, hi = state
        if self.top_k:
            lp, tok = jax.lax.top_k(log_probs, min(self.top_k, self.vocab_size))
            tok = tok.astype(jnp.int32)
            first = _lower_bound(self.sids, level, lo, hi, tok)
            last = _lower_bound(self.sids, level, lo, hi, tok + 1)
        else:
            B, K, V = log_probs.shape
            tok = jnp.broadcast_to(jnp.arange(V, dtype=jnp.int32), (B, K, V))
            bounds = _lower_bound(
                self.sids, level, lo, hi, jnp.broadcast_to(jnp.arange(V + 1), (B, K, V + 1))
            )
            first, last, lp = bounds[..., :-1], bounds[..., 1:], log_probs
        return Candidates(tok, lp, last > first, (first, last))


jax.tree_util.register_dataclass(
    PPVExact, data_fields=["sids", "num_rows"], meta_fields=["vocab_size", "top_k"]
)


def PPVApprox(sids: ArrayInput, *, vocab_size: int, top_k: int = 50) -> PPVExact:  # noqa: N802
    """PPV approximate: only each beam's top-k tokens are verified (k default 50)."""
    return PPVExact.build(sids, vocab_size=vocab_size, top_k=top_k)


def _lower_bound(sids, level, lo, hi, t):
    """First row in [lo, hi) whose code at `level` is >= t (rows there share the prefix)."""
    lo = jnp.broadcast_to(lo[..., None], t.shape)
    hi = jnp.broadcast_to(hi[..., None], t.shape)
    n, L = sids.shape
    flat = sids.reshape(-1)

    def body(_, bounds):
        lo, hi = bounds
        mid = (lo + hi) // 2
        v = jnp.take(flat, jnp.clip(mid, 0, n - 1) * L + level, mode="clip")
        right = (v < t) & (lo < hi)
        return jnp.where(right, mid + 1, lo), jnp.where(right | (lo >= hi), hi, mid)

    lo, _ = jax.lax.fori_loop(0, max(n, 1).bit_length(), body, (lo, hi))
    return lo


_GOLDEN = np.uint32(0x9E3779B1)


def _mix(h):
    """murmur3 fmix32; the same arithmetic in numpy (host build) and jax (device query)."""
    xp = jnp if isinstance(h, jax.Array) else np
    h = h ^ (h >> xp.uint32(16))
    h = h * xp.uint32(0x85EBCA6B)
    h = h ^ (h >> xp.uint32(13))
    h = h * xp.uint32(0xC2B2AE35)
    return h ^ (h >> xp.uint32(16))


def _extend(h, t):
    xp = jnp if isinstance(h, jax.Array) or isinstance(t, jax.Array) else np
    return _mix(h * xp.uint32(_GOLDEN) + t.astype(xp.uint32) + xp.uint32(1))


@dataclasses.dataclass(frozen=True)
class HashBitmap(Constraint):
    """One bitmap of hashed prefixes (all lengths); false positives possible, never negatives."""

    words: Any  # uint32 [2**log2_bits / 32]
    vocab_size: int
    num_levels: int
    log2_bits: int

    @classmethod
    def build(cls, sids: ArrayInput, *, vocab_size: int, bits_per_prefix: int = 16) -> "HashBitmap":
        sids = _check_sids(sids, vocab_size)
        N, L = sids.shape
        log2_bits = max(5, int(np.ceil(np.log2(N * L * bits_per_prefix))))
        words = np.zeros(max(1, (1 << log2_bits) // 32), np.uint32)
        h = np.zeros(N, np.uint32)
        with np.errstate(over="ignore"):
            for lev in range(L):
                h = _extend(h, sids[:, lev])
                # Sorted positions: OR each word's bits once (ufunc.at is ~10x slower).
                pos = np.sort(h & np.uint32((1 << log2_bits) - 1))
                word = pos >> np.uint32(5)
                first = np.flatnonzero(np.concatenate([[True], word[1:] != word[:-1]]))
                bits = np.left_shift(np.uint32(1), pos & np.uint32(31))
                words[word[first]] |= np.bitwise_or.reduceat(bits, first)
        return cls(words, vocab_size, L, log2_bits)

    def init_state(self, batch_size: int) -> UInt32[Array, " B"]:
        return jnp.zeros((batch_size,), jnp.uint32)

    def candidates(
        self, level: Level, state: UInt32[Array, "B K"], log_probs: Float[Array, "B K V"]
    ) -> Candidates:
        out = _all_tokens(log_probs)
        h = _extend(state[..., None], out.tokens)
        pos = h & jnp.uint32((1 << self.log2_bits) - 1)
        w = jnp.take(self.words, (pos >> 5).astype(jnp.int32))
        return out._replace(valid=((w >> (pos & 31)) & 1).astype(bool), aux=h)


jax.tree_util.register_dataclass(
    HashBitmap, data_fields=["words"], meta_fields=["vocab_size", "num_levels", "log2_bits"]
)


def index_nbytes(constraint: Constraint) -> int:
    """Bytes of device arrays held by a constraint (host structures estimated for the CPU trie)."""
    if isinstance(constraint, CpuTrie):
        trie = _LIVE_TRIES[int(constraint.trie_id)]
        return sum(232 + 100 * len(c) for c in trie.children)  # dict + int entries
    return sum(np.asarray(x).nbytes for x in jax.tree.leaves(constraint))
