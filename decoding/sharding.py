"""Several devices: the batch sharded along a `data` mesh axis; the constraint index replicated,
or its large tables split by rows over an `index` axis (`shard_index`, `shard_live`)."""

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Int, PyTree

from decoding.constraints import StaticConstraint, _edge_tokens, _row_range
from decoding.live import Gather, LiveCapacity, LiveConstraint, LiveIndex
from decoding.static_index import (
    _DELTA_DTYPES,
    ROW_BLOCK,
    StaticIndex,
    _compact_rows,
    _pack_tokens,
    csr_arrays,
)


def data_mesh(devices: Sequence[jax.Device] | np.ndarray | None = None, axis: str = "data") -> Mesh:
    """A 1-D mesh over `devices` (default: all) named `axis`."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), (axis,))


def shard_batch(tree: PyTree, mesh: Mesh, axis: str = "data") -> PyTree:
    """Puts every leaf with its leading (batch) axis split over `axis`; B must divide evenly."""
    n = mesh.shape[axis]
    for leaf in jax.tree.leaves(tree):
        if leaf.shape[0] % n:
            raise ValueError(f"batch size {leaf.shape[0]} is not divisible by {n} devices")
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec(axis)))


def replicate(tree: PyTree, mesh: Mesh) -> PyTree:
    """Puts every leaf (e.g. a constraint's index arrays) whole on every device."""
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def device_nbytes(tree: PyTree) -> dict[jax.Device, int]:
    """Bytes each device holds of the tree's arrays (a replicated leaf counts on every device)."""
    out: dict[jax.Device, int] = {}
    for leaf in jax.tree.leaves(tree):
        for shard in leaf.addressable_shards:
            out[shard.device] = out.get(shard.device, 0) + shard.data.nbytes
    return out


def sharded_take(table: Array, idx: Int[Array, "..."], *, mesh: Mesh, axis: str) -> Array:
    """table[idx] along axis 0 (0 <= idx < rows) for a table whose rows are split into equal
    contiguous blocks over the mesh axis `axis`; the result is replicated over `axis`.

    Each device gathers the indices that fall in its block and writes 0 elsewhere, then one psum
    adds the blocks' answers: only [idx.shape + row] values cross devices, never the table.
    Integer tables narrower than 32 bits come back as int32 (the psum's type).
    """
    n = mesh.shape[axis]
    rows = table.shape[0] // n
    if rows * n != table.shape[0]:
        raise ValueError(f"table rows {table.shape[0]} do not split evenly over {n} devices")

    def local(t, i):
        j = i - jax.lax.axis_index(axis) * rows
        here = (j >= 0) & (j < rows)
        v = jnp.take(t, jnp.clip(j, 0, rows - 1), axis=0, mode="clip")
        if jnp.issubdtype(v.dtype, jnp.integer) and v.dtype.itemsize < 4:
            v = v.astype(jnp.int32)
        here = here.reshape(here.shape + (1,) * (v.ndim - here.ndim))
        # Exactly one block holds row i, so the sum is its value (the others add zeros).
        return jax.lax.psum(jnp.where(here, v, jnp.zeros((), v.dtype)), axis)

    spec = PartitionSpec(axis)
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(spec, PartitionSpec()),
        out_specs=PartitionSpec(),
        axis_names=frozenset({axis}),
    )(table, idx)


@dataclasses.dataclass(frozen=True)
class ShardedStaticConstraint(StaticConstraint):
    """STATIC with the CSR split by rows over a mesh axis, each device holding its rows' edges.

    `index.row_ptr`, `index.tokens` and `index.row_base` hold one equal-length block per device,
    in the index's layout (csr or compact): block k has the CSR rows bounds[k, 0] .. bounds[k, 1]
    - 1, with row pointers counted from its first edge, bounds[k, 2], and exactly those rows'
    edges, so a beam's whole lookup (bounds, then tokens) runs on the device holding its row and
    one psum per level combines the [B, K, W + 2] answers. Node and edge ids are the replicated
    index's (so both give the same beams); the dense masks and their rank directory (V**d bits,
    ~1 MB at V = 2048, d = 2) are replicated.
    """

    bounds: Any = None  # int32 [devices, 3]: first row, end row, first edge of each block
    mesh: Mesh = None
    axis: str = "index"

    def _children(self, s, width):
        W = width

        def local(row_ptr, tokens, row_base, bounds, s):
            first, stop, edge0 = bounds[0, 0], bounds[0, 1], bounds[0, 2]
            mine = (s >= first) & (s < stop)
            # This block as an index of its own (local rows and edges from 0), in either layout;
            # blocks are padded with empty rows, so local row j has pointers j and j + 1.
            block = dataclasses.replace(
                self.index, row_ptr=row_ptr, tokens=tokens, row_base=row_base
            )
            j = jnp.clip(s - first, 0, row_ptr.shape[0] - 2)
            start, end = _row_range(block, j)
            edge = start[..., None] + _slots(W, start.ndim)
            # A row's edges are all in its block; slots past them read token 0 (never chosen).
            tok = jnp.where(edge < end[..., None], _edge_tokens(block, edge), 0)
            out = jnp.concatenate([tok, (start + edge0)[..., None], (end + edge0)[..., None]], -1)
            # One block owns row s: the sum is its answer.
            return jax.lax.psum(jnp.where(mine[..., None], out, 0), self.axis)

        spec = PartitionSpec(self.axis)
        idx = self.index
        out = jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(spec, spec, spec, spec, PartitionSpec()),
            out_specs=PartitionSpec(),
            axis_names=frozenset({self.axis}),
        )(idx.row_ptr, idx.tokens, idx.row_base, self.bounds, s)
        start, end = out[..., W], out[..., W + 1]
        edge = start[..., None] + _slots(W, start.ndim)
        return edge, edge < end[..., None], out[..., :W]


def _slots(width: int, lead: int) -> jax.Array:
    """0 .. width - 1 with `lead` leading axes of size 1 (no rank promotion when added)."""
    return jnp.arange(width, dtype=jnp.int32).reshape((1,) * lead + (width,))


jax.tree_util.register_dataclass(
    ShardedStaticConstraint, data_fields=["index", "bounds"], meta_fields=["mesh", "axis"]
)


def _row_blocks(row_ptr: np.ndarray, n: int, row_bytes: float, token_bytes: float) -> np.ndarray:
    """Row boundaries [n + 1] of n contiguous blocks whose padded size (the most rows of any
    block times `row_bytes` plus the most edges times `token_bytes`) is about the least.

    Shallow rows have more edges than deep ones, so equal row counts would give unequal edge
    counts; a grid over the row cap, with the least edge cap that fits all rows, balances both.
    """
    rows, edges = len(row_ptr) - 1, int(row_ptr[-1])

    def greedy(row_cap: int, edge_cap: int) -> np.ndarray | None:
        b = [0]
        for _ in range(n):
            last = int(np.searchsorted(row_ptr, row_ptr[b[-1]] + edge_cap, side="right")) - 1
            b.append(min(b[-1] + row_cap, last, rows))
        return np.asarray(b) if b[-1] == rows else None

    best, best_cost = None, None
    for slack in np.linspace(0.0, 0.5, 26):
        row_cap = max(-(-rows * (1 + slack) // n), 1)
        lo, hi = max(-(-edges // n), int(np.diff(row_ptr).max(initial=0))), max(edges, 1)
        if greedy(int(row_cap), hi) is None:
            continue
        while lo < hi:  # the least edge cap that fits, for this row cap
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if greedy(int(row_cap), mid) is not None else (mid + 1, hi)
        b = greedy(int(row_cap), hi)
        cost = row_bytes * np.diff(b).max() + token_bytes * np.diff(row_ptr[b]).max()
        if best_cost is None or cost < best_cost:
            best, best_cost = b, cost
    return best


def shard_index(index: StaticIndex, mesh: Mesh, axis: str = "index") -> ShardedStaticConstraint:
    """The STATIC constraint over `index` with its CSR split into one row block per device of
    `axis` (see `ShardedStaticConstraint`), each block stored in the index's layout; the blocks
    are padded to one length with empty rows and unused edges."""
    n = mesh.shape[axis]
    row_ptr, tokens = csr_arrays(index)
    compact = index.layout == "compact"
    if compact:  # an offset of 1-2 bytes and a 4-byte base per 32 rows; packed tokens
        cost = (index.capacity.delta_bits / 8 + 4 / ROW_BLOCK, index.token_bits / 8)
    else:
        cost = (4.0, float(np.asarray(index.tokens).itemsize))
    b = _row_blocks(row_ptr, n, *cost)
    R = int(np.diff(b).max())
    E = max(int(np.diff(row_ptr[b]).max()), 1)

    def local_ptr(k: int) -> np.ndarray:
        local = row_ptr[b[k] : b[k + 1] + 1] - row_ptr[b[k]]
        out = np.full(R + 1, local[-1], np.int64)  # padding rows: no edges
        out[: len(local)] = local
        return out

    def local_tokens(k: int) -> np.ndarray:
        out = np.zeros(E, tokens.dtype)
        out[: row_ptr[b[k + 1]] - row_ptr[b[k]]] = tokens[row_ptr[b[k]] : row_ptr[b[k + 1]]]
        return out

    capacity = index.capacity
    if compact:
        # Each block is packed anew from its own first row and edge; its offsets take the
        # widest width any block needs.
        bits = max(_compact_rows(local_ptr(k))[2] for k in range(n))
        capacity = dataclasses.replace(capacity, delta_bits=bits)
        dtype = _DELTA_DTYPES[bits]

        def blocks(k: int) -> tuple[np.ndarray, ...]:
            base, delta, _ = _compact_rows(local_ptr(k))
            packed = _pack_tokens(local_tokens(k), index.token_bits)
            return delta.astype(dtype), packed, base.astype(np.int32)

    else:

        def blocks(k: int) -> tuple[np.ndarray, ...]:
            return local_ptr(k).astype(np.int32), local_tokens(k), np.zeros(1, np.int32)

    rows, whole = NamedSharding(mesh, PartitionSpec(axis)), NamedSharding(mesh, PartitionSpec())
    # Block by block onto its device: no host copy of the whole split arrays at once.
    sizes = [len(x) for x in blocks(0)]
    where = rows.addressable_devices_indices_map((n * sizes[0],))
    parts: list[list[jax.Array]] = [[], [], []]
    for device, (sl,) in where.items():
        for i, x in enumerate(blocks((sl.start or 0) // sizes[0])):
            parts[i].append(jax.device_put(x, device))

    def split(i: int) -> jax.Array:
        return jax.make_array_from_single_device_arrays((n * sizes[i],), rows, parts[i])

    bounds = np.stack([b[:-1], b[1:], row_ptr[b[:-1]]], axis=1).astype(np.int32)
    empty = np.zeros(0, np.int32)
    rest = dataclasses.replace(index, row_ptr=empty, tokens=empty, row_base=empty)
    placed = dataclasses.replace(
        jax.device_put(rest, whole),
        row_ptr=split(0),
        tokens=split(1),
        row_base=split(2),
        capacity=capacity,
    )
    return ShardedStaticConstraint(placed, jax.device_put(bounds, rows), mesh, axis)


def _splits(rows: int, n: int) -> bool:
    return rows >= n and rows % n == 0


@dataclasses.dataclass(frozen=True)
class _ShardedGather(Gather):
    """Gathers from live tables whose rows (maxima: columns) are split over a mesh axis; a table
    whose length does not divide evenly is replicated (`shard_live`) and read locally."""

    mesh: Mesh
    axis: str

    def rows(self, table, idx):
        if not _splits(table.shape[0], self.mesh.shape[self.axis]):
            return super().rows(table, idx)
        idx = jnp.clip(idx, 0, table.shape[0] - 1)
        return sharded_take(table, idx, mesh=self.mesh, axis=self.axis)

    def summary(self, summ, R, nodes):
        n = self.mesh.shape[self.axis]
        if not _splits(summ.shape[1], n):
            return super().summary(summ, R, nodes)
        rows = summ.shape[1] // n
        R, nodes = jnp.broadcast_arrays(R, nodes)

        def local(s, r, i):
            j = i - jax.lax.axis_index(self.axis) * rows
            v = jnp.take(s.reshape(-1), r * rows + jnp.clip(j, 0, rows - 1), mode="clip")
            return jax.lax.psum(jnp.where((j >= 0) & (j < rows), v, 0), self.axis)

        return jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(PartitionSpec(None, self.axis), PartitionSpec(), PartitionSpec()),
            out_specs=PartitionSpec(),
            axis_names=frozenset({self.axis}),
        )(summ, R, nodes)


@dataclasses.dataclass(frozen=True)
class ShardedLiveConstraint(LiveConstraint):
    """`LiveConstraint` over an index placed by `shard_live`: the same candidates, each row
    gather answered by the device holding that row (one psum of the [B, K, ...] answers)."""

    mesh: Mesh = None
    axis: str = "index"

    def _gather(self) -> Gather:
        return _ShardedGather(self.mesh, self.axis)


jax.tree_util.register_dataclass(
    ShardedLiveConstraint,
    data_fields=["index", "row_sets", "row_min_time"],
    meta_fields=["mesh", "axis"],
)


def split_capacity(capacity: LiveCapacity, n: int) -> LiveCapacity:
    """`capacity` with item and node slots rounded up to multiples of n, so that `shard_live`
    splits every table but the root's."""
    up = lambda x: -(-x // n) * n  # noqa: E731
    return dataclasses.replace(
        capacity,
        items=up(capacity.items),
        nodes=capacity.nodes[:1] + tuple(up(x) for x in capacity.nodes[1:]),
    )


def live_shardings(index: LiveIndex, mesh: Mesh, axis: str = "index") -> LiveIndex:
    """Where `shard_live` puts each array: per-node and per-item tables split by rows (maxima by
    node columns) when their length divides evenly over `axis`, the rest replicated."""
    n = mesh.shape[axis]
    whole = NamedSharding(mesh, PartitionSpec())

    def by_rows(x):
        return NamedSharding(mesh, PartitionSpec(axis)) if _splits(x.shape[0], n) else whole

    def by_cols(x):
        return NamedSharding(mesh, PartitionSpec(None, axis)) if _splits(x.shape[1], n) else whole

    return dataclasses.replace(
        index,
        child=tuple(map(by_rows, index.child)),
        tok=tuple(map(by_rows, index.tok)),
        summary=tuple(map(by_cols, index.summary)),
        parent=tuple(map(by_rows, index.parent)),
        item_parent=by_rows(index.item_parent),
        item_flags=by_rows(index.item_flags),
        item_time=by_rows(index.item_time),
        num_nodes=whole,
    )


def shard_live(index: LiveIndex, mesh: Mesh, axis: str = "index") -> LiveIndex:
    """The live index with its tables split over `axis` (see `live_shardings`); decode it with
    `ShardedLiveConstraint`. Build it with `split_capacity` so that every large table splits.

    The updates (`set_enabled`, `add_items`, ...) run on it unchanged, XLA partitioning their
    gathers and scatters; that needs an automatic mesh axis (`data_mesh`, or `jax.make_mesh`
    with `axis_types=(AxisType.Auto,)`): on an explicit one every such gather would have to
    name its output sharding.
    """
    if mesh.axis_types[mesh.axis_names.index(axis)] != AxisType.Auto:
        raise ValueError(
            f"mesh axis {axis!r} is {mesh.axis_types[mesh.axis_names.index(axis)]}; the live "
            "index's updates need an automatic axis (data_mesh, or jax.make_mesh with "
            "axis_types=(AxisType.Auto,))"
        )
    return jax.device_put(index, live_shardings(index, mesh, axis))
