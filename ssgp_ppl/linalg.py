"""Cholesky with jitter escalation: the one factorisation the SSGP predictives and likelihoods use.

A = ΦᵀΦ + (mσ_n²/σ_s²) I is SPD in exact arithmetic, but in float32 with a tiny noise ratio (near-
constant targets, duplicated rows, inputs on very different scales) round-off can make its
Cholesky factor fail (JAX returns NaN). :func:`cholesky` then retries with ε·mean(diag A) added to
the diagonal, ε from :data:`JITTER`, and returns NaN only if even the largest fails; callers on
the host turn that into an error naming the failure (:func:`check_finite`).
"""

from __future__ import annotations

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
