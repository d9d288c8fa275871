"""Adaptive neighbourhoods for local predictive inference (Tan et al. 2016, §6).

For each test point x*: fit M₁ by Algorithm 2 on its k Euclidean nearest training neighbours N₁,
then refit M₂ on the k nearest under d(x*, x) = ((x* − x)ᵀ diag(μ_λ²) (x* − x))^{1/2} (eq. 16), with
μ_λ from M₁, and predict from M₂ with the closed-form predictive of §5. Each local fit starts as §7
says: ten random spectral sets, two iterations each, the best bound continues; each local target
vector is centred (the model has zero mean). A float32 fit is finished in float64 from where it
stopped (:func:`ssgp_ppl.inference.ncvmp.continue_x64`): float32 resolves L only to ~10⁻⁵ of
itself, and on these small, nearly interpolated neighbourhoods Algorithm 2 still raises L by 0.05
nats (median; up to 4) after float32 has stopped seeing any gain.

The fits of a batch of test points run at once (``vmap`` of the jitted solver over neighbourhoods);
batches advance a progress bar. Euclidean neighbours come from one scipy ``cKDTree``; the eq. (16)
metric changes with every test point, so its neighbours are found by an exact O(n d) scan (a tree
would have to be rebuilt per point, O(n log n)).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.spatial import cKDTree

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import ncvmp


class LocalResult(NamedTuple):
    """Per test point (n*,): predictive of y* (the fit's target units) and both local fits."""

    mean: np.ndarray
    var: np.ndarray
    mean_euclidean: np.ndarray  # predictive of M₁ (the "initial fit" of §7)
    var_euclidean: np.ndarray
    mu_lambda_euclidean: np.ndarray  # (n*, d) μ_λ of M₁
    mu_lambda: np.ndarray  # (n*, d) μ_λ of M₂ (of M₁ when adapt=False)
    bound: np.ndarray  # L of the fit predicted from
    iterations: np.ndarray  # of both precisions where a float32 fit was finished in float64
    neighbours: np.ndarray  # (n*, k) training rows of the fit predicted from
    converged: np.ndarray  # (n*,) bool: the fit predicted from converged by NCVMP's rule, in float64
    converged_euclidean: np.ndarray  # (n*,) bool: M₁ converged (its μ_λ picks M₂'s neighbours)


@partial(jax.jit, static_argnames=("settings",))
def _fit_batch(xs, ys, sets, xq, prior, settings):
    """Algorithm 2 on a batch of neighbourhoods (B, k, d), (B, k) with spectral sets (B, R, m, d);
    returns the predictive at xq (B, d) and the fits' μ_λ, bound, iteration count and whether
    each converged."""

    def one(x, y, pts, q):
        ybar = jnp.mean(y)
        res = ncvmp.fit_ncvmp(x, y - ybar, pts, prior, settings)
        mean, var = ncvmp.predictive(res.state, res.points, q[None], x.shape[0], prior)
        return (mean[0] + ybar, var[0], res.state.mu_lambda, res.bound, res.iterations,
                res.converged), (res.state, res.points)

    return jax.vmap(one)(xs, ys, sets, xq)


@partial(jax.jit, static_argnames=("settings",))
def _finish_batch(xs, ys, points, states, xq, prior, settings):
    """:func:`_fit_batch`'s outputs of fits continued from ``states`` (B, ...) with their spectral
    sets ``points`` (B, m, d): called in float64 on float32 fits (:func:`ncvmp.continue_x64`)."""

    def one(x, y, pts, st, q):
        ybar = jnp.mean(y)
        res = ncvmp.fit_ncvmp(x, y - ybar, pts[None], prior, settings, init=st)
        mean, var = ncvmp.predictive(res.state, res.points, q[None], x.shape[0], prior)
        return mean[0] + ybar, var[0], res.state.mu_lambda, res.bound, res.iterations, res.converged

    return jax.vmap(one)(xs, ys, points, states, xq)


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def weighted_neighbours(x_train, x_query, weights, k: int):
    """Indices (n*, k) of the k nearest rows under the eq. (16) metric, weights (n*, d) = μ_λ²."""
    out = np.empty((len(x_query), k), np.int64)
    for j, (q, w) in enumerate(zip(x_query, weights, strict=True)):
        d2 = ((x_train - q) ** 2) @ w
        idx = np.argpartition(d2, k - 1)[:k]
        out[j] = idx[np.argsort(d2[idx], kind="stable")]
    return out


def local_predict(x_train, y_train, x_test, prior: ncvmp.TanPrior, *, m: int, k: int,
                  settings: ncvmp.NCVMPSettings, key, adapt: bool = True, batch: int = 32,
                  progress: bool = True, desc: str = "local", offset: int = 0,
                  threads: int | None = None) -> LocalResult:
    """Tan et al. 2016, §6 for every test point; x (n, d), y (n,), x_test (n*, d) as numpy arrays.

    Test row j draws its spectral sets from ``fold_in(fold_in(key, stage), offset + j)``: a call on
    rows r:r' of a test set with ``offset=r`` reproduces those rows' draws of the whole call (the
    chunks of :func:`ssgp_ppl.runtime.cluster.local_predict_distributed`). The batches of ``batch`` fits
    (vmapped) run on ``threads`` threads (default: the cores this process may use), results
    independent of the thread count."""
    x_train = np.asarray(x_train)
    y_train = np.asarray(y_train)
    x_test = np.asarray(x_test)
    n, d = x_train.shape
    if k > n:
        raise SSGPError(f"inference.local.k = {k} exceeds the {n} training rows")
    if offset < 0:
        raise SSGPError(f"offset must be >= 0, got {offset}")
    ncvmp.check_data(x_train[:k], y_train[:k], m)
    dtype = jnp.result_type(float)
    n_star = len(x_test)
    tree = cKDTree(x_train)
    idx1 = tree.query(x_test, k)[1].reshape(n_star, k)

    def sets(stage, rows):
        keys = jax.vmap(lambda j: jax.random.fold_in(jax.random.fold_in(key, stage), j))(
            jnp.asarray(offset + rows))
        return jax.vmap(lambda kk: ncvmp.spectral_sets(kk, settings.restarts, m, d, dtype))(keys)

    x64 = bool(jax.config.read("jax_enable_x64"))  # the caller's width (jax.enable_x64 is per thread)

    def one(stage, idx, lo):
        rows = np.arange(lo, min(lo + batch, n_star))
        pad = np.concatenate([rows, np.full(batch - len(rows), rows[-1])])  # fixed shapes
        with jax.enable_x64(x64):
            res, (states, points) = _fit_batch(jnp.asarray(x_train[idx[pad]], dtype),
                                               jnp.asarray(y_train[idx[pad]], dtype),
                                               sets(stage, pad), jnp.asarray(x_test[pad], dtype),
                                               prior, settings)
        if not x64:  # finished in float64 from where float32 stopped (ncvmp.continue_x64)
            with jax.enable_x64(True):
                f64 = lambda a: jnp.asarray(np.asarray(a), jnp.float64)  # noqa: E731
                fin = _finish_batch(f64(x_train[idx[pad]]), f64(y_train[idx[pad]]), f64(points),
                                    jax.tree.map(f64, states), f64(x_test[pad]),
                                    jax.tree.map(f64, prior), settings)
                fin = [np.asarray(r) for r in fin]
            # the float32 run's dtype (as continue_x64 returns); iterations of both precisions
            fin[:4] = [np.asarray(r, dtype) for r in fin[:4]]
            fin[4] = fin[4] + np.asarray(res[4])
            res = fin
        return [np.asarray(r)[: len(rows)] for r in res]

    starts = range(0, n_star, batch)
    workers = max(1, min(len(starts), threads or _cores()))

    def run(idx, stage, bar):
        # batches on ``workers`` threads (a jitted call releases the GIL): each batch's result is
        # the same whichever thread computes it; map keeps their order
        outs = []
        pool = ThreadPoolExecutor(workers)
        try:
            for lo, out in zip(starts, pool.map(lambda lo: one(stage, idx, lo), starts), strict=True):
                outs.append(out)
                if bar is not None:
                    bar.update(min(batch, n_star - lo))
        except BaseException:  # an error or Ctrl-C: drop the queued batches, do not wait for them
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        return [np.concatenate(parts) for parts in zip(*outs, strict=True)]

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_star * (2 if adapt else 1), desc=desc, unit="fit")
    try:
        mean1, var1, lam1, bound1, it1, conv1 = run(idx1, 0, bar)
        if adapt:
            idx2 = weighted_neighbours(x_train, x_test, lam1**2, k)
            mean2, var2, lam2, bound2, it2, conv2 = run(idx2, 1, bar)
        else:
            idx2, mean2, var2, lam2, bound2, it2, conv2 = idx1, mean1, var1, lam1, bound1, it1, conv1
    finally:
        if bar is not None:
            bar.close()
    return LocalResult(mean2, var2, mean1, var1, lam1, lam2, bound2, it2, idx2, conv2, conv1)


__all__ = ["LocalResult", "local_predict", "weighted_neighbours"]
