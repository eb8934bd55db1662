"""Host-side build, storage and loading of the STATIC index (the allowed-SID trie as flat arrays).

Layout (levels are 0-based; the node of depth l is a prefix of l codes):
- depths 1..d: one bit-packed dense mask per depth over the V**depth prefix codes (little-endian
  bits in uint32 words), plus, for depth d, the number of set bits before each word (`rank`), so
  that a depth-d prefix code maps to its node id with one gather and one popcount;
- depths d..L-1: one global CSR over all nodes. Nodes are numbered depth by depth in lexicographic
  order and so are the edges, hence the children of a node are contiguous and sorted, and the child
  reached through edge e is node e + num_dense_nodes (no next-state array is stored);
- per sparse level the maximum branch width (rounded up to a power of two), a static shape.
Two layouts of the CSR (`layout`, a static choice that is part of the capacity):
- "csr" (default): `row_ptr` int32 [nodes + 1], `tokens` uint16 (V <= 65536) or int32 per edge;
- "compact": `row_base` int32 holds row_ptr at every 32nd row (and the last) and `row_ptr` only
  each row's offset from its block's base (uint8, uint16 or int32: `Capacity.delta_bits`);
  `tokens` packs the edge tokens at b = bit_length(V - 1) bits each into uint32 words, 32 tokens
  in b whole words. At 1e7 random 8 x 11-bit SIDs: ~15 bytes per item instead of ~34.
"""

import dataclasses
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jaxtyping import ArrayLike

# Host inputs: numpy or jax arrays, scalars, or nested lists/tuples (numpy.typing.ArrayLike is
# not checked reliably at runtime: beartype rejects a tuple of floats).
ArrayInput = ArrayLike | Sequence
_MAX_DENSE_BITS = 1 << 28  # 32 MiB of mask per dense depth at most
_INT32_MAX = np.iinfo(np.int32).max
ROW_BLOCK = 32  # compact layout: rows per stored base (a shift of 5 in the kernel)
LAYOUTS = ("csr", "compact")
_DELTA_DTYPES = {0: np.int32, 8: np.uint8, 16: np.uint16, 32: np.int32}  # by Capacity.delta_bits


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capacity:
    """Static shape metadata: indexes with equal capacity share one compiled program."""

    nodes: int  # CSR rows (sparse source nodes), padded
    edges: int  # CSR entries, padded
    widths: tuple[int, ...]  # max branch width per sparse level (levels d..L-1)
    # Compact layout only: bits of each row's offset from its block base (8, 16 or 32); 0 means
    # the "csr" layout (int32 row pointers, one token per array entry).
    delta_bits: int = 0

    def fits(self, other: "Capacity") -> bool:
        """True when an index needing `other` fits into this capacity."""
        return (
            self.nodes >= other.nodes
            and self.edges >= other.edges
            and (self.delta_bits == 0) == (other.delta_bits == 0)
            and self.delta_bits >= other.delta_bits
            and len(self.widths) == len(other.widths)
            and all(a >= b for a, b in zip(self.widths, other.widths, strict=True))
        )


def bucket(n: int) -> int:
    """Rounds up to 2**k * (1 + j/8): at most 12.5% padding, few distinct shapes."""
    if n <= 16:
        return max(n, 1)
    step = 1 << (n.bit_length() - 4)
    return -(-n // step) * step


def _pow2(n: int, cap: int) -> int:
    return min(1 << max(n - 1, 0).bit_length(), cap) if n > 0 else 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaticIndex:
    """The STATIC index; a pytree whose arrays are leaves and whose shapes are static metadata."""

    # Leaves are typed Any: numpy on the host, jax arrays or tracers on device, specs in tree maps.
    dense_words: Any  # uint32, masks of depths 1..d concatenated
    rank: Any  # int32 [words of the depth-d mask], set bits before each word
    row_ptr: Any  # csr: int32 [nodes + 1]; compact: offsets from row_base, [nodes + 1]
    tokens: Any  # csr: uint16 (V <= 65536) else int32 [edges]; compact: packed uint32 words
    row_base: (
        Any  # compact: int32 [ceil((nodes + 1) / 32) + 1], row_ptr at rows 0, 32, ...; csr: [1]
    )
    num_dense_nodes: Any  # int32 scalar: nodes of depth d (the first CSR rows)
    num_items: Any  # int32 scalar: distinct SIDs
    vocab_size: int
    num_levels: int
    dense_levels: int
    capacity: Capacity

    @property
    def layout(self) -> str:
        """The CSR layout, "csr" or "compact" (see the module docstring)."""
        return "compact" if self.capacity.delta_bits else "csr"

    @property
    def token_bits(self) -> int:
        """Bits per packed token in the compact layout."""
        return max(1, (self.vocab_size - 1).bit_length())

    @property
    def dense_offsets(self) -> tuple[int, ...]:
        """Word offset of each dense depth's mask in `dense_words` (static)."""
        offs, total = [], 0
        for depth in range(1, self.dense_levels + 1):
            offs.append(total)
            total += -(-(self.vocab_size**depth) // 32)
        return tuple(offs)

    def nbytes(self) -> dict[str, int]:
        """Bytes per component and in total."""
        parts = {
            "dense_masks": self.dense_words.nbytes,
            "dense_rank": self.rank.nbytes,
            "row_ptr": self.row_ptr.nbytes,
            "row_base": self.row_base.nbytes,
            "tokens": self.tokens.nbytes,
        }
        parts["total"] = sum(parts.values())
        return parts

    @classmethod
    def build(
        cls,
        sids: ArrayInput,
        *,
        vocab_size: int,
        dense_levels: int | None = None,
        capacity: Capacity | None = None,
        layout: str = "csr",
    ) -> "StaticIndex":
        """Builds the index from allowed SIDs int[N, L], any order, duplicates allowed.

        `dense_levels` d in [0, L] (default min(2, L); ValueError outside) is lowered while V**d
        bits would exceed 2**28; `capacity` pads to a given bucket (ValueError when the set does
        not fit) instead of the default rounding; `layout` is "csr" or "compact" (same beams).
        """
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        sids = _check_sids(sids, vocab_size)
        N, L = sids.shape
        V = vocab_size
        d = _check_dense_levels(dense_levels, L)
        while d > 0 and V**d > _MAX_DENSE_BITS:
            d -= 1
        cols = _sorted_unique_columns(sids, V)  # L arrays [M], lexicographically sorted rows
        M = cols[0].shape[0]
        # starts[l]: the rows that begin a new prefix of length l+1 (its node at depth l+1).
        # Rows are sorted, so a prefix's rows are contiguous and its node is numbered by the
        # rank of its first row among starts[l]: lexicographic order within each depth.
        changed = np.zeros(M, dtype=bool)
        starts = []
        for lev in range(L):
            changed[1:] |= cols[lev][1:] != cols[lev][:-1]
            changed[0] = True
            starts.append(np.flatnonzero(changed).astype(np.int32))
        counts = [1] + [len(s) for s in starts]  # nodes per depth 0..L

        dense_words, rank = _dense_masks(cols, starts, V, d)

        # Sparse CSR over depths d..L-1; two passes so that no level's rows are held twice.
        # CSR rows are the nodes of depths d..L-1 and entries the edges into depths d+1..L, both
        # depth by depth, so edge e (its child's rank among all nodes deeper than d) enters node
        # e + counts[d]: that is `num_dense_nodes`, the shift `StaticConstraint.advance` adds.
        widths = [_pow2(int(np.diff(_first_child(starts, lev, M)).max()), V) for lev in range(d, L)]
        num_nodes, num_edges = sum(counts[d:L]), sum(counts[d + 1 : L + 1])
        if num_edges > _INT32_MAX - 1:
            raise ValueError(f"sids: {num_edges} trie edges exceed the int32 range")
        needed = Capacity(nodes=num_nodes, edges=num_edges, widths=tuple(widths))
        if capacity is None:
            capacity = Capacity(
                nodes=bucket(num_nodes), edges=bucket(num_edges), widths=tuple(widths)
            )
        elif capacity.delta_bits not in _DELTA_DTYPES or (capacity.delta_bits > 0) != (
            layout == "compact"
        ):
            raise ValueError(
                f"capacity: delta_bits={capacity.delta_bits} does not fit layout {layout!r} "
                "(0 for csr, 8, 16 or 32 for compact)"
            )
        if not capacity.fits(dataclasses.replace(needed, delta_bits=capacity.delta_bits)):
            raise ValueError(
                f"capacity: {capacity} is too small for this set, which needs {needed}"
            )
        # Padding rows (and the closing entry of the last real row) hold num_edges: they start and
        # end at the same place, i.e. have no children.
        row_ptr = np.full(capacity.nodes + 1, num_edges, dtype=np.int32)
        tokens = np.zeros(capacity.edges, dtype=np.uint16 if V <= 65536 else np.int32)
        node_off = edge_off = 0  # CSR rows and edges of the depths before `lev`
        for lev in range(d, L):
            # A depth-lev node's first child, as a rank within depth lev+1, plus the edges of
            # the shallower levels, is its first global edge; its last edge is the next row's
            # first minus one, because the children of consecutive nodes are consecutive.
            first = _first_child(starts, lev, M)[:-1]
            row_ptr[node_off : node_off + counts[lev]] = first + edge_off
            # Edge = child node: its token is the child's last code, read on its first row.
            tokens[edge_off : edge_off + counts[lev + 1]] = cols[lev][starts[lev]]
            node_off += counts[lev]
            edge_off += counts[lev + 1]
        row_base = np.zeros(1, np.int32)
        if layout == "compact":
            row_base, delta, bits = _compact_rows(row_ptr)
            if capacity.delta_bits == 0:
                capacity = dataclasses.replace(capacity, delta_bits=bits)
            elif bits > capacity.delta_bits:
                raise ValueError(
                    f"capacity: {capacity} is too small for this set, whose row offsets need "
                    f"delta_bits={bits}"
                )
            row_ptr = delta.astype(_DELTA_DTYPES[capacity.delta_bits])
            tokens = _pack_tokens(tokens, max(1, (V - 1).bit_length()))
        return cls(
            dense_words=dense_words,
            rank=rank,
            row_ptr=row_ptr,
            tokens=tokens,
            row_base=row_base,
            num_dense_nodes=np.asarray(counts[d], dtype=np.int32),
            num_items=np.asarray(M, dtype=np.int32),
            vocab_size=V,
            num_levels=L,
            dense_levels=d,
            capacity=capacity,
        )

    def save(self, path: str | os.PathLike) -> None:
        """Writes an .npz (arrays plus JSON metadata, no pickle), atomically."""
        path = Path(path)
        meta = {
            "vocab_size": self.vocab_size,
            "num_levels": self.num_levels,
            "dense_levels": self.dense_levels,
            "capacity": dataclasses.asdict(self.capacity),
        }
        arrays = {f: np.asarray(getattr(self, f)) for f in _DATA_FIELDS}
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "StaticIndex":
        """Reads an index written by `save`."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such STATIC index file")
        with np.load(path, allow_pickle=False) as z:
            # Files written before the compact layout have no row_base (a csr index).
            missing = [k for k in ("meta", *_DATA_FIELDS) if k not in z.files and k != "row_base"]
            if missing:
                raise ValueError(f"{path}: not a STATIC index (missing {missing})")
            meta = json.loads(z["meta"].tobytes().decode())
            arrays = {f: z[f] if f in z.files else np.zeros(1, np.int32) for f in _DATA_FIELDS}
        cap = meta.pop("capacity")
        cap["widths"] = tuple(cap["widths"])
        return cls(**arrays, **meta, capacity=Capacity(**cap))


_DATA_FIELDS = (
    "dense_words",
    "rank",
    "row_ptr",
    "tokens",
    "row_base",
    "num_dense_nodes",
    "num_items",
)
jax.tree_util.register_dataclass(
    StaticIndex,
    data_fields=list(_DATA_FIELDS),
    meta_fields=["vocab_size", "num_levels", "dense_levels", "capacity"],
)


def _check_sids(sids, vocab_size: int) -> np.ndarray:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer):
        raise ValueError(f"vocab_size must be an int, got {vocab_size!r}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    sids = np.asarray(sids)
    if not np.issubdtype(sids.dtype, np.integer):
        raise ValueError(f"sids: expected an integer array, got dtype {sids.dtype}")
    if sids.ndim != 2:
        raise ValueError(f"sids: expected rank 2 [N, L], got shape {sids.shape}")
    if sids.shape[0] == 0 or sids.shape[1] == 0:
        raise ValueError(f"sids: the allowed set is empty (shape {sids.shape})")
    lo, hi = sids.min(), sids.max()
    if lo < 0 or hi >= vocab_size:
        bad = np.argwhere((sids < 0) | (sids >= vocab_size))[0]
        raise ValueError(
            f"sids[{bad[0]}, {bad[1]}] = {sids[bad[0], bad[1]]} is outside "
            f"[0, vocab_size={vocab_size})"
        )
    return sids


def _check_dense_levels(dense_levels: int | None, L: int) -> int:
    """d in [0, L]: more dense levels than SID levels would index masks that are never built."""
    if dense_levels is None:
        return min(2, L)
    if isinstance(dense_levels, bool) or not isinstance(dense_levels, int | np.integer):
        raise ValueError(f"dense_levels must be an int, got {dense_levels!r}")
    if not 0 <= dense_levels <= L:
        raise ValueError(
            f"dense_levels must be in [0, {L}] (the SIDs have {L} levels), got {dense_levels}"
        )
    return int(dense_levels)


def _first_child(starts: list[np.ndarray], lev: int, M: int) -> np.ndarray:
    """Index of the first depth-(lev+1) child of each depth-lev node, plus the child count."""
    if lev == 0:
        return np.array([0, len(starts[0])], dtype=np.int32)
    # child_of_row[r]: rank within depth lev+1 of the node that row r belongs to (the number of
    # depth-(lev+1) starts up to r, minus one); at a parent's first row that is its first child.
    child_of_row = np.zeros(M, dtype=np.int32)
    child_of_row[starts[lev]] = 1
    np.cumsum(child_of_row, out=child_of_row)
    first = child_of_row[starts[lev - 1]] - 1
    return np.append(first, np.int32(len(starts[lev])))


def _pack(sids: np.ndarray, bits: int, per_word: int) -> list[np.ndarray]:
    """Codes packed big-end first into uint64 words, in row blocks (no [N, L] uint64 temporary)."""
    N, L = sids.shape
    words = [np.empty(N, np.uint64) for _ in range(0, L, per_word)]
    for a in range(0, N, 1 << 20):
        block = sids[a : a + (1 << 20)].astype(np.uint64)
        for k, start in enumerate(range(0, L, per_word)):
            w = np.zeros(len(block), np.uint64)
            for j in range(start, min(start + per_word, L)):
                w <<= np.uint64(bits)
                w |= block[:, j]
            words[k][a : a + len(block)] = w
    return words


def _sorted_distinct(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values (np.unique hashes first, which is ~10x slower here)."""
    x = np.sort(x)
    keep = np.empty(len(x), dtype=bool)
    keep[:1] = True
    np.not_equal(x[1:], x[:-1], out=keep[1:])
    return x[keep]


def _sorted_unique_columns(sids: np.ndarray, V: int) -> list[np.ndarray]:
    """Lexicographically sorted distinct rows, one array per column (codes packed in uint64)."""
    N, L = sids.shape
    bits = max(1, (V - 1).bit_length())
    per_word = 64 // bits
    words = _pack(sids, bits, per_word)
    tail_bits = bits * (L - per_word * (len(words) - 1))
    if len(words) == 1:
        words = [_sorted_distinct(words[0])]
    elif len(words) == 2 and max(N - 1, 1).bit_length() + tail_bits <= 64:
        # Replace the first word by its dense rank so that (rank, second word) is one uint64:
        # one argsort plus one plain sort instead of a multi-key stable sort (4x faster at 1e7).
        order = np.argsort(words[0])
        lead, tail = words[0][order], words[1][order]
        del order, words
        new = np.empty(N, dtype=bool)
        new[0] = True
        np.not_equal(lead[1:], lead[:-1], out=new[1:])
        uniq_lead = lead[new]
        del lead
        rank = np.cumsum(new, dtype=np.uint64) - np.uint64(1)
        key = _sorted_distinct((rank << np.uint64(tail_bits)) | tail)
        del rank, tail
        words = [uniq_lead[key >> np.uint64(tail_bits)], key & np.uint64((1 << tail_bits) - 1)]
    else:
        # LSD order: unstable sort on the last word, then stable sorts towards the first.
        order = np.argsort(words[-1])
        for w in reversed(words[:-1]):
            order = order[np.argsort(w[order], kind="stable")]
        words = [w[order] for w in words]
        dup = np.ones(N - 1, dtype=bool)
        for w in words:
            dup &= w[1:] == w[:-1]
        if dup.any():
            keep = np.concatenate([[True], ~dup])
            words = [w[keep] for w in words]
    tok_dtype = np.uint16 if V <= 65536 else np.int32
    mask = np.uint64((1 << bits) - 1)
    cols = []
    for start, w in zip(range(0, L, per_word), words, strict=True):
        n_here = min(per_word, L - start)
        for j in range(n_here):
            shift = np.uint64(bits * (n_here - 1 - j))
            cols.append(((w >> shift) & mask).astype(tok_dtype))
    return cols


def _dense_masks(cols, starts, V: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Bit-packed masks of depths 1..d and the rank directory of depth d."""
    if d == 0:
        return np.zeros(1, np.uint32), np.zeros(1, np.int32)
    parts = []
    code = None
    for depth in range(1, d + 1):
        rows = starts[depth - 1]
        c = cols[depth - 1][rows].astype(np.int64)
        if depth == 1:
            code = c
        else:
            # Prefix codes of the depth-(depth-1) parent of each row, then one more digit.
            parent_rows = np.searchsorted(starts[depth - 2], rows, side="right") - 1
            code = code[parent_rows] * V + c
        nbits = V**depth
        bitmap = np.zeros(-(-nbits // 32) * 32, dtype=bool)
        bitmap[code] = True
        # Little-endian bits in little-endian words: code c is bit c & 31 of word c >> 5, which
        # is how the kernel reads it back (`_bit`, and V/32 whole words when 32 divides V).
        parts.append(np.packbits(bitmap, bitorder="little").view("<u4"))
    # rank[w]: set bits in the depth-d words before w, so a depth-d code's node id (its rank
    # among the allowed codes) is rank[code >> 5] plus a popcount within its word (`_rank`).
    per_word = bitmap.reshape(-1, 32).sum(axis=1, dtype=np.int32)
    rank = np.concatenate([[0], np.cumsum(per_word)[:-1]]).astype(np.int32)
    return np.concatenate(parts).astype(np.uint32), rank


def _delta_bits(max_delta: int) -> int:
    """The narrowest of 8, 16 and 32 bits that holds offsets up to `max_delta`."""
    return 8 if max_delta < 1 << 8 else 16 if max_delta < 1 << 16 else 32


def _compact_rows(row_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Row pointers as a base per ROW_BLOCK rows, each row's int32 offset from it, and the bits
    those offsets need (row pointers never decrease, so every offset is >= 0)."""
    n = len(row_ptr)
    blocks = np.pad(row_ptr, (0, -n % ROW_BLOCK), mode="edge").reshape(-1, ROW_BLOCK)
    # One base more than there are blocks: the kernel reads bases b and b + 1 as one window.
    base = np.append(blocks[:, 0], row_ptr[-1])
    delta = (blocks - blocks[:, :1]).reshape(-1)[:n]
    return base, delta, _delta_bits(int(delta.max()))


def csr_arrays(index: StaticIndex) -> tuple[np.ndarray, np.ndarray]:
    """The index's CSR as plain host arrays in either layout: int64 row pointers [nodes + 1] and
    one token per edge [edges] (what the csr layout stores, widened)."""
    row_ptr, tokens = np.asarray(index.row_ptr), np.asarray(index.tokens)
    if index.layout == "csr":
        return row_ptr.astype(np.int64), tokens
    base = np.asarray(index.row_base).astype(np.int64)
    rows = np.arange(len(row_ptr)) // ROW_BLOCK
    return base[rows] + row_ptr.astype(np.int64), _unpack_tokens(
        tokens, index.token_bits, index.capacity.edges
    )


def _pack_tokens(tokens: np.ndarray, bits: int) -> np.ndarray:
    """Tokens at `bits` bits each, little-endian, into uint32 words; 32 tokens fill `bits` words.

    Token e starts at bit (e % 32) * bits of the block of words from (e // 32) * bits on, so the
    kernel finds it without a product e * bits that could leave int32. One zero word follows, so
    that the kernel may always read the word after a token's first.
    """
    n_blocks = -(-len(tokens) // ROW_BLOCK)
    out = np.zeros(n_blocks * bits + 1, np.uint32)
    blocks_out = out[:-1].reshape(n_blocks, bits)
    step = 1 << 18  # blocks per chunk: a 32 MiB uint32 copy of the tokens at most
    for a in range(0, n_blocks, step):
        chunk = tokens[a * ROW_BLOCK : (a + step) * ROW_BLOCK].astype(np.uint32)
        chunk = np.pad(chunk, (0, -len(chunk) % ROW_BLOCK)).reshape(-1, ROW_BLOCK)
        dst = blocks_out[a : a + len(chunk)]
        # Token r of every block at once: its low bits into word w, the rest into word w + 1.
        for r in range(ROW_BLOCK):
            w, shift = divmod(r * bits, 32)
            dst[:, w] |= chunk[:, r] << np.uint32(shift)
            if shift + bits > 32:
                dst[:, w + 1] |= chunk[:, r] >> np.uint32(32 - shift)
    return out


def _unpack_tokens(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first `count` tokens that `_pack_tokens(tokens, bits)` packed into `words` (int32)."""
    blocks = words[:-1].reshape(-1, bits).astype(np.uint64)
    out = np.empty((len(blocks), ROW_BLOCK), np.int32)
    mask = np.uint64((1 << bits) - 1)
    for r in range(ROW_BLOCK):
        w, shift = divmod(r * bits, 32)
        v = blocks[:, w] >> np.uint64(shift)
        if shift + bits > 32:
            v |= blocks[:, w + 1] << np.uint64(32 - shift)
        out[:, r] = (v & mask).astype(np.int32)
    return out.reshape(-1)[:count]
