"""Several devices: the batch sharded along a `data` mesh axis, the constraint index replicated."""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def data_mesh(devices=None, axis: str = "data") -> Mesh:
    """A 1-D mesh over `devices` (default: all) named `axis`."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), (axis,))


def shard_batch(tree, mesh: Mesh, axis: str = "data"):
    """Puts every leaf with its leading (batch) axis split over `axis`; B must divide evenly."""
    n = mesh.shape[axis]
    for leaf in jax.tree.leaves(tree):
        if leaf.shape[0] % n:
            raise ValueError(f"batch size {leaf.shape[0]} is not divisible by {n} devices")
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec(axis)))


def replicate(tree, mesh: Mesh):
    """Puts every leaf (e.g. a constraint's index arrays) whole on every device."""
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))
