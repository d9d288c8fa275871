"""Observation models p(y | f) for the SSGP feature model f = φ_θ(x)ᵀs (Wei et al. 2021, §2, Table 1).

Each likelihood is a set of pure functions of (y, f) or of a Gaussian q(f) = N(mu, var):

* ``log_prob(y, f, scale)``: log p(y | f) (``scale`` is σ_n for the Gaussian and Student-t,
  ignored by probit and Poisson);
* ``expected_log_prob(y, mu, var, scale)``: E_q[log p(y | f)], the ELBO's loss term; closed form
  for the Gaussian and the Poisson (log link), Gauss-Hermite quadrature otherwise;
* ``log_expected_prob(y, mu, var, scale)``: log E_q[p(y | f)] = log q(y), the log-loss DLM term
  (Wei et al. 2021, §1.1); closed form for the Gaussian (log N(y | mu, var + σ²)) and probit
  (log Φ((2y − 1) mu / √(1 + var)), Wei et al. 2021, §2); Laplace-centred Gauss-Hermite for the
  Poisson; for the Student-t, Gauss-Laguerre over its Gaussian scale mixture;
* ``mean(mu, var)``: E_q[E[y | f]], the prediction ŷ of square-loss DLM (Wei et al. 2021, §2) and the
  mean of the predictive; for the Poisson E_q[e^f] = exp(mu + var/2) (Wei et al. 2021, supp. "Evaluation");
* ``prob_max(y, scale)`` and ``interval_max(y, a, b, scale)``: ℓ_max = max_f p(y | f) and
  m₁ = max_{f ∈ [a, b]} p(y | f), what the uPS rejection sampler needs (Wei et al. 2021, supp. §1).

Probit targets are y ∈ {0, 1}; Poisson targets are counts y ∈ {0, 1, 2, ...}.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln, logsumexp
from jax.scipy.stats import norm
from scipy.special import gammaln as gammaln_np
from scipy.special import roots_genlaguerre

from ssgp_ppl.errors import SSGPError

LIKELIHOODS = ("gaussian", "student_t", "probit", "poisson")
QUADRATURE_NODES = 32


def hermite(nodes: int = QUADRATURE_NODES):
    """Gauss-Hermite nodes and log weights for E_{N(0,1)}[g(ε)] ≈ Σ_k w_k g(ε_k)."""
    t, w = np.polynomial.hermite.hermgauss(nodes)
    return np.sqrt(2.0) * t, np.log(w / np.sqrt(np.pi))


def _quad_points(mu, var, nodes):
    eps, logw = hermite(nodes)
    f = mu[..., None] + jnp.sqrt(var)[..., None] * eps  # (..., K)
    return f, jnp.asarray(logw, f.dtype)


class Likelihood(NamedTuple):
    """The pure functions of one observation model (see the module docstring)."""

    name: str
    has_scale: bool  # uses the noise site σ_n as its scale
    target: str  # continuous | binary | count
    log_prob: callable
    expected_log_prob: callable
    log_expected_prob: callable
    mean: callable
    prob_max: callable
    interval_max: callable
    distribution: callable  # (f, scale) -> numpyro distribution of y
    noise_variance: callable = None  # scale -> Var[y | f] (continuous likelihoods)


def _quadrature_expected_log(log_prob):
    def expected_log_prob(y, mu, var, scale=None, nodes=QUADRATURE_NODES):
        f, logw = _quad_points(mu, var, nodes)
        return jnp.sum(jnp.exp(logw) * log_prob(y[..., None], f, scale), axis=-1)

    return expected_log_prob


def _laplace_log_expected(log_prob):
    """log ∫ N(f | mu, var) p(y | f) df by Gauss-Hermite centred on the tilted density, for a
    log-concave p (the Poisson).

    p(y | f) can be much narrower than q (a count of 17 under q(f) = N(0.4, 1.7)) and nodes
    spread over q then miss it; the nodes are placed on N(f̂, ŝ²), the Laplace approximation of
    q(f)p(y | f) (damped Newton steps from mu), and the integrand is reweighted by
    q·p / N(f̂, ŝ²), an identity for any centre (with 32 nodes: within 1e-7 relative of dense
    quadrature for counts up to 250 in the tests, and equal to the 64-node value to 1e-12 for a
    count of 1062). (A heavy-tailed p under a wide q would put mass outside the Laplace fit: Student-t
    uses its scale-mixture rule instead.)
    """

    def log_expected_prob(y, mu, var, scale=None, nodes=QUADRATURE_NODES):
        eps, logw = hermite(nodes)
        sc = scale if scale is None or jnp.ndim(scale) == 0 else jnp.asarray(scale)[..., None]

        def dlp(f):
            return jax.grad(lambda g: jnp.sum(log_prob(y, g, scale)))(f)

        def d2lp(f):
            return jax.grad(lambda g: jnp.sum(dlp(g)))(f)

        m0, v0 = jax.lax.stop_gradient(mu), jax.lax.stop_gradient(var)
        f = jnp.broadcast_to(m0, jnp.broadcast_shapes(jnp.shape(y), jnp.shape(m0))).astype(m0.dtype)
        for _ in range(30):  # damped Newton: steps of at most 3 sd of q
            step = ((m0 - f) / v0 + dlp(f)) / (1.0 / v0 - d2lp(f))
            f = f + jnp.clip(step, -3.0 * jnp.sqrt(v0), 3.0 * jnp.sqrt(v0))
        centre = jax.lax.stop_gradient(f)
        sd = jax.lax.stop_gradient(1.0 / jnp.sqrt(1.0 / v0 - d2lp(f)))
        pts = centre[..., None] + sd[..., None] * eps
        log_int = (norm.logpdf(pts, mu[..., None], jnp.sqrt(var)[..., None])
                   + log_prob(y[..., None], pts, sc) - norm.logpdf(pts, centre[..., None], sd[..., None]))
        return logsumexp(jnp.asarray(logw, pts.dtype) + log_int, axis=-1)

    return log_expected_prob


# ----------------------------------------------------------------------------- Gaussian


def _gauss_log_prob(y, f, scale):
    return norm.logpdf(y, f, scale)


def _gauss_expected_log(y, mu, var, scale, nodes=None):
    return norm.logpdf(y, mu, scale) - 0.5 * var / scale**2


def _gauss_log_expected(y, mu, var, scale, nodes=None):
    return norm.logpdf(y, mu, jnp.sqrt(var + scale**2))


def _unimodal_interval_max(log_prob, mode):
    def interval_max(y, a, b, scale=None):
        pa, pb = jnp.exp(log_prob(y, a, scale)), jnp.exp(log_prob(y, b, scale))
        fm = mode(y, scale)
        inside = (fm >= a) & (fm <= b)
        return jnp.where(inside, jnp.exp(log_prob(y, fm, scale)), jnp.maximum(pa, pb))

    return interval_max


GAUSSIAN = Likelihood(
    "gaussian", True, "continuous", _gauss_log_prob, _gauss_expected_log, _gauss_log_expected,
    mean=lambda mu, var: mu,
    prob_max=lambda y, scale=None: jnp.exp(norm.logpdf(y, y, scale)),
    interval_max=_unimodal_interval_max(_gauss_log_prob, lambda y, s: y),
    distribution=lambda f, scale: dist.Normal(f, scale),
    noise_variance=lambda scale: scale**2,
)

# ----------------------------------------------------------------------------- Student-t

STUDENT_T_DF = 4.0
SCALE_MIXTURE_NODES = 256  # ≤ 3e-5 relative even with y far in q's tail (64: 2e-3)


def student_t(df: float = STUDENT_T_DF) -> Likelihood:
    """Student-t noise with ``df`` degrees of freedom and scale σ_n (Wei et al. 2021, Table 1)."""

    def log_prob(y, f, scale):
        return dist.StudentT(df, f, scale).log_prob(y)

    # t_ν(y | f, σ) = ∫ N(y | f, σ²/w) Gamma(w | ν/2, ν/2) dw, so log E_q p = log E_w N(y | mu,
    # var + σ²/w): generalised Gauss-Laguerre in w (smooth in w, unlike p in f under a wide q)
    def log_expected_prob(y, mu, var, scale, nodes=SCALE_MIXTURE_NODES):
        x, w = roots_genlaguerre(nodes, df / 2 - 1)
        x, w = x[w > 0], w[w > 0]  # the far nodes' weights underflow to 0: they add nothing
        w_mix, log_wts = 2.0 * x / df, np.log(w) - gammaln_np(df / 2)
        sc = jnp.asarray(scale)[..., None] if jnp.ndim(scale) else scale
        sd = jnp.sqrt(var[..., None] + sc**2 / w_mix)
        return logsumexp(log_wts + norm.logpdf(y[..., None], mu[..., None], sd), axis=-1)

    return Likelihood(
        "student_t", True, "continuous", log_prob, _quadrature_expected_log(log_prob),
        log_expected_prob, mean=lambda mu, var: mu,
        prob_max=lambda y, scale=None: jnp.exp(log_prob(y, y, scale)),
        interval_max=_unimodal_interval_max(log_prob, lambda y, s: y),
        distribution=lambda f, scale: dist.StudentT(df, f, scale),
        noise_variance=lambda scale: scale**2 * df / (df - 2),  # finite for ν > 2 (catalog)
    )


# ----------------------------------------------------------------------------- probit


def _probit_log_prob(y, f, scale=None):
    return norm.logcdf((2.0 * y - 1.0) * f)


def _probit_log_expected(y, mu, var, scale=None, nodes=None):
    return norm.logcdf((2.0 * y - 1.0) * mu / jnp.sqrt(1.0 + var))


def _probit_interval_max(y, a, b, scale=None):  # monotone in f: the maximum is at an endpoint
    return jnp.exp(jnp.maximum(_probit_log_prob(y, a), _probit_log_prob(y, b)))


PROBIT = Likelihood(
    "probit", False, "binary", _probit_log_prob, _quadrature_expected_log(_probit_log_prob),
    _probit_log_expected,
    mean=lambda mu, var: norm.cdf(mu / jnp.sqrt(1.0 + var)),
    prob_max=lambda y, scale=None: jnp.ones_like(y),
    interval_max=_probit_interval_max,
    distribution=lambda f, scale=None: dist.Bernoulli(probs=norm.cdf(f)),
)

# ----------------------------------------------------------------------------- Poisson


def _poisson_log_prob(y, f, scale=None):
    return y * f - jnp.exp(f) - gammaln(y + 1.0)


def _poisson_expected_log(y, mu, var, scale=None, nodes=None):
    return y * mu - jnp.exp(mu + 0.5 * var) - gammaln(y + 1.0)


def _poisson_mode(y, scale=None):  # argmax_f: e^f = y (f → −∞ for y = 0, where p → 1)
    return jnp.log(jnp.maximum(y, 1e-30))


def _poisson_prob_max(y, scale=None):
    return jnp.exp(_poisson_log_prob(y, _poisson_mode(y)))


POISSON = Likelihood(
    "poisson", False, "count", _poisson_log_prob, _poisson_expected_log,
    _laplace_log_expected(_poisson_log_prob),
    mean=lambda mu, var: jnp.exp(mu + 0.5 * var),
    prob_max=_poisson_prob_max,
    interval_max=_unimodal_interval_max(_poisson_log_prob, _poisson_mode),
    distribution=lambda f, scale=None: dist.Poisson(jnp.exp(f)),
)


def get(name: str, df: float = STUDENT_T_DF) -> Likelihood:
    """The likelihood called ``name`` (one of :data:`LIKELIHOODS`)."""
    if name == "gaussian":
        return GAUSSIAN
    if name == "student_t":
        return student_t(df)
    if name == "probit":
        return PROBIT
    if name == "poisson":
        return POISSON
    raise SSGPError(f"unknown likelihood {name!r}; known: {', '.join(LIKELIHOODS)}")


__all__ = ["GAUSSIAN", "LIKELIHOODS", "POISSON", "PROBIT", "Likelihood", "get", "hermite",
           "student_t"]
