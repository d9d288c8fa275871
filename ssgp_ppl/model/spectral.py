"""The trigonometric feature map and the kernels a set of frequencies implies.

Conventions (Hoang et al. 2017, eqs. 1-2): a stationary kernel is k(τ) = σ_s² E_{r~p(r)}[cos(2π rᵀτ)] with the
spectral density p(r) over *frequencies* r (cycles per unit input). With m frequencies
θ = vec(r_1, ..., r_m) the feature map is φ_θ(x) = [cos(2π r_1ᵀx), sin(2π r_1ᵀx), ...] (2m features,
cos/sin interleaved as Hoang et al. 2017, eq. 2) and k(x, x') ≈ φ_θ(x)ᵀ Λ φ_θ(x') with Λ = σ_s²/m I.

Two parameterisations of the frequencies are used by the seeds:

* **free**: θ is itself a variable (SSGP optimized, VSSGP, sVBSSGP), with prior p(r) given the
  lengthscales ℓ;
* **scaled**: fixed standard spectral points s_r drawn once, multiplied by inverse lengthscales λ
  (Tan et al. 2016, eq. 4: cos((s_r ⊙ x)ᵀλ) = cos(2π r_rᵀx) with r_r = s_r ⊙ λ / 2π).

The spectral densities themselves (p(r), the exact k(τ), the standard spectral points) are
objects of :mod:`ssgp_ppl.model.densities`. Every function here is pure: no sampling inside.
Design matrices are (n, 2m): row i is φ(x_i)ᵀ (the paper's Φ_θ(X) is its transpose).
"""

from __future__ import annotations

import math

import jax.numpy as jnp

TWO_PI = 2.0 * math.pi


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


__all__ = ["TWO_PI", "features", "frequencies_from_spectral_points", "implied_kernel",
           "kernel_estimate"]
