"""Tests for ssgp_ppl.spectral: densities, exact kernels, spectral points and the feature map.

References are independent of the code under test: scipy quadrature of the densities and of the
Fourier integral k(τ) = ∫ p(r) cos(2π rτ) dr (Hoang et al. 2017, eq. 1), scipy.stats densities, numpy float64
feature maps, and Monte Carlo means within their standard errors.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from ssgp_ppl import spectral
from ssgp_ppl.errors import SSGPError

DENSITIES = ["se", "matern12", "matern32", "matern52"]
NU = {"se": None, "matern12": 0.5, "matern32": 1.5, "matern52": 2.5}
ELL_1D = 0.7
N_POINTS = 6 * 1024  # one shape for all large spectral draws (d = 9): jax compiles the sampler once


def _density_1d(density, ell=ELL_1D):
    return lambda r: float(spectral.spectral_density(jnp.array([r]), jnp.array([ell]), density))


def _ard_lengthscales(d):
    return np.linspace(1.5, 3.0, d)


# --------------------------------------------------------------------------- spectral densities


@pytest.mark.parametrize("density", DENSITIES)
def test_density_integrates_to_one_in_1d(x64, density):
    total, err = integrate.quad(_density_1d(density), -np.inf, np.inf, limit=200)
    assert err < 1e-7
    assert total == pytest.approx(1.0, abs=1e-8)


@pytest.mark.parametrize("d", [2, 3], ids=["d2", "d3"])
@pytest.mark.parametrize("density", DENSITIES)
def test_density_integrates_to_one_in_higher_d(x64, density, d):
    """∫ p(r) dr over R^d by the radial integral in whitened coordinates u = r ⊙ ℓ, ARD ℓ."""
    ell = np.array([0.7, 1.3, 0.4][:d])
    sphere = {2: 2 * math.pi, 3: 4 * math.pi}[d]  # surface area of the unit sphere in R^d

    def radial(rho):
        r = np.zeros(d)
        r[0] = rho / ell[0]  # whitened point (rho, 0, ...) mapped back to frequencies
        return sphere * rho ** (d - 1) * float(spectral.spectral_density(jnp.asarray(r), ell, density))

    total, _ = integrate.quad(radial, 0.0, np.inf, limit=200)
    assert total / np.prod(ell) == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("density", DENSITIES)
def test_density_matches_scipy_pointwise(x64, density):
    """SE: product of N(0, 1/(4π²ℓ²)); Matérn ν: ω = 2πr ~ t_{2ν}(0, diag(1/ℓ²)), times (2π)^d."""
    rng = np.random.default_rng(0)
    d = 3
    ell = np.array([0.7, 1.3, 0.4])
    r = rng.normal(scale=0.5, size=(20, d))
    got = np.asarray(spectral.spectral_density(r, ell, density))
    nu = NU[density]
    if nu is None:
        want = np.prod(stats.norm.pdf(r, 0.0, 1.0 / (2 * np.pi * ell)), axis=-1)
    else:
        want = (2 * np.pi) ** d * stats.multivariate_t.pdf(
            2 * np.pi * r, loc=np.zeros(d), shape=np.diag(1.0 / ell**2), df=2 * nu
        )
    np.testing.assert_allclose(got, want, rtol=1e-10)


# Regression: a scalar (isotropic) lengthscale must count d times in the log-Jacobian (it once
# counted once, making p(r) off by a factor ℓ^(d-1)).
@pytest.mark.parametrize("density", DENSITIES)
def test_density_scalar_lengthscale_matches_ard_vector(x64, density):
    r = np.array([[0.1, 0.2], [-0.3, 0.05]])
    iso = spectral.spectral_density(r, 0.7, density)
    ard = spectral.spectral_density(r, np.full(2, 0.7), density)
    np.testing.assert_allclose(iso, ard, rtol=1e-12)


@pytest.mark.parametrize("density", DENSITIES)
def test_kernel_is_fourier_transform_of_density(x64, density):
    """k(τ) = ∫ p(r) cos(2π r τ) dr (d = 1): ties the density and kernel conventions together."""
    p = _density_1d(density)
    for tau in [0.0, 0.3, 1.0, 2.5]:
        if tau == 0.0:
            want = integrate.quad(p, -np.inf, np.inf, limit=200)[0]
        else:  # even integrand: 2 ∫_0^∞ p(r) cos(2π τ r) dr by QAWF
            want = 2.0 * integrate.quad(p, 0.0, np.inf, weight="cos", wvar=2 * np.pi * tau, limlst=100)[0]
        got = float(spectral.kernel(jnp.array([tau]), jnp.array([ELL_1D]), density))
        assert got == pytest.approx(want, rel=1e-7, abs=1e-9), tau


@pytest.mark.parametrize("density", DENSITIES)
def test_kernel_signal_and_ard(x64, density):
    """k(τ; ℓ, σ) = σ² k_unit(|τ/ℓ|): ARD scaling and the signal variance, at the analytic value."""
    tau = np.array([0.3, -0.8, 1.1])
    ell = np.array([0.5, 2.0, 1.0])
    rho = np.sqrt(np.sum((tau / ell) ** 2))
    unit = {
        "se": np.exp(-0.5 * rho**2),
        "matern12": np.exp(-rho),
        "matern32": (1 + np.sqrt(3) * rho) * np.exp(-np.sqrt(3) * rho),
        "matern52": (1 + np.sqrt(5) * rho + 5 * rho**2 / 3) * np.exp(-np.sqrt(5) * rho),
    }[density]
    got = float(spectral.kernel(tau, ell, density, signal=1.7))
    assert got == pytest.approx(1.7**2 * unit, rel=1e-12)
    assert float(spectral.kernel(np.zeros(3), ell, density, signal=1.7)) == pytest.approx(1.7**2, rel=1e-14)


# --------------------------------------------------------------------------- spectral points


@pytest.mark.parametrize("density", DENSITIES)
def test_standard_spectral_points_distribution(x64, density):
    """Coordinates ~ N(0,1) or t_{2ν}; the squared radius |s|²/d ~ χ²_d/d or F(d, 2ν) (shared χ²)."""
    d = 9
    s = np.asarray(spectral.standard_spectral_points(jax.random.PRNGKey(11), N_POINTS, d, density))
    assert s.shape == (N_POINTS, d)
    assert s.dtype == np.float64
    nu = NU[density]
    coord = stats.norm() if nu is None else stats.t(df=2 * nu)
    radius = stats.chi2(d, scale=1.0 / d) if nu is None else stats.f(d, 2 * nu)
    assert stats.kstest(s[:, 0], coord.cdf).pvalue > 1e-3
    assert stats.kstest(np.sum(s**2, axis=1) / d, radius.cdf).pvalue > 1e-3


def test_standard_spectral_points_are_seeded_and_dtyped(precision):
    a = spectral.standard_spectral_points(jax.random.PRNGKey(3), N_POINTS, 9, "matern32")
    b = spectral.standard_spectral_points(jax.random.PRNGKey(3), N_POINTS, 9, "matern32")
    c = spectral.standard_spectral_points(jax.random.PRNGKey(4), N_POINTS, 9, "matern32")
    assert a.dtype == precision
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_frequencies_from_spectral_points():
    s = np.array([[1.0, -2.0], [0.5, 3.0]])
    lam = np.array([2.0, 0.25])
    np.testing.assert_allclose(
        spectral.frequencies_from_spectral_points(s, lam), s * lam / (2 * np.pi), rtol=1e-6
    )


@pytest.mark.parametrize("density", DENSITIES)
def test_kernel_estimate_converges_like_inverse_sqrt_m(x64, pendulum, density):
    """max |k̂ − k| over 30×30 pendulum pairs shrinks ~ m^{-1/2} (Hoang et al. 2017, eq. 2;
    Tan et al. 2016, eq. 4)."""
    x = pendulum.x_train[:30]
    d = x.shape[1]
    ell = _ard_lengthscales(d)
    exact = np.asarray(spectral.kernel(x[:, None, :] - x[None, :, :], ell, density, signal=1.3))
    ms = [16, 64, 256, 1024]
    seeds = N_POINTS // ms[-1]
    # one draw of 6 x 1024 i.i.d. points; the first m of each row are an i.i.d. draw of size m
    pts = spectral.standard_spectral_points(jax.random.PRNGKey(100), N_POINTS, d, density)
    pts = np.asarray(pts).reshape(seeds, ms[-1], d)
    errors = []
    for m in ms:
        errs = []
        for seed in range(seeds):
            freq = spectral.frequencies_from_spectral_points(pts[seed, :m], 1.0 / ell)
            est = np.asarray(spectral.kernel_estimate(x, x, freq, signal=1.3))
            errs.append(np.max(np.abs(est - exact)))
        errors.append(np.mean(errs))
    errors = np.array(errors)
    assert errors[-1] < errors[0] / 4
    assert np.all(errors[1:] < 0.8 * errors[:-1]), errors  # monotone, each 4x in m roughly halves it
    slope = np.polyfit(np.log(ms), np.log(errors), 1)[0]
    assert -0.7 < slope < -0.3, (slope, errors)


@pytest.mark.parametrize("density", DENSITIES)
def test_kernel_estimate_is_unbiased(x64, pendulum, density):
    """Mean of m = 1 SSGP estimates over 6144 spectral draws = k(τ) within 4 standard errors."""
    x = pendulum.x_train
    d = x.shape[1]
    ell = _ard_lengthscales(d)
    signal = 1.3
    pairs = [(0, 1), (2, 3), (4, 5), (6, 7)]
    x1 = np.concatenate([x[[i for i, _ in pairs]], 0.4 * x[[i for i, _ in pairs]]])
    x2 = np.concatenate([x[[j for _, j in pairs]], 0.4 * x[[j for _, j in pairs]]])
    pts = spectral.standard_spectral_points(jax.random.PRNGKey(7), N_POINTS, d, density)
    freq = spectral.frequencies_from_spectral_points(pts, 1.0 / ell)

    def one(a, b, f):  # the m = 1 estimate φ(a)ᵀΛφ(b)
        return spectral.kernel_estimate(a[None], b[None], f[None], signal)[0, 0]

    draws = np.asarray(jax.vmap(lambda f: jax.vmap(one, (0, 0, None))(x1, x2, f))(freq))  # (6144, 8)
    mean = draws.mean(axis=0)
    se = draws.std(axis=0, ddof=1) / np.sqrt(draws.shape[0])
    exact = np.asarray(spectral.kernel(x1 - x2, ell, density, signal=signal))
    assert np.all(exact > 0.01)  # informative lags, not all in the tail
    assert np.all(np.abs(mean - exact) < 4 * se), (mean, exact, se)
    assert np.all(np.abs(draws) <= signal**2 + 1e-12)


# --------------------------------------------------------------------------- feature map


def _numpy_features(x, freq):
    proj = 2 * np.pi * np.asarray(x, np.float64) @ np.asarray(freq, np.float64).T
    out = np.empty((proj.shape[0], 2 * proj.shape[1]))
    out[:, 0::2] = np.cos(proj)
    out[:, 1::2] = np.sin(proj)
    return out


def _freq(m, d, lam=0.5, seed=5):
    """Frequencies r = s λ / 2π from numpy-drawn standard normal points (fast, independent of jax)."""
    pts = np.random.default_rng(seed).standard_normal((m, d))
    return spectral.frequencies_from_spectral_points(pts, np.full(d, lam))


def test_features_shape_and_interleaving(precision, pendulum):
    tol = {np.float32: 2e-5, np.float64: 1e-12}[precision]
    x = pendulum.x_train[:8]
    freq = _freq(5, x.shape[1])
    phi = spectral.features(x, freq)
    assert phi.shape == (8, 10)
    assert phi.dtype == precision
    x64_, f64 = np.asarray(x, np.float64), np.asarray(freq, np.float64)
    np.testing.assert_allclose(phi[:, 0], np.cos(2 * np.pi * x64_ @ f64[0]), atol=tol)
    np.testing.assert_allclose(phi[:, 1], np.sin(2 * np.pi * x64_ @ f64[0]), atol=tol)
    np.testing.assert_allclose(phi, _numpy_features(x, freq), atol=tol)
    np.testing.assert_allclose(phi[:, 0::2] ** 2 + phi[:, 1::2] ** 2, 1.0, atol=tol)


def test_features_gram_is_kernel_of_differences(precision, pendulum):
    """σ²/m Φ(x)Φ(x')ᵀ = σ²/m Σ cos(2π rᵀ(x − x')) (cos(a−b) = cos a cos b + sin a sin b)."""
    tol = {np.float32: 2e-5, np.float64: 1e-12}[precision]
    x1, x2 = pendulum.x_train[:6], pendulum.x_train[6:10]
    m, signal = 7, 1.4
    freq = _freq(m, x1.shape[1])
    gram = signal**2 / m * spectral.features(x1, freq) @ spectral.features(x2, freq).T
    lags = np.asarray(x1, np.float64)[:, None, :] - np.asarray(x2, np.float64)[None, :, :]
    want = signal**2 * np.mean(np.cos(2 * np.pi * lags @ np.asarray(freq, np.float64).T), axis=-1)
    assert gram.shape == (6, 4)
    np.testing.assert_allclose(gram, want, atol=tol * signal**2)
    np.testing.assert_allclose(spectral.kernel_estimate(x1, x2, freq, signal), want, atol=tol * signal**2)


def test_implied_kernel_equals_kernel_estimate(precision, pendulum):
    tol = {np.float32: 2e-5, np.float64: 1e-12}[precision]
    x1, x2 = pendulum.x_train[:5], pendulum.x_train[20:23]
    freq = _freq(9, x1.shape[1])
    implied = spectral.implied_kernel(x1[:, None, :] - x2[None, :, :], freq, signal=0.8)
    assert implied.shape == (5, 3)
    np.testing.assert_allclose(implied, spectral.kernel_estimate(x1, x2, freq, 0.8), atol=tol)
    np.testing.assert_allclose(spectral.implied_kernel(np.zeros(x1.shape[1]), freq, 0.8), 0.64, rtol=1e-6)


# --------------------------------------------------------------------------- names and bad input


@pytest.mark.parametrize("density", DENSITIES)
def test_check_density_known(density):
    assert spectral.check_density(density) == NU[density]


BAD_CALLS = {
    "check_density": lambda name: spectral.check_density(name),
    "spectral_density": lambda name: spectral.spectral_density(jnp.zeros((1, 2)), jnp.ones(2), name),
    "kernel": lambda name: spectral.kernel(jnp.zeros((1, 2)), jnp.ones(2), name),
    "standard_spectral_points": lambda name: spectral.standard_spectral_points(
        jax.random.PRNGKey(0), 3, 2, name
    ),
}


@pytest.mark.parametrize("name", ["gaussian", "Matern32", "rbf", ""])
@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_unknown_density_raises(call, name):
    with pytest.raises(SSGPError, match="unknown spectral density") as info:
        call(name)
    assert "matern52" in str(info.value)  # names the known ones


@pytest.mark.parametrize("m,d", [(0, 2), (3, 0)], ids=["m0", "d0"])
def test_standard_spectral_points_rejects_empty(m, d):
    with pytest.raises(SSGPError, match="need m >= 1"):
        spectral.standard_spectral_points(jax.random.PRNGKey(0), m, d)
