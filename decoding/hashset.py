"""Exact membership of whole SIDs on device: an open-addressing hash set of mixed-radix SID keys
(built with numpy, queried in jax with a fixed probe count and no host round trip), the sorted-key
binary search it is measured against, and `HashVerify`, the constraint that checks drafted SIDs
before the last level's top-K (NEZHA's verification).

Keys: the mixed-radix integer sum_l c_l * V**l of a SID, written in base V**g with g levels per
uint32 word (the most levels with V**g <= 2**32): word w = sum_{j<g} c_{wg+j} * V**j. Two SIDs are
equal iff their words are, so any L and V fit without 64-bit integers (JAX's default is 32).
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, UInt32

from decoding.baselines import _mix
from decoding.constraints import Candidates, Constraint, Level, _all_tokens
from decoding.static_index import ArrayInput, _check_sids

_MAX_LOAD = 0.5  # open addressing: half the slots empty keeps probe windows short
_MAX_PROBES = 16  # beyond this the table grows instead


def levels_per_word(vocab_size: int) -> int:
    """g: the most SID levels whose mixed-radix value fits one uint32 word (V**g <= 2**32)."""
    g = 1
    while vocab_size ** (g + 1) <= 1 << 32:
        g += 1
    return g


def num_words(num_levels: int, vocab_size: int) -> int:
    return -(-num_levels // levels_per_word(vocab_size))


def sid_words(sids: Int[ArrayLike, "*Q L"], vocab_size: int, xp: Any = jnp) -> UInt32[Any, "*Q W"]:
    """Key words of SIDs with codes in [0, V), by numpy (xp=np, the build) or jax (queries).

    One function for both, so build and query can never disagree on a key.
    """
    L, g = sids.shape[-1], levels_per_word(vocab_size)
    words = []
    for start in range(0, L, g):
        # Horner over the word's levels, most significant first; every partial value is below
        # V**g <= 2**32, so uint32 never wraps here.
        acc = xp.zeros(sids.shape[:-1], xp.uint32)
        for level in reversed(range(start, min(start + g, L))):
            acc = acc * xp.uint32(vocab_size) + sids[..., level].astype(xp.uint32)
        words.append(acc)
    return xp.stack(words, axis=-1)


def _hash(words, xp):
    """uint32 hash of key words [..., W] (multiplications wrap mod 2**32 in numpy and XLA)."""
    h = xp.zeros(words.shape[:-1], xp.uint32)
    for w in range(words.shape[-1]):
        h = _mix(h * xp.uint32(0x9E3779B1) + words[..., w])
    return h


@dataclasses.dataclass(frozen=True, kw_only=True)
class HashSet:
    """Open addressing with a fixed probe window: key k sits in one of the slots
    (h(k) mod capacity) + 0..P-1.

    A pytree: the arrays are leaves, (V, L, capacity, probes) static metadata, so sets of one
    capacity share one compiled program (`build(..., capacity=other.capacity)`).
    """

    keys: Any  # uint32 [capacity + P - 1, W]
    used: Any  # bool [capacity + P - 1]
    num_items: Any  # int32 scalar: distinct SIDs stored
    vocab_size: int
    num_levels: int
    capacity: int  # home slots, a power of two
    probes: int  # P: slots a query reads

    @property
    def num_words(self) -> int:
        return num_words(self.num_levels, self.vocab_size)

    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.used.nbytes)

    @classmethod
    def build(
        cls,
        sids: ArrayInput,
        *,
        vocab_size: int,
        probes: int | None = None,
        capacity: int | None = None,
    ) -> "HashSet":
        """From SIDs int[N, L] (any order, duplicates allowed), vectorised numpy.

        Without `capacity`, the table starts at the smallest power of two holding N at load 0.5
        and doubles until every key lands within its window; with it, a set that does not fit
        raises ValueError. Without `probes`, P is the smallest of 4, 8, 16 that fits (the longest
        displacement measured at load 0.48 was 11 for 1e6 random SIDs, 14 at 0.6 for 1e7).
        Another set with the same `capacity` and `probes` shares the compiled programs.
        """
        sids = _check_sids(sids, vocab_size)
        if probes is not None and probes < 1:
            raise ValueError(f"probes must be >= 1, got {probes}")
        keys = np.unique(sid_words(sids, vocab_size, np), axis=0)
        N = len(keys)
        if capacity is not None:
            if capacity < 1 or capacity & (capacity - 1):
                raise ValueError(f"capacity must be a power of two, got {capacity}")
            cap = capacity
        else:
            cap = 1 << max(int(np.ceil(N / _MAX_LOAD)) - 1, 15).bit_length()
        h = _hash(keys, np).astype(np.int64)
        while True:
            slot, longest = _place(h & (cap - 1)) if N <= cap else (None, None)
            limit = _MAX_PROBES if probes is None else probes
            if slot is not None and longest < limit:
                break
            if capacity is not None:
                raise ValueError(
                    f"capacity={capacity}: {N} SIDs do not fit within {limit} probes; "
                    "build with a larger capacity (or none, to size it)"
                )
            cap *= 2
        if probes is None:
            # Fewer probes, fewer gathers per query; powers of two keep the shapes few.
            probes = next(p for p in (4, 8, _MAX_PROBES) if longest < p)
        # P - 1 slots past the last home slot: windows never wrap around, so no mask per probe.
        table = np.zeros((cap + probes - 1, keys.shape[1]), np.uint32)
        used = np.zeros(cap + probes - 1, bool)
        table[slot], used[slot] = keys, True
        return cls(
            keys=table,
            used=used,
            num_items=np.int32(N),
            vocab_size=vocab_size,
            num_levels=sids.shape[1],
            capacity=cap,
            probes=probes,
        )

    def contains_words(self, words: UInt32[Array, "*Q W"]) -> Bool[Array, "*Q"]:
        """Membership of key words (`sid_words`); any leading shape."""
        home = (_hash(words, jnp) & jnp.uint32(self.capacity - 1)).astype(jnp.int32)
        found = jnp.zeros(words.shape[:-1], bool)
        # One gather per probe rather than a [..., P, W] block: the last draft level queries
        # B * K * V keys, and P times that many words would not fit in cache (or memory).
        for r in range(self.probes):
            slot = home + r
            same = jnp.all(jnp.take(self.keys, slot, axis=0) == words, axis=-1)
            found |= same & jnp.take(self.used, slot)
        return found


jax.tree_util.register_dataclass(
    HashSet,
    data_fields=["keys", "used", "num_items"],
    meta_fields=["vocab_size", "num_levels", "capacity", "probes"],
)


def _place(home: np.ndarray) -> tuple[np.ndarray, int]:
    """(slot of each key, the longest displacement slot - home) of linear probing.

    Keys are inserted in order of their home slot (Robin Hood's placement, whose longest
    displacement is the shortest possible): the i-th key by home takes slot
    max(home_i, slot_{i-1} + 1) = i + max_{j<=i} (home_j - j), one cumulative max. Queries read
    their whole window without stopping at an empty slot, so any placement inside it is correct.
    """
    order = np.argsort(home, kind="stable")
    i = np.arange(len(home))
    slot_sorted = i + np.maximum.accumulate(home[order] - i)
    slot = np.empty_like(slot_sorted)
    slot[order] = slot_sorted
    return slot, int((slot_sorted - home[order]).max(initial=0))


def hash_contains(hashset: HashSet, sids: Int[ArrayLike, "Q L"]) -> Bool[Array, " Q"]:
    """Membership of whole SIDs in the hash set (cf. `decoding.contains` for a STATIC index)."""
    sids = _query_sids(sids, hashset.num_levels)
    V = hashset.vocab_size
    ok = jnp.all((sids >= 0) & (sids < V), axis=-1)
    return ok & hashset.contains_words(sid_words(jnp.clip(sids, 0, V - 1), V))


def _query_sids(sids, L: int) -> jax.Array:
    if sids.ndim != 2 or sids.shape[1] != L:
        raise ValueError(f"sids: expected [Q, {L}], got shape {sids.shape}")
    return jnp.asarray(sids, jnp.int32)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SortedKeys:
    """The baseline: distinct key words sorted lexicographically, queried by binary search."""

    keys: Any  # uint32 [N, W], most significant word last
    vocab_size: int
    num_levels: int

    @classmethod
    def build(cls, sids: ArrayInput, *, vocab_size: int) -> "SortedKeys":
        sids = _check_sids(sids, vocab_size)
        words = sid_words(sids, vocab_size, np)
        # np.unique sorts rows by word 0 first; reversing the columns makes the last (most
        # significant) word the primary key, i.e. numeric order of the mixed-radix integers.
        keys = np.unique(words[:, ::-1], axis=0)[:, ::-1]
        return cls(keys=np.ascontiguousarray(keys), vocab_size=vocab_size, num_levels=sids.shape[1])

    def nbytes(self) -> int:
        return int(self.keys.nbytes)


jax.tree_util.register_dataclass(
    SortedKeys, data_fields=["keys"], meta_fields=["vocab_size", "num_levels"]
)


def sorted_contains(table: SortedKeys, sids: Int[ArrayLike, "Q L"]) -> Bool[Array, " Q"]:
    """Membership by a fixed ceil(log2(N + 1))-step lower-bound search over the sorted keys."""
    sids = _query_sids(sids, table.num_levels)
    V = table.vocab_size
    ok = jnp.all((sids >= 0) & (sids < V), axis=-1)
    q = sid_words(jnp.clip(sids, 0, V - 1), V)
    N = table.keys.shape[0]

    def step(_, bounds):
        lo, hi = bounds
        mid = (lo + hi) // 2
        less = _lex_less(jnp.take(table.keys, jnp.minimum(mid, N - 1), axis=0), q)
        go_right = (mid < hi) & less
        return jnp.where(go_right, mid + 1, lo), jnp.where(go_right, hi, mid)

    # A loop, not unrolled steps: XLA:CPU compiled the unrolled steps of keys of W > 1 words so
    # that each step doubled the call's time (2**steps, i.e. linear in N: 4,096 queries took
    # 64 ms at N=1,000, 1.1 s at 16,000, 80 s at 1e6); in the loop one step is one gather.
    bounds = (jnp.zeros(q.shape[:1], jnp.int32), jnp.full(q.shape[:1], N, jnp.int32))
    lo, _ = jax.lax.fori_loop(0, max(N, 1).bit_length(), step, bounds)
    found = jnp.all(jnp.take(table.keys, jnp.minimum(lo, N - 1), axis=0) == q, axis=-1)
    return ok & (lo < N) & found


def _lex_less(a, b):
    """a < b as mixed-radix integers: compare from the most significant (last) word down."""
    less = jnp.zeros(a.shape[:-1], bool)
    equal = jnp.ones(a.shape[:-1], bool)
    for w in reversed(range(a.shape[-1])):
        less |= equal & (a[..., w] < b[..., w])
        equal &= a[..., w] == b[..., w]
    return less


@dataclasses.dataclass(frozen=True)
class HashVerify(Constraint):
    """NEZHA's verification as a constraint: every code is allowed at levels 0..L-2; at the last
    level each beam's V completions are checked against the hash set, so SIDs that are no item
    are dropped before the final top-K (and if fewer than K remain, the rest are flagged invalid).

    State: the key words of the beam's prefix [B, K, W]; a completion adds c * V**j to one word.
    """

    hashset: HashSet

    @property
    def vocab_size(self) -> int:
        return self.hashset.vocab_size

    @property
    def num_levels(self) -> int:
        return self.hashset.num_levels

    @property
    def scan_start(self) -> int:
        # The last level differs in kind from the others, so no level runs in a traced loop.
        return self.hashset.num_levels

    def _word_of(self, level: int) -> tuple[int, int]:
        """(word index, multiplier V**j) of `level`'s code in the key."""
        w, j = divmod(int(level), levels_per_word(self.vocab_size))
        return w, self.vocab_size**j

    def init_state(self, batch_size: int) -> UInt32[Array, "B W"]:
        return jnp.zeros((batch_size, self.hashset.num_words), jnp.uint32)

    def candidates(
        self, level: Level, state: UInt32[Array, "B K W"], log_probs: Float[Array, "B K V"]
    ) -> Candidates:
        out = _all_tokens(log_probs)
        if int(level) < self.num_levels - 1:
            return out
        w, mult = self._word_of(level)
        V = self.vocab_size
        codes_V = jnp.arange(V, dtype=jnp.uint32) * jnp.uint32(mult)
        # [B, K, 1, W] + one-hot word w * codes -> the keys of all V completions, [B, K, V, W].
        onehot_W = (jnp.arange(state.shape[-1]) == w).astype(jnp.uint32)
        keys = state[..., None, :] + (codes_V[:, None] * onehot_W[None, :])[None, None]
        return out._replace(valid=self.hashset.contains_words(keys))

    def advance(
        self, level: Level, state: UInt32[Array, "B K W"], tokens: Int[Array, "B K"], aux: PyTree
    ) -> UInt32[Array, "B K W"]:
        w, mult = self._word_of(level)
        return state.at[..., w].add(tokens.astype(jnp.uint32) * jnp.uint32(mult))


jax.tree_util.register_dataclass(HashVerify, data_fields=["hashset"], meta_fields=[])
