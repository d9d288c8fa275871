"""Tests for ssgp_ppl.model.spectral: the trigonometric feature map and the kernel estimate it gives
for every registered spectral density (the densities themselves: tests/model/test_densities.py).

References are independent of the code under test: numpy float64 feature maps, each density's
exact kernel, and Monte Carlo means within their standard errors.
"""

import jax
import numpy as np
import pytest

from ssgp_ppl.model import spectral
from ssgp_ppl.model.densities import DENSITIES

N_POINTS = 6 * 1024  # one shape for all large spectral draws (d = 9): jax compiles the sampler once


def _ard_lengthscales(d):
    return np.linspace(1.5, 3.0, d)


# --------------------------------------------------------------------------- kernel estimate


def test_frequencies_from_spectral_points():
    s = np.array([[1.0, -2.0], [0.5, 3.0]])
    lam = np.array([2.0, 0.25])
    np.testing.assert_allclose(
        spectral.frequencies_from_spectral_points(s, lam), s * lam / (2 * np.pi), rtol=1e-6
    )


@pytest.mark.parametrize("name", list(DENSITIES))
def test_kernel_estimate_converges_like_inverse_sqrt_m(x64, pendulum, name):
    """max |k̂ − k| over 30×30 pendulum pairs shrinks ~ m^{-1/2} (Hoang et al. 2017, eq. 2;
    Tan et al. 2016, eq. 4)."""
    x = pendulum.x_train[:30]
    d = x.shape[1]
    ell = _ard_lengthscales(d)
    density = DENSITIES[name]
    exact = np.asarray(density.kernel(x[:, None, :] - x[None, :, :], ell, signal=1.3))
    ms = [16, 64, 256, 1024]
    seeds = N_POINTS // ms[-1]
    # one draw of 6 x 1024 i.i.d. points; the first m of each row are an i.i.d. draw of size m
    pts = density.standard_points(jax.random.PRNGKey(100), N_POINTS, d)
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


@pytest.mark.parametrize("name", list(DENSITIES))
def test_kernel_estimate_is_unbiased(x64, pendulum, name):
    """Mean of m = 1 SSGP estimates over 6144 spectral draws = k(τ) within 4 standard errors."""
    x = pendulum.x_train
    d = x.shape[1]
    ell = _ard_lengthscales(d)
    signal = 1.3
    pairs = [(0, 1), (2, 3), (4, 5), (6, 7)]
    # pendulum pairs at 0.4 and 0.15 of their distance: in every density's informative range
    x1 = np.concatenate([0.4 * x[[i for i, _ in pairs]], 0.15 * x[[i for i, _ in pairs]]])
    x2 = np.concatenate([0.4 * x[[j for _, j in pairs]], 0.15 * x[[j for _, j in pairs]]])
    density = DENSITIES[name]
    pts = density.standard_points(jax.random.PRNGKey(7), N_POINTS, d)
    freq = spectral.frequencies_from_spectral_points(pts, 1.0 / ell)

    def one(a, b, f):  # the m = 1 estimate φ(a)ᵀΛφ(b)
        return spectral.kernel_estimate(a[None], b[None], f[None], signal)[0, 0]

    draws = np.asarray(jax.vmap(lambda f: jax.vmap(one, (0, 0, None))(x1, x2, f))(freq))  # (6144, 8)
    mean = draws.mean(axis=0)
    se = draws.std(axis=0, ddof=1) / np.sqrt(draws.shape[0])
    exact = np.asarray(density.kernel(x1 - x2, ell, signal=signal))
    assert np.all(exact > 0.1 * signal**2) and np.all(exact < 0.99 * signal**2)  # not the tail
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
