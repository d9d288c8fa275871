"""Data parallelism of the minibatch/partition-sampled gradient over JAX devices (``jax.sharding``).

The rows of one SVI step (a drawn partitions × block size, Hoang et al. 2017, §4.1 eq. 7, or a uniform
minibatch) are split over a 1-D device mesh with axis ``"rows"``; data, parameters and optimiser
state are replicated, so each device gathers its own rows from its replica and XLA sums the
per-device parts of the loss and its gradient (an all-reduce of O(parameters) per step). With
several processes (:mod:`jax.distributed`), ``jax.devices()`` lists every process's devices and the
same code spans them: each process holds the same replicated inputs (same seed, same data) and
computes its own rows.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ssgp_ppl.errors import SSGPError

AXIS = "rows"


def row_mesh(devices: int | None = None) -> Mesh | None:
    """A 1-D mesh over the first ``devices`` of ``jax.devices()`` (all by default); None for one.

    Across processes the mesh must hold every process's devices (one program, SPMD).
    """
    available = jax.devices()
    count = len(available) if devices is None else devices
    if count < 1 or count > len(available):
        raise SSGPError(f"devices must be in [1, {len(available)}] (the JAX devices here), got {count}")
    if jax.process_count() > 1 and count != len(available):
        raise SSGPError(f"with {jax.process_count()} processes the mesh spans all {len(available)} "
                        f"devices; got devices={count}")
    if count == 1:
        return None
    return Mesh(np.asarray(available[:count]), (AXIS,))


def padded_size(size: int, mesh: Mesh | None) -> int:
    """Smallest multiple of the mesh size that holds ``size`` rows (block columns are padded to it)."""
    k = 1 if mesh is None else mesh.size
    return k * math.ceil(size / k)


def split_rows(x, mesh: Mesh | None):
    """Constrain ``x``'s leading axis to be split over the mesh (inside jit); identity without one."""
    if mesh is None:
        return x
    spec = PartitionSpec(AXIS, *([None] * (x.ndim - 1)))
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def replicated(mesh: Mesh) -> NamedSharding:
    """Every device holds the whole array."""
    return NamedSharding(mesh, PartitionSpec())


def gather_scalar(value: int) -> list[int]:
    """``value`` of every process (a collective: every process must call it)."""
    from jax.experimental import multihost_utils

    return [int(v) for v in np.asarray(multihost_utils.process_allgather(np.int64(value))).ravel()]


def replicate(tree, mesh: Mesh | None):
    """Every leaf of ``tree`` replicated on all devices of the mesh (global arrays across
    processes: each process passes the same full values)."""
    if mesh is None:
        return tree
    sharding = replicated(mesh)
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    return jax.tree.map(
        lambda a: jax.make_array_from_callback(np.shape(a), sharding, lambda idx: np.asarray(a)[idx]),
        tree)


def host(tree):
    """numpy copies of (possibly global, replicated) arrays, on every process."""
    def one(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable:
            return np.asarray(a.addressable_data(0))
        return np.asarray(a)

    return jax.tree.map(one, tree)


__all__ = ["AXIS", "gather_scalar", "host", "padded_size", "replicate", "replicated", "row_mesh",
           "split_rows"]
