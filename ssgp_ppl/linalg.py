"""Cholesky with jitter escalation: the one factorisation the SSGP predictives and likelihoods use.

A = ΦᵀΦ + (mσ_n²/σ_s²) I is SPD in exact arithmetic, but in float32 with a tiny noise ratio (near-
constant targets, duplicated rows, inputs on very different scales) round-off can make its
Cholesky factor fail (JAX returns NaN). :func:`cholesky` then retries with ε·mean(diag A) added to
the diagonal, ε from :data:`JITTER`, and returns NaN only if even the largest fails; callers on
the host turn that into an error naming the failure (:func:`check_finite`).

:func:`resolution` checks a fitted posterior against the working precision: the jitter its factor
of A needs at the fitted values, and whether its noise sits at the precision's resolution floor
(float32 with a tiny noise: the fit and its intervals are not float64's).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ssgp_ppl.errors import SSGPError

JITTER = (0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)  # relative to the mean diagonal


def jitter_level(a):
    """Index into :data:`JITTER` of the smallest jitter that factors ``a`` (k, k) (no gradient);
    the last index if none does."""
    a = jax.lax.stop_gradient(a)
    eye = jnp.eye(a.shape[-1], dtype=a.dtype)
    scale = jnp.mean(jnp.diagonal(a))
    eps = jnp.asarray(JITTER, a.dtype)

    def fails(level):
        return ~jnp.all(jnp.isfinite(jnp.linalg.cholesky(a + eps[level] * scale * eye)))

    return jax.lax.while_loop(lambda lv: (lv < len(JITTER) - 1) & fails(lv), lambda lv: lv + 1, 0)


def cholesky(a):
    """Lower Cholesky factor of the SPD matrix ``a`` (k, k), with the smallest jitter ε·mean(diag a)
    (ε in :data:`JITTER`) that succeeds; NaN if none does. Differentiable in ``a`` (the jitter is a
    constant of the step)."""
    eps = jnp.asarray(JITTER, a.dtype)[jitter_level(a)]
    scale = jax.lax.stop_gradient(jnp.mean(jnp.diagonal(a)))
    return jnp.linalg.cholesky(a + eps * scale * jnp.eye(a.shape[-1], dtype=a.dtype))


def check_finite(what: str, *arrays) -> None:
    """Host-side check after a factorisation: an SSGPError naming ``what`` if any value is NaN/inf."""
    bad = sum(int(np.size(a) - np.isfinite(np.asarray(a)).sum()) for a in arrays)
    if bad:
        total = sum(int(np.size(a)) for a in arrays)
        raise SSGPError(f"{what}: {bad} of {total} values are NaN/inf (a Cholesky factorisation "
                        f"failed even with jitter {JITTER[-1]:g} × its mean diagonal); try --x64")


# --------------------------------------------------------------------------- the fit vs its precision

FLOOR_FACTOR = 10.0  # A is at the working precision's floor when λ_min(A) ≤ this × eps × λ_max(A)
CHECK_DRAWS = 8  # draws of a posterior the check looks at (evenly spaced) ...
CHECK_FLOPS = 2**34  # ... fewer where their ΦᵀΦ (n (2m)² each) would cost more than this, at least 1
GRAM_VALUES = 2**24  # feature values per block of rows when ΦᵀΦ is summed block by block


def gram(x, frequencies):
    """ΦᵀΦ (2m, 2m) of the features of ``x`` (n, d): one product where Φ holds at most
    :data:`GRAM_VALUES` values (the marginal likelihood's own), else a sum over blocks of rows."""
    from ssgp_ppl import spectral

    n, two_m = x.shape[0], 2 * frequencies.shape[0]
    rows = max(1, GRAM_VALUES // two_m)
    if n <= rows:
        phi = spectral.features(x, frequencies)
        return phi.T @ phi
    blocks = -(-n // rows)
    pad = jnp.pad(x, ((0, blocks * rows - n), (0, 0))).reshape(blocks, rows, -1)
    keep = (jnp.arange(blocks * rows) < n).reshape(blocks, rows, 1)

    def add(g, block):
        phi = spectral.features(block[0], frequencies) * block[1]
        return g + phi.T @ phi, None

    return jax.lax.scan(add, jnp.zeros((two_m, two_m), x.dtype), (pad, keep))[0]


@jax.jit
def _factor_checks(x, frequencies, signal, noise):
    """Per draw: ΦᵀΦ, the :data:`JITTER` index the factor of A = ΦᵀΦ + (mσ_n²/σ_s²)I needs, and
    mean(diag A)."""

    def one(draw):
        f, s, n = draw
        g = gram(x, f)
        a = g + (f.shape[0] * n**2 / s**2) * jnp.eye(g.shape[0], dtype=g.dtype)
        return g, jitter_level(a), jnp.mean(jnp.diagonal(a))

    return jax.lax.map(one, (frequencies, signal, noise))


class Resolution(NamedTuple):
    """A fit's noise against its working precision (:func:`resolution`), over ``draws`` checked
    draws; noise values in the model's standardised units."""

    dtype: str
    draws: int
    noise: float  # median σ_n
    noise_floor: float  # median σ_floor (eq. in :func:`resolution`)
    floor_draws: int  # draws with σ_n ≤ σ_floor
    jitter: float  # largest ε (× mean diag A) the factor of A needed; 0.0: none (or not checked)
    jitter_draws: int
    jitter_noise: float  # the σ_n the largest jitter acts as

    @property
    def warns(self) -> bool:
        return self.floor_draws > 0 or self.jitter_draws > 0

    def text(self, y_scale: float = 1.0) -> str | None:
        """The warning in one line (noise in the target's units: × ``y_scale``); None when the
        precision resolves the fit."""
        if not self.warns:
            return None
        parts = []
        if self.floor_draws:
            parts.append(f"the learned noise σ_n = {self.noise * y_scale:.2g} is at or below "
                         f"{self.dtype}'s resolution floor {self.noise_floor * y_scale:.2g} for "
                         f"its signal and features ({self.floor_draws} of {self.draws} draws)")
        if self.jitter_draws:
            parts.append(f"the Cholesky factor of A = ΦᵀΦ + (mσ_n²/σ_s²)I needed jitter "
                         f"{self.jitter:g} × mean diag A, which acts as a noise σ_n of "
                         f"{self.jitter_noise * y_scale:.2g} ({self.jitter_draws} of "
                         f"{self.draws} draws)")
        advice = "refit with --x64 (float64)" if self.dtype != "float64" else "float64 already"
        return f"{self.dtype} cannot resolve this fit: {'; '.join(parts)}; {advice}"


def resolution(x, frequencies, signal, noise, *, jitter: bool = True) -> Resolution:
    """Whether the working precision resolves a fit of σ_n, σ_s, θ (draws (S,), (S,), (S, m, d)) on
    the training inputs ``x`` (n, d), over at most :data:`CHECK_DRAWS` evenly spaced draws (fewer
    where n (2m)² per draw passes :data:`CHECK_FLOPS` in all).

    * Floor. The SSGP likelihood and predictive factor A = ΦᵀΦ + rI, r = mσ_n²/σ_s² (Hoang et
      al. 2017, App. E). Rounding blurs A's eigenvalues by about eps · λ_max (eps: the precision's
      machine epsilon, 1.2e-7 in float32), so A is resolved only while λ_min(A) = λ_min(ΦᵀΦ) + r
      exceeds F · eps · λ_max(A), F = :data:`FLOOR_FACTOR`. Where ΦᵀΦ is near singular
      (near-collinear features: λ_min ≈ 0), the noise relative to the signal must keep r above
      F · eps · λ_max(ΦᵀΦ): the floor is
      σ_floor² = (σ_s²/m) · max(F · eps · λ_max − λ_min, 0) / (1 − F · eps),
      λ of ΦᵀΦ (the scale of the features: λ_max grows with n). A fit with σ_n ≤ σ_floor sits
      at the floor: the optimum below it cannot be represented, and the noise settles above it.
    * Jitter (``jitter``: where the fit factors A): the :data:`JITTER` the factor of A needs at
      the fitted values, and the noise it acts as, σ_s √((r + ε · mean diag A)/m).
    """
    count, m = int(np.shape(frequencies)[0]), int(np.shape(frequencies)[1])
    most = max(1, min(CHECK_DRAWS, CHECK_FLOPS // (np.shape(x)[0] * (2 * m) ** 2)))
    pick = np.unique(np.linspace(0, count - 1, min(count, most)).round().astype(int))
    x = jnp.asarray(x)
    dtype = x.dtype
    freq = jnp.asarray(np.asarray(frequencies)[pick], dtype)
    sig = np.asarray(signal, np.float64)[pick]
    noi = np.asarray(noise, np.float64)[pick]
    g, level, diag = _factor_checks(x, freq, jnp.asarray(sig, dtype), jnp.asarray(noi, dtype))
    eps = float(jnp.finfo(dtype).eps)
    lam = np.linalg.eigvalsh(np.asarray(g, np.float64))  # (k, 2m), ascending
    lo, hi = np.maximum(lam[:, 0], 0.0), lam[:, -1]
    floor = np.sqrt(sig**2 / m * np.maximum(FLOOR_FACTOR * eps * hi - lo, 0.0)
                    / (1.0 - FLOOR_FACTOR * eps))
    eps_j = np.asarray(JITTER)[np.asarray(level)] if jitter else np.zeros(len(pick))
    r = m * noi**2 / sig**2
    acts = sig * np.sqrt((r + eps_j * np.asarray(diag, np.float64)) / m)
    worst = int(np.argmax(eps_j))
    return Resolution(str(np.dtype(dtype)), len(pick), float(np.median(noi)),
                      float(np.median(floor)), int(np.sum(noi <= floor)), float(eps_j[worst]),
                      int(np.sum(eps_j > 0)), float(acts[worst]))
