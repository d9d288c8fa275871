"""Predictive rules: the predictive of y* at new inputs, for every method (one module).

Per posterior draw of the sites, f* has Gaussian moments under one of three rules:

* ``marginal``: s integrated out on all training data (Lázaro-Gredilla et al. 2010, eq. 7);
* ``degenerate``: f* = φ_θ(x*)ᵀs (Hoang et al. 2017, Prop. 1 with γ = 1; VSSGP), or with s
  integrated under a Gaussian q(s | θ);
* ``local``: the γ-family with the test point's partition of the training data (Hoang et al. 2017,
  Prop. 1).

Two closed forms hold one Gaussian per test point: NCVMP's (Tan et al. 2016, §5) and the
adaptive-neighbourhood fits (Tan et al. 2016, §6). :func:`y_moments` turns the per-draw f*
moments into the moments of y* under the entry's likelihood (each draw's from the likelihood's
own predictive mean and variance, :mod:`ssgp_ppl.model.likelihoods`; their mixture moment-matched).
A log-transformed target (a y scaler with ``log``) has y* log-normal given each draw: its moments,
quantiles, draws and density are those of exp(log y*) (:func:`prediction`, :class:`Prediction`).

A rule object (:class:`SiteRule`, :class:`NCVMPRule`, :class:`LocalFitsRule`) holds what it needs
(draws, training rows, partitions, variational state) and computes ``moments(x)`` in the model's
standardised units; :meth:`state` / :func:`rule_from_state` save and restore it as arrays.

Memory: a prediction of S draws at n* rows returns (S, n*) arrays; everything else it holds at
once — features, per-draw batches, y* moments and draws — is computed in chunks within
:data:`PREDICT_BUDGET` bytes (:func:`chunk_rows`, :func:`feature_rows`), with the same numbers as
all rows at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular
from scipy.special import ndtr, ndtri

from ssgp_ppl.errors import SSGPError, one_line
from ssgp_ppl.inference import ncvmp
from ssgp_ppl.inference.neighbourhoods import LocalResult, local_predict
from ssgp_ppl.inference.partitions import Partitions
from ssgp_ppl.model import spectral
from ssgp_ppl.model.linalg import cholesky


def marginal_predictive(x_train, y_train, x_test, frequencies, signal, noise):
    """Exact SSGP predictive of f* given θ with s integrated on all training data (LG 2010 eq. 7).

    mean = φ*ᵀA⁻¹Φᵀy, var = σ_n² φ*ᵀA⁻¹φ*, A = ΦᵀΦ + (mσ_n²/σ_s²) I. Returns (mean, var) of f*.
    """
    chol, w = _marginal_factor(x_train, y_train, frequencies, signal, noise)
    return _marginal_apply(chol, w, x_test, frequencies, noise)


def _marginal_factor(x_train, y_train, frequencies, signal, noise):
    """The training side of :func:`marginal_predictive`: (L (2m, 2m), w (2m,)) with LLᵀ = A,
    w = A⁻¹Φᵀy."""
    phi = spectral.features(x_train, frequencies)
    two_m = phi.shape[1]
    a = phi.T @ phi + (two_m // 2) * noise**2 / signal**2 * jnp.eye(two_m, dtype=phi.dtype)
    chol = cholesky(a)  # jitter escalation (ssgp_ppl.model.linalg)
    return chol, jax.scipy.linalg.cho_solve((chol, True), phi.T @ y_train)


def _marginal_apply(chol, w, x_test, frequencies, noise):
    """The test side of :func:`marginal_predictive`: (mean, var) (n*,) each from the factor."""
    phi_star = spectral.features(x_test, frequencies)
    v = solve_triangular(chol, phi_star.T, lower=True)  # (2m, n*)
    return phi_star @ w, noise**2 * jnp.sum(v**2, axis=0)


def loo_predictive(x_train, y_train, frequencies, signal, noise):
    """Leave-one-out predictive p(yᵢ | y₋ᵢ, θ) of every training row with s integrated out, in
    O(n m²) from the 2m × 2m factor (no refits): with K = σ_s²/m ΦΦᵀ + σ_n² I and
    K⁻¹ = (I − Φ A⁻¹ Φᵀ)/σ_n² (Woodbury; A = ΦᵀΦ + (mσ_n²/σ_s²) I), yᵢ | y₋ᵢ ~ N(yᵢ − [K⁻¹y]ᵢ/[K⁻¹]ᵢᵢ,
    1/[K⁻¹]ᵢᵢ) (the Gaussian-process LOO identity, Rasmussen & Williams 2006, eq. 5.12).
    Returns (mean, var, log density) per row, each (n,)."""
    phi = spectral.features(x_train, frequencies)
    two_m = phi.shape[1]
    a = phi.T @ phi + (two_m // 2) * noise**2 / signal**2 * jnp.eye(two_m, dtype=phi.dtype)
    chol = cholesky(a)
    v = solve_triangular(chol, phi.T, lower=True)  # (2m, n): φᵢᵀA⁻¹φᵢ = ‖vᵢ‖²
    w = jax.scipy.linalg.cho_solve((chol, True), phi.T @ y_train)
    kinv_diag = (1.0 - jnp.sum(v**2, axis=0)) / noise**2
    kinv_y = (y_train - phi @ w) / noise**2
    var = 1.0 / kinv_diag
    mean = y_train - kinv_y * var
    log_dens = -0.5 * (jnp.log(2 * jnp.pi * var) + kinv_y**2 * var)
    return mean, var, log_dens


def degenerate_predictive(x_test, frequencies, nuisance, nuisance_tril=None):
    """γ = 1 test conditional f* = φ_θ(x*)ᵀ s (Hoang et al. 2017, Prop. 1 with γ = 1; VSSGP).

    With ``nuisance_tril`` L, ``nuisance`` is the mean of a Gaussian q(s | θ) = N(μ, LLᵀ) and s is
    integrated out: f* | θ ~ N(φ*ᵀμ, ‖Lᵀφ*‖²) (the same predictive, Rao-Blackwellised over s).
    """
    phi = spectral.features(x_test, frequencies)
    mean = phi @ nuisance
    if nuisance_tril is None:
        return mean, jnp.zeros_like(mean)
    return mean, jnp.sum((phi @ nuisance_tril) ** 2, axis=-1)


def local_conditional(x_test, test_block, x_train, y_train, blocks, mask, frequencies, nuisance,
                      signal, noise, gamma: float, *, block_batch: int = 32, test_batch: int = 1024):
    """γ-family test conditional with the test point's local data (Hoang et al. 2017, Prop. 1), one draw α.

    For x* in partition k: μ = γ φ*ᵀs + (1−γ) φ*ᵀΓ_k⁻¹Φ_kᵀy_k, σ² = (1−γ²) σ_n² φ*ᵀΓ_k⁻¹φ*,
    Γ_k = Φ_kᵀΦ_k + σ_n²Λ⁻¹ = Φ_kᵀΦ_k + (mσ_n²/σ_s²) I (Φ_k the (n_k, 2m) design matrix).
    γ = 1 is VSSGP's degenerate conditional; γ = 0 is SSGP's predictive on the local data.

    test_block: (n*,) index into ``blocks``/``mask`` ((u, size) padded rows of the partitions
    that hold test points). Memory is bounded by ``block_batch`` blocks and ``test_batch`` test
    points at a time.
    """
    if nuisance is None and gamma != 0.0:
        raise SSGPError("the local conditional with gamma != 0 needs the nuisance draw s")
    two_m = 2 * frequencies.shape[0]
    ratio = (two_m // 2) * noise**2 / signal**2

    def block(args):
        idx, msk = args
        phi = spectral.features(x_train[idx], frequencies) * msk[:, None]
        a = phi.T @ phi + ratio * jnp.eye(two_m, dtype=phi.dtype)
        chol = cholesky(a)  # jitter escalation (ssgp_ppl.model.linalg)
        w = jax.scipy.linalg.cho_solve((chol, True), phi.T @ (y_train[idx] * msk))
        return chol, w

    chols, ws = jax.lax.map(block, (blocks, mask), batch_size=block_batch)

    def point(args):
        x, k = args
        phi = spectral.features(x[None], frequencies)[0]
        v = solve_triangular(chols[k], phi, lower=True)
        mean = (1.0 - gamma) * phi @ ws[k]
        if nuisance is not None:
            mean = mean + gamma * phi @ nuisance
        return mean, (1.0 - gamma**2) * noise**2 * v @ v

    return jax.lax.map(point, (x_test, test_block), batch_size=test_batch)


RULES = ("marginal", "degenerate", "local")


class LocalData(NamedTuple):
    """What the ``local`` rule needs besides the draws: the padded blocks holding test points,
    each test point's index into them, and γ."""

    blocks: jax.Array  # (u, size) int32
    mask: jax.Array  # (u, size) bool
    test_block: jax.Array  # (n*,) int32 in [0, u)
    gamma: float


def local_data(partitions, x_test, gamma: float) -> LocalData:
    """Assign test inputs to their nearest partition and keep only the blocks they use."""
    if not -1.0 <= gamma <= 1.0:
        raise SSGPError(f"gamma must be in [-1, 1], got {gamma}")
    assign = partitions.assign(x_test)
    used, test_block = np.unique(assign, return_inverse=True)
    return LocalData(jnp.asarray(partitions.blocks[used]), jnp.asarray(partitions.mask[used]),
                     jnp.asarray(test_block.astype(np.int32)), float(gamma))


@partial(jax.jit, static_argnames=("gamma",))
def _local_draws(sites, x_train, y_train, x_test, blocks, mask, test_block, *, gamma):
    """local_conditional for each draw in turn (lax.map bounds memory to one draw at a time)."""

    def one(site):
        return local_conditional(x_test, test_block, x_train, y_train, blocks, mask,
                                 site["frequencies"], site.get("nuisance"), site["signal"],
                                 site["noise"], gamma)

    return jax.lax.map(one, sites)


DRAW_BATCH = 8  # draws evaluated at once: memory (draws × n × 2m) stays bounded at any S
PREDICT_BUDGET = 256 * 2**20  # bytes: a prediction's working set beyond the arrays it returns
WORK_ARRAYS = 12  # (draws, rows) float64 arrays one chunk of rows holds at once
FEATURE_ARRAYS = 4  # (rows, 2m) arrays per draw while a batch of test rows is evaluated


def chunk_rows(draws: int, rows: int, budget: float | None = None) -> int:
    """Rows of the (draws, rows) per-draw arrays computed at once: :data:`WORK_ARRAYS` such
    float64 arrays within ``budget`` bytes (default :data:`PREDICT_BUDGET`); between 1 and
    ``rows``."""
    budget = PREDICT_BUDGET if budget is None else budget
    return int(min(max(rows, 1), max(1, budget // (WORK_ARRAYS * 8 * max(draws, 1)))))


def feature_rows(two_m: int, budget: float | None = None) -> int:
    """Test rows whose (rows, 2m) features :data:`DRAW_BATCH` draws evaluate at once within
    ``budget`` bytes (default :data:`PREDICT_BUDGET`)."""
    budget = PREDICT_BUDGET if budget is None else budget
    return int(max(1, budget // (DRAW_BATCH * FEATURE_ARRAYS * 8 * max(two_m, 1))))


@partial(jax.jit, static_argnames=("rows",))
def _marginal_draws(sites, x_train, y_train, x_test, *, rows):
    """(mean, var) (S, n*) of f* per draw: each draw's factor once, the test rows ``rows`` at a
    time."""

    def one(st):
        chol, w = _marginal_factor(x_train, y_train, st["frequencies"], st["signal"], st["noise"])

        def point(x):
            mean, var = _marginal_apply(chol, w, x[None], st["frequencies"], st["noise"])
            return mean[0], var[0]

        return jax.lax.map(point, x_test, batch_size=rows)

    return jax.lax.map(one, sites, batch_size=DRAW_BATCH)


@partial(jax.jit, static_argnames=("rows",))
def _degenerate_draws(sites, x_test, *, rows):
    """(mean, var) (S, n*) of f* = φ*ᵀs per draw, the test rows ``rows`` at a time."""

    def one(st):
        def point(x):
            mean, var = degenerate_predictive(x[None], st["frequencies"], st["nuisance"],
                                              st.get("nuisance_tril"))
            return mean[0], var[0]

        return jax.lax.map(point, x_test, batch_size=rows)

    return jax.lax.map(one, sites, batch_size=DRAW_BATCH)


def check_test_inputs(x_train, x_test) -> None:
    """Test inputs must have the training inputs' columns (one clear error, not a shape error)."""
    if x_train is None:  # rules that do not read the training data
        return
    d, d_star = np.shape(x_train)[-1], np.shape(x_test)[-1]
    if np.ndim(x_test) != 2 or d_star != d:
        raise SSGPError(f"test inputs have {d_star if np.ndim(x_test) == 2 else np.shape(x_test)} "
                        f"columns but the model was built for {d} (the training inputs')")


def predict_draws(rule: str, sites: dict, x_train, y_train, x_test, local: LocalData | None = None):
    """Per-draw predictive (mean_f, var_f) (S, n*) under ``rule`` from site values (S, ...);
    the features of at most :func:`feature_rows` test rows per draw at a time."""
    check_test_inputs(x_train, x_test)
    if rule == "local":
        if local is None:
            raise SSGPError("the local rule needs partitions (LocalData)")
        if local.gamma != 0.0 and "nuisance" not in sites:
            raise SSGPError("the local rule with gamma != 0 needs sampled nuisance variables s")

        keep = {k: sites[k] for k in ("frequencies", "nuisance", "signal", "noise") if k in sites}
        return _local_draws(keep, x_train, y_train, x_test, local.blocks, local.mask,
                            local.test_block, gamma=local.gamma)
    if rule == "marginal":
        keep = {k: sites[k] for k in ("frequencies", "signal", "noise")}
        return _marginal_draws(keep, x_train, y_train, x_test,
                               rows=feature_rows(2 * np.shape(sites["frequencies"])[1]))
    if rule == "degenerate":
        if "nuisance" not in sites:
            raise SSGPError("the degenerate predictive needs sampled nuisance variables s")
        keep = ("frequencies", "nuisance", "nuisance_tril")
        return _degenerate_draws({k: sites[k] for k in keep if k in sites}, x_test,
                                 rows=feature_rows(2 * np.shape(sites["frequencies"])[1]))
    raise SSGPError(f"unknown predictive rule {rule!r}; known: {', '.join(RULES)}")


# ---------------------------------------------------------------------------- y* moments


def y_moments(lik, mean_f, var_f, noise=None):
    """Moments of y* (n*,) in the model's units from per-draw f* moments (S, n*).

    Per draw, the likelihood's predictive mean and variance of y* under N(mean_f[s], var_f[s])
    (:meth:`~ssgp_ppl.model.likelihoods.Likelihood.mean`, ``variance``; in float64); over draws, the
    equal-weight mixture moment-matched (law of total variance; Nguyen & Bonilla 2014, eqs.
    37-38). ``noise`` (S,) the likelihood's scale per draw; None on a likelihood with a scale: a
    closed form whose var_f already is the variance of y*. Returns (mean, var, var_y) with var_y
    (S, n*) the per-draw variance of y*.
    """
    m, var_y = draw_moments(lik, mean_f, var_f, noise)
    mean = np.mean(m, axis=0)
    return mean, np.mean(var_y, axis=0) + np.mean((m - mean) ** 2, axis=0), var_y


def draw_moments(lik, mean_f, var_f, noise=None):
    """Per-draw mean and variance of y* (S, n*) each, in the model's units, as :func:`y_moments`
    computes them (float64); non-finite moments are one SSGPError."""
    mf, vf = np.asarray(mean_f, np.float64), np.asarray(var_f, np.float64)
    scale = None if noise is None else np.asarray(noise, np.float64)[:, None]
    with jax.enable_x64(True):
        m = np.asarray(lik.mean(jnp.asarray(mf), jnp.asarray(vf)), np.float64)
        var_y = np.asarray(lik.variance(jnp.asarray(mf), jnp.asarray(vf),
                                        None if scale is None else jnp.asarray(scale)), np.float64)
    m, var_y = np.broadcast_to(m, mf.shape), np.broadcast_to(var_y, mf.shape)
    bad = int(np.count_nonzero(~(np.isfinite(m) & np.isfinite(var_y))))
    if bad:
        raise SSGPError(f"the {lik.name} predictive of y* has {bad} non-finite moments (from "
                        "non-finite f* moments or an overflow)")
    return m, var_y


def lognormal_mixture(mu, var):
    """Mean and variance (n*,) of y* = exp(z) for z an equal-weight mixture of Gaussians
    N(mu[s], var[s]) (S, n*): each component log-normal with mean exp(μ + σ²/2) and variance
    (exp(σ²) − 1) exp(2μ + σ²) (Johnson et al. 1994, ch. 14), the mixture by the law of total
    variance. An overflow gives inf (no warning), which the callers' finiteness checks refuse."""
    mu, var = np.asarray(mu, np.float64), np.asarray(var, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(mu + 0.5 * var)
        mean = np.mean(e, axis=0)
        return mean, np.mean(np.expm1(var) * e**2, axis=0) + np.mean((e - mean) ** 2, axis=0)


class Moments(NamedTuple):
    """Per-draw moments of f* and y* (S, n*) in the model's units, and a rule's extras."""

    mean_f: np.ndarray
    var_f: np.ndarray
    noise: np.ndarray | None  # (S,) likelihood scale per draw; None where var_f includes it
    extra: dict | None = None  # rule-specific arrays (the local fits' μ_λ, bounds, …)


class Prediction(NamedTuple):
    """The predictive of y* at n* inputs, in the original units of the target.

    Returned by `Posterior.predict`. The per-draw arrays are what a prediction holds; its working
    set beyond them is bounded (`chunk_rows`).

    Attributes
    ----------
    mean, var
        (n*,) moments of y*.
    mean_f, var_f, var_y
        (S, n*) per posterior draw, in the model's standardised units: the mean and variance of
        f*, and the likelihood's variance of y* given the draw.
    draws
        (S, n*) one y* draw per posterior draw (original units).
    y_scale, y_shift
        Map the model's standardised units to the target's (or to log y where ``log``).
    gaussian
        Whether y* | draw is Gaussian (then the interval is the mixture's exact quantiles).
    extra
        Method-specific arrays for the DataTree (the local fits of ``tan_local``), else None.
    log
        The model's target is log y: y* | draw is log-normal, with ``mean``, ``var``, ``draws``
        and the quantiles those of y*.
    """

    mean: np.ndarray
    var: np.ndarray
    mean_f: np.ndarray
    var_f: np.ndarray
    var_y: np.ndarray
    draws: np.ndarray
    y_scale: float
    y_shift: float
    gaussian: bool
    extra: dict | None = None
    log: bool = False

    def modelled(self, y) -> np.ndarray:
        """Targets in the units the model fits.

        Parameters
        ----------
        y
            (n*,) targets in original units.

        Returns
        -------
        numpy.ndarray
            ``y``, or log y where ``log``.
        """
        y = np.asarray(y, np.float64)
        if not self.log:
            return y
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(y)

    def matched(self) -> tuple[np.ndarray, np.ndarray]:
        """The predictive moment-matched to one Gaussian per point, in the units the model fits.

        Returns
        -------
        tuple of numpy.ndarray
            (mean, var), each (n*,): of y*, or of log y* where ``log`` (a log target's y* | draw
            is Gaussian on the log scale with mean ``mean_f``).
        """
        if not self.log:
            return self.mean, self.var
        mu = np.asarray(self.mean_f, np.float64)
        m = np.mean(mu, axis=0)
        v = np.mean(np.asarray(self.var_y, np.float64), axis=0) + np.mean((mu - m) ** 2, axis=0)
        return m * self.y_scale + self.y_shift, v * self.y_scale**2

    def log_density(self, y) -> np.ndarray:
        """The log density of the predictive mixture at observed targets.

        Parameters
        ----------
        y
            (n*,) targets in original units.

        Returns
        -------
        numpy.ndarray
            (n*,) log q(y*) of the mixture (1/S) Σ_s N(y*; mean_f[s], var_y[s]) in original
            units (− log ``y_scale``); for a log target that of log y* with the Jacobian − log y
            (a density of y*, so comparable with a fit on y).

        Raises
        ------
        SSGPError
            When y* | draw is not Gaussian (a non-Gaussian likelihood), or ``y`` does not have
            the prediction's shape.
        """
        from scipy.special import logsumexp

        if not self.gaussian:
            raise SSGPError("log_density needs a Gaussian predictive per draw (a gaussian "
                            "likelihood); score other likelihoods with their task metrics")
        y = np.asarray(y, np.float64)
        if y.shape != np.shape(self.mean):
            raise SSGPError(f"log_density: y must have the prediction's shape "
                            f"{np.shape(self.mean)}, got {y.shape}")
        z = (self.modelled(y) - self.y_shift) / self.y_scale
        mu, var = np.asarray(self.mean_f, np.float64), np.asarray(self.var_y, np.float64)
        with np.errstate(invalid="ignore"):
            log_n = -0.5 * ((z - mu) ** 2 / var + np.log(2 * np.pi * var))
            out = logsumexp(log_n, axis=0) - np.log(len(mu)) - np.log(self.y_scale)
        if self.log:
            out = np.where(y > 0, out - self.modelled(y), -np.inf)
        return out

    def interval(self, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """The central interval of y* at each point.

        Parameters
        ----------
        level
            The interval's probability, strictly between 0 and 1.

        Returns
        -------
        tuple of numpy.ndarray
            (lower, upper), each (n*,): the exact quantiles of the Gaussian mixture (bisection,
            float64) for a Gaussian likelihood, else the empirical quantiles of ``draws``.

        Raises
        ------
        SSGPError
            When ``level`` is not strictly between 0 and 1.
        """
        if not 0.0 < level < 1.0:
            raise SSGPError(f"interval level must lie strictly between 0 and 1, got {level!r}")
        lo_p, hi_p = (1.0 - level) / 2.0, (1.0 + level) / 2.0
        n = np.shape(self.mean)[0]
        lo, hi = np.empty(n), np.empty(n)
        rows = chunk_rows(len(self.draws) if not self.gaussian else len(self.mean_f), n)
        for a in range(0, n, rows):  # in chunks of rows: (S, rows) temporaries
            cols = slice(a, a + rows)
            if not self.gaussian:
                lo[cols], hi[cols] = np.quantile(self.draws[:, cols], [lo_p, hi_p], axis=0)
            else:
                lo[cols], hi[cols] = self._quantile(lo_p, cols), self._quantile(hi_p, cols)
        return lo, hi

    def _quantile(self, p: float, cols: slice) -> np.ndarray:
        mu = np.asarray(self.mean_f[:, cols], np.float64)
        sd = np.sqrt(np.asarray(self.var_y[:, cols], np.float64))
        lo = np.min(mu + ndtri(p) * sd, axis=0)  # the mixture quantile lies between the extremes
        hi = np.max(mu + ndtri(p) * sd, axis=0)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            below = np.mean(ndtr((mid - mu) / sd), axis=0) < p
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        q = 0.5 * (lo + hi) * self.y_scale + self.y_shift
        return np.exp(q) if self.log else q  # exp is increasing: log y*'s quantile, mapped


class _YDraws:
    """y* draws of successive chunks of rows by the likelihood's ``predictive_draws``, the same
    numbers whatever the chunks: a closed form draws row by row from one NumPy stream (the
    Gaussian), the others draw each row from its own key."""

    def __init__(self, lik, seed: int):
        self.lik = lik
        self.rng = np.random.default_rng(seed + 2)
        self.key = jax.random.PRNGKey(seed + 2)

    def __call__(self, moments: Moments, num: int, start: int) -> np.ndarray:
        """(W, rows) y* draws (model units) of the rows ``start`` onwards; W = S, or ``num``
        where S = 1."""
        mean_f = np.asarray(moments.mean_f, np.float64)
        var_f = np.asarray(moments.var_f, np.float64)
        width = mean_f.shape[0] * (num if mean_f.shape[0] == 1 else 1)
        rows = mean_f.shape[1]
        noise = None if moments.noise is None else np.broadcast_to(
            np.asarray(moments.noise, np.float64), (mean_f.shape[0],))
        full = (width, rows)
        scale = None if noise is None else np.broadcast_to(noise, (width,))[:, None]
        return self.lik.predictive_draws(np.broadcast_to(mean_f, full),
                                         np.broadcast_to(var_f, full), scale, key=self.key,
                                         start=start, rng=self.rng)


def prediction(rule, lik, x_std, y_scaler, *, seed: int = 0, num: int = 1, client=None,
               progress: bool = False) -> Prediction:
    """The predictive of y* at standardised inputs under ``rule`` and the likelihood ``lik``, in
    original units (``y_scaler``); ``num`` y* draws when the rule has a single draw. y* moments
    and draws are computed :func:`chunk_rows` rows at a time into the returned arrays.

    With a log target (``y_scaler.log``) the model's y* is log y*: per draw Gaussian with mean
    μ and variance σ² (log units), so y* is log-normal; its mean and variance are the mixture's
    (:func:`lognormal_mixture`) and its draws exp of log y*'s."""
    mom = rule.moments(x_std, client=client, progress=progress)
    mean_f, var_f = np.asarray(mom.mean_f), np.asarray(mom.var_f)
    draws_f, n = mean_f.shape
    width = num if draws_f == 1 else draws_f  # y* draws per row
    log = bool(getattr(y_scaler, "log", False))
    scale = float(np.asarray(y_scaler.scale))
    shift = float(np.asarray(y_scaler.mean))  # standardised 0 in the model's units (y or log y)
    mean, var = np.empty(n), np.empty(n)
    var_y, draws = np.empty((draws_f, n)), np.empty((width, n))
    sample = _YDraws(lik, seed)
    rows = chunk_rows(max(draws_f, width), n)
    for a in range(0, n, rows):
        cols = slice(a, a + rows)
        part = mom._replace(mean_f=mean_f[:, cols], var_f=var_f[:, cols])
        if log:
            m_s, var_y[:, cols] = draw_moments(lik, part.mean_f, part.var_f, part.noise)
            mean[cols], var[cols] = lognormal_mixture(m_s * scale + shift,
                                                      var_y[:, cols] * scale**2)
            with np.errstate(over="ignore"):
                draws[:, cols] = np.exp(sample(part, num, a) * scale + shift)
        else:
            m, v, var_y[:, cols] = y_moments(lik, part.mean_f, part.var_f, part.noise)
            mean[cols], var[cols] = m * scale + shift, v * scale**2
            draws[:, cols] = sample(part, num, a) * scale + shift
    return Prediction(mean, var, mean_f, var_f, var_y, draws, scale, shift,
                      lik.conjugate, mom.extra, log)


def predict_sites(sites: dict, data, rule: str, *, gamma: float = 0.0, partitions=None,
                  x_test=None, lik=None, seed: int = 0) -> Prediction:
    """The predictive of y* at ``x_test`` (standardised; default the test split of ``data``) from
    flat site draws (S, ...) under ``rule``, in original units (``data``'s y scaler). A shortcut
    for scripts that hold draws rather than a Posterior (:meth:`Posterior.predict`)."""
    from ssgp_ppl.model import likelihoods

    r = SiteRule(rule, sites, np.asarray(data.x_train), np.asarray(data.y_train), gamma, partitions)
    return prediction(r, lik or likelihoods.GAUSSIAN,
                      np.asarray(data.x_test if x_test is None else x_test), data.y_scaler, seed=seed)


# ---------------------------------------------------------------------------- rule objects


def _map_rows(fn, x, client):
    """``fn(x)`` (a tuple of (S, n*) arrays), on a Dask cluster in row chunks when ``client``."""
    if client is None:
        return fn(x)
    from ssgp_ppl.runtime.cluster import map_rows

    return map_rows(fn, x, client)


@dataclass(frozen=True, eq=False)
class SiteRule:
    """``marginal``, ``degenerate`` or ``local`` over posterior draws of the sites (S, ...)."""

    closed_form = False  # one Gaussian per draw of the sites
    fits_at_prediction = False
    kind: str
    sites: dict  # frequencies, signal, noise, nuisance (nuisance_tril where s is integrated)
    x_train: np.ndarray | None = None  # standardised training rows (marginal, local)
    y_train: np.ndarray | None = None
    gamma: float = 0.0
    partitions: Partitions | None = None

    def __post_init__(self):
        if self.kind not in RULES:
            raise SSGPError(f"unknown predictive rule {self.kind!r}; known: {', '.join(RULES)}")
        if self.kind == "local" and self.partitions is None:
            raise SSGPError("the local rule needs partitions of the training rows")

    def _f(self, x):
        """(mean_f, var_f) (S, n*), :func:`chunk_rows` (n*, S) draws at a time."""
        local = local_data(self.partitions, x, self.gamma) if self.kind == "local" else None
        xt = None if self.x_train is None else jnp.asarray(self.x_train)
        yt = None if self.y_train is None else jnp.asarray(self.y_train)
        xs = jnp.asarray(x)
        sites = {k: jnp.asarray(v) for k, v in self.sites.items()}  # on the device once
        count, n = len(next(iter(sites.values()))), len(x)
        batch = chunk_rows(n, count)  # draws per call
        out = None
        for a in range(0, count, batch):
            b = min(count, a + batch)
            pick = np.minimum(np.arange(a, a + batch), count - 1)  # the last batch padded: one shape
            part = {k: v[pick] for k, v in sites.items()}
            mean_f, var_f = (np.asarray(v)[: b - a]
                             for v in predict_draws(self.kind, part, xt, yt, xs, local))
            if out is None:
                out = (np.empty((count, n), mean_f.dtype), np.empty((count, n), var_f.dtype))
            out[0][a:b], out[1][a:b] = mean_f, var_f
        return out

    def moments(self, x, *, client=None, progress: bool = False) -> Moments:
        mean_f, var_f = _map_rows(self._f, np.asarray(x), client)
        noise = self.sites.get("noise")
        return Moments(mean_f, var_f, None if noise is None else np.asarray(noise))

    def state(self) -> tuple[dict, dict]:
        arrays = {f"site_{k}": np.asarray(v) for k, v in self.sites.items()}
        if self.x_train is not None:
            arrays.update(x_train=np.asarray(self.x_train), y_train=np.asarray(self.y_train))
        if self.partitions is not None:
            arrays.update({f"partitions_{k}": np.asarray(v)
                           for k, v in self.partitions._asdict().items()})
        return arrays, {"rule": "sites", "kind": self.kind, "gamma": float(self.gamma)}


@dataclass(frozen=True, eq=False)
class NCVMPRule:
    """NCVMP's closed-form predictive of y* (Tan et al. 2016, §5), one Gaussian per point."""

    closed_form = True
    fits_at_prediction = False
    fit_state: ncvmp.NCVMPState
    points: np.ndarray  # (m, d) the spectral points of the fit
    n: int
    prior: ncvmp.TanPrior
    ybar: float  # training mean the fit was centred on

    def _f(self, x):
        mean, var = ncvmp.predictive(self.fit_state, jnp.asarray(self.points), jnp.asarray(x), self.n,
                                     self.prior)
        return np.asarray(mean)[None] + self.ybar, np.asarray(var)[None]

    def moments(self, x, *, client=None, progress: bool = False) -> Moments:
        mean, var = _map_rows(self._f, np.asarray(x), client)
        return Moments(mean, var, None)

    def state(self) -> tuple[dict, dict]:
        arrays = {f"ncvmp_{k}": np.asarray(v) for k, v in self.fit_state._asdict().items()}
        arrays.update(points=np.asarray(self.points), prior_mu0=np.asarray(self.prior.mu0),
                      prior_sigma0=np.asarray(self.prior.sigma0))
        return arrays, {"rule": "ncvmp", "n": int(self.n), "ybar": float(self.ybar),
                        "a_signal": float(self.prior.a_signal), "a_noise": float(self.prior.a_noise)}


@dataclass(frozen=True, eq=False)
class LocalFitsRule:
    """Adaptive-neighbourhood fits (Tan et al. 2016, §6): a local NCVMP fit per new input."""

    closed_form = True
    fits_at_prediction = True  # each new input's neighbourhood is fitted when it is predicted
    x_train: np.ndarray
    y_train: np.ndarray
    prior: ncvmp.TanPrior
    m: int
    k: int
    settings: ncvmp.NCVMPSettings
    spectral_seed: int
    adapt: bool = True
    batch: int = 1
    desc: str = "local"

    def moments(self, x, *, client=None, progress: bool = False) -> Moments:
        kw: dict[str, Any] = dict(m=self.m, k=self.k, settings=self.settings,
                                  key=jax.random.PRNGKey(self.spectral_seed), adapt=self.adapt,
                                  batch=self.batch)
        if client is None:
            out = local_predict(self.x_train, self.y_train, np.asarray(x), self.prior,
                                progress=progress, desc=self.desc, **kw)
        else:
            from ssgp_ppl.runtime.cluster import local_predict_distributed

            out = local_predict_distributed(self.x_train, self.y_train, np.asarray(x), self.prior,
                                            client=client, **kw)
        fits = {"mu_lambda_euclidean": out.mu_lambda_euclidean, "mu_lambda": out.mu_lambda,
                "bound": out.bound, "iterations": out.iterations,
                "f_mean_euclidean": out.mean_euclidean, "converged": out.converged,
                "converged_euclidean": out.converged_euclidean}  # the DataTree's local_fits group
        return Moments(np.asarray(out.mean)[None], np.asarray(out.var)[None], None,
                       extra={k: np.asarray(v)[None, None] for k, v in fits.items()})

    def state(self) -> tuple[dict, dict]:
        arrays = dict(x_train=np.asarray(self.x_train), y_train=np.asarray(self.y_train),
                      prior_mu0=np.asarray(self.prior.mu0),
                      prior_sigma0=np.asarray(self.prior.sigma0))
        return arrays, {"rule": "local_fits", "m": self.m, "k": self.k,
                        "settings": list(self.settings), "spectral_seed": self.spectral_seed,
                        "adapt": bool(self.adapt), "batch": self.batch,
                        "a_signal": float(self.prior.a_signal), "a_noise": float(self.prior.a_noise)}


@dataclass(frozen=True, eq=False)
class StackedRule:
    """The weighted mixture of K closed-form rules (a multi-path fit, :mod:`ssgp_ppl.inference.paths`): path
    k's per-draw moments are repeated ``counts[k]`` times, so the equal-weight mixture over the
    rows is the weighted mixture of the paths."""

    rules: tuple
    counts: tuple  # (K,) ints: rows of each path in the mixture

    @property
    def closed_form(self) -> bool:
        return self.rules[0].closed_form

    @property
    def fits_at_prediction(self) -> bool:
        return self.rules[0].fits_at_prediction

    def moments(self, x, *, client=None, progress: bool = False) -> Moments:
        """(sum(counts), n*) per-draw moments, each path's rows cycled into the returned arrays."""
        parts = [(r.moments(x, client=client, progress=progress), c)
                 for r, c in zip(self.rules, self.counts, strict=True) if c > 0]

        def stack(field):
            first = np.asarray(getattr(parts[0][0], field))
            out = np.empty((sum(c for _, c in parts),) + first.shape[1:], first.dtype)
            at = 0
            for m, c in parts:  # row at + j of path k is its draw j mod S_k
                a = np.asarray(getattr(m, field))
                for j in range(min(len(a), c)):
                    out[at + j:at + c:len(a)] = a[j]
                at += c
            return out

        noise = None if parts[0][0].noise is None else stack("noise")
        return Moments(stack("mean_f"), stack("var_f"), noise)

    def state(self) -> tuple[dict, dict]:
        arrays, attrs = {}, []
        for k, r in enumerate(self.rules):
            a, at = r.state()
            arrays.update({f"path{k}_{name}": v for name, v in a.items()})
            attrs.append(at)
        return arrays, {"rule": "stacked", "counts": [int(c) for c in self.counts], "paths": attrs}


def _prior(arrays: dict, attrs: dict) -> ncvmp.TanPrior:
    return ncvmp.TanPrior(jnp.asarray(arrays["prior_mu0"]), jnp.asarray(arrays["prior_sigma0"]),
                          float(attrs["a_signal"]), float(attrs["a_noise"]))


# the names of the arrays the rules' state() writes (a stacked rule's path k with "path<k>_")
STATE_ARRAYS = re.compile(
    r"(?:path\d+_)?(?:site_\w+|x_train|y_train|points|prior_mu0|prior_sigma0"
    rf"|partitions_(?:{'|'.join(Partitions._fields)})|ncvmp_(?:{'|'.join(ncvmp.NCVMPState._fields)}))")


def rule_from_state(arrays: dict, attrs: dict):
    """The rule object :meth:`SiteRule.state` (or the others') saved; a state with missing or
    mistyped parts is one SSGPError."""
    try:
        return _rule_from_state(arrays, attrs)
    except SSGPError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise SSGPError(f"the saved predictive rule is corrupt ({type(e).__name__}: "
                        f"{one_line(e)[:120]})") from None


def _rule_from_state(arrays: dict, attrs: dict):
    kind = attrs["rule"]
    if kind == "sites":
        parts = None
        if "partitions_blocks" in arrays:
            parts = Partitions(*(arrays[f"partitions_{k}"] for k in Partitions._fields))
        sites = {k[len("site_"):]: jnp.asarray(v) for k, v in arrays.items() if k.startswith("site_")}
        return SiteRule(attrs["kind"], sites, arrays.get("x_train"), arrays.get("y_train"),
                        float(attrs["gamma"]), parts)
    if kind == "ncvmp":
        state = ncvmp.NCVMPState(*(jnp.asarray(arrays[f"ncvmp_{k}"])
                                   for k in ncvmp.NCVMPState._fields))
        return NCVMPRule(state, arrays["points"], int(attrs["n"]), _prior(arrays, attrs),
                         float(attrs["ybar"]))
    if kind == "stacked":
        rules = tuple(_rule_from_state({k[len(f"path{i}_"):]: v for k, v in arrays.items()
                                       if k.startswith(f"path{i}_")}, a)
                      for i, a in enumerate(attrs["paths"]))
        return StackedRule(rules, tuple(attrs["counts"]))
    if kind == "local_fits":
        settings = ncvmp.NCVMPSettings(*attrs["settings"])
        return LocalFitsRule(arrays["x_train"], arrays["y_train"], _prior(arrays, attrs),
                             int(attrs["m"]), int(attrs["k"]), settings,
                             int(attrs["spectral_seed"]), bool(attrs["adapt"]), int(attrs["batch"]))
    raise SSGPError(f"unknown saved predictive rule {kind!r}")


__all__ = ["RULES", "LocalResult", "Moments", "Prediction", "SiteRule", "NCVMPRule", "StackedRule",
           "LocalFitsRule", "y_moments", "draw_moments", "lognormal_mixture", "predict_draws",
           "prediction", "predict_sites",
           "check_test_inputs", "loo_predictive", "rule_from_state", "STATE_ARRAYS"]
