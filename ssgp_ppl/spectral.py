"""Spectral densities, exact stationary kernels and the trigonometric feature map.

Conventions (Hoang et al. 2017, eqs. 1-2): a stationary kernel is k(τ) = σ_s² E_{r~p(r)}[cos(2π rᵀτ)] with the
spectral density p(r) over *frequencies* r (cycles per unit input). With m frequencies
θ = vec(r_1, ..., r_m) the feature map is φ_θ(x) = [cos(2π r_1ᵀx), sin(2π r_1ᵀx), ...] (2m features,
cos/sin interleaved as Hoang et al. 2017, eq. 2) and k(x, x') ≈ φ_θ(x)ᵀ Λ φ_θ(x') with Λ = σ_s²/m I.

Two parameterisations of the frequencies are used by the seeds:

* **free**: θ is itself a variable (SSGP optimized, VSSGP, sVBSSGP), with prior p(r) given the
  lengthscales ℓ;
* **scaled**: fixed standard spectral points s_r drawn once, multiplied by inverse lengthscales λ
  (Tan et al. 2016, eq. 4: cos((s_r ⊙ x)ᵀλ) = cos(2π r_rᵀx) with r_r = s_r ⊙ λ / 2π).

Every function here is pure: no sampling inside (``standard_spectral_points`` takes an explicit key).
Design matrices are (n, 2m): row i is φ(x_i)ᵀ (the paper's Φ_θ(X) is its transpose).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln

from ssgp_ppl.errors import SSGPError

# name -> Matérn smoothness ν (None for the squared exponential)
DENSITIES: dict[str, float | None] = {
    "se": None,
    "matern12": 0.5,
    "matern32": 1.5,
    "matern52": 2.5,
}

TWO_PI = 2.0 * math.pi


def check_density(density: str) -> float | None:
    """Return the Matérn ν of ``density`` (None for SE); raise SSGPError for unknown names."""
    if density not in DENSITIES:
        raise SSGPError(f"unknown spectral density {density!r}; known: {', '.join(DENSITIES)}")
    return DENSITIES[density]


def spectral_density(r, lengthscales, density: str = "se"):
    """Density p(r) of frequencies r (..., d) for an ARD kernel with unit signal variance.

    SE: p(r) = N(0, (4π²Δ)⁻¹), Δ = diag(ℓ²) (Hoang et al. 2017, below eq. 1).
    Matérn ν: the angular frequency ω = 2πr follows a multivariate Student-t with 2ν degrees of
    freedom and scale diag(1/ℓ²) (Rasmussen & Williams 2006, eq. 4.15); p(r) = (2π)^d p_ω(2πr).
    """
    nu = check_density(density)
    r = jnp.asarray(r)
    ell = jnp.asarray(lengthscales)
    d = r.shape[-1]
    omega = TWO_PI * r * ell  # whitened angular frequency
    q = jnp.sum(omega**2, axis=-1)
    # |dω_white / dr|; a scalar ℓ is shared by all d inputs (so it counts d times)
    log_jac = d * math.log(TWO_PI) + jnp.sum(jnp.broadcast_to(jnp.log(ell), r.shape[-1:]))
    if nu is None:
        log_p = -0.5 * q - 0.5 * d * math.log(2 * math.pi)
    else:
        df = 2.0 * nu
        log_p = (
            gammaln((df + d) / 2)
            - gammaln(df / 2)
            - 0.5 * d * jnp.log(df * math.pi)
            - 0.5 * (df + d) * jnp.log1p(q / df)
        )
    return jnp.exp(log_p + log_jac)


def kernel(tau, lengthscales, density: str = "se", signal: float = 1.0):
    """Exact stationary kernel k(τ) for lags τ (..., d): the reference the SSGP approximates."""
    nu = check_density(density)
    tau = jnp.asarray(tau)
    dist = jnp.sqrt(jnp.sum((tau / jnp.asarray(lengthscales)) ** 2, axis=-1))
    s2 = signal**2
    if nu is None:
        return s2 * jnp.exp(-0.5 * dist**2)
    if nu == 0.5:
        return s2 * jnp.exp(-dist)
    if nu == 1.5:
        z = math.sqrt(3.0) * dist
        return s2 * (1.0 + z) * jnp.exp(-z)
    z = math.sqrt(5.0) * dist
    return s2 * (1.0 + z + z**2 / 3.0) * jnp.exp(-z)


def standard_spectral_points(key, m: int, d: int, density: str = "se", dtype=None):
    """m standard spectral points s (m, d) of ``density`` with unit lengthscales, in ω-units.

    SE: s ~ N(0, I_d). Matérn ν: s ~ multivariate t_{2ν}(0, I_d) = z / sqrt(g / 2ν), g ~ χ²_{2ν}.
    Frequencies follow as r = s ⊙ λ / 2π with λ = 1/ℓ (Tan et al. 2016, eq. 4).
    """
    nu = check_density(density)
    if m < 1 or d < 1:
        raise SSGPError(f"need m >= 1 frequencies and d >= 1 inputs, got m={m}, d={d}")
    dtype = dtype or jnp.result_type(float)
    kz, kg = jax.random.split(key)
    z = jax.random.normal(kz, (m, d), dtype=dtype)
    if nu is None:
        return z
    df = 2.0 * nu
    g = 2.0 * jax.random.gamma(kg, df / 2.0, (m, 1), dtype=dtype)  # χ²_df
    return z / jnp.sqrt(g / df)


def frequencies_from_spectral_points(spectral_points, inverse_lengthscales):
    """Frequencies r_i = s_i ⊙ λ / 2π (m, d): the scaled parameterisation of Tan et al. 2016, eq. (4)."""
    return jnp.asarray(spectral_points) * jnp.asarray(inverse_lengthscales) / TWO_PI


def features(x, frequencies):
    """Trigonometric feature map, design matrix (n, 2m) with rows φ_θ(x)ᵀ (Hoang et al. 2017, eq. 2).

    Columns 2i and 2i+1 (0-based) are cos(2π r_iᵀx) and sin(2π r_iᵀx).
    """
    proj = TWO_PI * jnp.asarray(x) @ jnp.asarray(frequencies).T  # (n, m)
    n, m = proj.shape
    return jnp.stack([jnp.cos(proj), jnp.sin(proj)], axis=-1).reshape(n, 2 * m)


def kernel_estimate(x1, x2, frequencies, signal: float = 1.0):
    """SSGP kernel φ_θ(x1)ᵀ Λ φ_θ(x2) = σ_s²/m Σ_i cos(2π r_iᵀ(x1 − x2)) (Hoang et al. 2017, eq. 2)."""
    m = jnp.shape(frequencies)[0]
    return (signal**2 / m) * features(x1, frequencies) @ features(x2, frequencies).T


def implied_kernel(tau, frequencies, signal=1.0):
    """k(τ) implied by a set of frequencies at lags τ (..., d): σ_s²/m Σ_i cos(2π r_iᵀτ)."""
    proj = TWO_PI * jnp.asarray(tau) @ jnp.asarray(frequencies).T
    return signal**2 * jnp.mean(jnp.cos(proj), axis=-1)


__all__ = ["DENSITIES", "TWO_PI", "check_density", "features", "frequencies_from_spectral_points",
           "implied_kernel", "kernel", "kernel_estimate", "spectral_density",
           "standard_spectral_points"]
