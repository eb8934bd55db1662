"""Host-side build and proof of the label index: a trie of variable-length token sequences as CSR.

Layout (a label is a sequence of >= 1 token ids; labels are numbered in trie order):
- labels are sorted lexicographically with "end of label" before every token, so a label sorts
  before its extensions and every node's labels are one contiguous range [lo, hi) of label ids;
- nodes are numbered depth by depth (root 0), lexicographically within a depth, so the children of
  a node are contiguous and sorted by token, and the child reached through edge e is node e + 1
  (no next-state array is stored);
- `end[n]` marks a node that completes a label; that label's id is `lo[n]` (it sorts first);
- `root_child[t]`: the root's child through token t (a dense [V] map, as the root of a large label
  set branches over much of the vocabulary); below the root one static width, the widest
  branching (a power of two), so one compiled step reads a fixed-width slice per row.
"""

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jaxtyping import Bool, Int

from decoding.static_index import ArrayInput, _pack, _pow2, bucket

_INT32_MAX = np.iinfo(np.int32).max


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelCapacity:
    """Static shapes: label indexes with equal capacity share one compiled program."""

    nodes: int  # trie nodes, root included, padded
    edges: int  # trie edges (nodes - 1), padded
    labels: int  # label ids, padded to a multiple of 32 (whole bitset words)
    width: int  # candidate slots below the root (the widest branching, a power of two); the
    # root is read as a dense [V] mask instead, as STATIC reads its first levels
    narrow: int = 0  # slots when no row sits at a wider node (0: `width`); a few wide nodes
    # ("The ...") then cost only at the steps where some row is there

    @property
    def narrow_width(self) -> int:
        return min(self.narrow or self.width, self.width)

    def fits(self, other: "LabelCapacity") -> bool:
        """True when an index needing `other` fits into this capacity (`narrow` may differ)."""
        return all(
            getattr(self, f) >= getattr(other, f) for f in ("nodes", "edges", "labels", "width")
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelIndex:
    """The label trie; a pytree whose arrays are leaves and whose shapes are static metadata."""

    # Leaves are typed Any: numpy on the host, jax arrays or tracers on device.
    row_ptr: Any  # int32 [nodes + 1]: node n's children are edges row_ptr[n] .. row_ptr[n+1]-1
    tokens: Any  # uint16 (V <= 65536) else int32 [edges]: the token of edge e (into node e + 1)
    lo: Any  # int32 [nodes]: first label id under the node
    hi: Any  # int32 [nodes]: one past the last label id under the node
    end: Any  # bool [nodes]: the node completes label lo[n]
    label_order: Any  # int32 [labels]: trie id -> the caller's label index (-1 padding)
    first: Any  # int32 [labels]: the first token of each label (trie order; -1 padding)
    root_child: Any  # int32 [V]: the root's child through token t, 0 where t starts no label
    num_labels: Any  # int32 scalar
    max_len: Any  # int32 scalar: tokens of the longest label
    vocab_size: int
    capacity: LabelCapacity

    @property
    def words(self) -> int:
        """uint32 words of a per-row label bitset; one spare so that bit `num_labels` exists."""
        return self.capacity.labels // 32 + 1

    @classmethod
    def build(
        cls,
        labels: ArrayInput,
        *,
        vocab_size: int,
        capacity: LabelCapacity | None = None,
    ) -> "LabelIndex":
        """Builds the index from token-id sequences (a list of lists, or int[N, T] padded with -1).

        Labels keep their caller's numbering in `label_order`; duplicates and empty labels are a
        ValueError. `capacity` pads to a given size class (ValueError when the set does not fit).
        """
        table, lengths = _label_table(labels, vocab_size)
        N, T = table.shape
        order = _lexsort_rows(table, vocab_size)
        table, lengths = table[order], lengths[order]
        same = np.all(table[1:] == table[:-1], axis=1)
        if same.any():
            i = int(np.flatnonzero(same)[0])
            a, b = sorted((int(order[i]), int(order[i + 1])))
            raise ValueError(f"labels[{a}] and labels[{b}] have the same tokens")
        # Depth by depth: `changed[r]` says row r starts a new (padded) prefix of length `depth`;
        # rows are sorted, so equal prefixes are contiguous. A depth-`depth` node is a run of
        # rows at least `depth` long; the run ends at the next change (a shorter row differs by
        # its padding 0, which sorts first), so its label range is [start, next change).
        changed = np.zeros(N, dtype=bool)
        starts, his = [np.zeros(1, np.int64)], [np.array([N])]
        for depth in range(1, T + 1):
            changed[1:] |= table[1:, depth - 1] != table[:-1, depth - 1]
            changed[0] = True
            bounds = np.append(np.flatnonzero(changed), N)
            s = np.flatnonzero(changed & (lengths >= depth))
            starts.append(s)
            his.append(bounds[np.searchsorted(bounds, s, side="right")])
        counts = [len(s) for s in starts]
        offsets = np.concatenate([[0], np.cumsum(counts)])  # first node id of each depth
        num_nodes = int(offsets[-1])
        if num_nodes > _INT32_MAX - 1:
            raise ValueError(f"labels: {num_nodes} trie nodes exceed the int32 range")
        lo = np.concatenate(starts).astype(np.int32)
        hi = np.concatenate(his).astype(np.int32)
        depth_of = np.repeat(np.arange(T + 1), counts)
        end = np.zeros(num_nodes, bool)
        end[1:] = lengths[lo[1:]] == depth_of[1:]
        # Edge e enters node e + 1; its token is the node's last token, read on its first row
        # (the table holds token + 1, padding 0).
        edge_tokens = (table[lo[1:], depth_of[1:] - 1] - 1).astype(
            np.uint16 if vocab_size <= 65536 else np.int32
        )
        # A node's children are the next depth's runs inside its rows [lo, hi); their first
        # edge is (first child's node id) - 1. Children of consecutive nodes are consecutive, so
        # the first edges alone make a CSR (a node without children gets its successor's).
        first_edge = np.empty(num_nodes + 1, np.int64)
        for depth in range(T + 1):
            a, b = offsets[depth], offsets[depth + 1]
            nxt = starts[depth + 1] if depth < T else np.zeros(0, np.int64)
            first_edge[a:b] = offsets[depth + 1] + np.searchsorted(nxt, lo[a:b]) - 1
        first_edge[num_nodes] = num_nodes - 1
        branching = np.diff(first_edge)
        needed = LabelCapacity(
            nodes=num_nodes,
            edges=num_nodes - 1,
            labels=-(-N // 32) * 32,
            width=_pow2(int(branching[1:].max(initial=1)), vocab_size),
            narrow=_narrow_width(branching[1:], vocab_size),
        )
        if capacity is None:
            capacity = dataclasses.replace(
                needed,
                nodes=bucket(num_nodes),
                edges=bucket(num_nodes - 1),
                labels=-(-bucket(N) // 32) * 32,
            )
        elif not capacity.fits(needed):
            raise ValueError(f"capacity: {capacity} is too small for these labels: {needed}")
        # Padding nodes have no children and an empty label range past every real label.
        row_ptr = np.full(capacity.nodes + 1, num_nodes - 1, np.int32)
        row_ptr[: num_nodes + 1] = first_edge
        label_order = np.full(capacity.labels, -1, np.int32)
        label_order[:N] = order
        # The root's children are nodes 1..R and their ranges tile [0, N) in order, so the
        # first tokens of all labels are the root edges' tokens, each repeated over its range.
        R = int(branching[0])
        root_child = np.zeros(vocab_size, np.int32)
        root_child[edge_tokens[:R]] = np.arange(1, R + 1, dtype=np.int32)
        first = np.full(capacity.labels, -1, np.int32)
        first[:N] = np.repeat(edge_tokens[:R], hi[1 : R + 1] - lo[1 : R + 1])
        return cls(
            row_ptr=row_ptr,
            tokens=_pad(edge_tokens, capacity.edges, 0),
            lo=_pad(lo, capacity.nodes, N),
            hi=_pad(hi, capacity.nodes, N),
            end=_pad(end, capacity.nodes, False),
            label_order=label_order,
            first=first,
            root_child=root_child,
            num_labels=np.asarray(N, np.int32),
            max_len=np.asarray(int(lengths.max()), np.int32),
            vocab_size=int(vocab_size),
            capacity=capacity,
        )

    def paths(self) -> list[tuple[int, ...]]:
        """Every label of the index, as its token path from the root, in trie (label id) order."""
        return [tuple(t for t in row if t >= 0) for row in self._path_table().tolist()]

    def _path_table(self) -> Int[np.ndarray, "N T"]:
        """Every label's path, int64 [N, T] padded with -1, row = label id."""
        nodes = np.flatnonzero(np.asarray(self.end)[: self.num_nodes])
        lo = np.asarray(self.lo)[nodes]
        row_ptr = np.asarray(self.row_ptr)[: self.num_nodes + 1]
        tokens = np.asarray(self.tokens).astype(np.int64)
        # Walk all end nodes up at once: node n entered through edge n - 1, whose parent is the
        # last node whose children start at or before that edge.
        steps, cur = [], nodes.astype(np.int64)
        while (cur > 0).any():
            live = cur > 0
            steps.append(np.where(live, tokens[np.maximum(cur - 1, 0)], -1))
            parent = np.searchsorted(row_ptr, cur - 1, side="right") - 1
            cur = np.where(live, parent, 0)
        rev = np.stack(steps, axis=1) if steps else np.zeros((len(nodes), 0), np.int64)
        # rev[i] is path i backwards, then -1s: read each row's first n entries in reverse.
        n = (rev >= 0).sum(axis=1)
        T = rev.shape[1]
        col = n[:, None] - 1 - np.arange(T)
        table = np.where(col >= 0, np.take_along_axis(rev, np.maximum(col, 0), axis=1), -1)
        out = np.empty_like(table)
        out[lo] = table  # an end node's label id is its lo
        return out

    @property
    def num_nodes(self) -> int:
        """Real (unpadded) nodes: padding rows of `row_ptr` repeat the edge count, nodes - 1."""
        return int(np.asarray(self.row_ptr)[-1]) + 1

    def verify(self, labels: ArrayInput) -> None:
        """Build-time proof: the index's paths are exactly `labels`, with sound ranges and order.

        Enumerates every root-to-end path and compares it, label id by label id, with the caller's
        token lists; checks that each node's children are sorted, that their label ranges tile the
        parent's range, and that every range holds exactly the labels ending below it.
        ValueError on the first mismatch.
        """
        table, _ = _label_table(labels, self.vocab_size)
        N, M = int(self.num_labels), self.num_nodes
        if table.shape[0] != N:
            raise ValueError(f"labels: {table.shape[0]} labels, but the index holds {N}")
        order = np.asarray(self.label_order)[:N]
        if sorted(order.tolist()) != list(range(N)):
            raise ValueError("index: label_order is not a permutation of the labels")
        got = self._path_table()
        want = table[order] - 1  # row tid: the caller's label order[tid]; padding -1
        width = max(got.shape[1], want.shape[1])
        got, want = (
            np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=-1) for x in (got, want)
        )
        bad = np.flatnonzero((got != want).any(axis=1))
        if len(bad):
            tid = int(bad[0])
            raise ValueError(
                f"labels[{order[tid]}]: the index holds {[t for t in got[tid] if t >= 0]} for "
                f"it, not its tokens {[t for t in want[tid] if t >= 0]}"
            )
        row_ptr = np.asarray(self.row_ptr)[: M + 1].astype(np.int64)
        lo, hi = (np.asarray(a)[:M].astype(np.int64) for a in (self.lo, self.hi))
        end = np.asarray(self.end)[:M]
        tokens = np.asarray(self.tokens)[: M - 1].astype(np.int64)
        parent = np.searchsorted(row_ptr, np.arange(M - 1), side="right") - 1
        child = np.arange(1, M)
        same_parent = parent[1:] == parent[:-1]
        if (tokens[1:][same_parent] <= tokens[:-1][same_parent]).any():
            raise ValueError("index: the children of a node are not sorted by distinct tokens")
        # With the root's range [0, N), ranges that tile (a node's own label first, then its
        # children's ranges side by side) and leaves that hold exactly their own label, every
        # node's range is, by induction from the leaves, exactly the labels ending below it.
        first = np.ones(M - 1, bool)
        first[1:] = ~same_parent
        last = np.ones(M - 1, bool)
        last[:-1] = ~same_parent
        leaf = np.diff(row_ptr) == 0
        if (
            (lo[0], hi[0]) != (0, N)
            or (lo[child][first] != lo[parent][first] + end[parent][first]).any()
            or (hi[child][last] != hi[parent][last]).any()
            or (lo[child][1:][same_parent] != hi[child][:-1][same_parent]).any()
            or not (end[leaf] & (hi[leaf] - lo[leaf] == 1)).all()
        ):
            raise ValueError("index: label ranges do not tile (a node, its label, its children)")
        R = int(row_ptr[1])
        root_child = np.asarray(self.root_child)
        paths_first = np.asarray(self.first)[:N]
        if (
            np.count_nonzero(root_child) != R
            or (root_child[tokens[:R]] != np.arange(1, R + 1)).any()
            or (paths_first != tokens[:R].repeat(hi[1 : R + 1] - lo[1 : R + 1])).any()
        ):
            raise ValueError("index: root_child or first disagrees with the root's edges")


jax.tree_util.register_dataclass(
    LabelIndex,
    data_fields=[
        "row_ptr",
        "tokens",
        "lo",
        "hi",
        "end",
        "label_order",
        "first",
        "root_child",
        "num_labels",
        "max_len",
    ],
    meta_fields=["vocab_size", "capacity"],
)


def _narrow_width(branching: np.ndarray, vocab_size: int) -> int:
    """Children slots for all but the widest 1% of the nodes with children (at least one node
    left out; a power of two, >= 16), or the widest node's when that is at most 4x more (a
    second program would not pay)."""
    inner = np.sort(branching[branching > 0])
    if not len(inner):
        return 1
    width = _pow2(int(inner[-1]), vocab_size)
    rest = inner[: len(inner) - max(1, len(inner) // 100)]
    narrow = max(_pow2(int(rest.max(initial=1)), vocab_size), 16)
    return width if narrow * 4 >= width else narrow


def _pad(x: np.ndarray, size: int, value) -> np.ndarray:
    out = np.full(size, value, dtype=x.dtype)
    out[: len(x)] = x
    return out


def _label_table(labels, vocab_size: int) -> tuple[Int[np.ndarray, "N T"], Int[np.ndarray, " N"]]:
    """Labels as int64 [N, T] holding token + 1 (0 pads), and their lengths; checks the input."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer):
        raise ValueError(f"vocab_size must be an int, got {vocab_size!r}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    if isinstance(labels, np.ndarray) and labels.ndim == 2:
        if not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels: expected integer token ids, got dtype {labels.dtype}")
        # -1 padding only at the end of a row: count the tokens before the first -1.
        pad = labels < 0
        lengths = np.where(pad.any(axis=1), pad.argmax(axis=1), labels.shape[1])
        if (~pad & (np.arange(labels.shape[1]) >= lengths[:, None])).any():
            raise ValueError("labels: a padded array may hold -1 only after each row's tokens")
        labels = [row[:n] for row, n in zip(labels, lengths, strict=True)]
    if isinstance(labels, str | bytes) or not isinstance(labels, Sequence | np.ndarray):
        raise ValueError(f"labels: expected a sequence of token-id sequences, got {type(labels)}")
    N = len(labels)
    if N == 0:
        raise ValueError("labels: the label set is empty")
    try:
        lengths = np.fromiter(map(len, labels), np.int64, count=N)
        # float64 holds every token id exactly and lets 1.5 be told from 1.
        real = np.fromiter(itertools.chain.from_iterable(labels), np.float64, count=lengths.sum())
    except (TypeError, ValueError) as e:
        raise ValueError(f"labels: expected sequences of int token ids ({e})") from None
    flat = real.astype(np.int64)
    if (flat != real).any():
        raise ValueError(f"labels: expected int token ids, got {real[flat != real][0]}")
    if (lengths == 0).any():
        raise ValueError(f"labels[{int(np.argmin(lengths))}] is empty")
    bad = np.flatnonzero((flat < 0) | (flat >= vocab_size))
    if len(bad):
        row = int(np.searchsorted(np.cumsum(lengths), bad[0], side="right"))
        raise ValueError(
            f"labels[{row}] holds token {flat[bad[0]]}, outside [0, vocab_size={vocab_size})"
        )
    T = int(lengths.max())
    table = np.zeros((N, T), np.int64)
    rows = np.repeat(np.arange(N), lengths)
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    table[rows, cols] = flat + 1
    return table, lengths


def _lexsort_rows(table: np.ndarray, vocab_size: int) -> Int[np.ndarray, " N"]:
    """Row order of `table` (values 0..V) in lexicographic order; codes packed into uint64 keys."""
    bits = max(1, int(vocab_size).bit_length())
    words = _pack(table, bits, 64 // bits)
    # np.lexsort's last key is the primary one: the word holding the first tokens.
    return np.lexsort(words[::-1]).astype(np.int64)


def subset_words(index: LabelIndex, allowed: Bool[np.ndarray, "B N"]) -> np.ndarray:
    """Per-row allowed labels (caller's label order) as bitsets in trie order: uint32 [B, words]."""
    allowed = np.asarray(allowed)
    N = int(index.num_labels)
    if allowed.dtype != bool or allowed.ndim != 2 or allowed.shape[1] != N:
        raise ValueError(
            f"allowed: expected bool [B, {N}] (one column per label), got "
            f"{allowed.dtype} {allowed.shape}"
        )
    bits = np.zeros((allowed.shape[0], index.words * 32), bool)
    bits[:, :N] = allowed[:, np.asarray(index.label_order)[:N]]
    return np.packbits(bits, axis=1, bitorder="little").view("<u4").astype(np.uint32)


def refuse_empty_rows(words: np.ndarray) -> None:
    """ValueError naming the first row of packed subsets ([B, words]) that allows no label: it
    would leave every token at -inf (EOS filler, NaN from a softmax, a sampler's error)."""
    empty = np.flatnonzero(~np.asarray(words).any(axis=1))
    if len(empty):
        more = f" (and {len(empty) - 1} more rows)" if len(empty) > 1 else ""
        raise ValueError(
            f"allowed: row {int(empty[0])} allows no label{more}; every row needs at least one"
        )
