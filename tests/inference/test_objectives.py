"""Objectives (Wei et al. 2021): estimators of log-expectation gradients and the objectives themselves.

uPS is unbiased and bMC's bias shrinks with L (against exact or dense-quadrature gradients); the
objectives match float64 references where θ is fixed, Trace_ELBO in expectation, the closed-form
KL in expectation, and are unbiased under minibatching.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.test_util import check_grads
from numpyro.infer import SVI, Trace_ELBO
from scipy import integrate, stats

from ssgp_ppl.entry import load_entry
from ssgp_ppl.inference import objectives
from ssgp_ppl.model import likelihoods, spectral


def _tilted_moments(name, y, mu, var):
    lik = likelihoods.get(name)
    sd = math.sqrt(var)

    def w(f):
        return math.exp(float(lik.log_prob(y, f, 1.0))) * stats.norm.pdf(f, mu, sd)

    lo, hi = mu - 12 * sd, mu + 12 * sd
    z = integrate.quad(w, lo, hi, limit=400)[0]
    m1 = integrate.quad(lambda f: f * w(f), lo, hi, limit=400)[0] / z
    m2 = integrate.quad(lambda f: f * f * w(f), lo, hi, limit=400)[0] / z
    return m1, m2 - m1**2


@pytest.mark.parametrize(("name", "y", "mu", "var"), [
    ("poisson", 5.0, 0.3, 0.8), ("poisson", 8.0, 0.5, 0.3), ("probit", 0.0, 1.5, 2.0)],
    ids=["poisson-aligned", "poisson-misaligned", "probit"])
def test_product_sampler_draws_from_tilted_q(name, y, mu, var, x64):
    """Draws of the supplement's rejection sampler have q̃ ∝ q·p(y|f)'s mean and variance."""
    lik = likelihoods.get(name)
    n = 20000
    f, rounds, missed = objectives.product_samples(jax.random.PRNGKey(0), lik, jnp.asarray(y),
                                                   jnp.asarray(mu), jnp.asarray(var), jnp.ones(()), n)
    f = np.asarray(f)
    m, v = _tilted_moments(name, y, mu, var)
    assert abs(f.mean() - m) < 4 * math.sqrt(v / n)
    assert abs(f.var() / v - 1) < 4 * math.sqrt(2 / n) + 0.01
    assert int(rounds) < 10_000 and float(missed) == 0.0


def _exact_grad(lik, y, mu, var, scale):
    if lik.exact_log_expected:
        fn = lik.log_expected_prob
    else:
        def fn(y, mu, var, scale):
            return lik.log_expected_prob(y, mu, var, scale, nodes=200)
    return jax.grad(lambda a: fn(y, a[0], a[1], a[2]))(jnp.asarray([mu, var, scale]))


def _estimates(estimator, lik, y, mu, var, scale, samples, reps, seed=0):
    def one(k):
        return jax.grad(lambda a: estimator(k, lik, y, a[0], a[1], a[2], samples))(
            jnp.asarray([mu, var, scale]))

    return np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(seed), reps)))


@pytest.mark.parametrize(("name", "y", "mu", "var", "scale"), [
    ("probit", 1.0, -0.4, 1.2, 1.0), ("poisson", 4.0, 0.2, 0.6, 1.0),
    ("gaussian", 0.9, 0.1, 0.5, 0.6)], ids=["probit", "poisson", "gaussian"])
def test_ups_gradient_is_unbiased(name, y, mu, var, scale, x64):
    """Mean of 4000 uPS gradients (L = 1) = exact gradient within 4 Monte Carlo standard errors,
    for (mu, var) and, where the likelihood has one, its scale (Wei et al. 2021, Prop. 1)."""
    lik = likelihoods.get(name)
    exact = np.asarray(_exact_grad(lik, jnp.asarray(y), mu, var, scale))
    g = _estimates(objectives.ups_log_expected, lik, jnp.asarray(y), mu, var, scale, 1, 4000)
    se = g.std(0) / math.sqrt(len(g))
    k = 3 if lik.has_scale else 2
    assert np.all(np.abs(g.mean(0) - exact)[:k] < 4 * se[:k] + 1e-9), (g.mean(0), exact, se)


def test_bmc_bias_shrinks_with_samples(x64):
    """bMC's gradient is biased, and the bias falls roughly as 1/L (Wei et al. 2021, §4)."""
    lik = likelihoods.get("poisson")
    y, mu, var = jnp.asarray(3.0), 0.0, 1.0
    exact = np.asarray(_exact_grad(lik, y, mu, var, 1.0))[:2]
    bias, se = {}, {}
    for samples in (1, 10, 100):
        g = _estimates(objectives.bmc_log_expected, lik, y, mu, var, 1.0, samples, 6000)[:, :2]
        bias[samples] = np.abs(g.mean(0) - exact)
        se[samples] = g.std(0) / math.sqrt(len(g))
    assert np.all(bias[1] > 6 * se[1])  # clearly biased with one draw
    assert np.all(bias[10] < bias[1] / 3)
    assert np.all(bias[100] < bias[1] / 10 + 3 * se[100])


# ------------------------------------------------------------------------- objectives on SSGP


def _setup(guide="mean_field", m=4, n=30, seed=0):
    entry = load_entry("vssgp" if guide == "mean_field" else "svbssgp").with_overrides([f"m={m}"])
    spec = entry.spec(1)
    model = entry.model(spec)
    g = entry.guide(spec, model)
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.uniform(-2, 2, (n, 1)))
    y = jnp.asarray(np.sin(2 * np.asarray(x[:, 0])) + 0.2 * rng.standard_normal(n))
    svi = SVI(model, g, numpyro.optim.Adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), x, y))
    # move away from the symmetric start so that every term matters
    params = jax.tree.map(lambda v: v, params)
    if guide == "mean_field":
        params["nuisance_loc"] = jnp.asarray(rng.normal(0, 0.4, 2 * m))
        params["nuisance_scale"] = jnp.asarray(rng.uniform(0.05, 0.3, 2 * m))
    return spec, model, g, params, x, y


def _features_at_loc(params, x):
    return np.asarray(spectral.features(x, params["frequencies_loc"]), np.float64)


def test_objectives_match_float64_reference_with_theta_fixed(precision):
    """θ's guide scale → 0: each data term equals its closed form (β = 0), float32 and float64."""
    spec, model, g, params, x, y = _setup()
    params["frequencies_scale"] = jnp.full_like(params["frequencies_scale"], 1e-12)
    phi = _features_at_loc(params, x)
    mu = phi @ np.asarray(params["nuisance_loc"], np.float64)
    v = (phi**2) @ np.asarray(params["nuisance_scale"], np.float64) ** 2
    sn = float(params["noise"])
    yy = np.asarray(y, np.float64)
    refs = {
        "beta_elbo": -np.sum(stats.norm.logpdf(yy, mu, sn) - v / (2 * sn**2)),
        "dlm_log": -np.sum(stats.norm.logpdf(yy, mu, np.sqrt(v + sn**2))),
        "dlm_square": np.sum((mu - yy) ** 2),
    }
    key = jax.random.PRNGKey(3)

    @jax.jit
    def all_three(params):
        return {"beta_elbo": objectives.beta_elbo(key, params, model, g, x, y, beta=0.0),
                "dlm_log": objectives.dlm_log(key, params, model, g, x, y, beta=0.0, particles=3),
                "dlm_square": objectives.dlm_square(key, params, model, g, x, y, beta=0.0,
                                                    particles=4)}

    got = all_three(params)
    rtol = 1e-9 if precision is np.float64 else 2e-4
    for k, ref in refs.items():
        np.testing.assert_allclose(float(got[k]), ref, rtol=rtol, err_msg=k)


@pytest.mark.parametrize("guide", ["mean_field", "joint_affine"])
def test_elbo_objective_equals_trace_elbo_in_expectation(guide, x64):
    """β = 1 is NumPyro's negative ELBO on average, with a smaller variance (exact in s given θ)."""
    spec, model, g, params, x, y = _setup(guide)
    keys = jax.random.split(jax.random.PRNGKey(1), 3000)
    ref = np.asarray(jax.vmap(lambda k: Trace_ELBO().loss(k, params, model, g, x, y))(keys))
    ours = np.asarray(jax.vmap(lambda k: objectives.beta_elbo(k, params, model, g, x, y))(keys))
    se = math.sqrt(ref.var() / len(ref) + ours.var() / len(ours))
    assert abs(ref.mean() - ours.mean()) < 4 * se
    assert ours.std() < ref.std()


def test_kl_term_is_closed_form_kl_in_expectation(x64):
    spec, model, g, params, x, y = _setup()
    keys = jax.random.split(jax.random.PRNGKey(2), 4000)
    kl = np.asarray(jax.vmap(lambda k: objectives.particle(k, params, model, g, x, {}).kl)(keys))
    ell = float(params["lengthscales"][0])
    prior_theta = 1.0 / (spectral.TWO_PI * ell)
    prior_s = float(params["signal"]) / math.sqrt(spec.m)

    def kl_normal(mu, sd, p):
        return np.sum(np.log(p / sd) + (sd**2 + mu**2) / (2 * p**2) - 0.5)

    ref = kl_normal(np.asarray(params["frequencies_loc"]), np.asarray(params["frequencies_scale"]),
                    prior_theta) + kl_normal(np.asarray(params["nuisance_loc"]),
                                             np.asarray(params["nuisance_scale"]), prior_s)
    assert abs(kl.mean() - ref) < 4 * kl.std() / math.sqrt(len(kl))
    loc, tril = jnp.asarray([0.3, -0.2]), jnp.asarray([[0.5, 0.0], [0.1, 0.2]])
    np.testing.assert_allclose(
        float(objectives.gaussian_kl(loc, tril, 0.7)),
        float(dist.kl_divergence(dist.MultivariateNormal(loc, scale_tril=tril),
                                 dist.MultivariateNormal(jnp.zeros(2), 0.49 * jnp.eye(2)))), rtol=1e-10)


def test_minibatch_objective_is_unbiased(x64):
    """Rows drawn with replacement, scaled by n/b: the mean over batches is the full objective."""
    spec, model, g, params, x, y = _setup(n=40)
    params["frequencies_scale"] = jnp.full_like(params["frequencies_scale"], 1e-12)
    key = jax.random.PRNGKey(0)
    full = float(jax.jit(lambda p: objectives.dlm_log(key, p, model, g, x, y, beta=0.0))(params))

    def batch(k):
        idx = jax.random.randint(k, (8,), 0, 40)
        return objectives.dlm_log(key, params, model, g, x[idx], y[idx], beta=0.0, n_total=40)

    vals = np.asarray(jax.vmap(batch)(jax.random.split(jax.random.PRNGKey(5), 4000)))
    assert abs(vals.mean() - full) < 4 * vals.std() / math.sqrt(len(vals))


def test_dlm_log_gradients_check(x64):
    spec, model, g, params, x, y = _setup("joint_affine", m=3, n=12)
    key = jax.random.PRNGKey(4)
    small = {k: params[k] for k in ("alpha_loc", "noise")}

    @jax.jit
    def f(p):
        return objectives.dlm_log(key, {**params, **p}, model, g, x, y, beta=0.3, particles=2)

    check_grads(f, (small,), order=1, modes=["rev"], atol=1e-4, rtol=1e-4)


def test_square_loss_two_halves_unbiased_for_squared_mean(x64):
    """E[(ā − y)(b̄ − y)] = (E ŷ − y)² for independent halves, where (ŷ − y)² from one draw is not."""
    spec, model, g, params, x, y = _setup(n=10)
    keys = jax.random.split(jax.random.PRNGKey(6), 3000)
    two = np.asarray(jax.vmap(lambda k: objectives.dlm_square(k, params, model, g, x, y, beta=0.0,
                                                              particles=2))(keys))
    many = float(jax.jit(lambda p: objectives.dlm_square(jax.random.PRNGKey(7), p, model, g, x, y,
                                                         beta=0.0, particles=4000))(params))
    one = np.asarray(jax.vmap(lambda k: objectives.dlm_square(k, params, model, g, x, y, beta=0.0,
                                                              particles=1))(keys))
    assert abs(two.mean() - many) < 4 * two.std() / math.sqrt(len(two)) + 0.01 * abs(many)
    assert one.mean() - many > 4 * one.std() / math.sqrt(len(one))
