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

    # Several hosts: every process holds the same global batch; each puts its own rows on its
    # devices. An explicit device_put per shard, as make_array_from_callback's implicit copy
    # trips the training loop's jax.transfer_guard("disallow").
    def put(x):
        rows = sharding.addressable_devices_indices_map(x.shape)
        shards = [jax.device_put(x[idx], device) for device, idx in rows.items()]
        return jax.make_array_from_single_device_arrays(x.shape, sharding, shards)

    return jax.tree.map(put, batch)
