"""Observation models p(y | f) for the SSGP feature model f = φ_θ(x)ᵀs (Wei et al. 2021, §2, Table 1).

A likelihood is an instance of a :class:`Likelihood` subclass, registered in :data:`LIKELIHOODS`
under its ``name`` (the catalog's ``model.likelihood``). It owns everything that depends on it:

* the observation model: ``log_prob(y, f, scale)`` and ``distribution(f, scale)`` (the model's
  ``y`` site; ``scale`` is σ_n where ``has_scale``, else ignored), E[y | f] and Var[y | f];
* under a Gaussian q(f) = N(mu, var): ``expected_log_prob`` E_q[log p(y | f)] (the ELBO's loss
  term), ``log_expected_prob`` log E_q[p(y | f)] = log q(y) (the log-loss DLM term and the test
  NLL, Wei et al. 2021, §1.1), ``mean`` and ``variance`` of y (ŷ of square-loss DLM, Wei et al.
  2021, §2, and the predictive moments) and ``predictive_draws`` of y; each is a closed form where
  the class declares one (``exact_expected_log``, ``exact_log_expected``, ``exact_moments``),
  Gauss-Hermite quadrature otherwise;
* ``prob_max`` ℓ_max = max_f p(y | f) and ``interval_max`` m₁ = max_{f ∈ [a, b]} p(y | f), what the
  uPS rejection sampler needs (Wei et al. 2021, supp. §1);
* the data it takes (``target``: continuous, binary or count; ``check_target``), its task metrics
  (``task_metrics``), its catalog settings (``check_settings``, ``configure``) and whether s
  integrates out in closed form (``conjugate``).

:class:`ContinuousLikelihood`, :class:`BinaryLikelihood` and :class:`CountLikelihood` hold what
each kind of target shares; a new likelihood subclasses one and is registered with
:func:`register` (docs/guide/adding-a-model.md, "Adding a likelihood").
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln, logsumexp
from jax.scipy.stats import norm
from scipy.special import gammaln as gammaln_np
from scipy.special import roots_genlaguerre

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.plugins import Registry

QUADRATURE_NODES = 32
TARGETS = ("continuous", "binary", "count")


def hermite(nodes: int = QUADRATURE_NODES):
    """Gauss-Hermite nodes and log weights for E_{N(0,1)}[g(ε)] ≈ Σ_k w_k g(ε_k)."""
    t, w = np.polynomial.hermite.hermgauss(nodes)
    return np.sqrt(2.0) * t, np.log(w / np.sqrt(np.pi))


def _quad_points(mu, var, nodes):
    eps, logw = hermite(nodes)
    f = jnp.asarray(mu)[..., None] + jnp.sqrt(var)[..., None] * eps  # (..., K)
    return f, jnp.asarray(logw, f.dtype)


def _per_node(scale):
    """``scale`` broadcastable against (..., K) quadrature points."""
    return scale if scale is None or jnp.ndim(scale) == 0 else jnp.asarray(scale)[..., None]


@functools.partial(jax.jit, static_argnums=0)
def _sample_rows(lik, keys, mean_f, var_f, scale):
    """y (W, rows) from f moments (W, rows), row i from its own key ``keys[i]``."""

    def row(key, mf, vf):
        key_f, key_y = jax.random.split(key)
        f = mf + jnp.sqrt(vf) * jax.random.normal(key_f, mf.shape, mf.dtype)
        return lik.sample(key_y, f, scale)

    return jax.vmap(row, in_axes=(0, 1, 1), out_axes=1)(keys, mean_f, var_f)


class Likelihood:
    """An observation model p(y | f) and everything computed from it (see the module docstring).

    A subclass sets ``name`` and implements ``log_prob``, ``distribution``, ``conditional_mean``
    and ``conditional_variance``; the expectations under q(f) then come by Gauss-Hermite
    quadrature, and a closed form replaces one where it exists (declared by its flag).
    """

    name: str = ""
    description: str = ""  # one line, for the docs' list of likelihoods
    target: str = "continuous"  # continuous | binary | count: the data it takes
    has_scale: bool = False  # reads the model's noise site σ_n as its scale
    # p(y | f) = N(y | f, σ_n²): s integrates out in closed form (Hoang et al. 2017, App. E), the
    # marginal and local predictive rules apply, and y* given one draw is Gaussian
    conjugate: bool = False
    exact_expected_log: bool = False  # expected_log_prob is a closed form
    exact_log_expected: bool = False  # log_expected_prob is a closed form
    exact_moments: bool = False  # mean and variance are closed forms

    def __repr__(self) -> str:
        return f"<likelihood {self.name!r}>"

    # ------------------------------------------------------------------ observation model

    def log_prob(self, y, f, scale=None):
        """log p(y | f)."""
        raise NotImplementedError

    def distribution(self, f, scale=None):
        """The NumPyro distribution of y given f (the model's observed ``y`` site)."""
        raise NotImplementedError

    def sample(self, key, f, scale=None):
        """One y ~ p(y | f) per entry of f."""
        return self.distribution(f, scale).sample(key)

    def conditional_mean(self, f):
        """E[y | f]."""
        raise NotImplementedError

    def conditional_variance(self, f, scale=None):
        """Var[y | f]."""
        raise NotImplementedError

    # ------------------------------------------------------------------ under q(f) = N(mu, var)

    def expected_log_prob(self, y, mu, var, scale=None, nodes=QUADRATURE_NODES):
        """E_q[log p(y | f)] (Gauss-Hermite)."""
        f, logw = _quad_points(mu, var, nodes)
        return jnp.sum(jnp.exp(logw) * self.log_prob(jnp.asarray(y)[..., None], f,
                                                     _per_node(scale)), axis=-1)

    def log_expected_prob(self, y, mu, var, scale=None, nodes=QUADRATURE_NODES):
        """log E_q[p(y | f)] (Gauss-Hermite on q)."""
        f, logw = _quad_points(mu, var, nodes)
        return logsumexp(logw + self.log_prob(jnp.asarray(y)[..., None], f, _per_node(scale)),
                         axis=-1)

    def mean(self, mu, var):
        """E_q[E[y | f]], the predictive mean of y (Gauss-Hermite)."""
        f, logw = _quad_points(mu, var, QUADRATURE_NODES)
        return jnp.sum(jnp.exp(logw) * self.conditional_mean(f), axis=-1)

    def variance(self, mu, var, scale=None):
        """Var_q[y] = E_q[Var[y | f]] + Var_q[E[y | f]] (Gauss-Hermite)."""
        f, logw = _quad_points(mu, var, QUADRATURE_NODES)
        w = jnp.exp(logw)
        m = self.conditional_mean(f)
        mean = jnp.sum(w * m, axis=-1)
        return (jnp.sum(w * (self.conditional_variance(f, _per_node(scale)) + m**2), axis=-1)
                - mean**2)

    def predictive_draws(self, mean_f, var_f, scale=None, *, key, start=0, rng=None):
        """y draws (W, rows) given f ~ N(mean_f, var_f) (W, rows each): f drawn, then
        y ~ p(y | f, scale) (scale None or (W, 1)). Row i draws from ``fold_in(key, start + i)``,
        so a row's draws do not depend on how the rows are chunked; ``rng``, a NumPy generator
        shared by successive chunks, is for closed forms that draw row by row from one stream."""
        rows = np.shape(mean_f)[1]
        keys = jax.vmap(functools.partial(jax.random.fold_in, key))(jnp.arange(start, start + rows))
        sc = jnp.ones(()) if scale is None else jnp.asarray(scale).reshape(-1)
        return np.asarray(_sample_rows(self, keys, jnp.asarray(mean_f), jnp.asarray(var_f), sc),
                          np.float64)

    # ------------------------------------------------------------------ uPS bounds

    def mode(self, y, scale=None):
        """argmax_f p(y | f), for :meth:`prob_max` and :meth:`interval_max` of a unimodal p."""
        raise SSGPError(f"the {self.name} likelihood declares no mode: the uPS sampler "
                        "(gradient 'ups') needs prob_max and interval_max")

    def prob_max(self, y, scale=None):
        """ℓ_max = max_f p(y | f)."""
        return jnp.exp(self.log_prob(y, self.mode(y, scale), scale))

    def interval_max(self, y, a, b, scale=None):
        """m₁ = max_{f ∈ [a, b]} p(y | f) of a unimodal p: at the mode if inside, else an end."""
        pa, pb = jnp.exp(self.log_prob(y, a, scale)), jnp.exp(self.log_prob(y, b, scale))
        fm = self.mode(y, scale)
        inside = (fm >= a) & (fm <= b)
        return jnp.where(inside, jnp.exp(self.log_prob(y, fm, scale)), jnp.maximum(pa, pb))

    # ------------------------------------------------------------------ data, settings, scores

    def check_target(self, y, what: str = "y") -> None:
        """One SSGPError naming ``what`` where ``y`` is not data of this likelihood."""
        v = np.asarray(y)
        if not np.issubdtype(v.dtype, np.number) or not np.all(np.isfinite(v)):
            raise SSGPError(f"{what}: the {self.name} likelihood needs finite real numbers")

    def task_metrics(self, y, mean, var) -> dict[str, float]:
        """Scores of the predictive mean and variance (n,) on test targets y (original units)."""
        return {}

    def check_settings(self, model: dict, src: str) -> None:
        """One SSGPError naming ``src`` and the key where the catalog's [model] table ``model``
        gives this likelihood an impossible setting."""

    def configure(self, model: dict) -> Likelihood:
        """This likelihood with the settings it reads from the catalog's [model] table."""
        return self


# ----------------------------------------------------------------------------- target kinds


class ContinuousLikelihood(Likelihood):
    """y = f + σ_n ε with ε symmetric, unimodal and of finite variance: E[y | f] = f, the mode
    at f = y; scored by RMSE, NMSE, MNLP, CRPS and coverage (Tan et al. 2016, §7)."""

    target = "continuous"
    has_scale = True
    exact_moments = True

    def noise_variance(self, scale):
        """Var[y | f] as a function of σ_n."""
        raise NotImplementedError

    def conditional_mean(self, f):
        return f

    def conditional_variance(self, f, scale=None):
        return jnp.zeros_like(f) + self.noise_variance(scale)

    def mean(self, mu, var):
        return mu

    def variance(self, mu, var, scale=None):
        """var + Var[y | f]; ``scale`` None: ``var`` already is y's (closed-form predictive rules)."""
        return var if scale is None else var + self.noise_variance(scale)

    def mode(self, y, scale=None):
        return y

    def task_metrics(self, y, mean, var) -> dict[str, float]:
        from ssgp_ppl.diagnostics.metrics import regression_metrics

        if var is None:
            raise SSGPError(f"the {self.name} likelihood's metrics need the predictive variance")
        return regression_metrics(y, mean, var)


class BinaryLikelihood(Likelihood):
    """y ∈ {0, 1} with P(y = 1 | f) = ``conditional_mean(f)`` increasing in f (so p(y | f) is
    monotone and its maximum on an interval is at an end); scored by the error rate of
    P(y* = 1) > 1/2 and the Brier score."""

    target = "binary"

    def distribution(self, f, scale=None):
        return dist.Bernoulli(logits=self.log_prob(1.0, f) - self.log_prob(0.0, f))

    def conditional_variance(self, f, scale=None):
        p = self.conditional_mean(f)
        return p * (1.0 - p)

    def variance(self, mu, var, scale=None):
        p = self.mean(mu, var)
        return p * (1.0 - p)

    def prob_max(self, y, scale=None):
        return jnp.ones_like(y)

    def interval_max(self, y, a, b, scale=None):
        return jnp.exp(jnp.maximum(self.log_prob(y, a, scale), self.log_prob(y, b, scale)))

    def check_target(self, y, what: str = "y") -> None:
        v = np.asarray(y)
        bad = ~((v == 0) | (v == 1))
        if np.any(bad):
            raise SSGPError(f"{what}: the {self.name} likelihood needs binary targets (0 or 1); "
                            f"{int(np.sum(bad))} of {v.size} are not (e.g. {v[bad].flat[0]:g})")

    def task_metrics(self, y, mean, var) -> dict[str, float]:
        y, p = np.asarray(y, np.float64), np.asarray(mean, np.float64)
        return {"error_rate": float(np.mean((p > 0.5) != (y > 0.5))),
                "brier": float(np.mean((p - y) ** 2))}


class CountLikelihood(Likelihood):
    """y ∈ {0, 1, 2, ...}; scored by the mean relative error |ŷ − y| / max(1, y) (Wei et al.
    2021, supp. "Evaluation")."""

    target = "count"

    def check_target(self, y, what: str = "y") -> None:
        v = np.asarray(y)
        bad = ~((v >= 0) & (v == np.round(v)))
        if np.any(bad):
            raise SSGPError(f"{what}: the {self.name} likelihood needs non-negative integer "
                            f"counts; {int(np.sum(bad))} of {v.size} are not (e.g. "
                            f"{v[bad].flat[0]:g})")

    def task_metrics(self, y, mean, var) -> dict[str, float]:
        y = np.asarray(y, np.float64)
        return {"mre": float(np.mean(np.abs(np.asarray(mean, np.float64) - y)
                                     / np.maximum(1.0, y)))}


def _laplace_log_expected(log_prob, y, mu, var, scale, nodes):
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
    eps, logw = hermite(nodes)
    sc = _per_node(scale)

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


# ----------------------------------------------------------------------------- Gaussian


class Gaussian(ContinuousLikelihood):
    """y ~ N(f, σ_n²), the SSGP regression model (Hoang et al. 2017, eq. 3)."""

    name = "gaussian"
    description = "y ~ N(f, σ_n²): SSGP regression"
    conjugate = True
    exact_expected_log = True
    exact_log_expected = True

    def log_prob(self, y, f, scale=None):
        return norm.logpdf(y, f, scale)

    def distribution(self, f, scale=None):
        return dist.Normal(f, scale)

    def noise_variance(self, scale):
        return scale**2

    def expected_log_prob(self, y, mu, var, scale=None, nodes=None):
        return norm.logpdf(y, mu, scale) - 0.5 * var / scale**2

    def log_expected_prob(self, y, mu, var, scale=None, nodes=None):
        return norm.logpdf(y, mu, jnp.sqrt(var + scale**2))

    def predictive_draws(self, mean_f, var_f, scale=None, *, key, start=0, rng=None):
        """y ~ N(mean_f, var_f + σ_n²) in one step; from ``rng`` row by row where given."""
        if rng is None:
            return super().predictive_draws(mean_f, var_f, scale, key=key, start=start)
        var = var_f if scale is None else var_f + np.asarray(scale, np.float64) ** 2
        z = rng.standard_normal(np.shape(mean_f)[::-1]).T  # row by row: chunk-invariant
        return mean_f + np.sqrt(var) * z


# ----------------------------------------------------------------------------- Student-t

STUDENT_T_DF = 4.0
SCALE_MIXTURE_NODES = 256  # ≤ 3e-5 relative even with y far in q's tail (64: 2e-3)


class StudentT(ContinuousLikelihood):
    """Student-t noise with ``df`` degrees of freedom (the catalog's ``model.df``) and scale σ_n
    (Wei et al. 2021, Table 1)."""

    name = "student_t"
    description = "y ~ t_ν(f, σ_n) with ν = model.df > 2: regression robust to outliers"

    def __init__(self, df: float = STUDENT_T_DF):
        self.df = float(df)

    def __repr__(self) -> str:
        return f"<likelihood 'student_t' (df = {self.df:g})>"

    def log_prob(self, y, f, scale=None):
        return dist.StudentT(self.df, f, scale).log_prob(y)

    def distribution(self, f, scale=None):
        return dist.StudentT(self.df, f, scale)

    def noise_variance(self, scale):
        return scale**2 * self.df / (self.df - 2)  # finite for ν > 2 (check_settings)

    # t_ν(y | f, σ) = ∫ N(y | f, σ²/w) Gamma(w | ν/2, ν/2) dw, so log E_q p = log E_w N(y | mu,
    # var + σ²/w): generalised Gauss-Laguerre in w (smooth in w, unlike p in f under a wide q)
    def log_expected_prob(self, y, mu, var, scale=None, nodes=SCALE_MIXTURE_NODES):
        df = self.df
        x, w = roots_genlaguerre(nodes, df / 2 - 1)
        x, w = x[w > 0], w[w > 0]  # the far nodes' weights underflow to 0: they add nothing
        w_mix, log_wts = 2.0 * x / df, np.log(w) - gammaln_np(df / 2)
        sd = jnp.sqrt(var[..., None] + _per_node(scale) ** 2 / w_mix)
        return logsumexp(log_wts + norm.logpdf(y[..., None], mu[..., None], sd), axis=-1)

    def check_settings(self, model: dict, src: str) -> None:
        if model["df"] <= 2:
            raise SSGPError(f"{src}: model.df: the Student-t predictive needs df > 2 (finite "
                            f"variance), got {model['df']:g}")

    def configure(self, model: dict) -> Likelihood:
        return student_t(model["df"])


@functools.lru_cache(maxsize=64)
def _student_t(df: float) -> StudentT:
    return STUDENT_T if df == STUDENT_T.df else StudentT(df)


def student_t(df: float = STUDENT_T_DF) -> StudentT:
    """The Student-t likelihood with ``df`` degrees of freedom (one object per df)."""
    return _student_t(float(df))


# ----------------------------------------------------------------------------- probit


class Probit(BinaryLikelihood):
    """P(y = 1 | f) = Φ(f); log q(y) = log Φ((2y − 1) mu / √(1 + var)) (Wei et al. 2021, §2)."""

    name = "probit"
    description = "P(y = 1 | f) = Φ(f): binary classification"
    exact_log_expected = True
    exact_moments = True

    def log_prob(self, y, f, scale=None):
        return norm.logcdf((2.0 * y - 1.0) * f)

    def distribution(self, f, scale=None):
        return dist.Bernoulli(probs=norm.cdf(f))

    def conditional_mean(self, f):
        return norm.cdf(f)

    def log_expected_prob(self, y, mu, var, scale=None, nodes=None):
        return norm.logcdf((2.0 * y - 1.0) * mu / jnp.sqrt(1.0 + var))

    def mean(self, mu, var):
        return norm.cdf(mu / jnp.sqrt(1.0 + var))


# ----------------------------------------------------------------------------- logit


class Logit(BinaryLikelihood):
    """P(y = 1 | f) = σ(f) = 1 / (1 + e^{−f}) (Bernoulli-logit): no closed form under a Gaussian
    q(f), so E_q[σ(f)] and log E_q[p(y | f)] are Gauss-Hermite sums (exact for the probit's Φ)."""

    name = "logit"
    description = "P(y = 1 | f) = 1 / (1 + e^(−f)): binary classification, logistic link"

    def log_prob(self, y, f, scale=None):
        return jax.nn.log_sigmoid((2.0 * y - 1.0) * f)

    def distribution(self, f, scale=None):
        return dist.Bernoulli(logits=f)

    def conditional_mean(self, f):
        return jax.nn.sigmoid(f)


# ----------------------------------------------------------------------------- Poisson


class Poisson(CountLikelihood):
    """y ~ Poisson(e^f); E_q[log p] = y mu − e^{mu + var/2} − log y!, E_q[e^f] = e^{mu + var/2}
    (Wei et al. 2021, Table 1, supp. "Evaluation"); log E_q[p] by Laplace-centred Gauss-Hermite."""

    name = "poisson"
    description = "y ~ Poisson(e^f): counts"
    exact_expected_log = True
    exact_moments = True

    def log_prob(self, y, f, scale=None):
        return y * f - jnp.exp(f) - gammaln(y + 1.0)

    def distribution(self, f, scale=None):
        return dist.Poisson(jnp.exp(f))

    def conditional_mean(self, f):
        return jnp.exp(f)

    def conditional_variance(self, f, scale=None):
        return jnp.exp(f)

    def expected_log_prob(self, y, mu, var, scale=None, nodes=None):
        return y * mu - jnp.exp(mu + 0.5 * var) - gammaln(y + 1.0)

    def log_expected_prob(self, y, mu, var, scale=None, nodes=QUADRATURE_NODES):
        return _laplace_log_expected(self.log_prob, y, mu, var, scale, nodes)

    def mean(self, mu, var):
        return jnp.exp(mu + 0.5 * var)

    def variance(self, mu, var, scale=None):
        """E rate + Var rate = e^{mu + var/2} + e^{2mu + 2var} − e^{2mu + var}."""
        return jnp.exp(mu + 0.5 * var) + jnp.exp(2.0 * mu + 2.0 * var) - jnp.exp(2.0 * mu + var)

    def mode(self, y, scale=None):  # e^f = y (f → −∞ for y = 0, where p → 1)
        return jnp.log(jnp.maximum(y, 1e-30))


# ----------------------------------------------------------------------------- the registry

GAUSSIAN = Gaussian()
STUDENT_T = StudentT()
PROBIT = Probit()
LOGIT = Logit()
POISSON = Poisson()

LIKELIHOODS: Registry[Likelihood] = Registry(
    "likelihood", Likelihood, (GAUSSIAN, STUDENT_T, PROBIT, LOGIT, POISSON))


def register(likelihood: Likelihood) -> Likelihood:
    """Add ``likelihood`` to the registry (one defined outside this package: the catalog then
    accepts its name in ``model.likelihood``). An installed package can instead declare it under
    the entry-point group ``ssgp_ppl.likelihoods`` (:mod:`ssgp_ppl.plugins`)."""
    if likelihood.target not in TARGETS:
        raise SSGPError(f"likelihood {likelihood.name!r}: target must be one of "
                        f"{', '.join(TARGETS)}, got {likelihood.target!r}")
    return LIKELIHOODS.register(likelihood)


def get(name: str, df: float = STUDENT_T_DF) -> Likelihood:
    """The likelihood registered as ``name``, configured with ``df`` (Student-t)."""
    return LIKELIHOODS.get(name).configure({"df": df})


__all__ = ["LIKELIHOODS", "QUADRATURE_NODES", "TARGETS", "BinaryLikelihood",
           "ContinuousLikelihood", "CountLikelihood", "Likelihood", "get", "hermite", "register",
           "student_t"]
