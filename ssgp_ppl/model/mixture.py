"""Mixture-of-Gaussians posteriors for α = vec(θ, s) (Nguyen & Bonilla 2014).

q(α) = (1/K) Σ_k N(α | m_k, diag S_k): K diagonal components with equal weights
(``alpha_loc`` (K, D), ``alpha_scale`` (K, D) = √S_k). :class:`ssgp_ppl.model.guides.MixtureGuide` is
the NumPyro guide (draws for predictions: pick k, then α; the predictive is Nguyen & Bonilla
2014, eq. 36 by Monte Carlo, its moments eqs. 37-38 = :func:`ssgp_ppl.diagnostics.metrics.mixture_moments`).
:func:`avi_elbo` is the negative ELBO the catalog's ``objective = "elbo"`` uses with this guide:

* expected log-likelihood: score-function gradients for the frequencies θ (Nguyen & Bonilla 2014, supp. eqs.
  9-10), Rao-Blackwellised (supp. §3, eqs. 16-20): under a diagonal component s and θ are
  independent, so the estimator conditions on θ and integrates s exactly,
  E_{q_k(s)} log p(yᵢ | θ, s) (closed form for the Gaussian and Poisson likelihoods, quadrature
  otherwise), whose gradient in the s-parameters is then exact given θ; a leave-one-out baseline
  over the ``samples`` draws replaces the constant C of eq. 26 (E ∇log q = 0);
* E_q[log p(α)] in closed form (supp. §4, eqs. 29-32);
* the entropy lower bound H[q] ≥ −(1/K) Σ_k log (1/K) Σ_l N(m_k | m_l, S_k + S_l) (supp. §5,
  whose gradients are eqs. 33-35; here by autodiff, tested against them).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import logsumexp
from numpyro import handlers

from ssgp_ppl.model import spectral


def entropy_bound(loc, scale) -> jax.Array:
    """H[q] ≥ −(1/K) Σ_k log z_k, z_k = (1/K) Σ_l N(m_k | m_l, S_k + S_l) (Nguyen & Bonilla 2014, supp. §5).

    loc, scale: (K, D) means and standard deviations √S_k of the diagonal components.
    """
    var = scale**2
    k = loc.shape[0]
    s = var[:, None, :] + var[None, :, :]  # (K, K, D)
    diff = loc[:, None, :] - loc[None, :, :]
    log_n = -0.5 * jnp.sum(jnp.log(2 * math.pi * s) + diff**2 / s, axis=-1)  # log N_kl
    log_z = logsumexp(log_n, axis=1) - math.log(k)
    return -jnp.mean(log_z)


def cross_entropy(loc, scale, prior_sd) -> jax.Array:
    """E_q[log p(α)] for p = N(0, diag prior_sd²) (Nguyen & Bonilla 2014, supp. eqs. 29-32, diagonal case)."""
    var = scale**2
    per = -0.5 * (jnp.log(2 * math.pi * prior_sd**2) + (loc**2 + var) / prior_sd**2)
    return jnp.mean(jnp.sum(per, axis=-1))


def _hyper_values(model, params, x, model_kwargs, spec):
    """Type-II / fixed hyperparameters as the model sees them (differentiable in params)."""
    d = x.shape[1]
    dummy = {"frequencies": jnp.zeros((spec.m, d), x.dtype),
             "nuisance": jnp.zeros(2 * spec.m, x.dtype)}
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data={**params, **dummy})
                        ).get_trace(x, None, **model_kwargs)
    noise = tr["noise"]["value"] if "noise" in tr else jnp.ones((), x.dtype)
    ell = tr["lengthscales"]["value"] if "lengthscales" in tr else jnp.full(
        (d,), spec.lengthscales.value, x.dtype)
    return noise, tr["signal"]["value"], ell


def avi_elbo(rng_key, params, model, guide, x, y=None, *, samples: int = 8, **model_kwargs):
    """Negative ELBO of the mixture guide with Nguyen & Bonilla 2014's estimators (module docstring).

    The returned value is the ELBO estimate (with the entropy bound); its gradient is the
    Rao-Blackwellised score-function estimate for the θ-parameters and exact (given the θ draws)
    for the s-parameters and the hyperparameters.
    """
    from ssgp_ppl.inference.objectives import data_weights

    spec = guide.spec
    lik = spec.lik
    loc, scale = params["alpha_loc"], params["alpha_scale"]  # (K, D)
    kc, dim = loc.shape
    m, d = spec.m, x.shape[1]
    n_theta = m * d
    noise, signal, ell = _hyper_values(model, params, x, model_kwargs, spec)
    w = data_weights(x.shape[0], model_kwargs, x.dtype)

    eps = jax.random.normal(rng_key, (kc, samples, n_theta), x.dtype)
    theta = jax.lax.stop_gradient(loc[:, None, :n_theta] + scale[:, None, :n_theta] * eps)

    def loglik(th, s_loc, s_sd):  # Σᵢ wᵢ E_{q_k(s)} log p(yᵢ | θ, s)
        phi = spectral.features(x, th.reshape(m, d))
        return jnp.sum(w * lik.expected_log_prob(y, phi @ s_loc, (phi**2) @ s_sd**2, noise))

    ell_ks = jax.vmap(lambda th_k, sl, ss: jax.vmap(lambda th: loglik(th, sl, ss))(th_k))(
        theta, loc[:, n_theta:], scale[:, n_theta:])  # (K, S)
    log_q = jnp.sum(dist.Normal(loc[:, None, :n_theta], scale[:, None, :n_theta]).log_prob(theta),
                    axis=-1)  # (K, S), score of q_k(θ)
    c = jax.lax.stop_gradient(ell_ks)
    baseline = (jnp.sum(c, axis=1, keepdims=True) - c) / (samples - 1)  # leave-one-out
    score = jnp.mean((c - baseline) * (log_q - jax.lax.stop_gradient(log_q)))
    expected_ll = jnp.mean(ell_ks)

    theta_sd = jnp.broadcast_to(1.0 / (spectral.TWO_PI * ell), (m, d)).ravel()
    prior_sd = jnp.concatenate([theta_sd, jnp.full((2 * m,), signal / math.sqrt(m))])
    elbo = expected_ll + cross_entropy(loc, scale, prior_sd) + entropy_bound(loc, scale)
    return -(elbo + score)


__all__ = ["avi_elbo", "cross_entropy", "entropy_bound"]
