"""Training objectives beyond the ELBO, as plain functions returning a scalar (Wei et al. 2021).

Every objective has NumPyro's loss signature ``objective(rng_key, params, model, guide, x, y,
**model_kwargs) -> scalar`` (``params`` constrained) and is minimised; :class:`Objective` wraps one
so that ``numpyro.infer.SVI`` (and :func:`ssgp_ppl.inference.runners.run_svi`) can use it.

* ``elbo`` / ``beta_elbo``: Σᵢ E_q[−log p(yᵢ | fᵢ)] + β KL(q ‖ p) (Wei et al. 2021, §1.1; β = 1 is the
  negative ELBO);
* ``dlm_log``: Σᵢ −log E_q[p(yᵢ | fᵢ)] + β KL(q ‖ p), log-loss direct loss minimisation
  (Wei et al. 2021, §1.1);
* ``dlm_square``: Σᵢ (ŷᵢ − yᵢ)² + β KL(q ‖ p), ŷᵢ = E_q[E[yᵢ | fᵢ]] the predictive mean (Wei et al. 2021
  §1.1, §2);
* ``avi_elbo``: the negative ELBO of the ``mixture`` guide with the score-function,
  Rao-Blackwellised gradients and the entropy bound of Nguyen & Bonilla 2014 (§3-5), see :func:`avi_elbo`.

**Inner expectations.** fᵢ = φ_θ(xᵢ)ᵀs is linear in the nuisance s. Where the guide's q(s | rest)
is Gaussian and known in closed form (guides whose ``gaussian_nuisance`` is True: joint
affine with ψ = normal, mean field, Gaussian λ; :class:`ssgp_ppl.model.guides.Guide`), each draw of
the other latents (θ or λ, the scales) gives q(fᵢ | rest) = N(μᵢ, vᵢ) exactly, and the
expectation over s is done exactly: the Gaussian ELBO term, log N(yᵢ | μᵢ, vᵢ + σ²) for log-loss
DLM, and the KL of s in closed form.
Otherwise s is drawn too (vᵢ = 0). The remaining expectation over θ is Monte Carlo with
``particles`` draws (for log-loss DLM: −log of the average over particles, biased like bMC).

**Log-expectation terms for non-conjugate likelihoods** (``gradient``; Wei et al. 2021, §3-4, supp. §1):
``exact`` (the likelihood's closed form, where it declares one: ``exact_log_expected``),
``quadrature`` (the likelihood's rule with ``samples`` nodes: Laplace-centred Gauss-Hermite for the
Poisson, scale-mixture Gauss-Laguerre for Student-t),
``bmc`` (−log of the mean of ``samples`` draws fᵢ ~ q(fᵢ | rest), reparameterised; biased),
``ups`` (unbiased product sampling: the gradient is the mean over ``samples`` draws from
q̃(f) ∝ q(f) p(y | f) of ∇ log q(f), drawn by the supplement's rejection sampler).

Minibatches are scaled like the ELBO: the data term of a batch of b rows is multiplied by n/b
(``n_total``) or by ``obs_scale`` (p/a partitions) and masked by ``obs_mask``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import logsumexp
from jax.scipy.stats import norm
from numpyro import handlers

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import spectral
from ssgp_ppl.model.likelihoods import Likelihood

OBJECTIVES = ("elbo", "beta_elbo", "dlm_log", "dlm_square")
GRADIENTS = ("exact", "quadrature", "bmc", "ups")


class Particle(NamedTuple):
    """One draw of the guide, as the objectives see it (b rows of the batch)."""

    mu: jax.Array  # (b,) mean of f given the drawn latents other than s (or f itself)
    var: jax.Array  # (b,) variance of f given them (0 when s was drawn)
    scale: jax.Array  # () likelihood scale σ_n (1 where the likelihood has none)
    kl: jax.Array  # () one-draw estimate of KL(q ‖ p), exact in s where q(s | rest) is known


def _sum_log_prob(site) -> jax.Array:
    lp = jnp.sum(site["fn"].log_prob(site["value"]))
    return lp if site.get("scale") is None else site["scale"] * lp


def gaussian_kl(loc, scale_tril, prior_sd) -> jax.Array:
    """KL(N(loc, LLᵀ) ‖ N(0, prior_sd² I)) for a D-vector (closed form)."""
    d = loc.shape[-1]
    tr = jnp.sum(scale_tril**2) / prior_sd**2
    logdet_q = 2.0 * jnp.sum(jnp.log(jnp.abs(jnp.diagonal(scale_tril))))
    return 0.5 * (tr + loc @ loc / prior_sd**2 - d + 2.0 * d * jnp.log(prior_sd) - logdet_q)


def particle(key, params, model, guide, x, model_kwargs: dict) -> Particle:
    """Draw the guide once (reparameterised) and reduce the draw to :class:`Particle`."""
    spec = guide.spec
    if spec.nuisance != "sampled":
        raise SSGPError("objectives other than the Gaussian ELBO need model.nuisance = 'sampled'")
    gtr = handlers.trace(handlers.seed(handlers.substitute(guide, data=params), key)).get_trace(
        x, None, **model_kwargs)
    gsites = {k: v for k, v in gtr.items() if v["type"] == "sample"}
    draw = {k: v["value"] for k, v in gsites.items() if not v["infer"].get("is_auxiliary")}
    log_q = sum(_sum_log_prob(v) for v in gsites.values())
    mtr = handlers.trace(handlers.substitute(handlers.seed(model, key), data={**params, **draw})
                         ).get_trace(x, None, **model_kwargs)
    latent = [v for k, v in mtr.items() if v["type"] == "sample" and not v.get("is_observed")
              and k != "y"]
    log_p = sum(_sum_log_prob(v) for v in latent)
    freq = mtr["frequencies"]["value"]
    signal = mtr["signal"]["value"]
    scale = mtr["noise"]["value"] if "noise" in mtr else jnp.ones((), freq.dtype)
    phi = spectral.features(x, freq)  # (b, 2m)
    s = draw["nuisance"]
    if not guide.gaussian_nuisance:
        return Particle(phi @ s, jnp.zeros(x.shape[0], phi.dtype), scale, log_q - log_p)
    both = guide.conditional_and_marginal(params, draw)  # log q(rest) without log q(θ, s)
    if both is not None:
        loc, tril, log_q_rest = both
    else:
        loc, tril = guide.nuisance_conditional(params, draw)
        log_q_rest = log_q - dist.MultivariateNormal(loc, scale_tril=tril).log_prob(s)
    prior_sd = signal / math.sqrt(spec.m)
    log_p_rest = log_p - jnp.sum(dist.Normal(0.0, prior_sd).log_prob(s))
    kl = log_q_rest - log_p_rest + gaussian_kl(loc, tril, prior_sd)
    return Particle(phi @ loc, jnp.sum((phi @ tril) ** 2, axis=-1), scale, kl)


def particles_of(key, params, model, guide, x, model_kwargs: dict, count: int) -> Particle:
    """``count`` independent particles, stacked on a leading axis."""
    keys = jax.random.split(key, count)
    return jax.vmap(lambda k: particle(k, params, model, guide, x, model_kwargs))(keys)


def data_weights(b: int, model_kwargs: dict, dtype):
    """Per-row weight of the data term: the minibatch scale times the mask (as the model's)."""
    n_total, mask, obs_scale = (model_kwargs.get(k) for k in ("n_total", "obs_mask", "obs_scale"))
    scale = obs_scale if obs_scale is not None else (1.0 if n_total is None else n_total / b)
    w = jnp.full((b,), scale, dtype)
    return w if mask is None else w * mask


# ------------------------------------------------------------------ log-expectation estimators


def bmc_log_expected(key, lik: Likelihood, y, mu, var, scale, samples: int):
    """bMC: log (1/L) Σ_l p(y | f_l), f_l = mu + √var ε_l (Wei et al. 2021, §4, eqs. 7-8); biased in L."""
    eps = jax.random.normal(key, (samples,) + mu.shape, mu.dtype)
    f = mu + jnp.sqrt(var) * eps
    return logsumexp(lik.log_prob(y, f, scale), axis=0) - math.log(samples)


WIDTHS = 10  # the supplement picks the proposal width multiplier n ≤ 10


def product_samples(key, lik: Likelihood, y, mu, var, scale, samples: int,
                    max_rounds: int = 10_000):
    """``samples`` draws per entry from q̃(f) ∝ N(f | mu, var) p(y | f) (Wei et al. 2021, supp. §1).

    Rejection sampling from h₂ = N(mu, n·var) with K = ℓ_max = max_f p(y | f): n is the largest
    n ≤ 10 with m₁ ≤ ℓ_max/√n, m₁ = max p(y | f) on [a, b] = mu ± r, r = √var·√(log n / (1 − 1/n))
    (the intersections of q and h₂); then K h₂ ≥ q·ℓ everywhere. Proposals are vectorised over
    all entries and repeated until every entry has its draws or ``max_rounds`` is reached (an
    entry still without a draw then keeps mu: a bias, reported as the third output). Returns
    (draws (samples, ...), rounds used, fraction of draws not accepted).
    """
    sd = jnp.sqrt(var)
    n = jnp.arange(1, WIDTHS + 1, dtype=mu.dtype)
    ratio = jnp.where(n > 1, jnp.log(n) / (1.0 - 1.0 / jnp.where(n > 1, n, 2.0)), 1.0)
    r = sd[..., None] * jnp.sqrt(ratio)
    m1 = lik.interval_max(y[..., None], mu[..., None] - r, mu[..., None] + r,
                          scale if jnp.ndim(scale) == 0 else scale[..., None])
    lmax = lik.prob_max(y, scale)
    ok = m1 <= lmax[..., None] / jnp.sqrt(n) * (1 + 1e-6)
    width = jnp.max(jnp.where(ok, n, 1.0), axis=-1)  # n = 1 always satisfies the condition
    prop_sd = jnp.sqrt(width) * sd
    log_lmax = jnp.log(lmax)
    shape = (samples,) + mu.shape

    def cond(state):
        _, done, _, rounds = state
        return (~jnp.all(done)) & (rounds < max_rounds)

    def body(state):
        k, done, out, rounds = state
        k, k1, k2 = jax.random.split(k, 3)
        f = mu + prop_sd * jax.random.normal(k1, shape, mu.dtype)
        log_acc = (norm.logpdf(f, mu, sd) + lik.log_prob(y, f, scale) - log_lmax
                   - norm.logpdf(f, mu, prop_sd))
        acc = jnp.log(jax.random.uniform(k2, shape, mu.dtype)) < log_acc
        take = acc & ~done
        return k, done | acc, jnp.where(take, f, out), rounds + 1

    init = (key, jnp.zeros(shape, bool), jnp.broadcast_to(mu, shape), 0)
    _, done, out, rounds = jax.lax.while_loop(cond, body, init)
    return out, rounds, 1.0 - jnp.mean(done)


def ups_log_expected(key, lik: Likelihood, y, mu, var, scale, samples: int):
    """log E_{N(f|mu,var)} p(y | f) with the unbiased product-sampling gradient (Wei et al. 2021, Prop. 1).

    Value: the bMC estimate with as many draws (the reported loss only). Gradient: the mean over
    draws f̃ ~ q̃ of ∇_{mu,var} log N(f̃ | mu, var) (Prop. 1), and of ∂_σ log p(y | f̃, σ) for the
    likelihood's scale (E_q̃[∇ log p] = ∇ log E_q p by the same argument), each unbiased; written as
    a surrogate whose value is zero and whose gradient is that estimate.
    """
    k_value, k_ps = jax.random.split(key)
    f, _, _ = product_samples(k_ps, lik, y, jax.lax.stop_gradient(mu), jax.lax.stop_gradient(var),
                           jax.lax.stop_gradient(scale), samples)
    f = jax.lax.stop_gradient(f)
    surrogate = jnp.mean(norm.logpdf(f, mu, jnp.sqrt(var)), axis=0)
    if lik.has_scale:
        surrogate = surrogate + jnp.mean(lik.log_prob(y, f, scale), axis=0)
    value = bmc_log_expected(k_value, lik, y, mu, var, scale, samples)
    return jax.lax.stop_gradient(value) + surrogate - jax.lax.stop_gradient(surrogate)


def log_expected(key, lik: Likelihood, y, mu, var, scale, gradient: str, samples: int):
    """log E_{N(f | mu, var)} p(y | f) by the chosen estimator (see the module docstring)."""
    if gradient == "exact":
        if not lik.exact_log_expected:
            raise SSGPError(f"gradient 'exact': log E_q p(y | f) has no closed form under the "
                            f"{lik.name} likelihood (use quadrature, bmc or ups)")
        return lik.log_expected_prob(y, mu, var, scale)
    if gradient == "quadrature":  # the likelihood's own rule with ``samples`` nodes
        return lik.log_expected_prob(y, mu, var, scale, nodes=samples)
    if gradient == "bmc":
        return bmc_log_expected(key, lik, y, mu, var, scale, samples)
    if gradient == "ups":
        return ups_log_expected(key, lik, y, mu, var, scale, samples)
    raise SSGPError(f"unknown gradient estimator {gradient!r}; known: {', '.join(GRADIENTS)}")


# ------------------------------------------------------------------------------ objectives


def _loss(kind: str, rng_key, params, model, guide, x, y, *, beta: float, particles: int,
          gradient: str, samples: int, **model_kwargs):
    spec = guide.spec
    lik = spec.lik
    key_p, key_e = jax.random.split(rng_key)
    p = particles_of(key_p, params, model, guide, x, model_kwargs, particles)
    w = data_weights(x.shape[0], model_kwargs, p.mu.dtype)
    scale = p.scale[:, None]
    drawn = not guide.gaussian_nuisance  # var = 0: f itself was drawn
    if kind == "elbo":
        per_row = -jnp.mean(lik.log_prob(y, p.mu, scale) if drawn
                            else lik.expected_log_prob(y, p.mu, p.var, scale), axis=0)
    elif kind == "dlm_log":
        inner = lik.log_prob(y, p.mu, scale) if drawn else log_expected(
            key_e, lik, y, p.mu, p.var, scale, gradient, samples)  # (P, b)
        per_row = -(logsumexp(inner, axis=0) - math.log(particles))
    elif kind == "dlm_square":
        yhat = lik.mean(p.mu, p.var)  # (P, b)
        if particles >= 2:  # (ā − y)(b̄ − y) from two independent halves: unbiased for (ŷ − y)²
            h = particles // 2
            per_row = (jnp.mean(yhat[:h], 0) - y) * (jnp.mean(yhat[h:2 * h], 0) - y)
        else:
            per_row = (yhat[0] - y) ** 2
    else:
        raise SSGPError(f"unknown objective {kind!r}; known: {', '.join(OBJECTIVES)}")
    return jnp.sum(w * per_row) + beta * jnp.mean(p.kl)


def beta_elbo(rng_key, params, model, guide, x, y=None, *, beta: float = 1.0, particles: int = 1,
              **model_kwargs):
    """Σᵢ E_q[−log p(yᵢ | fᵢ)] + β KL(q ‖ p) (Wei et al. 2021, §1.1); β = 1 is the negative ELBO."""
    return _loss("elbo", rng_key, params, model, guide, x, y, beta=beta, particles=particles,
                 gradient="exact", samples=1, **model_kwargs)


def dlm_log(rng_key, params, model, guide, x, y=None, *, beta: float = 1.0, particles: int = 1,
            gradient: str = "exact", samples: int = 10, **model_kwargs):
    """Σᵢ −log E_q[p(yᵢ | fᵢ)] + β KL(q ‖ p): log-loss DLM (Wei et al. 2021, §1.1)."""
    return _loss("dlm_log", rng_key, params, model, guide, x, y, beta=beta, particles=particles,
                 gradient=gradient, samples=samples, **model_kwargs)


def dlm_square(rng_key, params, model, guide, x, y=None, *, beta: float = 1.0, particles: int = 2,
               **model_kwargs):
    """Σᵢ (ŷᵢ − yᵢ)² + β KL(q ‖ p), ŷᵢ the predictive mean: square-loss DLM (Wei et al. 2021, §1.1, §2)."""
    return _loss("dlm_square", rng_key, params, model, guide, x, y, beta=beta,
                 particles=particles, gradient="exact", samples=1, **model_kwargs)


class Objective:
    """A plain objective function as a NumPyro loss (``SVI(model, guide, optim, Objective(f))``).

    Discrete guide sites are allowed (``can_infer_discrete``): the only one in the catalog is the
    mixture's component index, whose equal weights do not depend on any parameter.
    """

    can_infer_discrete = True

    def __init__(self, fn: Callable, **options):
        self.fn = partial(fn, **options) if options else fn

    def loss(self, rng_key, param_map, model, guide, *args, **kwargs):
        return self.fn(rng_key, param_map, model, guide, *args, **kwargs)

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        return {"loss": self.loss(rng_key, param_map, model, guide, *args, **kwargs),
                "mutable_state": None}


def make_objective(name: str, *, beta: float | None = 1.0, particles: int = 1,
                   gradient: str = "exact", samples: int = 10, guide=None) -> Objective | None:
    """The catalog's ``objective`` as a loss for SVI: the guide's own estimator where it has one
    (:meth:`~ssgp_ppl.model.guides.Guide.own_objective`: the mixture's Nguyen & Bonilla 2014 ELBO), else
    None for ``elbo`` (NumPyro's Trace_ELBO) or this module's function. ``beta=None`` leaves β
    unbound, to be passed with each update (β selection)."""
    own = None if guide is None else guide.own_objective(name)
    if own is not None:
        return Objective(own, samples=max(samples, 2))
    if name == "elbo":
        return None
    fns = {"beta_elbo": beta_elbo, "dlm_log": dlm_log, "dlm_square": dlm_square}
    if name not in fns:
        raise SSGPError(f"unknown objective {name!r}; known: {', '.join(OBJECTIVES)}")
    options: dict = {"particles": max(particles, 2) if name == "dlm_square" else particles}
    if name == "dlm_log":
        options.update(gradient=gradient, samples=samples)
    if beta is not None:
        options["beta"] = beta
    return Objective(fns[name], **options)


__all__ = ["GRADIENTS", "OBJECTIVES", "Objective", "beta_elbo", "dlm_log", "dlm_square",
           "gaussian_kl", "make_objective"]
