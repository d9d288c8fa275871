"""Tests for ssgp_ppl.model.ssgp and its predictive rules (ssgp_ppl.model.predictive): the SSGP marginal
likelihood and predictive against dense float64 GP
references (Hoang et al. 2017, eqs. 2-3; Lázaro-Gredilla et al. 2010), gradients, Monte Carlo moments, the
NumPyro model's sites for every parameterisation / nuisance / hyperparameter role, and minibatch
scaling.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from numpyro import handlers
from numpyro.infer.util import log_density
from scipy import stats

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import spectral
from ssgp_ppl.model.densities import DENSITIES
from ssgp_ppl.model.predictive import degenerate_predictive, marginal_predictive, predict_draws
from ssgp_ppl.model.ssgp import (
    Hyper,
    SSGPMarginal,
    SSGPSpec,
    frequency_prior,
    marginal_log_likelihood,
    ssgp_model,
)

SIGNAL, NOISE = 1.3, 0.4


def _freq(m, d, lam=0.5, seed=0):
    """Frequencies of the scaled parameterisation r = s λ / 2π (Tan et al. 2016, eq. 4), numpy float64."""
    pts = np.random.default_rng(seed).standard_normal((m, d))
    return pts * lam / (2 * np.pi)


def _phi(x, freq):
    """Dense float64 design matrix (n, 2m), cos/sin interleaved (Hoang et al. 2017, eq. 2)."""
    proj = 2 * np.pi * np.asarray(x, np.float64) @ np.asarray(freq, np.float64).T
    out = np.empty((proj.shape[0], 2 * proj.shape[1]))
    out[:, 0::2], out[:, 1::2] = np.cos(proj), np.sin(proj)
    return out


def _ssgp_cov(phi, signal, noise):
    m = phi.shape[1] // 2
    return signal**2 / m * phi @ phi.T + noise**2 * np.eye(phi.shape[0])


# --------------------------------------------------------------------------- marginal likelihood


@pytest.mark.parametrize("seed", [0, 1], ids=["freq0", "freq1"])
def test_marginal_log_likelihood_matches_dense_gaussian(precision, pendulum, seed):
    x, y = pendulum.x_train[:100], pendulum.y_train[:100]
    freq = _freq(10, x.shape[1], lam=0.5, seed=seed)
    want = stats.multivariate_normal.logpdf(y, np.zeros(100), _ssgp_cov(_phi(x, freq), SIGNAL, NOISE))
    phi = spectral.features(x, freq)
    got = marginal_log_likelihood(phi, jnp.asarray(y), SIGNAL, NOISE)
    assert got.dtype == precision
    assert float(got) == pytest.approx(want, rel={np.float32: 1e-4, np.float64: 1e-10}[precision])


def test_marginal_log_likelihood_more_features_than_points(x64, pendulum):
    """2m > n: the Woodbury form must still equal the dense log density (A stays full rank)."""
    x, y = pendulum.x_train[:6], pendulum.y_train[:6]
    freq = _freq(8, x.shape[1], lam=0.5, seed=3)
    want = stats.multivariate_normal.logpdf(y, np.zeros(6), _ssgp_cov(_phi(x, freq), 0.9, 0.2))
    got = marginal_log_likelihood(spectral.features(x, freq), jnp.asarray(y), 0.9, 0.2)
    assert float(got) == pytest.approx(want, rel=1e-10)


def test_marginal_log_likelihood_gradients(x64, pendulum):
    x, y = jnp.asarray(pendulum.x_train[:12]), jnp.asarray(pendulum.y_train[:12])
    freq = jnp.asarray(_freq(3, x.shape[1], lam=0.5, seed=2))

    @jax.jit
    def f(fr, signal, noise):
        return marginal_log_likelihood(spectral.features(x, fr), y, signal, noise)

    args = (freq, jnp.asarray(SIGNAL), jnp.asarray(NOISE))
    check_grads(f, args, order=1, modes=["rev"], eps=1e-6)
    check_grads(f, args, order=2, modes=["fwd"], eps=1e-6)  # forward-over-forward second order
    # and the gradient is not trivially zero in any argument
    grads = jax.grad(f, argnums=(0, 1, 2))(freq, SIGNAL, NOISE)
    assert all(float(jnp.max(jnp.abs(g))) > 1e-3 for g in grads)


def test_ssgp_marginal_log_prob_is_marginal_log_likelihood(x64, pendulum):
    x, y = pendulum.x_train[:100], jnp.asarray(pendulum.y_train[:100])
    phi = spectral.features(x, _freq(10, x.shape[1]))
    d = SSGPMarginal(phi, SIGNAL, NOISE)
    assert d.event_shape == (100,) and d.batch_shape == ()
    assert float(d.log_prob(y)) == float(marginal_log_likelihood(phi, y, SIGNAL, NOISE))


def test_ssgp_marginal_sample_covariance(x64, pendulum):
    """Empirical mean/covariance of 200k draws vs 0 and σ_s²/m ΦΦᵀ + σ_n² I within 4.5 s.e."""
    x = pendulum.x_train[:5]
    freq = _freq(3, x.shape[1], lam=0.5, seed=4)
    phi = spectral.features(x, freq)
    n_draws = 200_000
    draws = np.asarray(SSGPMarginal(phi, SIGNAL, NOISE).sample(jax.random.PRNGKey(0), (n_draws,)))
    assert draws.shape == (n_draws, 5)
    cov = _ssgp_cov(_phi(x, freq), SIGNAL, NOISE)
    var = np.diag(cov)
    mean_se = np.sqrt(var / n_draws)
    assert np.all(np.abs(draws.mean(axis=0)) < 4.5 * mean_se)
    emp = draws.T @ draws / n_draws  # known zero mean
    cov_se = np.sqrt((np.outer(var, var) + cov**2) / n_draws)  # s.e. of a Gaussian cross-moment
    assert np.all(np.abs(emp - cov) < 4.5 * cov_se), (emp - cov) / cov_se


# --------------------------------------------------------------------------- predictive rules


def _dense_gp_predictive(x, y, xs, freq, signal, noise):
    """GP posterior of f* under the SSGP kernel, dense float64: K*ᵀ(K+σ²I)⁻¹y, k** − K*ᵀ(K+σ²I)⁻¹K*."""
    phi, phis = _phi(x, freq), _phi(xs, freq)
    m = freq.shape[0]
    k = signal**2 / m * phi @ phi.T
    ks = signal**2 / m * phi @ phis.T
    kss = signal**2 / m * np.sum(phis**2, axis=1)
    c = np.linalg.cholesky(k + noise**2 * np.eye(len(y)))
    alpha = np.linalg.solve(c.T, np.linalg.solve(c, y))
    v = np.linalg.solve(c, ks)
    return ks.T @ alpha, kss - np.sum(v**2, axis=0)


def test_marginal_predictive_matches_dense_gp(precision, pendulum):
    x, y = pendulum.x_train[:100], pendulum.y_train[:100]
    xs = pendulum.x_test[:15]
    freq = _freq(10, x.shape[1], lam=0.5, seed=6)
    want_mean, want_var = _dense_gp_predictive(x, y, xs, freq, SIGNAL, 0.35)
    mean, var = marginal_predictive(x, jnp.asarray(y), xs, freq, SIGNAL, 0.35)
    assert mean.shape == var.shape == (15,)
    assert mean.dtype == var.dtype == precision
    rtol = {np.float32: 1e-4, np.float64: 1e-8}[precision]
    np.testing.assert_allclose(mean, want_mean, rtol=rtol, atol=rtol * np.max(np.abs(want_mean)))
    np.testing.assert_allclose(var, want_var, rtol=rtol)
    assert np.all(np.asarray(var) > 0)


def test_marginal_predictive_more_features_than_points(x64, pendulum):
    x, y, xs = pendulum.x_train[:6], pendulum.y_train[:6], pendulum.x_test[:15]
    freq = _freq(8, x.shape[1], lam=0.5, seed=3)
    want_mean, want_var = _dense_gp_predictive(x, y, xs, freq, 0.9, 0.2)
    mean, var = marginal_predictive(x, jnp.asarray(y), xs, freq, 0.9, 0.2)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, want_var, rtol=1e-8)


def test_degenerate_predictive_is_features_times_nuisance(precision, pendulum):
    xs = pendulum.x_test[:7]
    freq = _freq(4, xs.shape[1])
    s = np.random.default_rng(9).standard_normal(8)
    mean, var = degenerate_predictive(xs, freq, s)
    np.testing.assert_allclose(
        mean, _phi(xs, freq) @ s, atol={np.float32: 1e-5, np.float64: 1e-12}[precision]
    )
    assert mean.dtype == precision
    np.testing.assert_array_equal(var, np.zeros(7))


def test_predict_draws_vectorises_both_rules(x64, pendulum):
    x, y, xs = pendulum.x_train[:100], jnp.asarray(pendulum.y_train[:100]), pendulum.x_test[:15]
    d = x.shape[1]
    sites = {
        "frequencies": jnp.stack([jnp.asarray(_freq(10, d, seed=k)) for k in range(3)]),
        "signal": jnp.array([0.8, 1.0, 1.5]),
        "noise": jnp.array([0.2, 0.3, 0.5]),
        "nuisance": jnp.asarray(np.random.default_rng(1).standard_normal((3, 20))),
    }
    run = jax.jit(predict_draws, static_argnums=0)  # eager vmap would compile op by op
    mean, var = run("marginal", sites, x, y, xs)
    assert mean.shape == var.shape == (3, 15)
    for k in range(3):
        want_mean, want_var = _dense_gp_predictive(
            x,
            np.asarray(y),
            xs,
            np.asarray(sites["frequencies"][k]),
            float(sites["signal"][k]),
            float(sites["noise"][k]),
        )
        np.testing.assert_allclose(mean[k], want_mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(var[k], want_var, rtol=1e-8)
    mean, var = run("degenerate", sites, x, y, xs)
    for k in range(3):
        want = _phi(xs, sites["frequencies"][k]) @ np.asarray(sites["nuisance"][k])
        np.testing.assert_allclose(mean[k], want, atol=1e-12)
    with pytest.raises(SSGPError, match="nuisance"):
        predict_draws("degenerate", {k: v for k, v in sites.items() if k != "nuisance"}, x, y, xs)
    with pytest.raises(SSGPError, match="unknown predictive rule"):
        predict_draws("gamma", sites, x, y, xs)


# --------------------------------------------------------------------------- priors


@pytest.mark.parametrize("name", list(DENSITIES))
def test_frequency_prior_is_spectral_density(x64, name):
    """log p(θ | ℓ) = Σ_i log p(r_i) with p the spectral density of Hoang et al. 2017, eq. 1 (same
    convention); each row's term counts once (a row changed changes only its own term)."""
    density = DENSITIES[name]
    ell = jnp.array([0.7, 1.3, 0.4])
    r = jnp.asarray(np.random.default_rng(2).normal(scale=0.4, size=(5, 3)))
    prior = frequency_prior(ell, 5, density)
    assert prior.event_shape == (5, 3) and prior.batch_shape == ()
    rows = np.asarray(density.log_density(r, ell))
    assert float(prior.log_prob(r)) == pytest.approx(rows.sum(), rel=1e-12)
    r2 = r.at[3].set(2.0 * r[3])
    change = float(prior.log_prob(r2) - prior.log_prob(r))
    assert change == pytest.approx(float(density.log_density(r2[3], ell)) - rows[3], rel=1e-10)


@pytest.mark.parametrize(
    "hyper,shape,want",
    [
        (Hyper("prior", dist="half_cauchy", scale=2.0), (), lambda v: stats.halfcauchy.logpdf(v, scale=2.0)),
        (Hyper("prior", dist="half_normal", scale=0.5), (), lambda v: stats.halfnorm.logpdf(v, scale=0.5)),
        (
            Hyper("prior", dist="lognormal", loc=0.3, scale=0.7),
            (3,),
            lambda v: stats.lognorm.logpdf(v, 0.7, scale=math.exp(0.3)).sum(),
        ),
        (
            Hyper("prior", dist="normal", loc=1.0, scale=3.0),
            (3,),
            lambda v: stats.norm.logpdf(v, 1.0, 3.0).sum(),
        ),
    ],
    ids=["half_cauchy", "half_normal", "lognormal", "normal"],
)
def test_hyper_priors(x64, hyper, shape, want):
    prior = hyper.prior(shape)
    assert prior.event_shape == shape and prior.batch_shape == ()
    v = np.full(shape, 0.8) if shape else np.asarray(0.8)
    assert float(prior.log_prob(jnp.asarray(v))) == pytest.approx(want(v), rel=1e-12)


def test_unknown_hyper_prior_raises():
    with pytest.raises(SSGPError, match="unknown prior"):
        Hyper("prior", dist="gamma").prior()


# --------------------------------------------------------------------------- the NumPyro model

M, N_ROWS = 3, 12
PARAMETERIZATIONS = {
    "free-prior": ("free", "prior"),
    "free-learned": ("free", "learned"),
    "scaled": ("scaled", "prior"),
}
HYPER_VALUES = {"noise": 0.3, "signal": 1.2, "lengthscales": 1.5, "inverse_lengthscales": 0.7}


def _spec(parameterization, nuisance, role, d=9, density="se", m=M):
    pts = DENSITIES[density].standard_points(jax.random.PRNGKey(0), m, d)
    par, freq = PARAMETERIZATIONS[parameterization]
    hypers = {k: Hyper(role, v, dist="half_normal") for k, v in HYPER_VALUES.items()}
    return SSGPSpec(
        m=m,
        d=d,
        spectral_points=pts,
        density=density,
        parameterization=par,
        frequencies=freq,
        nuisance=nuisance,
        **hypers,
    )


def _trace(spec, x, y, seed=0, **kw):
    return handlers.trace(handlers.seed(ssgp_model, seed)).get_trace(x, y, spec=spec, **kw)


@pytest.mark.parametrize("role", ["learned", "fixed", "prior"])
@pytest.mark.parametrize("nuisance", ["sampled", "marginalized"])
@pytest.mark.parametrize("parameterization", list(PARAMETERIZATIONS))
def test_model_sites(x64, pendulum, parameterization, nuisance, role):
    x, y = jnp.asarray(pendulum.x_train[:N_ROWS]), jnp.asarray(pendulum.y_train[:N_ROWS])
    d = x.shape[1]
    spec = _spec(parameterization, nuisance, role)
    tr = _trace(spec, x, y)
    hyper_type = {"learned": "param", "prior": "sample", "fixed": None}[role]

    expected = {  # site -> (type, shape); None type = absent
        "noise": (hyper_type, ()),
        "signal": (hyper_type, ()),
        "frequencies": (
            {"free-prior": "sample", "free-learned": "param", "scaled": "deterministic"}[parameterization],
            (M, d),
        ),
        "lengthscales": (hyper_type if parameterization == "free-prior" else None, (d,)),
        "inverse_lengthscales": (hyper_type if parameterization == "scaled" else None, (d,)),
        "nuisance": ("sample" if nuisance == "sampled" else None, (2 * M,)),
        "f": ("deterministic" if nuisance == "sampled" else None, (N_ROWS,)),
        "y": ("sample", (N_ROWS,)),
    }
    for name, (kind, shape) in expected.items():
        if kind is None:
            assert name not in tr, name
            continue
        assert tr[name]["type"] == kind, name
        assert jnp.shape(tr[name]["value"]) == shape, name
    assert set(tr) - {"data"} == {k for k, (kind, _) in expected.items() if kind is not None}
    assert tr["y"]["is_observed"]
    np.testing.assert_array_equal(tr["y"]["value"], y)

    latent = {k for k, v in tr.items() if v["type"] == "sample" and not v["is_observed"]}
    params = {k for k, v in tr.items() if v["type"] == "param"}
    assert latent == set(spec.latent_sites())
    assert params == set(spec.learned_sites())

    # values: fixed/learned hypers enter at their value; frequencies follow the parameterisation
    def hyper(name):
        return tr[name]["value"] if name in tr else HYPER_VALUES[name]

    if role != "prior":
        for name in ("noise", "signal"):
            assert float(hyper(name)) == HYPER_VALUES[name]
    freq = tr["frequencies"]["value"]
    pts = np.asarray(spec.spectral_points)
    if parameterization == "scaled":
        lam = np.broadcast_to(hyper("inverse_lengthscales"), (d,))
        np.testing.assert_allclose(freq, pts * lam / (2 * np.pi), rtol=1e-12)
    elif parameterization == "free-learned":
        np.testing.assert_allclose(freq, pts / (2 * np.pi * HYPER_VALUES["lengthscales"]), rtol=1e-12)
    else:  # prior p(θ | ℓ) = Π p(r_i) at the traced (or fixed) lengthscales
        ell = jnp.broadcast_to(jnp.asarray(hyper("lengthscales")), (d,))
        want = stats.norm.logpdf(np.asarray(freq), 0.0, 1.0 / (2 * np.pi * np.asarray(ell))).sum()
        assert float(tr["frequencies"]["fn"].log_prob(freq)) == pytest.approx(want, rel=1e-10)
    if nuisance == "sampled":
        s = tr["nuisance"]["value"]
        sd = float(hyper("signal")) / math.sqrt(M)
        assert float(tr["nuisance"]["fn"].log_prob(s)) == pytest.approx(
            stats.norm.logpdf(np.asarray(s), 0.0, sd).sum(), rel=1e-12
        )
        np.testing.assert_allclose(tr["f"]["value"], _phi(x, freq) @ np.asarray(s), atol=1e-12)
        ll = stats.norm.logpdf(np.asarray(y), np.asarray(tr["f"]["value"]), float(hyper("noise"))).sum()
    else:
        cov = _ssgp_cov(_phi(x, freq), float(hyper("signal")), float(hyper("noise")))
        ll = stats.multivariate_normal.logpdf(np.asarray(y), np.zeros(N_ROWS), cov)
    assert float(jnp.sum(tr["y"]["fn"].log_prob(y))) == pytest.approx(ll, rel=1e-10)


@pytest.mark.parametrize("name", list(DENSITIES))
def test_model_frequency_prior_site(x64, pendulum, name):
    x, y = jnp.asarray(pendulum.x_train[:N_ROWS]), jnp.asarray(pendulum.y_train[:N_ROWS])
    spec = SSGPSpec(
        m=M,
        d=9,
        spectral_points=jnp.zeros((M, 9)),
        density=DENSITIES[name],  # points unused here
        **{k: Hyper("fixed", v) for k, v in HYPER_VALUES.items()},
    )
    freq = jnp.asarray(_freq(M, 9, seed=3))
    tr = handlers.trace(
        handlers.substitute(handlers.seed(ssgp_model, 0), data={"frequencies": freq})
    ).get_trace(x, y, spec=spec)
    assert tr["frequencies"]["fn"].event_shape == (M, 9)
    want = float(DENSITIES[name].log_density(freq, jnp.full(9, 1.5)).sum())
    assert float(tr["frequencies"]["fn"].log_prob(freq)) == pytest.approx(want, rel=1e-10)


def test_sampled_model_log_joint(precision, pendulum):
    """log p(y, θ, s) = Σ log N(r | 0, 1/2πℓ) + Σ log N(s | 0, σ_s/√m) + Σ log N(y | Φs, σ_n), both widths."""
    x, y, spec, latents = _sampled_setup(pendulum)
    x, y = x[:50], y[:50]
    latents = {k: jnp.asarray(np.asarray(v), precision) for k, v in latents.items()}
    got = _log_joint(spec, x, y, latents)
    assert got.dtype == precision
    freq, s = np.asarray(latents["frequencies"], np.float64), np.asarray(latents["nuisance"], np.float64)
    h = HYPER_VALUES
    want = (
        stats.norm.logpdf(freq, 0.0, 1.0 / (2 * np.pi * h["lengthscales"])).sum()
        + stats.norm.logpdf(s, 0.0, h["signal"] / math.sqrt(5)).sum()
        + stats.norm.logpdf(np.asarray(y), _phi(x, freq) @ s, h["noise"]).sum()
    )
    assert float(got) == pytest.approx(want, rel={np.float32: 1e-5, np.float64: 1e-12}[precision])


def test_marginalized_model_log_density_is_marginal_log_likelihood(x64, pendulum):
    """All hypers fixed, θ learned at its initial value: log joint = log p(y | θ, σ_s, σ_n)."""
    x, y = jnp.asarray(pendulum.x_train[:N_ROWS]), jnp.asarray(pendulum.y_train[:N_ROWS])
    spec = _spec("free-learned", "marginalized", "fixed")
    freq = np.asarray(spec.spectral_points) / (2 * np.pi * HYPER_VALUES["lengthscales"])
    lj, _ = log_density(ssgp_model, (x, y), {"spec": spec}, {})
    want = stats.multivariate_normal.logpdf(
        np.asarray(y),
        np.zeros(N_ROWS),
        _ssgp_cov(_phi(x, freq), HYPER_VALUES["signal"], HYPER_VALUES["noise"]),
    )
    assert float(lj) == pytest.approx(want, rel=1e-10)
    # n_total equal to the batch size is allowed and changes nothing
    lj_full, _ = log_density(ssgp_model, (x, y), {"spec": spec, "n_total": N_ROWS}, {})
    assert float(lj_full) == float(lj)


# --------------------------------------------------------------------------- minibatches


def _log_joint(spec, x, y, latents, n_total=None):
    """log p(y, latents) of the model, jitted (one XLA compile is cheaper than eager op-by-op)."""
    kw = {"spec": spec} if n_total is None else {"spec": spec, "n_total": n_total}
    return jax.jit(lambda a, b, p: log_density(ssgp_model, (a, b), kw, p)[0])(x, y, latents)


def _sampled_setup(pendulum):
    x, y = jnp.asarray(pendulum.x_train), jnp.asarray(pendulum.y_train)
    spec = _spec("free-prior", "sampled", "fixed", m=5)
    rng = np.random.default_rng(2)  # a draw from the prior, made in numpy
    latents = {
        "frequencies": jnp.asarray(_freq(5, 9, lam=1.0 / HYPER_VALUES["lengthscales"], seed=2)),
        "nuisance": jnp.asarray(rng.standard_normal(10) * HYPER_VALUES["signal"] / math.sqrt(5)),
    }
    return x, y, spec, latents


def test_minibatch_likelihood_scaled_by_n_over_b(x64, pendulum):
    x, y, spec, latents = _sampled_setup(pendulum)
    n_total, idx = x.shape[0], np.array([3, 17, 17, 40, 101, 200, 314])
    xb, yb = x[idx], y[idx]
    scaled = _log_joint(spec, xb, yb, latents, n_total)
    plain = _log_joint(spec, xb, yb, latents)
    fb = _phi(xb, latents["frequencies"]) @ np.asarray(latents["nuisance"])
    batch_ll = stats.norm.logpdf(np.asarray(yb), fb, HYPER_VALUES["noise"]).sum()
    b = len(idx)
    assert float(scaled - plain) == pytest.approx((n_total / b - 1.0) * batch_ll, rel=1e-10)


def test_minibatch_log_joint_is_unbiased(x64, pendulum):
    """E over with-replacement batches of the scaled log joint = full-data log joint (4 s.e.)."""
    x, y, spec, latents = _sampled_setup(pendulum)
    n_total, b, draws = x.shape[0], 10, 4000
    full = _log_joint(spec, x, y, latents)
    idx = jax.random.randint(jax.random.PRNGKey(5), (draws, b), 0, n_total)

    def batch_log_joint(i):
        return log_density(ssgp_model, (x[i], y[i]), {"spec": spec, "n_total": n_total}, latents)[0]

    vals = np.asarray(jax.jit(jax.vmap(batch_log_joint))(idx))
    se = vals.std(ddof=1) / math.sqrt(draws)
    assert abs(vals.mean() - float(full)) < 4 * se, (vals.mean(), float(full), se)
    # the scaling matters at this precision: the unscaled batch log joint is far off
    plain = float(_log_joint(spec, x[idx[0]], y[idx[0]], latents))
    assert abs(plain - float(full)) > 20 * se


# --------------------------------------------------------------------------- bad input


def test_model_rejects_wrong_input_width(pendulum):
    x, y = jnp.asarray(pendulum.x_train[:N_ROWS, :8]), jnp.asarray(pendulum.y_train[:N_ROWS])
    spec = _spec("free-prior", "sampled", "learned")
    with pytest.raises(SSGPError, match="8 columns.*built for 9"):
        _trace(spec, x, y)


def test_marginalized_model_on_a_minibatch_is_the_batch_marginal_scaled_by_n_over_b(x64, pendulum):
    """s integrated out: a batch of b different rows adds (n/b) log N(y_B | 0, σ_s²/m Φ_BΦ_Bᵀ +
    σ_n² I) (the minibatch marginal likelihood), against the dense float64 density."""
    x, y = jnp.asarray(pendulum.x_train), jnp.asarray(pendulum.y_train)
    spec = _spec("free-prior", "marginalized", "fixed", m=5)
    freq = _freq(5, 9, lam=1.0 / HYPER_VALUES["lengthscales"], seed=2)
    latents = {"frequencies": jnp.asarray(freq)}
    n_total, idx = x.shape[0], np.array([3, 17, 40, 101, 200, 314])
    xb, yb = x[idx], y[idx]
    scaled = _log_joint(spec, xb, yb, latents, n_total)
    plain = _log_joint(spec, xb, yb, latents)
    cov = _ssgp_cov(_phi(xb, freq), HYPER_VALUES["signal"], HYPER_VALUES["noise"])
    batch_ll = stats.multivariate_normal.logpdf(np.asarray(yb), np.zeros(len(idx)), cov)
    assert float(scaled - plain) == pytest.approx((n_total / len(idx) - 1.0) * batch_ll, rel=1e-10)


def test_marginalized_model_rejects_partition_masks(pendulum):
    x, y = jnp.asarray(pendulum.x_train[:N_ROWS]), jnp.asarray(pendulum.y_train[:N_ROWS])
    spec = _spec("scaled", "marginalized", "learned")
    with pytest.raises(SSGPError, match="no partitions"):
        _trace(spec, x, y, obs_mask=jnp.ones(N_ROWS, bool), obs_scale=2.0)


def test_numpyro_factor_works_when_arviz_base_was_imported_before_numpyro():
    # arviz_base loads numpyro lazily; imported first it leaves numpyro's packages without their
    # submodule attributes, and numpyro.factor (the model's log-det terms) raised AttributeError
    import subprocess
    import sys

    code = ("import arviz_base\n"
            "import numpyro.distributions\n"
            "import numpyro\n"
            "from numpyro import handlers\n"
            "from ssgp_ppl.model import ssgp\n"
            "tr = handlers.trace(lambda: numpyro.factor('a', 1.5)).get_trace()\n"
            "print(float(tr['a']['fn'].log_prob(0.0)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.split()[-1]) == 1.5
