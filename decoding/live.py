"""The live index: a SID trie whose items are toggled, added and filtered per request on device.

Layout (depth d holds the nodes of d-code prefixes; depth 0 is the root, depth L the items):
- per level l < L, a child table `child[l]` [nodes of depth l, W_l] of local ids at depth l+1
  (item ids at l = L-1; -1 = free slot) and the tokens beside them `tok[l]` (int16 while
  V <= 2**15): a fixed-width slice per node, so a beam's candidates are one row gather, and free
  slots take new children in place;
- per item: `item_flags` (bit s: member of named set s; bit 30: enabled) and `item_time`;
- per set mask R in [0, 2**S) and node n of depth d: `summary[d - 1][R, n]`, the newest time
  of an enabled item under n that is in every set of R (`_EMPTY` when there is none). A child
  is allowed for a request (R, t) iff its maximum is >= t: intersection and freshness in one
  gather and one compare per candidate, exact, for any of the 2**S masks. Mask-major, so one
  request's reads of a beam's children (consecutive ids, as built) share cache lines. Stored
  for depths 1..D-1 only, those whose nodes have more than `_LEAF_SLOTS` leaf slots under them
  (D fixed by the capacity's widths): deeper, a child's maximum is read off its few items
  through the child tables (`_newest`). At 1e6 random items that drops 3 of 7 depths' maxima,
  126 of 454 MB, for ~5% of the search time;
- `parent[d]` (depth d -> d-1) and `item_parent`, so that an update walks each item's root path.

Why a pointer trie with per-mask maxima, not items in trie order with range counts: an insertion
would shift every later item's range, and counts per set cannot answer an intersection nor
"newest under n" after a deletion. Maxima cannot be decremented either, so an update recomputes
each stored node on the item's path from its children (W_l reads per level, bottom-up). The
cost is 2**S values per stored node: S <= 5 named sets (`MAX_SETS`), 4 * 2**S bytes a node.
"""

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from decoding.constraints import Candidates, Constraint, Level
from decoding.static_index import ArrayInput, _check_sids, bucket

MAX_SETS = 5  # 2**5 = 32 maxima per node
ENABLED = 1 << 30  # the item_flags bit of "not disabled", apart from the named sets' bits
_EMPTY = int(np.iinfo(np.int32).min)  # the summary of a node with no qualifying item
_LEAF_SLOTS = 8  # maxima are stored for depths with more leaf slots than this under a node
TIME_MIN = _EMPTY + 1  # item times and request windows live in [TIME_MIN, int32 max]
# Rows per compiled addition or lookup: one program of each per capacity, so an addition of a new
# size compiles nothing (compiling one costs seconds; running a chunk, milliseconds).
_CHUNK = 256


@dataclasses.dataclass(frozen=True, kw_only=True)
class LiveCapacity:
    """Static shapes: live indexes of equal capacity share every compiled program."""

    items: int  # item slots (ids 0 .. items-1)
    nodes: tuple[int, ...]  # node slots per depth 0..L-1 (depth 0: the root, 1)
    widths: tuple[int, ...]  # child slots per node, per level 0..L-1


@dataclasses.dataclass(frozen=True, kw_only=True)
class LiveIndex:
    """The live trie; a pytree whose arrays are leaves and whose shapes are static metadata."""

    child: Any  # tuple over levels l: int32 [nodes[l], widths[l]], local ids at depth l+1
    tok: Any  # tuple over levels l: int16/int32 [nodes[l], widths[l]], the token of each slot
    summary: Any  # tuple over the stored depths d = 1..D-1: int32 [2**S, nodes[d]]
    parent: Any  # tuple over depths 1..L-1: int32 [nodes[d]], local id at depth d-1
    item_parent: Any  # int32 [items]: the item's depth-(L-1) node
    item_flags: Any  # int32 [items]: set bits | ENABLED
    item_time: Any  # int32 [items]
    num_nodes: Any  # int32 [L]: nodes in use per depth 0..L-1
    vocab_size: int
    num_levels: int
    set_names: tuple[str, ...]
    capacity: LiveCapacity

    @property
    def num_masks(self) -> int:
        return 1 << len(self.set_names)

    def mask(self, names: Sequence[str]) -> int:
        """The request mask R of the named sets an item must all be in."""
        unknown = [n for n in names if n not in self.set_names]
        if unknown:
            raise ValueError(f"unknown set names {unknown}; this index has {self.set_names}")
        return sum(1 << self.set_names.index(n) for n in names)

    def nbytes(self) -> int:
        return sum(int(x.nbytes) for x in jax.tree.leaves(self))

    @classmethod
    def build(
        cls,
        sids: ArrayInput,
        *,
        vocab_size: int,
        set_names: Sequence[str] = (),
        sets: ArrayInput | None = None,
        times: ArrayInput | None = None,
        enabled: ArrayInput | None = None,
        spare: float = 0.25,
        capacity: LiveCapacity | None = None,
    ) -> "LiveIndex":
        """From distinct SIDs int[N, L]; item i is row i.

        `sets` int[N] holds bit s for membership of `set_names[s]` (default: every set), `times`
        int[N] (default TIME_MIN), `enabled` bool[N] (default all). Without `capacity`, node and
        item slots get `spare` headroom and each level's width is the widest branching plus
        one, rounded up to a power of two (at most V); a given capacity that is too small is a
        ValueError.
        """
        sids = _check_sids(sids, vocab_size)
        N, L = sids.shape
        S = len(set_names)
        if S > MAX_SETS or len(set(set_names)) != S:
            raise ValueError(f"set_names: at most {MAX_SETS} distinct names, got {set_names}")
        flags, times = _attributes(N, S, sets, times, enabled)
        order = np.lexsort(sids.T[::-1])
        cols = sids[order].T
        dup = np.all(cols[:, 1:] == cols[:, :-1], axis=0)
        if dup.any():
            raise ValueError(f"sids: item {order[np.argmax(dup) + 1]} repeats an earlier SID")
        # node_of[d][r]: local id at depth d of sorted row r's prefix (depth-major lexicographic
        # numbering, as in static_index); depth L is the item itself.
        changed = np.zeros(N, bool)
        node_of, starts = [np.zeros(N, np.int64)], [np.zeros(1, np.int64)]
        for d in range(1, L + 1):
            changed[1:] |= cols[d - 1][1:] != cols[d - 1][:-1]
            changed[0] = True
            node_of.append(np.cumsum(changed) - 1 if d < L else order.astype(np.int64))
            starts.append(np.flatnonzero(changed))
        counts = [len(s) for s in starts[:L]]
        branch = [
            np.bincount(node_of[lev][starts[lev + 1]], minlength=counts[lev]).max()
            for lev in range(L)
        ]
        needed = LiveCapacity(
            items=N,
            nodes=tuple(counts),
            widths=tuple(min(1 << int(b).bit_length(), vocab_size) for b in branch),
        )
        if capacity is None:
            capacity = LiveCapacity(
                items=bucket(int(N * (1 + spare)) + 1),
                nodes=(1,) + tuple(bucket(int(c * (1 + spare)) + 1) for c in counts[1:]),
                widths=needed.widths,
            )
        elif not _fits(capacity, needed, L):
            raise ValueError(f"capacity: {capacity} is too small; this catalog needs {needed}")
        child, tok, parent, summary = [], [], [], []
        val = _leaf_values(flags[order], times[order], S)
        for lev in range(L):
            # Children of a depth-lev node are consecutive among the depth-(lev+1) first rows;
            # a child's slot is its rank among its siblings.
            rows = starts[lev + 1]
            par = node_of[lev][rows]
            slot = np.arange(len(rows)) - np.searchsorted(par, par, side="left")
            c = np.full((capacity.nodes[lev], capacity.widths[lev]), -1, np.int32)
            t = np.zeros_like(c, _tok_dtype(vocab_size))
            c[par, slot] = node_of[lev + 1][rows]
            t[par, slot] = cols[lev][rows]
            child.append(c)
            tok.append(t)
            if lev + 1 < L:
                p = np.zeros(capacity.nodes[lev + 1], np.int32)
                p[: len(rows)] = par
                parent.append(p)
            if lev + 1 < _stored_depths(capacity):
                # The depth-(lev+1) maxima: the per-item maxima [N, 2**S] in trie order reduced
                # over each node's contiguous rows (the build is the one place using trie order).
                s = np.full((1 << S, capacity.nodes[lev + 1]), _EMPTY, np.int32)
                s[:, : len(rows)] = np.maximum.reduceat(val, rows, axis=0).T
                summary.append(s)
        item_parent = np.zeros(capacity.items, np.int32)
        item_parent[order] = node_of[L - 1]
        return cls(
            child=tuple(child),
            tok=tuple(tok),
            summary=tuple(summary),
            parent=tuple(parent),
            item_parent=item_parent,
            item_flags=_pad(flags, capacity.items, 0),
            item_time=_pad(times, capacity.items, TIME_MIN),
            num_nodes=np.asarray(counts, np.int32),
            vocab_size=vocab_size,
            num_levels=L,
            set_names=tuple(set_names),
            capacity=capacity,
        )


jax.tree_util.register_dataclass(
    LiveIndex,
    data_fields=[
        "child",
        "tok",
        "summary",
        "parent",
        "item_parent",
        "item_flags",
        "item_time",
        "num_nodes",
    ],
    meta_fields=["vocab_size", "num_levels", "set_names", "capacity"],
)


def _fits(cap: LiveCapacity, need: LiveCapacity, L: int) -> bool:
    return (
        len(cap.nodes) == len(cap.widths) == L
        and cap.items >= need.items
        and all(a >= b for a, b in zip(cap.nodes, need.nodes, strict=True))
        and all(a >= b for a, b in zip(cap.widths, need.widths, strict=True))
    )


def _stored_depths(cap: LiveCapacity) -> int:
    """D: the depths 1..D-1 hold maxima (a node there has more than _LEAF_SLOTS leaf slots)."""
    slots, D = 1, len(cap.widths)
    while D > 1 and slots * cap.widths[D - 1] <= _LEAF_SLOTS:
        slots *= cap.widths[D - 1]
        D -= 1
    return D


def _tok_dtype(vocab_size: int):
    return np.int16 if vocab_size <= 1 << 15 else np.int32


def _pad(x: np.ndarray, n: int, value) -> np.ndarray:
    out = np.full(n, value, x.dtype)
    out[: len(x)] = x
    return out


def _attributes(N: int, S: int, sets, times, enabled) -> tuple[np.ndarray, np.ndarray]:
    """(item_flags, item_time) int32 [N] from the caller's optional per-item columns."""
    full = (1 << S) - 1
    sets = np.full(N, full, np.int64) if sets is None else np.asarray(sets, np.int64)
    times = np.full(N, TIME_MIN, np.int64) if times is None else np.asarray(times, np.int64)
    on = np.ones(N, bool) if enabled is None else np.asarray(enabled, bool)
    for name, x in (("sets", sets), ("times", times), ("enabled", on)):
        if x.shape != (N,):
            raise ValueError(f"{name}: expected shape ({N},), got {x.shape}")
    if ((sets < 0) | (sets > full)).any():
        raise ValueError(f"sets: bit masks must be in [0, {full}] for {S} named sets")
    if ((times < TIME_MIN) | (times > np.iinfo(np.int32).max)).any():
        raise ValueError(f"times: must be int32 values >= {TIME_MIN}")
    flags = (sets | np.where(on, ENABLED, 0)).astype(np.int32)
    return flags, times.astype(np.int32)


def _leaf_values(flags: np.ndarray, times: np.ndarray, S: int) -> np.ndarray:
    """[..., 2**S]: the item's time under every mask R it satisfies (enabled and in all of R)."""
    need = np.arange(1 << S, dtype=np.int32) | ENABLED
    ok = (flags[..., None] & need) == need
    return np.where(ok, times[..., None], np.int32(_EMPTY))


class Gather:
    """The row gathers a search makes in the live tables (a sharded index answers them across
    devices, `decoding.sharding.shard_live`); indices are in range, so they clip."""

    def rows(self, table: Array, idx: Array) -> Array:
        """table[idx] along axis 0."""
        return jnp.take(table, idx, axis=0, mode="clip")

    def summary(self, summ: Array, R: Array, nodes: Array) -> Array:
        """summ[R, nodes] of one depth's maxima [2**S, nodes]; R and nodes broadcast."""
        return jnp.take(summ.reshape(-1), R * summ.shape[1] + nodes, mode="clip")


_LOCAL = Gather()


def _newest(index: LiveIndex, d: int, nodes: Array, R: Array, take: Gather = _LOCAL) -> Array:
    """The newest time of an enabled item in every set of R under depth-d nodes (items at
    d = L), `_EMPTY` where none; `nodes` and `R` broadcast, rank for rank."""
    if d == index.num_levels:
        need = R | ENABLED
        f = take.rows(index.item_flags, nodes)
        return jnp.where((f & need) == need, take.rows(index.item_time, nodes), _EMPTY)
    if d <= len(index.summary):
        return take.summary(index.summary[d - 1], R, nodes)  # one gather
    # A depth without maxima: the max over the node's children (a few leaf slots in all).
    kids = take.rows(index.child[d], nodes)  # [..., W_d]
    val = _newest(index, d + 1, jnp.maximum(kids, 0), R[..., None], take)
    return jnp.where(kids >= 0, val, _EMPTY).max(axis=-1)


# ---------------------------------------------------------------------------------------------
# Updates: pure jitted functions of the index (a caller holding an old reference keeps it intact).


def _refresh(index: LiveIndex, ids: Int[Array, " U"], ok: Bool[Array, " U"]) -> LiveIndex:
    """Recomputes the stored maxima on the root paths of items `ids` (where `ok`), bottom-up."""
    R = jnp.arange(index.num_masks, dtype=jnp.int32).reshape(1, 1, -1)  # against [U, W_d, 1]
    node = jnp.take(index.item_parent, jnp.where(ok, ids, 0))
    for d in range(index.num_levels - 1, 0, -1):
        if d <= len(index.summary):
            # The maxima of `node` (depth d) from its children's, refreshed in the last pass.
            kids = jnp.take(index.child[d], node, axis=0)  # [U, W_d]
            val = _newest(index, d + 1, jnp.maximum(kids, 0)[..., None], R)  # [U, W_d, 2**S]
            val = jnp.where(kids[..., None] >= 0, val, _EMPTY).max(axis=1)  # [U, 2**S]
            # Items sharing a node write the same column (computed from one state): no race.
            cols = jnp.where(ok, node, index.capacity.nodes[d])
            summary = list(index.summary)
            summary[d - 1] = summary[d - 1].at[:, cols].set(val.T, mode="drop")
            index = dataclasses.replace(index, summary=tuple(summary))
        node = jnp.take(index.parent[d - 1], node)
    return index


def _set_flags_impl(index, ids, set_mask, clear_mask, times, set_time):
    """Flags := (flags | set_mask) & ~clear_mask, times where set_time, for ids >= 0."""
    ok = (ids >= 0) & (ids < index.capacity.items)
    at = jnp.where(ok, ids, index.capacity.items)
    flags = jnp.take(index.item_flags, at, mode="fill", fill_value=0)
    flags = (flags | set_mask) & ~clear_mask
    old_t = jnp.take(index.item_time, at, mode="fill", fill_value=TIME_MIN)
    index = dataclasses.replace(
        index,
        item_flags=index.item_flags.at[at].set(flags, mode="drop"),
        item_time=index.item_time.at[at].set(jnp.where(set_time, times, old_t), mode="drop"),
    )
    return _refresh(index, ids, ok)


# Donated: the update writes in place (no copy of the summaries), and the old index is deleted;
# only for a caller that holds the one reference (no reader may still use it).
_set_flags = jax.jit(_set_flags_impl)
_set_flags_donated = jax.jit(_set_flags_impl, donate_argnums=0)


def _bucket_pad(x: np.ndarray, fill) -> np.ndarray:
    """Pads the update batch to a power of two, so a few shapes serve every batch size."""
    n = max(len(x), 1)
    out = np.full((1 << (n - 1).bit_length(),) + x.shape[1:], fill, x.dtype)
    out[: len(x)] = x
    return out


def _chunk_pad(x: np.ndarray, fill) -> np.ndarray:
    """Pads rows to `_CHUNK`: additions and lookups run in chunks of one shape."""
    out = np.full((_CHUNK,) + x.shape[1:], fill, x.dtype)
    out[: len(x)] = x
    return out


def _ids(item_ids) -> np.ndarray:
    ids = np.atleast_1d(np.asarray(item_ids))
    if ids.size == 0:
        return np.zeros(0, np.int32)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"item_ids: expected a 1-d integer array, got {ids.dtype} {ids.shape}")
    return ids.astype(np.int32)


def _check_ids(index: LiveIndex, ids: np.ndarray) -> None:
    if len(ids) and (ids.min() < 0 or ids.max() >= index.capacity.items):
        raise ValueError(f"item_ids: must be in [0, {index.capacity.items})")


def set_enabled(
    index: LiveIndex, item_ids: ArrayInput, value: bool, *, donate: bool = False
) -> LiveIndex:
    """Disables (value=False) or re-enables items; one compiled program per batch-size bucket.

    With `donate`, `index` is updated in place and must not be used again.
    """
    ids = _ids(item_ids)
    _check_ids(index, ids)
    bit = np.int32(ENABLED)
    z = np.int32(0)
    return _toggle(index, ids, bit if value else z, z if value else bit, donate)


def set_membership(
    index: LiveIndex, set_name: str, item_ids: ArrayInput, value: bool, *, donate: bool = False
) -> LiveIndex:
    """Adds items to (value=True) or removes them from the named set (`donate`: in place)."""
    ids = _ids(item_ids)
    _check_ids(index, ids)
    bit = np.int32(index.mask([set_name]))
    z = np.int32(0)
    return _toggle(index, ids, bit if value else z, z if value else bit, donate)


def set_times(index: LiveIndex, item_ids: ArrayInput, times: ArrayInput) -> LiveIndex:
    """Sets the items' times (the freshness windows compare against them)."""
    ids = _ids(item_ids)
    _check_ids(index, ids)
    t = np.asarray(times, np.int64).reshape(-1)
    if t.shape != ids.shape or (len(t) and (t.min() < TIME_MIN or t.max() > 2**31 - 1)):
        raise ValueError(f"times: expected {len(ids)} int32 values >= {TIME_MIN}")
    z = np.int32(0)
    ids, t = _bucket_pad(ids, -1), _bucket_pad(t.astype(np.int32), 0)
    return _set_flags(index, ids, z, z, t, np.ones(len(ids), bool))


def _toggle(index, ids, set_mask, clear_mask, donate=False):
    ids = _bucket_pad(ids, -1)
    zeros = np.zeros(len(ids), np.int32)
    fn = _set_flags_donated if donate else _set_flags
    return fn(index, ids, set_mask, clear_mask, zeros, np.zeros(len(ids), bool))


def _set_attributes(index: LiveIndex, ids, flags, times) -> LiveIndex:
    """Overwrites flags and times of items (used to replay host state onto a rebuilt index);
    updates `index` in place: only for an index no reader holds."""
    ids, flags, times = (np.asarray(x, np.int32) for x in (ids, flags, times))
    for a in range(0, len(ids), _CHUNK):
        part = slice(a, a + _CHUNK)
        index = _overwrite(
            index,
            _chunk_pad(ids[part], -1),
            _chunk_pad(flags[part], 0),
            _chunk_pad(times[part], TIME_MIN),
        )
    return index


@functools.partial(jax.jit, donate_argnums=0)
def _overwrite(index, ids, flags, times):
    ok = (ids >= 0) & (ids < index.capacity.items)
    at = jnp.where(ok, ids, index.capacity.items)
    index = dataclasses.replace(
        index,
        item_flags=index.item_flags.at[at].set(flags, mode="drop"),
        item_time=index.item_time.at[at].set(times, mode="drop"),
    )
    return _refresh(index, ids, ok)


# Status codes of `add_items`, per row.
ADDED, PADDING, NO_ROOM, DUPLICATE = 1, 0, -1, -2


def add_items(
    index: LiveIndex,
    item_ids: ArrayInput,
    sids: ArrayInput,
    *,
    sets: ArrayInput | None = None,
    times: ArrayInput | None = None,
    enabled: ArrayInput | None = None,
) -> tuple[LiveIndex, np.ndarray]:
    """Inserts new items (ids chosen by the caller, free slots) into the spare capacity.

    Returns the new index and a status per item: ADDED, NO_ROOM (a node's width or a depth's
    node slots are full: rebuild with more capacity) or DUPLICATE (the SID is already an item).
    Items that are not ADDED leave the index as it was. No recompilation within a capacity.
    """
    ids = _ids(item_ids)
    _check_ids(index, ids)
    sids = _check_sids(sids, index.vocab_size)
    if sids.shape != (len(ids), index.num_levels):
        raise ValueError(f"sids: expected [{len(ids)}, {index.num_levels}], got {sids.shape}")
    flags, t = _attributes(len(ids), len(index.set_names), sets, times, enabled)
    if not len(ids):
        return index, np.zeros(0, np.int32)
    sids = sids.astype(np.int32)
    status = []
    # One copy (the caller's index stays intact), then fixed-size chunks update it in place, in
    # order (a chunk sees the items of the ones before it, as rows of one chunk see the rows
    # before them): one compiled program per capacity and one copy, whatever the count.
    index = _copy(index)
    for a in range(0, len(ids), _CHUNK):
        part = slice(a, a + _CHUNK)
        index, st = _insert(
            index,
            _chunk_pad(ids[part], -1),
            _chunk_pad(sids[part], 0),
            _chunk_pad(flags[part], 0),
            _chunk_pad(t[part], TIME_MIN),
            np.int32(len(ids[part])),
        )
        status.append(st)
    return index, np.concatenate(jax.device_get(status))[: len(ids)]


def _copy(index: LiveIndex) -> LiveIndex:
    return jax.tree.map(jnp.copy, index)


@functools.partial(jax.jit, donate_argnums=0)
def _insert(index: LiveIndex, ids, sids, flags, times, n):
    """Inserts rows [0, n) of the padded chunk, one after another, into `index` (donated)."""
    L, cap = index.num_levels, index.capacity

    def one(i, carry):
        child, tok, parent, item_parent, num_nodes, status = carry
        sid, item = sids[i], ids[i]
        # Walk down while the prefix exists: path[l] = depth-l node; f = first missing level.
        node, found, path, hit = jnp.int32(0), jnp.bool_(True), [], []
        for lev in range(L):
            path.append(node)
            row_c, row_t = child[lev][node], tok[lev][node]
            m = (row_c >= 0) & (row_t == sid[lev])
            here = found & m.any()
            hit.append(here)
            node = jnp.where(here, row_c[jnp.argmax(m)], 0)
            found = here
        f = sum(h.astype(jnp.int32) for h in hit)  # the hits are a prefix of the levels
        # Fits when the depth-f node has a free slot and every new depth f+1..L-1 node does.
        free_at_f = jnp.bool_(False)
        for lev in range(L):
            free_at_f |= (f == lev) & (child[lev][path[lev]] < 0).any()
        room = jnp.bool_(True)
        for d in range(1, L):
            room &= (d <= f) | (num_nodes[d] < cap.nodes[d])
        dup = f == L
        go = (item >= 0) & ~dup & free_at_f & room
        st = jnp.where(item < 0, PADDING, jnp.where(dup, DUPLICATE, jnp.where(go, ADDED, NO_ROOM)))
        status = status.at[i].set(st)
        # Create the nodes of depths f+1..L-1 and link each under the previous one; the
        # depth-f node gets its child in its first free slot, a new node in slot 0.
        child, tok, parent = list(child), list(tok), list(parent)
        prev = path[0]
        for lev in range(L):
            new = go & (lev >= f)
            if lev + 1 < L:
                new_id = jnp.where(lev + 1 > f, num_nodes[lev + 1], path[lev + 1])
            else:
                new_id = item
            slot = jnp.where(lev == f, jnp.argmax(child[lev][prev] < 0), 0)
            row = jnp.where(new, prev, cap.nodes[lev])
            child[lev] = child[lev].at[row, slot].set(new_id, mode="drop")
            tok[lev] = tok[lev].at[row, slot].set(sid[lev].astype(tok[lev].dtype), mode="drop")
            if lev + 1 < L:
                made = go & (lev + 1 > f)
                at = jnp.where(made, new_id, cap.nodes[lev + 1])
                parent[lev] = parent[lev].at[at].set(prev, mode="drop")
                num_nodes = num_nodes.at[lev + 1].add(made.astype(jnp.int32))
            else:
                item_parent = item_parent.at[jnp.where(go, item, cap.items)].set(prev, mode="drop")
            prev = new_id
        return tuple(child), tuple(tok), tuple(parent), item_parent, num_nodes, status

    status = jnp.zeros(ids.shape, jnp.int32)
    carry = (index.child, index.tok, index.parent, index.item_parent, index.num_nodes, status)
    # A traced bound (a while loop): the padding rows after n cost nothing here.
    child, tok, parent, item_parent, num_nodes, status = jax.lax.fori_loop(0, n, one, carry)
    ok = status == ADDED
    at = jnp.where(ok, ids, cap.items)
    index = dataclasses.replace(
        index,
        child=child,
        tok=tok,
        parent=parent,
        item_parent=item_parent,
        num_nodes=num_nodes,
        item_flags=index.item_flags.at[at].set(flags, mode="drop"),
        item_time=index.item_time.at[at].set(times, mode="drop"),
    )
    return _refresh(index, ids, ok), status


def lookup(index: LiveIndex, sids: ArrayInput) -> Int[Array, " Q"]:
    """The item id of each SID, -1 where it is no item (enabled or not)."""
    sids = np.asarray(sids)
    if sids.ndim != 2 or sids.shape[1] != index.num_levels:
        raise ValueError(f"sids: expected [Q, {index.num_levels}], got shape {sids.shape}")
    sids = sids.astype(np.int32)
    found = [
        _lookup(index, _chunk_pad(sids[a : a + _CHUNK], 0)) for a in range(0, len(sids), _CHUNK)
    ]
    if not found:
        return jax.device_put(np.zeros(0, np.int32))
    return jax.device_put(np.concatenate(jax.device_get(found))[: len(sids)])


@jax.jit
def _lookup(index, sids):
    node, found = jnp.zeros(sids.shape[:1], jnp.int32), jnp.ones(sids.shape[:1], bool)
    for lev in range(index.num_levels):
        row_c = jnp.take(index.child[lev], node, axis=0)
        m = (row_c >= 0) & (jnp.take(index.tok[lev], node, axis=0) == sids[:, lev : lev + 1])
        found &= m.any(axis=1)
        node = jnp.where(
            found, jnp.take_along_axis(row_c, jnp.argmax(m, axis=1)[:, None], 1)[:, 0], 0
        )
    return jnp.where(found, node, -1)


def compile_updates(index: LiveIndex) -> None:
    """Compiles the programs that add, look up and catch up items on indexes of this capacity,
    changing nothing: run before an index serves, no addition then waits for a compile."""
    none = _chunk_pad(np.zeros(0, np.int32), -1)
    sids = _chunk_pad(np.zeros((0, index.num_levels), np.int32), 0)
    jax.block_until_ready(
        (
            _insert(_copy(index), none, sids, none, none, np.int32(0)),
            _lookup(index, sids),
            _overwrite(_copy(index), none, none, none),
        )
    )


# ---------------------------------------------------------------------------------------------
# Decoding.


@dataclasses.dataclass(frozen=True)
class LiveConstraint(Constraint):
    """Per request row b: only enabled items in every set of `row_sets[b]` (a mask from
    `LiveIndex.mask`) whose time is >= `row_min_time[b]`. State: the beam's node at its depth."""

    index: LiveIndex
    row_sets: Any  # int32 [B]
    row_min_time: Any  # int32 [B]

    @property
    def vocab_size(self) -> int:
        return self.index.vocab_size

    @property
    def num_levels(self) -> int:
        return self.index.num_levels

    @property
    def scan_start(self) -> int:
        # Widths differ per level and so do the arrays read, so every level is unrolled.
        return self.index.num_levels

    def candidates(
        self, level: Level, state: Int[Array, "B K"], log_probs: Float[Array, "B K V"]
    ) -> Candidates:
        idx, lev, take = self.index, int(level), self._gather()
        # Every index here is in range (states are node ids, tokens < V), so the gathers clip
        # instead of wrapping negatives and filling: no per-candidate select around them.
        kids = take.rows(idx.child[lev], state)  # [B, K, W]: child slots
        tok = take.rows(idx.tok[lev], state)
        k = jnp.maximum(kids, 0)
        R = self.row_sets.astype(jnp.int32)[:, None, None]
        # A window below TIME_MIN would admit _EMPTY (no item) as "new enough".
        t = jnp.maximum(self.row_min_time.astype(jnp.int32), TIME_MIN)[:, None, None]
        # The child's maximum for mask R answers "some enabled item in all sets of R, as new as
        # t" for its whole subtree (one gather per candidate where the depth stores maxima).
        ok = _newest(idx, lev + 1, k, R, take) >= t
        lp = jnp.take_along_axis(log_probs, tok, axis=-1, mode="clip", wrap_negative_indices=False)
        return Candidates(tok.astype(jnp.int32), lp, (kids >= 0) & ok, k)

    def _gather(self) -> Gather:
        return _LOCAL

    def advance(
        self, level: Level, state: Int[Array, "B K"], tokens: Int[Array, "B K"], aux: Any
    ) -> Int[Array, "B K"]:
        # Slot -> child node (after the last level: the item id).
        return aux


jax.tree_util.register_dataclass(
    LiveConstraint, data_fields=["index", "row_sets", "row_min_time"], meta_fields=[]
)


def allowed_items(
    index: LiveIndex, row_sets: int | np.integer, min_time: int | np.integer
) -> np.ndarray:
    """Host reference: ids of the items a request (R, t) allows (for tests and checks)."""
    flags = np.asarray(index.item_flags)
    need = int(row_sets) | ENABLED
    ok = ((flags & need) == need) & (np.asarray(index.item_time) >= max(int(min_time), TIME_MIN))
    placed = np.zeros(len(flags), bool)
    last = np.asarray(index.child[-1])
    placed[last[last >= 0]] = True
    return np.flatnonzero(ok & placed)


# ---------------------------------------------------------------------------------------------
# The holder: readers take `catalog.index`, writers serialise on a lock, a full index is rebuilt
# in the background and swapped in whole.


class LiveCatalog:
    """The current live index plus the host copy of every item, rebuilt when capacity runs out.

    Readers call `index` (or `constraint`) and use that immutable pytree for their whole
    request; writers (`set_enabled`, `set_membership`, `set_times`, `add`) replace it under a
    lock. With `in_place=True` toggles and time changes update the device arrays in place
    (donated: no copy of the maxima, ~0.3 ms instead of ~50 ms at 1e6 items); then readers
    must decode inside `with catalog.reading() as index:` (the result ready before the block
    ends), and a writer waits until no reader holds the index (writers first: new readers wait
    behind a waiting writer; a reader must not write). When an addition does not fit, a thread
    rebuilds from a snapshot of the host copy;
    at the swap, every change made since the snapshot (the host copy's difference from it) is
    applied to the new index before it replaces the old one, so no update is lost and no reader
    sees a half-built index. Items that did not fit are decodable after the swap (`wait()`).
    The rebuild compiles the updates for the new capacity before the swap, and `warm(index)`,
    when given, whatever else the caller runs on it (its decoder), so no request waits for that.
    """

    def __init__(
        self,
        sids: ArrayInput,
        *,
        vocab_size: int,
        set_names: Sequence[str] = (),
        sets: ArrayInput | None = None,
        times: ArrayInput | None = None,
        enabled: ArrayInput | None = None,
        spare: float = 0.25,
        capacity: LiveCapacity | None = None,
        in_place: bool = False,
        warm: Callable[[LiveIndex], Any] | None = None,
    ):
        sids = _check_sids(sids, vocab_size)
        # One lock for writers and the reader count; readers wait while a writer waits.
        self._lock = threading.Condition(threading.Lock())
        self._readers = self._writers = 0
        self.in_place = in_place
        self._kw = {"vocab_size": vocab_size, "set_names": tuple(set_names), "spare": spare}
        flags, t = _attributes(len(sids), len(set_names), sets, times, enabled)
        self._sids, self._flags, self._times = sids.astype(np.int32), flags, t
        self._index = jax.device_put(
            LiveIndex.build(self._sids, capacity=capacity, **self._unpack(flags, t), **self._kw)
        )
        self._pending = 0  # items in the host copy beyond the current index (waiting a rebuild)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.swaps = 0
        self._warm = warm

    @staticmethod
    def _unpack(flags, times) -> dict:
        return {"sets": flags & ~ENABLED, "times": times, "enabled": (flags & ENABLED) != 0}

    @property
    def index(self) -> LiveIndex:
        return self._index  # one reference read: atomic

    @contextlib.contextmanager
    def reading(self):
        """The current index, held against in-place writes until the block ends: decode in it
        and block until the result is ready (`jax.block_until_ready`) before leaving."""
        with self._lock:
            while self._writers:
                self._lock.wait()
            self._readers += 1
            index = self._index
        try:
            yield index
        finally:
            with self._lock:
                self._readers -= 1
                if not self._readers:
                    self._lock.notify_all()

    @property
    def num_items(self) -> int:
        return len(self._sids)

    def constraint(self, row_sets: ArrayInput, row_min_time: ArrayInput) -> LiveConstraint:
        return LiveConstraint(
            self._index, jnp.asarray(row_sets, jnp.int32), jnp.asarray(row_min_time, jnp.int32)
        )

    def _write(self, ids, set_mask: int = 0, clear_mask: int = 0, times=None) -> None:
        ids = _ids(ids)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self._sids)):
            raise ValueError(f"item_ids: must be in [0, {len(self._sids)})")
        with self._lock:
            # The host copy first: it is what a rebuild (running or later) catches up from.
            self._flags[ids] = (self._flags[ids] | set_mask) & ~clear_mask
            if times is not None:
                self._times[ids] = times
            # Items waiting for a rebuild have no slot yet here; the rebuild applies theirs.
            here = ids < self._index.capacity.items
            ids = _bucket_pad(ids[here], -1)
            t = np.zeros(len(ids), np.int32) if times is None else _bucket_pad(times[here], 0)
            update = _set_flags
            if self.in_place:
                self._writers += 1
                try:
                    while self._readers:
                        self._lock.wait()
                finally:
                    self._writers -= 1
                update = _set_flags_donated
            self._index = update(
                self._index,
                ids,
                np.int32(set_mask),
                np.int32(clear_mask),
                t,
                np.full(len(ids), times is not None),
            )
            self._lock.notify_all()

    def set_enabled(self, item_ids: ArrayInput, value: bool) -> None:
        self._write(item_ids, ENABLED if value else 0, 0 if value else ENABLED)

    def set_membership(self, set_name: str, item_ids: ArrayInput, value: bool) -> None:
        bit = self._index.mask([set_name])
        self._write(item_ids, bit if value else 0, 0 if value else bit)

    def set_times(self, item_ids: ArrayInput, times: ArrayInput) -> None:
        t = np.asarray(times, np.int64).reshape(-1)
        if len(t) and (t.min() < TIME_MIN or t.max() > 2**31 - 1):
            raise ValueError(f"times: int32 values >= {TIME_MIN}")
        if t.shape != _ids(item_ids).shape:
            raise ValueError("times: one per item id")
        self._write(item_ids, times=t.astype(np.int32))

    def add(
        self,
        sids: ArrayInput,
        *,
        sets: ArrayInput | None = None,
        times: ArrayInput | None = None,
        enabled: ArrayInput | None = None,
    ) -> np.ndarray:
        """New items; returns their ids. Past capacity a background rebuild takes them."""
        sids = _check_sids(sids, self._kw["vocab_size"])
        flags, t = _attributes(len(sids), len(self._kw["set_names"]), sets, times, enabled)
        if not len(sids):
            return np.zeros(0, np.int32)
        if len(np.unique(sids, axis=0)) != len(sids):
            raise ValueError("sids: the new items repeat a SID")
        with self._lock:
            if (np.asarray(lookup(self._index, sids)) >= 0).any():
                raise ValueError("sids: some new items repeat an existing item's SID")
            pend = self._sids[len(self._sids) - self._pending :]
            if self._pending and (sids[:, None] == pend[None]).all(-1).any():
                raise ValueError("sids: some new items repeat a SID waiting for the rebuild")
            ids = np.arange(len(self._sids), len(self._sids) + len(sids), dtype=np.int32)
            self._sids = np.concatenate([self._sids, sids.astype(np.int32)])
            self._flags = np.concatenate([self._flags, flags])
            self._times = np.concatenate([self._times, t])
            fits = self._pending == 0 and ids[-1] < self._index.capacity.items
            if fits:
                new, status = add_items(self._index, ids, sids, **self._unpack(flags, t))
                fits = bool((status == ADDED).all())
                if fits:
                    self._index = new
            if not fits:
                # All or none: a partial insert would leave some of these ids placed and others
                # pending, and the pending count assumes a suffix of the host copy.
                self._pending += len(sids)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._rebuild, daemon=True)
                    self._thread.start()
        return ids

    def wait(self) -> None:
        """Returns when no rebuild is running (after its swap); re-raises a rebuild's error."""
        while (t := self._thread) is not None:
            t.join()
        if self._error is not None:
            raise RuntimeError("the background rebuild failed") from self._error

    def _build(self, sids, flags, times) -> LiveIndex:
        """The slow part, outside the lock (tests override it to hold a rebuild open)."""
        return jax.block_until_ready(
            jax.device_put(LiveIndex.build(sids, **self._unpack(flags, times), **self._kw))
        )

    def _rebuild(self) -> None:
        try:
            self._catch_up()
        except BaseException as e:  # kept for wait(); the old index stays in service
            self._error = e
            with self._lock:
                self._thread = None

    def _catch_up(self) -> None:
        while True:
            with self._lock:
                n = len(self._sids)
                sids, flags, times = self._sids.copy(), self._flags.copy(), self._times.copy()
            new = self._build(sids, flags, times)
            # New shapes: compile what will run on them here, not under the lock or on a request.
            compile_updates(new)
            if self._warm is not None:
                self._warm(new)
            with self._lock:
                # Catch up: attribute changes since the snapshot, then items added since.
                diff = np.flatnonzero((self._flags[:n] != flags) | (self._times[:n] != times))
                if diff.size:
                    new = _set_attributes(new, diff, self._flags[diff], self._times[diff])
                extra = np.arange(n, len(self._sids), dtype=np.int32)
                if extra.size:
                    got, status = add_items(
                        new, extra, self._sids[n:], **self._unpack(self._flags[n:], self._times[n:])
                    )
                    if not (status == ADDED).all():
                        continue  # the new capacity is already too small: snapshot again
                    new = got
                self._index = jax.block_until_ready(new)
                self._pending = 0
                self.swaps += 1
                self._thread = None
                return


__all__ = [
    "ADDED",
    "DUPLICATE",
    "ENABLED",
    "MAX_SETS",
    "NO_ROOM",
    "TIME_MIN",
    "LiveCapacity",
    "LiveCatalog",
    "LiveConstraint",
    "LiveIndex",
    "add_items",
    "allowed_items",
    "compile_updates",
    "lookup",
    "set_enabled",
    "set_membership",
    "set_times",
]
