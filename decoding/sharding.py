"""Several devices: the batch sharded along a `data` mesh axis; the constraint index replicated,
or its large tables split by rows over an `index` axis (`shard_index`, `shard_live`)."""

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Int, PyTree

from decoding.constraints import StaticConstraint
from decoding.live import Gather, LiveCapacity, LiveConstraint, LiveIndex
from decoding.static_index import StaticIndex


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
        mesh=_auto(mesh),
        in_specs=(spec, PartitionSpec()),
        out_specs=PartitionSpec(),
        axis_names=frozenset({axis}),
    )(table, idx)


@dataclasses.dataclass(frozen=True)
class ShardedStaticConstraint(StaticConstraint):
    """STATIC with the CSR (row_ptr, tokens) split by rows over a mesh axis; the dense masks and
    their rank directory (V**d bits, ~1 MB at V = 2048, d = 2) stay replicated. Node and edge
    ids are the replicated index's, so both walk the same states and give the same beams."""

    mesh: Mesh = None
    axis: str = "index"

    def _row_bounds(self, s):
        # One collective for both bounds: rows s and s + 1 (<= capacity.nodes, never padding).
        both = sharded_take(
            self.index.row_ptr, jnp.stack([s, s + 1]), mesh=self.mesh, axis=self.axis
        )
        return both[0], both[1]

    def _edge_tokens(self, edge):
        # Clip to the real edge list first, as the replicated take does (the tail is padding).
        edge = jnp.clip(edge, 0, self.index.capacity.edges - 1)
        return sharded_take(self.index.tokens, edge, mesh=self.mesh, axis=self.axis)


jax.tree_util.register_dataclass(
    ShardedStaticConstraint, data_fields=["index"], meta_fields=["mesh", "axis"]
)


def _pad_rows(x: np.ndarray, n: int, fill) -> np.ndarray:
    extra = -len(x) % n
    return np.concatenate([x, np.full((extra,) + x.shape[1:], fill, x.dtype)]) if extra else x


def shard_index(index: StaticIndex, mesh: Mesh, axis: str = "index") -> ShardedStaticConstraint:
    """The STATIC constraint over `index` with row_ptr and tokens split by rows over `axis`.

    Both are padded to a multiple of the axis size (padding rows have no children, padding
    edges are never read), then placed one contiguous block per device.
    """
    n = mesh.shape[axis]
    row_ptr = np.asarray(index.row_ptr)
    split = dataclasses.replace(
        index,
        row_ptr=_pad_rows(row_ptr, n, row_ptr[-1]),
        tokens=_pad_rows(np.asarray(index.tokens), n, 0),
    )
    mesh = _auto(mesh)
    rows, whole = NamedSharding(mesh, PartitionSpec(axis)), NamedSharding(mesh, PartitionSpec())
    shardings = dataclasses.replace(jax.tree.map(lambda _: whole, split), row_ptr=rows, tokens=rows)
    return ShardedStaticConstraint(jax.device_put(split, shardings), mesh, axis)


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
            mesh=_auto(self.mesh),
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

    The updates (`set_enabled`, `add_items`, ...) run on it unchanged: XLA partitions their
    gathers and scatters. For that the arrays carry an automatic (not explicit) sharding.
    """
    return jax.device_put(index, live_shardings(index, _auto(mesh), axis))


def _auto(mesh: Mesh) -> Mesh:
    """The mesh with automatic axes (jax.make_mesh's default, explicit axes, would make every
    gather from a split table in the updates name its output sharding)."""
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))
