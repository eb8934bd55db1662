"""Several devices: the batch sharded along a `data` mesh axis, the constraint index replicated."""

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import PyTree


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
