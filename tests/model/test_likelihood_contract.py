"""Every registered likelihood keeps its contract: its expectations under q(f) = N(mu, var) equal
float64 adaptive integrals of its own log p(y | f) (to 1e-9 where it declares a closed form),
its predictive moments are those of its own draws, its draws are data it accepts, its model
site agrees with log p, and its uPS bounds bound p."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import likelihoods

NAMES = sorted(likelihoods.LIKELIHOODS)
MOMENTS = [(-0.7, 0.3), (0.4, 1.7), (2.2, 0.05)]
TARGETS = {"continuous": [-1.3, 0.2, 2.5], "binary": [0.0, 1.0], "count": [0.0, 3.0, 17.0]}
NOT_TARGETS = {"continuous": np.nan, "binary": 0.5, "count": 2.5}
SCALE = 0.7
EXACT, QUADRATURE = 1e-9, 1e-4  # relative tolerance of a declared closed form / of quadrature


def _case(name):
    lik = likelihoods.LIKELIHOODS[name]
    return lik, (SCALE if lik.has_scale else None), TARGETS[lik.target]


def _log_prob64(lik, scale):
    """f ↦ log p(y | f) as a float64 scalar function."""
    fn = jax.jit(lambda y, f: lik.log_prob(y, f, scale))
    return lambda y, f: float(fn(jnp.float64(y), jnp.float64(f)))


def _quad(h, lo, hi, points=()):
    """∫ h on [lo, hi] (float64 adaptive, relative 1e-12), ``points`` its break points."""
    inner = [p for p in points if lo < p < hi] or None
    return integrate.quad(h, lo, hi, points=inner, limit=1000, epsabs=0, epsrel=1e-12)[0]


def _integral(g, mu, var):
    """∫ g(f) N(f | mu, var) df on mu ± 12 sd."""
    sd = math.sqrt(var)
    return _quad(lambda f: g(f) * stats.norm.pdf(f, mu, sd), mu - 12 * sd, mu + 12 * sd)


def _log_integral(lp, mu, var):
    """log ∫ p(y | f) N(f | mu, var) df, with the integrand's peak (found on a grid, which may lie
    far from mu: a count of 17 under N(−0.7, 0.3)) scaled out and used as a break point."""
    sd = math.sqrt(var)
    lo, hi = mu - 12 * sd - 10, mu + 12 * sd + 10
    grid = np.linspace(lo, hi, 4001)
    log_int = np.array([lp(f) for f in grid]) + stats.norm.logpdf(grid, mu, sd)
    peak, top = float(grid[np.argmax(log_int)]), float(np.max(log_int))
    val = _quad(lambda f: math.exp(lp(f) + stats.norm.logpdf(f, mu, sd) - top), lo, hi, (peak,))
    return math.log(val) + top


@pytest.mark.parametrize("name", NAMES)
def test_expected_log_prob_is_the_float64_integral(name, x64):
    lik, scale, ys = _case(name)
    lp = _log_prob64(lik, scale)
    rtol = EXACT if lik.exact_expected_log else QUADRATURE
    for y in ys:
        for mu, var in MOMENTS:
            ref = _integral(lambda f, y=y: lp(y, f), mu, var)
            got = float(lik.expected_log_prob(jnp.float64(y), jnp.float64(mu), jnp.float64(var),
                                              scale))
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-12, err_msg=f"y={y} {mu} {var}")


@pytest.mark.parametrize("name", NAMES)
def test_log_expected_prob_is_the_float64_integral(name, x64):
    lik, scale, ys = _case(name)
    lp = _log_prob64(lik, scale)
    rtol = EXACT if lik.exact_log_expected else QUADRATURE
    for y in ys:
        for mu, var in MOMENTS:
            ref = _log_integral(lambda f, y=y: lp(y, f), mu, var)
            got = float(lik.log_expected_prob(jnp.float64(y), jnp.float64(mu), jnp.float64(var),
                                              scale))
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-12, err_msg=f"y={y} {mu} {var}")


@pytest.mark.parametrize("name", NAMES)
def test_declared_closed_forms_do_not_depend_on_the_nodes(name, x64):
    """A flag that says closed form is one (the value ignores ``nodes``); a quadrature changes
    with its nodes."""
    lik, scale, ys = _case(name)
    args = (jnp.float64(ys[-1]), jnp.float64(0.4), jnp.float64(1.7), scale)
    for method, exact in ((lik.expected_log_prob, lik.exact_expected_log),
                          (lik.log_expected_prob, lik.exact_log_expected)):
        few, many = float(method(*args, nodes=3)), float(method(*args, nodes=64))
        assert (few == many) if exact else (few != many), (method.__name__, few, many)


@pytest.mark.parametrize("name", NAMES)
def test_predictive_moments_are_the_float64_integrals_of_the_conditional_ones(name, x64):
    lik, scale, _ = _case(name)
    rtol = EXACT if lik.exact_moments else 1e-6
    cm = jax.jit(lambda f: lik.conditional_mean(f))
    cv = jax.jit(lambda f: lik.conditional_variance(f, scale))
    for mu, var in MOMENTS:
        mean = _integral(lambda f: float(cm(jnp.float64(f))), mu, var)
        second = _integral(lambda f: float(cv(jnp.float64(f)) + cm(jnp.float64(f)) ** 2), mu, var)
        np.testing.assert_allclose(float(lik.mean(jnp.float64(mu), jnp.float64(var))), mean,
                                   rtol=rtol)
        np.testing.assert_allclose(float(lik.variance(jnp.float64(mu), jnp.float64(var), scale)),
                                   second - mean**2, rtol=rtol)


@pytest.mark.parametrize("name", NAMES)
def test_predictive_draws_have_the_predictive_moments_and_the_right_support(name, x64):
    """20,000 draws per (mu, var) (JAX keys, and for a closed form also the NumPy stream): their
    mean and variance within 5 Monte Carlo standard errors of ``mean`` and ``variance``, every
    draw a target the likelihood accepts."""
    lik, scale, _ = _case(name)
    w = 20_000
    mu = np.broadcast_to([m for m, _ in MOMENTS], (w, len(MOMENTS)))
    var = np.broadcast_to([v for _, v in MOMENTS], (w, len(MOMENTS)))
    sc = None if scale is None else np.full((w, 1), scale)
    mean = np.asarray(lik.mean(jnp.asarray(mu[0]), jnp.asarray(var[0])))
    variance = np.asarray(lik.variance(jnp.asarray(mu[0]), jnp.asarray(var[0]),
                                       None if scale is None else jnp.float64(scale)))
    for rng in (None, np.random.default_rng(5)):
        y = lik.predictive_draws(mu, var, sc, key=jax.random.PRNGKey(3), rng=rng)
        assert y.shape == (w, len(MOMENTS))
        lik.check_target(y, f"{name} draws")
        centred = y - y.mean(0)
        se_mean = np.sqrt(y.var(0) / w)
        se_var = np.sqrt(np.maximum(np.mean(centred**4, 0) - y.var(0) ** 2, 0) / w)
        assert np.all(np.abs(y.mean(0) - mean) < 5 * se_mean), (y.mean(0), mean, se_mean)
        assert np.all(np.abs(y.var(0) - variance) < 5 * se_var), (y.var(0), variance, se_var)


@pytest.mark.parametrize("name", NAMES)
def test_the_model_site_distribution_agrees_with_log_prob(name, x64):
    lik, scale, ys = _case(name)
    f = jnp.linspace(-3.0, 3.0, 7)
    for y in ys:
        np.testing.assert_allclose(np.asarray(lik.distribution(f, scale).log_prob(y)),
                                   np.asarray(lik.log_prob(jnp.float64(y), f, scale)), rtol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_ups_bounds_bound_the_likelihood(name, x64):
    """ℓ_max ≥ p(y | f) everywhere and m₁ is p's maximum on [a, b] (Wei et al. 2021, supp. §1)."""
    lik, scale, ys = _case(name)
    grid = np.linspace(-8.0, 8.0, 20001)  # the interval ends are grid points
    for y in ys:
        p = np.exp(np.asarray(lik.log_prob(jnp.float64(y), jnp.asarray(grid), scale)))
        assert float(lik.prob_max(jnp.float64(y), scale)) >= p.max() * (1 - 1e-9)
        for a, b in [(-1.0, 0.5), (1.0, 3.5), (-6.0, -2.0)]:
            inside = (grid >= a) & (grid <= b)
            np.testing.assert_allclose(float(lik.interval_max(jnp.float64(y), a, b, scale)),
                                       p[inside].max(), rtol=1e-3)


@pytest.mark.parametrize("name", NAMES)
def test_a_value_outside_the_support_is_one_error_naming_the_likelihood(name):
    lik, _, ys = _case(name)
    lik.check_target(np.array(ys))
    with pytest.raises(SSGPError, match=f"^y: the {name} likelihood needs "):
        lik.check_target(np.array([*ys, NOT_TARGETS[lik.target]]))


@pytest.mark.parametrize("name", NAMES)
def test_declared_abilities_are_consistent(name):
    lik = likelihoods.LIKELIHOODS[name]
    assert lik.name == name and lik.target in likelihoods.TARGETS and lik.description
    if lik.conjugate:  # s integrates out: y | f = N(f, σ_n²)
        assert lik.has_scale and lik.target == "continuous"
        assert lik.exact_expected_log and lik.exact_log_expected and lik.exact_moments
