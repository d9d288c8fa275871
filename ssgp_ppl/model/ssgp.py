"""The one NumPyro model every catalog entry reuses: y = Φ_θ(X) s + ε (Hoang et al. 2017, eqs. 2-3).

* frequencies θ (m, d): free variables with a spectral-density prior given lengthscales ℓ, or free
  point estimates (SSGP optimized), or fixed standard spectral points scaled by inverse lengthscales λ
  (Tan et al. 2016, eq. 4; SSGP fixed);
* nuisance s (2m,) ~ N(0, Λ), Λ = σ_s²/m I (Hoang et al. 2017, eq. 3), either sampled or integrated out
  in closed form (the SSGP marginal likelihood, Hoang et al. 2017, App. E / Lázaro-Gredilla et al. 2010);
* noise σ_n, signal σ_s and the lengthscales: type-II (``numpyro.param``), fixed, or with a prior
  (half-Cauchy as Tan et al. 2016, half-normal, log-normal, or normal for λ).

The observation plate takes minibatches: pass ``n_total`` (training-set size) and the likelihood of a
batch of b rows is scaled by n_total / b, so the ELBO estimate is unbiased where s is sampled (the
likelihood factorises over rows); with s integrated out it is the minibatch marginal likelihood,
consistent but biased (Chen et al. 2020; :func:`ssgp_model`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import densities, spectral
from ssgp_ppl.model.densities import SpectralDensity
from ssgp_ppl.model.linalg import cholesky


def bind_numpyro_submodules() -> None:
    """Bind every loaded ``numpyro.*`` submodule to its parent package where the attribute is
    missing. ``arviz_base`` loads numpyro through ``lazy_loader``; when it is imported before
    numpyro (``import arviz_base`` first in a notebook, or a test module), numpyro's packages lack
    their submodule attributes and ``numpyro.factor`` fails on
    ``numpyro.distributions.distribution.Unit``. Run when this module is imported: every fit goes
    through the model."""
    for name, module in list(sys.modules.items()):
        parent, _, child = name.rpartition(".")
        if name.startswith("numpyro.") and module is not None and parent in sys.modules:
            if child not in vars(sys.modules[parent]):
                setattr(sys.modules[parent], child, module)


bind_numpyro_submodules()


ROLES = ("learned", "fixed", "prior")
PRIORS = ("half_cauchy", "half_normal", "lognormal", "normal")
HYPERPARAMETERS = ("noise", "signal", "lengthscales", "inverse_lengthscales")


class Hyper(NamedTuple):
    """How a hyperparameter enters the model.

    role "learned": ``numpyro.param`` with initial value ``value`` (type-II / point estimate);
    role "fixed": the constant ``value``; role "prior": a sample site with prior ``dist(loc, scale)``.
    """

    role: str = "learned"
    value: float = 1.0
    dist: str = "half_cauchy"
    loc: float = 0.0
    scale: float = 1.0

    def prior(self, shape=()):
        """The prior distribution of a role-"prior" hyperparameter, expanded to ``shape``."""
        if self.dist == "half_cauchy":
            d = dist.HalfCauchy(self.scale)
        elif self.dist == "half_normal":
            d = dist.HalfNormal(self.scale)
        elif self.dist == "lognormal":
            d = dist.LogNormal(self.loc, self.scale)
        elif self.dist == "normal":
            d = dist.Normal(self.loc, self.scale)
        else:  # validated by the catalog; kept for direct users
            raise SSGPError(f"unknown prior {self.dist!r}; known: {', '.join(PRIORS)}")
        return d.expand(shape).to_event(len(shape)) if shape else d


@dataclass(frozen=True, eq=False)
class SSGPSpec:
    """Everything the model needs besides data; built by :mod:`ssgp_ppl.entry` from a TOML entry.

    ``spectral_points`` (m, d) are the fixed standard draws used by the scaled parameterisation and
    as the initial frequencies of the free one (r = s / 2πℓ). ``density`` is a
    :class:`~ssgp_ppl.model.densities.SpectralDensity`; a registered name is looked up once, here.
    """

    m: int
    d: int
    spectral_points: jax.Array  # (m, d)
    density: SpectralDensity = densities.SE
    parameterization: str = "free"  # free | scaled
    frequencies: str = "prior"  # prior | learned (free parameterisation only)
    nuisance: str = "sampled"  # sampled | marginalized
    likelihood: str = "gaussian"  # a name in ssgp_ppl.model.likelihoods.LIKELIHOODS
    df: float = 4.0  # Student-t degrees of freedom
    noise: Hyper = field(default_factory=lambda: Hyper("learned", 0.3))
    signal: Hyper = field(default_factory=lambda: Hyper("learned", 1.0))
    lengthscales: Hyper = field(default_factory=lambda: Hyper("learned", 1.0))
    inverse_lengthscales: Hyper = field(default_factory=lambda: Hyper("learned", 1.0))

    def __post_init__(self):
        if not isinstance(self.density, SpectralDensity):
            object.__setattr__(self, "density", densities.get(self.density))

    @property
    def lik(self):
        """The observation model (:mod:`ssgp_ppl.model.likelihoods`)."""
        from ssgp_ppl.model import likelihoods

        return likelihoods.get(self.likelihood, self.df)

    def hyper_names(self) -> tuple[str, ...]:
        """noise σ_n (only where the likelihood has a scale) and signal σ_s."""
        return ("noise", "signal") if self.lik.has_scale else ("signal",)

    def latent_sites(self) -> tuple[str, ...]:
        """Names of the model's latent sample sites (what a guide must cover)."""
        sites = [h for h in self.hyper_names() if getattr(self, h).role == "prior"]
        if self.parameterization == "free":
            if self.frequencies == "prior":
                if self.lengthscales.role == "prior":
                    sites.append("lengthscales")
                sites.append("frequencies")
        elif self.inverse_lengthscales.role == "prior":
            sites.append("inverse_lengthscales")
        if self.nuisance == "sampled":
            sites.append("nuisance")
        return tuple(sites)

    def learned_sites(self) -> tuple[str, ...]:
        """Names of the type-II (``numpyro.param``) hyperparameters of the model."""
        out = [h for h in self.hyper_names() if getattr(self, h).role == "learned"]
        if self.parameterization == "free":
            if self.frequencies == "learned":
                out.append("frequencies")
            elif self.lengthscales.role == "learned":
                out.append("lengthscales")
        elif self.inverse_lengthscales.role == "learned":
            out.append("inverse_lengthscales")
        return tuple(out)


def with_start(spec: SSGPSpec, start: dict) -> SSGPSpec:
    """``spec`` started at ``start`` (constrained values of noise, signal, lengthscales,
    inverse_lengthscales, frequencies; any subset): the hyperparameters' ``value`` (a fit's
    initial value) becomes the given one, and in the free parameterisation the spectral points
    become θ · 2πℓ₀, so that the initial frequencies r = s/2πℓ₀ are the given θ."""
    rep = {h: getattr(spec, h)._replace(value=jnp.asarray(start[h])) for h in HYPERPARAMETERS
           if h in start}
    if "frequencies" in start and spec.parameterization == "free":
        ell = rep["lengthscales"].value if "lengthscales" in rep else spec.lengthscales.value
        rep["spectral_points"] = jnp.asarray(start["frequencies"]) * spectral.TWO_PI * ell
    return dataclasses.replace(spec, **rep)


def hyper_site(name: str, h: Hyper, shape=()):
    """Value of a hyperparameter site according to its role."""
    if h.role == "fixed":
        return jnp.full(shape, h.value) if shape else jnp.asarray(h.value)
    if h.role == "learned":
        init = jnp.full(shape, h.value) if shape else jnp.asarray(h.value)
        return numpyro.param(name, init, constraint=constraints.positive)
    return numpyro.sample(name, h.prior(shape))


def frequency_prior(lengthscales, m: int, density: SpectralDensity):
    """Prior of the m free frequency vectors θ (m, d) given ℓ (d,): m i.i.d. draws of p(r | ℓ)
    (Hoang et al. 2017, eq. 1)."""
    d = jnp.shape(lengthscales)[-1]
    return density.frequency_distribution(lengthscales, d).expand((m,)).to_event(1)


def marginal_log_likelihood(phi, y, signal, noise):
    """log p(y | θ, σ_s, σ_n) with s integrated out, O(n m²) (Hoang et al. 2017, App. E; LG 2010 eq. 8).

    With A = ΦᵀΦ + (m σ_n²/σ_s²) I_{2m} (2m × 2m, Φ the (n, 2m) design matrix):
    log p = −(yᵀy − yᵀΦA⁻¹Φᵀy)/(2σ_n²) − ½log|A| + m log(m σ_n²/σ_s²) − (n/2) log(2πσ_n²),
    with the quadratic term computed as a residual norm (stable in float32 at large n).
    """
    n, two_m = phi.shape
    m = two_m // 2
    ratio = m * noise**2 / signal**2
    a = phi.T @ phi + ratio * jnp.eye(two_m, dtype=phi.dtype)
    chol = cholesky(a)  # jitter escalation (ssgp_ppl.model.linalg)
    w = jax.scipy.linalg.cho_solve((chol, True), phi.T @ y)
    # yᵀy − yᵀΦA⁻¹Φᵀy = ‖y − Φw‖² + r‖w‖² (w = A⁻¹Φᵀy): no cancellation of two O(n) terms
    resid = y - phi @ w
    quad = (resid @ resid + ratio * (w @ w)) / noise**2
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol)))
    return -0.5 * quad - 0.5 * logdet + m * jnp.log(ratio) - 0.5 * n * jnp.log(2 * math.pi * noise**2)


class SSGPMarginal(dist.Distribution):
    """Distribution of y (n,) with the nuisance s integrated out: N(0, σ_s²/m ΦΦᵀ + σ_n² I).

    ``log_prob`` is :func:`marginal_log_likelihood`, O(n m²) rather than O(n³).
    """

    arg_constraints = {"signal": constraints.positive, "noise": constraints.positive}
    support = constraints.real_vector
    reparametrized_params = ["signal", "noise"]

    def __init__(self, phi, signal, noise, *, validate_args=None):
        self.phi, self.signal, self.noise = phi, signal, noise
        super().__init__(batch_shape=(), event_shape=phi.shape[:1], validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        two_m = self.phi.shape[1]
        ks, ke = jax.random.split(key)
        dtype = self.phi.dtype
        s = jax.random.normal(ks, sample_shape + (two_m,), dtype) * self.signal / math.sqrt(two_m // 2)
        eps = jax.random.normal(ke, sample_shape + self.event_shape, dtype) * self.noise
        return s @ self.phi.T + eps

    def log_prob(self, value):
        return marginal_log_likelihood(self.phi, value, self.signal, self.noise)


def frequencies_of(spec: SSGPSpec, d: int):
    """Sample/param statements for the frequencies θ (m, d) according to the parameterisation."""
    if spec.parameterization == "scaled":
        lam = hyper_site("inverse_lengthscales", spec.inverse_lengthscales, (d,))
        freq = spectral.frequencies_from_spectral_points(spec.spectral_points, lam)
        return numpyro.deterministic("frequencies", freq)
    if spec.frequencies == "learned":
        init = spec.spectral_points / (spectral.TWO_PI * spec.lengthscales.value)
        return numpyro.param("frequencies", init)
    ell = hyper_site("lengthscales", spec.lengthscales, (d,))
    return numpyro.sample("frequencies", frequency_prior(ell, spec.m, spec.density))


def ssgp_model(x, y=None, *, spec: SSGPSpec, n_total: int | None = None, obs_mask=None,
               obs_scale=None):
    """SSGP regression y = Φ_θ(x) s + ε, ε ~ N(0, σ_n²) (Hoang et al. 2017, eq. 3; Tan et al. 2016, eq. 5), or
    y ~ p(y | f = Φ_θ(x) s) under the entry's likelihood (Student-t, probit, Poisson; Wei et al. 2021, §2).

    The catalog's one NumPyro model; an entry binds its ``spec`` (`CatalogEntry.model`).

    Parameters
    ----------
    x
        (b, d) inputs of this (mini)batch, scaled.
    y
        (b,) targets, or None to sample them.
    spec
        The model's specification (`CatalogEntry.spec`): spectral points, density,
        parameterisation, likelihood and each hyperparameter's role.
    n_total
        The training-set size when ``x`` is a minibatch: the batch likelihood is scaled by
        n_total / b. With s integrated out the likelihood does not factorise over rows: the
        batch's marginal likelihood scaled by n_total / b (the minibatch marginal likelihood of
        Chen et al. 2020) is then a consistent but biased stand-in for log p(y), its complexity
        term (½ log det of the 2m × 2m matrix, which grows like m log b) weighted n_total / b
        times; the batch must hold different rows (``Batching(distinct=True)``).
    obs_mask
        (b,) bool: the rows that count (padded partition blocks).
    obs_scale
        An explicit likelihood scale, e.g. p/a when a of p partitions are drawn (Hoang et al.
        2017, §4.1, eq. 7), overriding n_total / b.

    Raises
    ------
    SSGPError
        When ``x`` does not have the spec's d columns.
    """
    b, d = x.shape
    if d != spec.d:
        raise SSGPError(f"inputs have {d} columns but the model was built for {spec.d}")
    lik = spec.lik
    noise = hyper_site("noise", spec.noise) if lik.has_scale else None
    signal = hyper_site("signal", spec.signal)
    freq = frequencies_of(spec, d)
    phi = spectral.features(x, freq)  # (b, 2m)
    if spec.nuisance == "marginalized":
        if not lik.conjugate:
            raise SSGPError(f"s can be integrated out only under a conjugate (Gaussian) likelihood, "
                            f"not {lik.name}")
        if obs_mask is not None or obs_scale is not None:
            raise SSGPError("the marginalized-nuisance likelihood does not factorise: no partitions")
        with numpyro.handlers.scale(scale=1.0 if n_total is None else n_total / b):
            numpyro.sample("y", SSGPMarginal(phi, signal, noise), obs=y)
        return
    prior_scale = signal / math.sqrt(spec.m)
    s = numpyro.sample("nuisance", dist.Normal(0.0, prior_scale).expand([2 * spec.m]).to_event(1))
    f = numpyro.deterministic("f", phi @ s)
    scale = obs_scale if obs_scale is not None else (1.0 if n_total is None else n_total / b)
    with (
        numpyro.plate("data", b),
        numpyro.handlers.scale(scale=scale),
        numpyro.handlers.mask(mask=True if obs_mask is None else obs_mask),
    ):
        numpyro.sample("y", lik.distribution(f, noise), obs=y)


def nuisance_posterior(phi, y, signal, noise):
    """The exact Gaussian conditional s | θ, σ_s, σ_n, y = N(A⁻¹Φᵀy, σ_n² A⁻¹), A = ΦᵀΦ +
    (mσ_n²/σ_s²) I (Hoang et al. 2017, App. E; Lázaro-Gredilla et al. 2010, eq. 7): (mean (2m,),
    L) with A = LLᵀ, so that mean + σ_n L⁻ᵀz, z ~ N(0, I), is a draw."""
    two_m = phi.shape[1]
    a = phi.T @ phi + (two_m // 2) * noise**2 / signal**2 * jnp.eye(two_m, dtype=phi.dtype)
    chol = cholesky(a)
    return jax.scipy.linalg.cho_solve((chol, True), phi.T @ y), chol


def draw_nuisance(key, phi, y, signal, noise):
    """One draw of s from its exact conditional (:func:`nuisance_posterior`), (2m,)."""
    mean, chol = nuisance_posterior(phi, y, signal, noise)
    z = jax.random.normal(key, mean.shape, mean.dtype)
    return mean + noise * jax.scipy.linalg.solve_triangular(chol.T, z, lower=False)


__all__ = ["HYPERPARAMETERS", "Hyper", "SSGPMarginal", "SSGPSpec", "draw_nuisance",
           "frequencies_of", "frequency_prior", "hyper_site", "marginal_log_likelihood",
           "nuisance_posterior", "ssgp_model", "with_start"]
