"""Stacking weights (ssgp_ppl.stacking) on constructed cases with a known optimum, and the
closed-form LOO predictive of the collapsed model (ssgp_ppl.predictive.loo_predictive) against
brute-force refits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.predictive import loo_predictive
from ssgp_ppl.stacking import stacking_weights


@pytest.mark.parametrize("f", [0.4, 0.5, 0.6])
def test_two_paths_with_an_analytic_optimum(f):
    """Rows where path 1 has density 2 and path 2 density 1 (a share f) and the reverse: the
    score f log(1 + w) + (1 − f) log(2 − w) is maximal at w = 3f − 1."""
    n = 1000
    rows = int(f * n)
    p = np.where(np.arange(n)[:, None] < rows, [[2.0, 1.0]], [[1.0, 2.0]])
    res = stacking_weights(np.log(p))
    np.testing.assert_allclose(res.weights, [3 * f - 1, 2 - 3 * f], atol=1e-6)


def test_a_dominated_path_gets_no_weight_and_the_weights_sum_to_one():
    rng = np.random.default_rng(0)
    good = rng.normal(-1.0, 0.3, size=200)
    lp = np.stack([good, good - 3.0, good - 0.2 + rng.normal(0, 0.05, 200)], axis=1)
    res = stacking_weights(lp)
    assert res.weights.sum() == pytest.approx(1.0) and res.weights[1] < 1e-4
    # no other point of the simplex scores higher
    for w in rng.dirichlet(np.ones(3), size=200):
        assert np.log(np.exp(lp) @ w).sum() <= res.score + 1e-9


def test_stacking_refuses_rows_no_path_explains():
    with pytest.raises(SSGPError, match="must be finite"):
        stacking_weights(np.array([[0.0, -np.inf], [-np.inf, -np.inf]]))


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_loo_predictive_equals_brute_force_refits(x64):
    """Each row's LOO predictive equals the exact GP predictive of that row from the other n − 1
    rows with K = σ_s²/m ΦΦᵀ + σ_n² I (dense float64 refits)."""
    rng = np.random.default_rng(3)
    n, d, m = 25, 2, 4
    x = rng.normal(size=(n, d))
    freq = rng.normal(scale=0.3, size=(m, d))
    signal, noise = 1.3, 0.4
    y = np.sin(x[:, 0]) + 0.3 * rng.normal(size=n)
    with jax.enable_x64(x64):
        mean, var, lp = loo_predictive(jnp.asarray(x), jnp.asarray(y), jnp.asarray(freq),
                                       signal, noise)
    z = 2 * np.pi * x @ freq.T
    phi = np.stack([np.cos(z), np.sin(z)], -1).reshape(n, -1)
    k = signal**2 / m * phi @ phi.T + noise**2 * np.eye(n)
    for i in range(n):
        o = np.delete(np.arange(n), i)
        sol = np.linalg.solve(k[np.ix_(o, o)], np.stack([y[o], k[o, i]], 1))
        mu, v = k[i, o] @ sol[:, 0], k[i, i] - k[i, o] @ sol[:, 1]
        ref = -0.5 * (np.log(2 * np.pi * v) + (y[i] - mu) ** 2 / v)
        tol = 1e-9 if x64 else 2e-4
        assert float(mean[i]) == pytest.approx(mu, rel=tol, abs=tol)
        assert float(var[i]) == pytest.approx(v, rel=tol)
        assert float(lp[i]) == pytest.approx(ref, rel=tol, abs=tol)
