"""Data parallelism: a Mesh over local devices, batch sharded along `data`, params replicated."""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def make_mesh(devices: list | None = None) -> Mesh:
    """A 1-D mesh named `data` over `devices` (default: every device of every process)."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), ("data",))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharded(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec("data"))


def check_batch_size(batch_size: int, mesh: Mesh) -> None:
    """The global batch must split evenly across the mesh's `data` axis."""
    n = mesh.shape["data"]
    if batch_size % n:
        raise ValueError(
            f"seqmodel.batch_size={batch_size} is not divisible by the {n} devices of the mesh"
        )


def put_batch(batch, mesh: Mesh):
    """Host batch (array or dict of arrays) -> device arrays sharded along `data`."""
    sharding = batch_sharded(mesh)
    if jax.process_count() == 1:
        return jax.device_put(batch, sharding)
    # Several hosts: every process holds the same global batch; each keeps its own rows.
    return jax.tree.map(
        lambda x: jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx]), batch
    )
