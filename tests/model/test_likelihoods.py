"""Likelihoods: closed forms and quadratures against dense float64 integration, uPS bounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy import integrate, special, stats

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import likelihoods

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


# ----------------------------------------------------------------------------- logit

LOGIT_MOMENTS = [(2.0, 0.01), (-1.0, 0.01), (0.4, 1.7), (-0.7, 3.0)]


def test_logit_predictive_mean_is_the_float64_integral_of_the_sigmoid(x64):
    """E_q[σ(f)] by Gauss-Hermite equals the adaptive float64 integral; with a small var it is
    σ(mu) moved by its second-order term ½σ''(mu)·var, not σ(mu) and not mu."""
    for mu, var in LOGIT_MOMENTS:
        got = float(likelihoods.LOGIT.mean(jnp.asarray(mu), jnp.asarray(var)))
        np.testing.assert_allclose(got, _dense(special.expit, mu, var), rtol=1e-7)
        if var < 0.1:
            s = special.expit(mu)
            second = 0.5 * var * s * (1 - s) * (1 - 2 * s)
            assert abs(got - s - second) < 1e-5 < abs(second)


def test_logit_log_expected_prob_is_the_float64_integral(x64):
    for mu, var in LOGIT_MOMENTS:
        for y in (0.0, 1.0):
            ref = np.log(_dense(lambda f, y=y: special.expit((2 * y - 1) * f), mu, var))
            got = float(likelihoods.LOGIT.log_expected_prob(jnp.asarray(y), jnp.asarray(mu),
                                                            jnp.asarray(var)))
            np.testing.assert_allclose(got, ref, rtol=1e-7)


def test_the_predictive_mean_is_the_likelihoods_own_never_the_mean_of_f(x64):
    """A probit under another name predicts P(y* = 1) = Φ(μ/√(1 + v)) (0.949, 0.207 at
    μ = (2, −1), v = 0.5), and the logit E_q[σ(f)]: y_moments reads the likelihood's mean."""
    from ssgp_ppl.model.predictive import y_moments

    class ProbitCopy(likelihoods.Probit):
        name = "probit_copy"

    mean_f, var_f = np.array([[2.0, -1.0]]), np.array([[0.5, 0.5]])
    m, v, var_y = y_moments(ProbitCopy(), mean_f, var_f)
    np.testing.assert_allclose(m, stats.norm.cdf(np.array([2.0, -1.0]) / np.sqrt(1.5)), rtol=1e-12)
    np.testing.assert_allclose(m, [0.949, 0.207], atol=5e-4)
    np.testing.assert_allclose(v, m * (1 - m), rtol=1e-12)
    m, v, _ = y_moments(likelihoods.LOGIT, mean_f, var_f)
    ref = np.array([_dense(special.expit, 2.0, 0.5), _dense(special.expit, -1.0, 0.5)])
    np.testing.assert_allclose(m, ref, rtol=1e-9)
    np.testing.assert_allclose(v, ref * (1 - ref), rtol=1e-9)


# ----------------------------------------------------------------------------- registry, catalog


def test_the_registry_holds_the_built_ins_and_register_likelihood_adds_one(tmp_path):
    import ssgp_ppl
    from ssgp_ppl.entry import load_entry

    assert list(likelihoods.LIKELIHOODS) == ["gaussian", "student_t", "probit", "logit", "poisson"]
    assert ssgp_ppl.register_likelihood is likelihoods.register

    class Shifted(likelihoods.Logit):
        name = "shifted_logit"

        def conditional_mean(self, f):
            return jax.nn.sigmoid(f - 1.0)

    lik = ssgp_ppl.register_likelihood(Shifted())
    try:
        path = tmp_path / "mine.toml"
        path.write_text('description = "x"\n[model]\nlikelihood = "shifted_logit"\n'
                        '[predictive]\nrule = "degenerate"\n')
        entry = load_entry(path)
        assert entry.lik is lik and entry.spec(1).lik is lik
        with pytest.raises(SSGPError, match="a likelihood named 'shifted_logit' is registered"):
            ssgp_ppl.register_likelihood(Shifted())
    finally:
        del likelihoods.LIKELIHOODS["shifted_logit"]
    with pytest.raises(SSGPError, match=r"register_likelihood\(\) takes a Likelihood instance"):
        likelihoods.register(likelihoods.Logit)


def test_an_unknown_likelihood_names_file_key_and_the_known_ones(tmp_path):
    from ssgp_ppl.entry import load_entry

    path = tmp_path / "mine.toml"
    path.write_text('description = "x"\n[model]\nlikelihood = "cauchit"\n')
    with pytest.raises(SSGPError, match=r"mine.toml: model.likelihood: 'cauchit' is not one of "
                                        r"gaussian, student_t, probit, logit, poisson$"):
        load_entry(path)


def test_student_t_reads_model_df():
    t7 = likelihoods.get("student_t", 7)
    assert isinstance(t7, likelihoods.StudentT) and t7.df == 7.0
    assert t7 is likelihoods.student_t(7.0)  # one object per df: compiled functions are reused
    assert likelihoods.get("student_t") is likelihoods.STUDENT_T
    np.testing.assert_allclose(float(t7.noise_variance(2.0)), 4.0 * 7 / 5)
    with pytest.raises(SSGPError, match=r"f.toml: model.df: the Student-t predictive needs df > 2"):
        t7.check_settings({"df": 2.0}, "f.toml")


# ----------------------------------------------------------------------------- data and scores


def test_target_checks_name_the_likelihood_and_the_problem():
    with pytest.raises(SSGPError, match=r"^y: the probit likelihood needs binary targets \(0 or "
                                        r"1\); 1 of 3 are not \(e.g. 0.5\)$"):
        likelihoods.PROBIT.check_target(np.array([0.0, 1.0, 0.5]))
    with pytest.raises(SSGPError, match=r"test targets: the poisson likelihood needs non-negative "
                                        r"integer counts; 2 of 3 are not \(e.g. -1\)"):
        likelihoods.POISSON.check_target(np.array([-1.0, 2.0, 2.5]), "test targets")
    with pytest.raises(SSGPError, match="the gaussian likelihood needs finite real numbers"):
        likelihoods.GAUSSIAN.check_target(np.array([0.3, np.nan]))
    likelihoods.LOGIT.check_target(np.array([0.0, 1.0]))
    likelihoods.POISSON.check_target(np.array([0.0, 4.0]))


def test_a_fit_refuses_targets_its_likelihood_cannot_take():
    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.pipeline import fit

    data = load("pendulum", split=0)  # standardised, continuous
    with pytest.raises(SSGPError, match=r"pendulum: training targets: the probit likelihood needs "
                                        r"binary targets \(0 or 1\); 315 of 315 are not"):
        fit(load_entry("ssgp_probit"), data, progress=False)


def test_task_metrics_hand_examples():
    y, p = np.array([0.0, 1.0, 1.0, 0.0]), np.array([0.2, 0.7, 0.4, 0.5])
    got = likelihoods.LOGIT.task_metrics(y, p, None)
    assert got == pytest.approx({"error_rate": 0.25, "brier": (0.04 + 0.09 + 0.36 + 0.25) / 4})
    y, yhat = np.array([0.0, 4.0, 10.0]), np.array([0.5, 3.0, 12.0])
    assert likelihoods.POISSON.task_metrics(y, yhat, None) == pytest.approx(
        {"mre": (0.5 + 0.25 + 0.2) / 3})
    from ssgp_ppl.diagnostics.metrics import regression_metrics

    y, mean, var = np.array([0.1, -0.4, 2.0]), np.array([0.0, 0.0, 1.5]), np.array([0.3, 0.2, 1.1])
    assert likelihoods.STUDENT_T.task_metrics(y, mean, var) == regression_metrics(y, mean, var)
