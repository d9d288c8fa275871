"""Likelihoods: closed forms and quadratures against dense float64 integration, uPS bounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy import integrate, stats

from ssgp_ppl import likelihoods
from ssgp_ppl.errors import SSGPError

CASES = {  # name: (y values, scale)
    "gaussian": ([-1.3, 0.2, 2.5], 0.4),
    "student_t": ([-1.3, 0.2, 2.5], 0.4),
    "probit": ([0.0, 1.0, 1.0], None),
    "poisson": ([0.0, 3.0, 17.0, 250.0], None),
}
MOMENTS = [(-0.7, 0.3), (0.4, 1.7), (2.2, 0.05)]


def _dense(fn, mu, var, peaks=None):
    """∫ fn(f) N(f | mu, var) df by adaptive quadrature on ±12 sd, up to f = 6 at least (a
    count of 250 peaks at log 250 = 5.5), with the likelihood's peaks as break points."""
    sd = np.sqrt(var)
    val, _ = integrate.quad(lambda f: fn(f) * stats.norm.pdf(f, mu, sd), mu - 12 * sd,
                            max(mu + 12 * sd, 6.0), points=peaks, limit=1000, epsabs=0,
                            epsrel=1e-12)
    return val


def _scipy_logpdf(name, y, f, scale):
    if name == "gaussian":
        return stats.norm.logpdf(y, f, scale)
    if name == "student_t":
        return stats.t.logpdf(y, likelihoods.STUDENT_T_DF, f, scale)
    if name == "probit":
        return stats.norm.logcdf((2 * y - 1) * f)
    return stats.poisson.logpmf(y, np.exp(f))


@pytest.mark.parametrize("name", list(CASES))
def test_expectations_match_dense_quadrature(name, x64):
    lik = likelihoods.get(name)
    ys, scale = CASES[name]
    for y in ys:
        for mu, var in MOMENTS:
            args = (jnp.asarray(y), jnp.asarray(mu), jnp.asarray(var), scale)
            ref_el = _dense(lambda f, y=y: _scipy_logpdf(name, y, f, scale), mu, var)
            peak = [np.log(max(y, 1e-3))] if name == "poisson" else [y] if scale else None
            ref_le = np.log(_dense(lambda f, y=y: np.exp(_scipy_logpdf(name, y, f, scale)), mu, var,
                                   peak))
            # Student-t: E log p by Gauss-Hermite, log E p by the scale-mixture Gauss-Laguerre rule
            # (256 nodes): each ≤ 3e-5 relative
            rtol = 1e-4 if name == "student_t" else 1e-7
            np.testing.assert_allclose(float(lik.expected_log_prob(*args)), ref_el, rtol=rtol, atol=1e-8)
            np.testing.assert_allclose(float(lik.log_expected_prob(*args)), ref_le, rtol=rtol, atol=1e-8)
            np.testing.assert_allclose(float(lik.log_prob(y, mu, scale)), _scipy_logpdf(name, y, mu, scale),
                                       rtol=1e-10)


@pytest.mark.parametrize("name", ["poisson", "probit"])
def test_predictive_mean_matches_dense_quadrature(name, x64):
    lik = likelihoods.get(name)
    mean_y = (lambda f: np.exp(f)) if name == "poisson" else (lambda f: stats.norm.cdf(f))
    for mu, var in MOMENTS:
        np.testing.assert_allclose(float(lik.mean(jnp.asarray(mu), jnp.asarray(var))),
                                   _dense(mean_y, mu, var), rtol=1e-8)


@pytest.mark.parametrize("name", list(CASES))
def test_rejection_sampler_bounds(name, x64):
    """ℓ_max bounds the likelihood everywhere and m₁ is its maximum on [a, b] (supp. §1)."""
    lik = likelihoods.get(name)
    ys, scale = CASES[name]
    grid = np.linspace(-8, 8, 20001)
    for y in ys:
        p = np.exp(_scipy_logpdf(name, y, grid, scale))
        assert float(lik.prob_max(jnp.asarray(y), scale)) >= p.max() * (1 - 1e-9)
        for a, b in [(-1.0, 0.5), (1.0, 3.5), (-6.0, -2.0)]:
            inside = (grid >= a) & (grid <= b)
            np.testing.assert_allclose(float(lik.interval_max(jnp.asarray(y), a, b, scale)),
                                       p[inside].max(), rtol=1e-3)


def test_closed_forms_have_correct_gradients(x64):
    y = jnp.asarray([0.3, -1.0])
    for lik, scale in [(likelihoods.GAUSSIAN, 0.5), (likelihoods.PROBIT, None)]:
        yy = jnp.asarray([1.0, 0.0]) if lik.name == "probit" else y
        check_grads(lambda mu, var, lik=lik, yy=yy, scale=scale: lik.log_expected_prob(yy, mu, var, scale),
                    (jnp.asarray([0.2, 0.4]), jnp.asarray([0.5, 1.3])), order=2, modes=["rev"])
    check_grads(lambda mu, var: likelihoods.POISSON.expected_log_prob(jnp.asarray([2.0]), mu, var),
                (jnp.asarray([0.2]), jnp.asarray([0.5])), order=2, modes=["rev"])


def test_unknown_likelihood_is_named():
    with pytest.raises(SSGPError, match="unknown likelihood"):
        likelihoods.get("cauchit")


def test_quadrature_float32_close_to_float64():
    lik = likelihoods.get("poisson")
    v32 = lik.log_expected_prob(jnp.float32(3.0), jnp.float32(0.4), jnp.float32(1.7))
    assert v32.dtype == jnp.float32
    ref = np.log(_dense(lambda f: stats.poisson.pmf(3, np.exp(f)), 0.4, 1.7))
    np.testing.assert_allclose(float(v32), ref, rtol=1e-5)
    assert jax.numpy.isfinite(v32)
