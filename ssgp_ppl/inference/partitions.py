"""Disjoint partitions of the training inputs for sVBSSGP (Hoang et al. 2017, §2 and §4.1).

The input space is split by k-means (scipy's ``kmeans2`` on a row sample, then every row goes to
its nearest centre through a KD-tree), so each partition X_k is local. Partitions are stored as
padded index blocks with masks, shape (p, size), so that drawing a of them is O(a·size) inside a
jitted step, whatever n is. A cluster larger than ``max_size`` rows is cut into consecutive pieces
along its widest input, so no block is much larger than n/p and the padding stays small (the
pieces are still disjoint local subsets: the partition is merely finer). Test inputs go to the
partition with the nearest centre (the mean of its rows).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.spatial import cKDTree

from ssgp_ppl.errors import SSGPError


class Partitions(NamedTuple):
    """p disjoint blocks of training rows."""

    centres: np.ndarray  # (p, d) mean input of each block
    blocks: np.ndarray  # (p, size) int32 row indices, padded with 0
    mask: np.ndarray  # (p, size) bool, True for real rows
    sizes: np.ndarray  # (p,) rows per block

    @property
    def count(self) -> int:
        return int(self.blocks.shape[0])

    def assign(self, x) -> np.ndarray:
        """Index of the partition with the nearest centre for each row of ``x`` (n*, d)."""
        x = np.asarray(x, np.float64)
        if x.ndim != 2 or x.shape[1] != self.centres.shape[1]:
            raise SSGPError(f"inputs have shape {x.shape}; partitions were built for "
                            f"{self.centres.shape[1]} columns")
        return cKDTree(self.centres).query(x, workers=-1)[1].astype(np.int32)


def auto_count(n: int, rows_per_partition: int = 1000) -> int:
    """Default p from the data size: about ``rows_per_partition`` rows per partition."""
    return max(1, math.ceil(n / rows_per_partition))


def kmeans_partitions(x, p: int, *, seed: int = 0, sample: int = 20000,
                      max_size_factor: float = 2.0, pad_to: int = 0) -> Partitions:
    """k-means partitions of ``x`` (n, d) into about p blocks of at most
    ceil(max_size_factor · n / p) rows, padded to the largest block or ``pad_to`` rows."""
    x = np.asarray(x, np.float64)
    n, d = x.shape
    if p < 1:
        raise SSGPError(f"the number of partitions must be >= 1, got {p}")
    if n < p:
        raise SSGPError(f"{n} training rows cannot be split into {p} partitions")
    rng = np.random.default_rng(seed)
    if p == 1:
        labels = np.zeros(n, np.int64)
    else:
        rows = rng.choice(n, size=min(n, max(sample, 5 * p)), replace=False)
        # random-point initialisation: scipy's k-means++ init costs O(n k²) (3 minutes at p = 2000)
        centres, _ = kmeans2(x[rows], p, iter=20, minit="points", seed=rng)
        labels = cKDTree(centres).query(x, workers=-1)[1]
    max_size = max(1, math.ceil(max_size_factor * n / p))
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=p)
    pieces = []
    start = 0
    for c in counts:
        idx = order[start:start + c]
        start += c
        if c == 0:
            continue  # an empty cluster is dropped
        if c > max_size:  # cut along the widest input into consecutive pieces
            axis = int(np.argmax(x[idx].var(axis=0)))
            idx = idx[np.argsort(x[idx, axis], kind="stable")]
            pieces.extend(np.array_split(idx, math.ceil(c / max_size)))
        else:
            pieces.append(idx)
    sizes = np.array([len(q) for q in pieces])
    size = max(int(sizes.max()), pad_to)
    blocks = np.zeros((len(pieces), size), np.int32)
    mask = np.zeros((len(pieces), size), bool)
    for k, q in enumerate(pieces):
        blocks[k, :len(q)] = q
        mask[k, :len(q)] = True
    centres = np.stack([x[q].mean(axis=0) for q in pieces])
    return Partitions(centres, blocks, mask, sizes)


__all__ = ["Partitions", "auto_count", "kmeans_partitions"]
