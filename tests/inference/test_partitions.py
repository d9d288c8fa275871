"""Tests for ssgp_ppl.inference.partitions: k-means partitions of real training inputs (Hoang et al. 2017, §2,
§4.1) are a
disjoint cover of the rows, bounded in size, local, deterministic, and test inputs go to the nearest
centre."""

import math

import numpy as np
import pytest

from ssgp_ppl.data import datasets, registry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.partitions import Partitions, auto_count, kmeans_partitions

SHARED = registry.default_data_dir()


@pytest.fixture(scope="module")
def airline():
    if SHARED is None or not (SHARED / "airline2008").is_dir():
        pytest.skip("shared data directory with airline2008 absent")
    return datasets.load("airline", subsample=20000)


def _inputs(request, name):
    """Training inputs of a named real data set (pendulum: 315 rows; airline: 19000 rows)."""
    return np.asarray(request.getfixturevalue(name).x_train, np.float64)


def _check_structure(parts: Partitions, x: np.ndarray, p: int, factor: float):
    n = x.shape[0]
    count = parts.count
    assert parts.blocks.shape == parts.mask.shape == (count, parts.blocks.shape[1])
    assert parts.blocks.dtype == np.int32 and parts.mask.dtype == bool
    assert parts.centres.shape == (count, x.shape[1]) and parts.sizes.shape == (count,)
    # every training row in exactly one block
    rows = parts.blocks[parts.mask]
    assert rows.size == n
    np.testing.assert_array_equal(np.sort(rows), np.arange(n))
    # sizes match masks, padding is at the end, no empty block, none above ⌈factor·n/p⌉
    np.testing.assert_array_equal(parts.sizes, parts.mask.sum(1))
    for k in range(count):
        assert parts.mask[k, : parts.sizes[k]].all() and not parts.mask[k, parts.sizes[k]:].any()
    assert parts.sizes.min() >= 1
    assert parts.sizes.max() <= math.ceil(factor * n / p)
    assert parts.blocks.shape[1] == parts.sizes.max()
    # centres are block means
    for k in range(count):
        np.testing.assert_allclose(parts.centres[k], x[parts.blocks[k, : parts.sizes[k]]].mean(0),
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "name,p,factor",
    [("pendulum", 8, 2.0), ("pendulum", 20, 1.5), ("airline", 19, 2.0)],
    ids=["pendulum-p8", "pendulum-p20-factor1.5", "airline-p19"],
)
def test_partitions_cover_rows_once_with_bounded_blocks(request, name, p, factor):
    x = _inputs(request, name)
    parts = kmeans_partitions(x, p, seed=0, max_size_factor=factor)
    _check_structure(parts, x, p, factor)
    # empty clusters are dropped and oversized ones cut: the count stays close to p
    assert p // 2 <= parts.count <= 2 * p


def test_tight_size_factor_cuts_large_clusters(pendulum):
    """With max_size_factor = 1 no block exceeds ⌈n/p⌉ rows: large clusters are cut into more blocks."""
    x = np.asarray(pendulum.x_train)
    p = 6
    parts = kmeans_partitions(x, p, seed=0, max_size_factor=1.0)
    _check_structure(parts, x, p, 1.0)
    loose = kmeans_partitions(x, p, seed=0, max_size_factor=100.0)
    assert loose.sizes.max() > math.ceil(x.shape[0] / p)  # k-means alone would exceed the bound
    assert parts.count > loose.count


@pytest.mark.parametrize("name", ["pendulum", "airline"])
def test_assign_is_nearest_centre(request, name):
    x = _inputs(request, name)
    parts = kmeans_partitions(x, 10, seed=1)
    test = x[:2000] + np.random.default_rng(0).normal(0, 0.3, x[:2000].shape)
    got = parts.assign(test)
    assert got.dtype == np.int32 and got.shape == (test.shape[0],)
    d2 = ((test[:, None, :] - parts.centres[None, :, :]) ** 2).sum(-1)
    np.testing.assert_array_equal(got, d2.argmin(1))
    # a centre is assigned to itself
    np.testing.assert_array_equal(parts.assign(parts.centres), np.arange(parts.count))


def test_one_partition_holds_all_rows(pendulum):
    x = np.asarray(pendulum.x_train)
    parts = kmeans_partitions(x, 1)
    assert parts.count == 1
    np.testing.assert_array_equal(parts.blocks[0], np.arange(x.shape[0]))
    assert parts.mask.all() and parts.sizes.tolist() == [x.shape[0]]
    np.testing.assert_allclose(parts.centres[0], x.mean(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(parts.assign(x[:7]), np.zeros(7))


def test_partitions_are_deterministic_given_seed(pendulum):
    x = np.asarray(pendulum.x_train)
    a, b = kmeans_partitions(x, 8, seed=3), kmeans_partitions(x, 8, seed=3)
    for f in Partitions._fields:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


@pytest.mark.parametrize("name", ["pendulum", "airline"])
def test_kmeans_partitions_are_local(request, name):
    """Mean squared distance of rows to their block mean is much smaller than for a random partition
    with the same block sizes (the point of k-means partitions: local data X_k)."""
    x = _inputs(request, name)
    parts = kmeans_partitions(x, 10, seed=0)

    def spread(blocks_rows):
        return np.mean([((x[r] - x[r].mean(0)) ** 2).sum(1).mean() for r in blocks_rows])

    kmeans = spread([parts.blocks[k, : parts.sizes[k]] for k in range(parts.count)])
    perm = np.random.default_rng(0).permutation(x.shape[0])
    random = spread(np.split(perm, np.cumsum(parts.sizes)[:-1]))
    assert kmeans < 0.75 * random, (kmeans, random)


def test_partition_errors(pendulum):
    x = np.asarray(pendulum.x_train)
    with pytest.raises(SSGPError, match="number of partitions must be >= 1, got 0"):
        kmeans_partitions(x, 0)
    with pytest.raises(SSGPError, match="3 training rows cannot be split into 4 partitions"):
        kmeans_partitions(x[:3], 4)
    parts = kmeans_partitions(x, 4)
    with pytest.raises(SSGPError, match=r"inputs have shape \(5, 8\); partitions were built for 9 columns"):
        parts.assign(x[:5, :8])
    with pytest.raises(SSGPError, match="partitions were built for 9 columns"):
        parts.assign(x[0])


@pytest.mark.parametrize("n,want", [(1, 1), (1000, 1), (1001, 2), (19000, 19)])
def test_auto_count(n, want):
    assert auto_count(n) == want
