"""Predictive metrics for Gaussian predictions N(mean, var), computed in original units.

Every function takes plain arrays: the caller maps means and standard deviations back to the
original scale of y (undoing any y-scaler: mean -> mean * s + m, var -> var * s**2) before
calling. A posterior predictive that is a mixture over draws is moment-matched first with
:func:`mixture_moments`.

Definitions follow Tan et al. (2016, section 7) for NMSE and MNLP (the same MNLP as
Lazaro-Gredilla et al. 2010) and Gneiting & Raftery (2007) for the closed-form CRPS of a Gaussian.
A target modelled on its logarithm is scored on y with the log-normal that the Gaussian on log y
is (:func:`lognormal_metrics`; its CRPS by Baran & Lerch 2015). :func:`coverage_off` says when a
test coverage of the 90% interval is far from nominal. All arithmetic is float64; every bad input
raises :class:`~ssgp_ppl.errors.SSGPError`.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri

from ssgp_ppl.errors import SSGPError

__all__ = [
    "COVERAGE_OK",
    "COVERAGE_SDS",
    "DEFAULT_LEVELS",
    "coverage",
    "coverage_curve",
    "coverage_off",
    "crps_gaussian",
    "crps_lognormal",
    "likelihood_metrics",
    "lognormal_metrics",
    "mixture_moments",
    "mnlp",
    "nmse",
    "regression_metrics",
    "rmse",
]

DEFAULT_LEVELS = np.linspace(0.1, 0.9, 9)
DEFAULT_LEVELS.setflags(write=False)

# A test coverage of the 90% interval is flagged (coverage_off) when it lies outside COVERAGE_OK
# and more than COVERAGE_SDS binomial standard deviations sqrt(0.9 * 0.1 / n) from 0.9. The band
# is what matters in use: for a Gaussian predictive, 0.80 coverage means intervals about 22% too
# narrow (z 1.28 for 1.645) and 0.97 about 32% too wide (z 2.17). The 3 sd keep small test sets
# from being flagged for their sampling noise alone: sd 0.055 at n = 30 (flagged below 0.74,
# never above), 0.03 at n = 100 (below 0.80, or 1.0), 0.0095 at n = 1000 (the band itself).
COVERAGE_OK = (0.80, 0.97)
COVERAGE_SDS = 3.0

_LOG_2PI = float(np.log(2.0 * np.pi))
_INV_SQRT_PI = float(1.0 / np.sqrt(np.pi))
_INV_SQRT_2PI = float(1.0 / np.sqrt(2.0 * np.pi))


# --------------------------------------------------------------------------- validation


def _as_float_array(x, name: str, func: str, ndim: int) -> np.ndarray:
    """``x`` as a float64 array of exactly ``ndim`` dimensions, at least one entry, all finite."""
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError):
        raise SSGPError(f"{func}: {name} is not convertible to a numeric array") from None
    if arr.dtype.kind not in "iuf":
        raise SSGPError(f"{func}: {name} must be a real numeric array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim != ndim:
        raise SSGPError(f"{func}: {name} must be {ndim}-D, got shape {arr.shape}")
    if arr.size == 0:
        raise SSGPError(f"{func}: {name} is empty (shape {arr.shape}); need at least one entry")
    n_bad = int(np.count_nonzero(~np.isfinite(arr)))
    if n_bad:
        raise SSGPError(f"{func}: {name} has {n_bad} non-finite entries (NaN or inf)")
    return arr


def _check_positive(arr: np.ndarray, name: str, func: str) -> None:
    n_bad = int(np.count_nonzero(arr <= 0.0))
    if n_bad:
        raise SSGPError(f"{func}: {name} has {n_bad} non-positive entries; variances must be > 0")


def _validate(func: str, y, mean, var=None):
    """Check y, mean (and var) are finite 1-D float arrays of one length n >= 1, var > 0."""
    y = _as_float_array(y, "y", func, 1)
    mean = _as_float_array(mean, "mean", func, 1)
    if mean.shape != y.shape:
        raise SSGPError(f"{func}: mean has length {mean.shape[0]} but y has length {y.shape[0]}")
    if var is None:
        return y, mean
    var = _as_float_array(var, "var", func, 1)
    if var.shape != y.shape:
        raise SSGPError(f"{func}: var has length {var.shape[0]} but y has length {y.shape[0]}")
    _check_positive(var, "var", func)
    return y, mean, var


def _check_level(level, func: str) -> float:
    try:
        lv = float(level)
    except (TypeError, ValueError):
        raise SSGPError(f"{func}: level must be a number in (0, 1), got {level!r}") from None
    if not (0.0 < lv < 1.0):
        raise SSGPError(f"{func}: level must lie in the open interval (0, 1), got {lv!r}")
    return lv


def _coverage_checked(y: np.ndarray, mean: np.ndarray, var: np.ndarray, level: float) -> float:
    # central interval of N(mu, s^2) at `level`: mu +- s * Phi^{-1}((1 + level) / 2)
    half_width = np.sqrt(var) * ndtri(0.5 * (1.0 + level))
    return float(np.mean(np.abs(y - mean) <= half_width))


# --------------------------------------------------------------------------- metrics


def rmse(y, mean) -> float:
    """Root mean squared error ``sqrt(mean((y - mean)**2))``."""
    y, mean = _validate("rmse", y, mean)
    return float(np.sqrt(np.mean((y - mean) ** 2)))


def nmse(y, mean, y_train_mean: float | None = None) -> float:
    """Normalised MSE, Tan et al. (2016) section 7: ``mean((y - mu)**2) / mean((y - ybar)**2)``.

    ``ybar`` is the test-set mean of ``y`` (as Tan et al. write it) unless ``y_train_mean`` is
    given. Predicting ``ybar`` everywhere scores exactly 1.
    """
    y, mean = _validate("nmse", y, mean)
    if y_train_mean is None:
        ybar = float(np.mean(y))
    else:
        try:
            ybar = float(y_train_mean)
        except (TypeError, ValueError):
            raise SSGPError(f"nmse: y_train_mean must be a number, got {y_train_mean!r}") from None
        if not np.isfinite(ybar):
            raise SSGPError(f"nmse: y_train_mean must be finite, got {ybar!r}")
    denom = float(np.mean((y - ybar) ** 2))
    if denom <= 0.0:
        raise SSGPError("nmse: mean((y - ybar)**2) is 0 (y is constant and equal to ybar)")
    return float(np.mean((y - mean) ** 2)) / denom


def mnlp(y, mean, var) -> float:
    """Mean negative log probability of y under N(mean, var), Tan et al. (2016) section 7.

    ``1/(2n) * sum[(y - mu)**2 / s2 + log s2 + log 2 pi]`` (as in Lazaro-Gredilla et al. 2010).
    """
    y, mean, var = _validate("mnlp", y, mean, var)
    return float(0.5 * np.mean((y - mean) ** 2 / var + np.log(var) + _LOG_2PI))


def crps_gaussian(y, mean, var) -> float:
    """Mean continuous ranked probability score of N(mean, var), Gneiting & Raftery (2007).

    ``CRPS = s * [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]`` with ``z = (y - mu) / s``; lower is
    better, and it equals ``E|X - y| - E|X - X'| / 2`` for X, X' independent draws.
    """
    y, mean, var = _validate("crps_gaussian", y, mean, var)
    s = np.sqrt(var)
    z = (y - mean) / s
    pdf = _INV_SQRT_2PI * np.exp(-0.5 * z * z)
    crps = s * (z * (2.0 * ndtr(z) - 1.0) + 2.0 * pdf - _INV_SQRT_PI)
    return float(np.mean(crps))


def coverage(y, mean, var, level: float) -> float:
    """Fraction of ``y`` inside the central ``level`` interval of N(mean, var); level in (0, 1).

    A calibrated predictive gives coverage close to ``level``; over-dispersed gives more.
    """
    lv = _check_level(level, "coverage")
    y, mean, var = _validate("coverage", y, mean, var)
    return _coverage_checked(y, mean, var, lv)


def coverage_off(coverage_90: float, n: int) -> str | None:
    """One line saying how a test coverage of the 90% central interval on ``n`` test rows is far
    from nominal (outside :data:`COVERAGE_OK` and more than :data:`COVERAGE_SDS` binomial sds
    from 0.9), else None."""
    c, n = float(coverage_90), int(n)
    if n < 1 or not np.isfinite(c):
        return None
    sd = float(np.sqrt(0.9 * 0.1 / n))
    lo, hi = COVERAGE_OK
    if lo <= c <= hi or abs(c - 0.9) <= COVERAGE_SDS * sd:
        return None
    how = "too narrow" if c < 0.9 else "too wide"
    return (f"test coverage of the 90% interval is {c:.3g} on {n} rows, {abs(c - 0.9) / sd:.1f} "
            f"binomial sds from 0.9 and outside [{lo:g}, {hi:g}]: the predictive intervals are "
            f"{how} (miscalibrated)")


def crps_lognormal(y, mu, var) -> float:
    """Mean CRPS of the log-normal LN(mu, var) (log y ~ N(mu, var)) at positive ``y``, Baran &
    Lerch (2015): ``y (2 Phi(z) - 1) - 2 exp(mu + s^2/2) [Phi(z - s) + Phi(s / sqrt 2) - 1]`` with
    ``s = sqrt(var)``, ``z = (log y - mu) / s``; in the units of y."""
    y, mu, var = _validate("crps_lognormal", y, mu, var)
    if np.any(y <= 0):
        raise SSGPError("crps_lognormal: y must be positive (the log-normal's support)")
    s = np.sqrt(var)
    z = (np.log(y) - mu) / s
    crps = y * (2.0 * ndtr(z) - 1.0) - 2.0 * np.exp(mu + 0.5 * var) * (
        ndtr(z - s) + ndtr(s / np.sqrt(2.0)) - 1.0)
    return float(np.mean(crps))


def lognormal_metrics(y, mean, log_mean, log_var) -> dict[str, float]:
    """The scores of :func:`regression_metrics` for a target modelled on its logarithm, on the
    original scale of ``y`` (positive): rmse and nmse of the predictive ``mean`` of y; mnlp,
    crps and coverage of the log-normal that the Gaussian N(``log_mean``, ``log_var``) on log y
    is: mnlp with the Jacobian, −log p(y) = −log N(log y) + log y; coverage of its central
    intervals, exp of log y's."""
    func = "lognormal_metrics"
    y, mean = _validate(func, y, mean)
    if np.any(y <= 0):
        raise SSGPError(f"{func}: y must be positive (a log-transformed target)")
    log_y, log_mean, log_var = _validate(func, np.log(y), log_mean, log_var)
    return {
        "rmse": rmse(y, mean),
        "nmse": nmse(y, mean),
        "mnlp": mnlp(log_y, log_mean, log_var) + float(np.mean(log_y)),
        "crps": crps_lognormal(y, log_mean, log_var),
        "coverage_50": _coverage_checked(log_y, log_mean, log_var, 0.5),
        "coverage_90": _coverage_checked(log_y, log_mean, log_var, 0.9),
    }


def coverage_curve(y, mean, var, levels=DEFAULT_LEVELS) -> tuple[np.ndarray, np.ndarray]:
    """Empirical coverage of the central intervals at each nominal level (a calibration curve).

    Returns ``(levels, empirical)`` as float64 arrays of equal length.
    """
    lv = _as_float_array(levels, "levels", "coverage_curve", 1).copy()
    n_bad = int(np.count_nonzero((lv <= 0.0) | (lv >= 1.0)))
    if n_bad:
        raise SSGPError(
            f"coverage_curve: levels has {n_bad} entries outside the open interval (0, 1)"
        )
    y, mean, var = _validate("coverage_curve", y, mean, var)
    emp = np.array([_coverage_checked(y, mean, var, float(a)) for a in lv], dtype=np.float64)
    return lv, emp


def regression_metrics(y, mean, var) -> dict[str, float]:
    """All scalar metrics at once: rmse, nmse (test-mean ybar), mnlp, crps, coverage_50/90."""
    y, mean, var = _validate("regression_metrics", y, mean, var)
    return {
        "rmse": rmse(y, mean),
        "nmse": nmse(y, mean),
        "mnlp": mnlp(y, mean, var),
        "crps": crps_gaussian(y, mean, var),
        "coverage_50": _coverage_checked(y, mean, var, 0.5),
        "coverage_90": _coverage_checked(y, mean, var, 0.9),
    }


def mixture_moments(means, variances) -> tuple[np.ndarray, np.ndarray]:
    """Moment-match an equal-weight mixture of S Gaussians per test point (law of total variance).

    ``means``, ``variances`` have shape (S, n). Returns ``mean = avg_s mu_s`` and
    ``var = avg_s s2_s + var_s(mu_s)`` (population variance, ddof=0), each of shape (n,).
    """
    func = "mixture_moments"
    mu = _as_float_array(means, "means", func, 2)
    s2 = _as_float_array(variances, "variances", func, 2)
    if mu.shape != s2.shape:
        raise SSGPError(f"{func}: variances has shape {s2.shape} but means has shape {mu.shape}")
    _check_positive(s2, "variances", func)
    m = np.mean(mu, axis=0)
    v = np.mean(s2, axis=0) + np.mean((mu - m) ** 2, axis=0)
    return m, v


def likelihood_metrics(lik, y, mean, mean_f, var_f, noise=None, *, var=None, y_model=None,
                       y_scale: float = 1.0) -> dict[str, float]:
    """Scores of the predictive mixture q(y*) = (1/S) Σ_s ∫ p(y* | f) N(f | mean_f[s], var_f[s]) df.

    * the likelihood's task metrics of the predictive ``mean`` and ``var`` (n,)
      (:meth:`~ssgp_ppl.model.likelihoods.Likelihood.task_metrics`: RMSE, NMSE, MNLP, CRPS and
      coverage for a continuous target, error rate and Brier score for a binary one, ``mre`` =
      mean |ŷ − y| / max(1, y) for counts, Wei et al. 2021, supp. "Evaluation"); none where
      ``mean`` is None;
    * ``nll``: mean test −log q(y*) by the likelihood's ``log_expected_prob`` (Wei et al. 2021,
      supp. "Evaluation"), in original units (+ log ``y_scale`` for a standardised continuous
      target).

    y, mean, var: (n,) original units; mean_f, var_f: (S, n) in the model's units; ``y_model``:
    the targets in the model's units (default y); noise: (S,) likelihood scales or None.
    """
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp

    func = "likelihood_metrics"
    y = _as_float_array(y, "y", func, 1)
    mf = _as_float_array(mean_f, "mean_f", func, 2)
    vf = _as_float_array(var_f, "var_f", func, 2)
    ym = y if y_model is None else _as_float_array(y_model, "y_model", func, 1)
    scale = jnp.ones(()) if noise is None else jnp.asarray(np.asarray(noise, np.float64))[:, None]
    log_q = logsumexp(lik.log_expected_prob(jnp.asarray(ym), jnp.asarray(mf), jnp.asarray(vf),
                                            scale), axis=0) - np.log(mf.shape[0])
    nll = float(-np.mean(np.asarray(log_q, np.float64)) + np.log(y_scale))
    return ({} if mean is None else lik.task_metrics(y, mean, var)) | {"nll": nll}
