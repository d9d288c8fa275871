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
PINNED = 2.0  # ... and a noise there is held up by it when float64 puts it this many times lower
CHECK_DRAWS = 8  # draws of a posterior the check looks at (evenly spaced) ...
CHECK_FLOPS = 2**34  # ... fewer where their ΦᵀΦ (n (2m)² each) would cost more than this, at least 1
GRAM_VALUES = 2**24  # feature values per block of rows when ΦᵀΦ is summed block by block


def gram(x, frequencies):
    """ΦᵀΦ (2m, 2m) of the features of ``x`` (n, d) in its precision: one product where Φ holds
    at most :data:`GRAM_VALUES` values (the marginal likelihood's own), else a sum over blocks of
    rows."""
    from ssgp_ppl.model import spectral

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
def _jitter_levels(x, frequencies, signal, noise):
    """Per draw: the :data:`JITTER` index the factor of A = ΦᵀΦ + (mσ_n²/σ_s²)I needs in the
    working precision, and mean(diag A)."""

    def one(draw):
        f, s, n = draw
        g = gram(x, f)
        a = g + (f.shape[0] * n**2 / s**2) * jnp.eye(g.shape[0], dtype=g.dtype)
        return jitter_level(a), jnp.mean(jnp.diagonal(a))

    return jax.lax.map(one, (frequencies, signal, noise))


def _moments64(x, y, frequencies):
    """(ΦᵀΦ, Φᵀy, yᵀy) in float64 on the host (numpy), :data:`GRAM_VALUES` features at a time."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    f = np.asarray(frequencies, np.float64)
    two_m = 2 * f.shape[0]
    g, b = np.zeros((two_m, two_m)), np.zeros(two_m)
    rows = max(1, GRAM_VALUES // two_m)
    for a in range(0, len(x), rows):
        proj = 2 * np.pi * x[a:a + rows] @ f.T
        phi = np.stack([np.cos(proj), np.sin(proj)], axis=-1).reshape(len(proj), two_m)
        g += phi.T @ phi
        b += phi.T @ y[a:a + rows]
    return g, b, float(y @ y)


def profile_noise(lam, c, yy: float, n: int, signal: float, noise: float) -> float:
    """The σ_n that maximises the float64 marginal likelihood log p(y | θ, σ_s, σ_n) (Hoang et al.
    2017, App. E) at fixed θ and σ_s, searched over [10⁻⁴, 10] × ``noise``, from the
    eigenvalues ``lam`` of ΦᵀΦ and ``c`` = Qᵀ Φᵀy (Q its eigenvectors): with r = mσ_n²/σ_s²,
    log p = −(yᵀy − Σ c_i²/(λ_i + r))/(2σ_n²) − ½ Σ log(λ_i + r) + m log r − (n/2) log(2πσ_n²)."""
    m = len(lam) // 2
    lam = np.maximum(lam, 0.0)

    def logp(s):
        r = m * s**2 / signal**2
        quad = yy - np.sum(c**2 / (lam[None] + r[:, None]), axis=1)
        out = (-0.5 * quad / s**2 - 0.5 * np.sum(np.log(lam[None] + r[:, None]), axis=1)
               + m * np.log(r) - 0.5 * n * np.log(2 * np.pi * s**2))
        return np.where(quad > 0, out, -np.inf)

    grid = noise * np.logspace(-4, 1, 251)
    k = int(np.argmax(logp(grid)))
    fine = np.geomspace(grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)], 201)
    return float(fine[int(np.argmax(logp(fine)))])


class Resolution(NamedTuple):
    """A fit's noise against its working precision (:func:`resolution`), over ``draws`` checked
    draws; noise values in the model's standardised units."""

    dtype: str
    draws: int
    noise: float  # median σ_n
    noise_floor: float  # median σ_floor (eq. in :func:`resolution`)
    noise64: float  # median σ_n the float64 marginal likelihood puts at the same θ, σ_s
    floor_draws: int  # draws whose σ_n the floor holds up: σ_n ≤ σ_floor and ≥ PINNED × float64's
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
            parts.append(f"the learned noise σ_n = {self.noise * y_scale:.2g} sits at "
                         f"{self.dtype}'s resolution floor {self.noise_floor * y_scale:.2g} for "
                         f"its signal and features, where the float64 marginal likelihood puts it "
                         f"at {self.noise64 * y_scale:.2g} ({self.floor_draws} of {self.draws} "
                         "draws)")
        if self.jitter_draws:
            parts.append(f"the Cholesky factor of A = ΦᵀΦ + (mσ_n²/σ_s²)I needed jitter "
                         f"{self.jitter:g} × mean diag A, which acts as a noise σ_n of "
                         f"{self.jitter_noise * y_scale:.2g} ({self.jitter_draws} of "
                         f"{self.draws} draws)")
        advice = "refit with --x64 (float64)" if self.dtype != "float64" else "float64 already"
        return f"{self.dtype} cannot resolve this fit: {'; '.join(parts)}; {advice}"


def resolution(x, y, frequencies, signal, noise, *, jitter: bool = True) -> Resolution:
    """Whether the working precision (``x``'s) resolves a fit of σ_n, σ_s, θ (draws (S,), (S,),
    (S, m, d)) on the training rows ``x`` (n, d), ``y`` (n,), over at most :data:`CHECK_DRAWS`
    evenly spaced draws (fewer where n (2m)² per draw passes :data:`CHECK_FLOPS` in all).

    * Floor. The SSGP likelihood and predictive factor A = ΦᵀΦ + rI, r = mσ_n²/σ_s² (Hoang et
      al. 2017, App. E). Rounding blurs A's eigenvalues by about eps · λ_max (eps: the precision's
      machine epsilon, 1.2e-7 in float32), so A is resolved only while λ_min(A) = λ_min(ΦᵀΦ) + r
      exceeds F · eps · λ_max(A), F = :data:`FLOOR_FACTOR`. Where ΦᵀΦ is near singular
      (near-collinear features: λ_min ≈ 0), the noise relative to the signal must keep r above
      F · eps · λ_max(ΦᵀΦ): the floor is
      σ_floor² = (σ_s²/m) · max(F · eps · λ_max − λ_min, 0) / (1 − F · eps),
      λ of ΦᵀΦ in float64 (the scale of the features: λ_max grows with n). Below the floor a fit
      need not suffer (the prior holds A's weak directions, which the data may not need); it
      does where the data need them: the float64 marginal likelihood at the same θ and σ_s then
      puts σ_n lower (:func:`profile_noise`). A draw whose σ_n ≤ σ_floor is at least
      :data:`PINNED` times float64's sits at the floor.
    * Jitter (``jitter``: where the fit factors A): the :data:`JITTER` the factor of A needs at
      the fitted values in the working precision, and the noise it acts as,
      σ_s √((r + ε · mean diag A)/m).
    """
    count, m = int(np.shape(frequencies)[0]), int(np.shape(frequencies)[1])
    n = int(np.shape(x)[0])
    most = max(1, min(CHECK_DRAWS, CHECK_FLOPS // (n * (2 * m) ** 2)))
    pick = np.unique(np.linspace(0, count - 1, min(count, most)).round().astype(int))
    dtype = jnp.asarray(x[:1]).dtype
    eps = float(jnp.finfo(dtype).eps)
    freqs = np.asarray(frequencies)[pick]
    sig = np.asarray(signal, np.float64)[pick]
    noi = np.asarray(noise, np.float64)[pick]
    floor, best = np.zeros(len(pick)), np.zeros(len(pick))
    for i, f in enumerate(freqs):
        g, b, yy = _moments64(x, y, f)
        lam, q = np.linalg.eigh(g)
        floor[i] = np.sqrt(sig[i]**2 / m * max(FLOOR_FACTOR * eps * lam[-1] - max(lam[0], 0.0), 0.0)
                           / (1.0 - FLOOR_FACTOR * eps))
        best[i] = profile_noise(lam, q.T @ b, yy, n, sig[i], noi[i])
    pinned = (noi <= floor) & (noi >= PINNED * best)
    eps_j, diag = np.zeros(len(pick)), np.zeros(len(pick))
    if jitter:
        level, diag = _jitter_levels(jnp.asarray(x), jnp.asarray(freqs, dtype),
                                     jnp.asarray(sig, dtype), jnp.asarray(noi, dtype))
        eps_j, diag = np.asarray(JITTER)[np.asarray(level)], np.asarray(diag, np.float64)
    acts = sig * np.sqrt((m * noi**2 / sig**2 + eps_j * diag) / m)
    worst = int(np.argmax(eps_j))
    return Resolution(str(np.dtype(dtype)), len(pick), float(np.median(noi)),
                      float(np.median(floor)), float(np.median(best)), int(np.sum(pinned)),
                      float(eps_j[worst]), int(np.sum(eps_j > 0)), float(acts[worst]))


__all__ = ["JITTER", "Resolution", "check_finite", "cholesky", "gram", "jitter_level",
           "profile_noise", "resolution"]
