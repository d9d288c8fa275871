"""Stacking of predictive distributions: weights on the simplex that maximise the leave-one-out
log score of the mixture (Yao, Vehtari, Simpson & Gelman 2018; for the paths of a non-mixing
computation, Yao, Vehtari & Gelman 2022).

Given the LOO log predictive densities log p(yᵢ | y₋ᵢ, path k), an (n, K) matrix, the stacking
weights maximise Σᵢ log Σₖ wₖ p(yᵢ | y₋ᵢ, k) over the simplex. The objective is concave in w, so
the fixed point of the EM update wₖ ← (1/n) Σᵢ wₖ pᵢₖ / Σⱼ wⱼ pᵢⱼ (the mixture-weight M step) is
the global optimum; it is run in log space until no weight moves by more than ``tol``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import logsumexp

from ssgp_ppl.errors import SSGPError

COMBINE = ("stacking", "posterior", "best")  # how the paths of a multi-path fit combine


class Stacking(NamedTuple):
    weights: np.ndarray  # (K,) on the simplex
    score: float  # Σᵢ log Σₖ wₖ pᵢₖ at the weights
    iterations: int


def stacking_weights(loo_log_dens, *, tol: float = 1e-10, max_iter: int = 100_000) -> Stacking:
    """Stacking weights of K predictive distributions from their (n, K) LOO log densities."""
    lp = np.asarray(loo_log_dens, np.float64)
    if lp.ndim != 2 or lp.shape[0] < 1 or lp.shape[1] < 1:
        raise SSGPError(f"stacking needs an (n, K) matrix of LOO log densities, got {lp.shape}")
    if not np.all(np.isfinite(lp) | (lp == -np.inf)) or np.any(np.all(lp == -np.inf, axis=1)):
        raise SSGPError("stacking: LOO log densities must be finite (a row may be -inf for some "
                        "but not all paths)")
    n, k = lp.shape
    log_w = np.full(k, -np.log(k))
    it, done = 0, False
    while not done and it < max_iter:
        it += 1
        joint = lp + log_w  # (n, K): log wₖ pᵢₖ
        new = logsumexp(joint - logsumexp(joint, axis=1, keepdims=True), axis=0) - np.log(n)
        done = np.max(np.abs(np.exp(new) - np.exp(log_w))) < tol
        log_w = new
    w = np.exp(log_w - logsumexp(log_w))
    return Stacking(w, float(logsumexp(lp + np.log(np.maximum(w, 1e-300)), axis=1).sum()), it)


__all__ = ["COMBINE", "Stacking", "stacking_weights"]
