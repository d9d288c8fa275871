"""Stacking weights (ssgp_ppl.inference.stacking) on constructed cases with a known optimum, and the
closed-form LOO predictive of the collapsed model (ssgp_ppl.model.predictive.loo_predictive) against
brute-force refits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.stacking import stacking_weights
from ssgp_ppl.model.predictive import loo_predictive


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


def _one_frequency_posterior(n=30, seed=1):
    """Data and the exact posterior of one scalar frequency θ (m = 1, d = 1, σ_s = 1, σ_n = 0.3,
    prior θ ~ N(0, 0.5²)) on a fine grid; with it the exact LOO predictive of each row,
    log p(yᵢ | y₋ᵢ) = log Σ_θ p(θ | y₋ᵢ) p(yᵢ | y₋ᵢ, θ), dense float64 linear algebra."""
    from scipy.special import logsumexp

    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-2, 2, n))[:, None]
    y = np.sin(2 * np.pi * 0.35 * x[:, 0]) + 0.3 * rng.normal(size=n)
    grid = np.linspace(-1.5, 1.5, 1501)
    z = 2 * np.pi * grid[:, None, None] * x[None]
    phi = np.concatenate([np.cos(z), np.sin(z)], -1)  # (G, n, 2)
    k = phi @ phi.transpose(0, 2, 1) + 0.3**2 * np.eye(n)
    alpha = np.linalg.solve(k, y)
    log_marginal = (-0.5 * alpha @ y - 0.5 * np.linalg.slogdet(k)[1]
                    - 0.5 * n * np.log(2 * np.pi))
    kinv_diag = np.diagonal(np.linalg.inv(k), axis1=1, axis2=2)
    lp_i = -0.5 * np.log(2 * np.pi / kinv_diag) - 0.5 * alpha**2 / kinv_diag  # (G, n)
    log_post = -0.5 * grid**2 / 0.5**2 + log_marginal
    log_post -= logsumexp(log_post)
    log_post_minus_i = log_post[:, None] - lp_i  # p(θ | y₋ᵢ) ∝ p(θ | y) / p(yᵢ | y₋ᵢ, θ)
    log_post_minus_i -= logsumexp(log_post_minus_i, axis=0)
    exact = logsumexp(log_post_minus_i + lp_i, axis=0)
    keep_i_in = logsumexp(log_post[:, None] + lp_i, axis=0)  # θ from p(θ | y): yᵢ not left out
    return x, y, grid, log_post, exact, keep_i_in


def test_path_loo_of_posterior_draws_is_the_exact_loo():
    """A path's LOO log score leaves θ out as well as s: on a posterior known on a grid, a
    chain's draws and a VI path's draws of that same posterior (q = p, with its log p and log q)
    both give the exact Σᵢ log p(yᵢ | y₋ᵢ) within 0.05 nats, while averaging p(yᵢ | y₋ᵢ, θ)
    over the posterior (yᵢ kept in θ's posterior) scores about 1.5 nats higher."""
    from types import SimpleNamespace

    import ssgp_ppl.inference.methods  # noqa: F401  (ssgp_ppl.inference.paths imports it; load it first)
    from ssgp_ppl.inference.paths import path_loo

    x, y, grid, log_post, exact, keep_i_in = _one_frequency_posterior()
    assert keep_i_in.sum() - exact.sum() > 1.0  # what the estimator must not return
    rng = np.random.default_rng(7)
    step = grid[1] - grid[0]

    def draws(count):
        return grid[rng.choice(len(grid), count, p=np.exp(log_post))] + \
            rng.uniform(-0.5, 0.5, count) * step

    def path(theta, **dens):
        sites = {"frequencies": theta[:, None, None], "signal": np.ones(len(theta)),
                 "noise": np.full(len(theta), 0.3)}
        return SimpleNamespace(flat_sites=sites, y_centre=0.0, model="toy", **dens)

    data = SimpleNamespace(x_train=x, y_train=y)
    chain = path_loo(path(draws(4000), log_p=None, log_q=None), data)
    theta = draws(4000)
    log_q = np.interp(theta, grid, log_post) - np.log(step)  # q is the posterior itself
    vi = path_loo(path(theta, log_p=log_q + 12.3, log_q=log_q), data)
    for score in (chain, vi):
        assert score.elpd.sum() == pytest.approx(exact.sum(), abs=0.05)
        np.testing.assert_allclose(score.elpd, exact, atol=0.02)
        assert np.all(score.pareto_k < 0.7)
    assert vi.elpd.sum() == pytest.approx(chain.elpd.sum(), abs=0.05)
