"""The one NumPyro model every catalog entry reuses: y = Φ_θ(X) s + ε (Hoang et al. 2017, eqs. 2-3).

* frequencies θ (m, d): free variables with a spectral-density prior given lengthscales ℓ, or free
  point estimates (SSGP optimized), or fixed standard spectral points scaled by inverse lengthscales λ
  (Tan et al. 2016, eq. 4; SSGP fixed, Tan et al.);
* nuisance s (2m,) ~ N(0, Λ), Λ = σ_s²/m I (Hoang et al. 2017, eq. 3), either sampled or integrated out
  in closed form (the SSGP marginal likelihood, Hoang et al. 2017, App. E / Lázaro-Gredilla et al. 2010);
* noise σ_n, signal σ_s and the lengthscales: type-II (``numpyro.param``), fixed, or with a prior
  (half-Cauchy as Tan et al. 2016, half-normal, log-normal, or normal for λ).

The observation plate takes minibatches: pass ``n_total`` (training-set size) and the likelihood of a
batch of b rows is scaled by n_total / b, so the ELBO estimate is unbiased.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.linalg import solve_triangular
from numpyro.distributions import constraints

from ssgp_ppl import spectral
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.linalg import cholesky

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
    """Everything the model needs besides data; built by :mod:`ssgp_ppl.catalog` from a TOML entry.

    ``spectral_points`` (m, d) are the fixed standard draws used by the scaled parameterisation and
    as the initial frequencies of the free one (r = s / 2πℓ).
    """

    m: int
    d: int
    spectral_points: jax.Array  # (m, d)
    density: str = "se"
    parameterization: str = "free"  # free | scaled
    frequencies: str = "prior"  # prior | learned (free parameterisation only)
    nuisance: str = "sampled"  # sampled | marginalized
    likelihood: str = "gaussian"  # gaussian | student_t | probit | poisson (ssgp_ppl.likelihoods)
    df: float = 4.0  # Student-t degrees of freedom
    noise: Hyper = field(default_factory=lambda: Hyper("learned", 0.3))
    signal: Hyper = field(default_factory=lambda: Hyper("learned", 1.0))
    lengthscales: Hyper = field(default_factory=lambda: Hyper("learned", 1.0))
    inverse_lengthscales: Hyper = field(default_factory=lambda: Hyper("learned", 1.0))

    @property
    def lik(self):
        """The observation model (:mod:`ssgp_ppl.likelihoods`)."""
        from ssgp_ppl import likelihoods

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


def _hyper(name: str, h: Hyper, shape=()):
    """Value of a hyperparameter site according to its role."""
    if h.role == "fixed":
        return jnp.full(shape, h.value) if shape else jnp.asarray(h.value)
    if h.role == "learned":
        init = jnp.full(shape, h.value) if shape else jnp.asarray(h.value)
        return numpyro.param(name, init, constraint=constraints.positive)
    return numpyro.sample(name, h.prior(shape))


def frequency_prior(lengthscales, m: int, density: str):
    """Prior of the m free frequency vectors given ℓ: m i.i.d. draws of p(r) (Hoang et al. 2017, eq. 1)."""
    nu = spectral.check_density(density)
    scale = 1.0 / (spectral.TWO_PI * lengthscales)  # (d,)
    d = scale.shape[-1]
    if nu is None:
        return dist.Normal(jnp.zeros((m, d)), jnp.broadcast_to(scale, (m, d))).to_event(2)
    return dist.MultivariateStudentT(
        2.0 * nu, jnp.zeros((m, d)), jnp.broadcast_to(jnp.diag(scale), (m, d, d))
    ).to_event(1)


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
    chol = cholesky(a)  # jitter escalation (ssgp_ppl.linalg)
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
        lam = _hyper("inverse_lengthscales", spec.inverse_lengthscales, (d,))
        freq = spectral.frequencies_from_spectral_points(spec.spectral_points, lam)
        return numpyro.deterministic("frequencies", freq)
    if spec.frequencies == "learned":
        init = spec.spectral_points / (spectral.TWO_PI * spec.lengthscales.value)
        return numpyro.param("frequencies", init)
    ell = _hyper("lengthscales", spec.lengthscales, (d,))
    return numpyro.sample("frequencies", frequency_prior(ell, spec.m, spec.density))


def ssgp_model(x, y=None, *, spec: SSGPSpec, n_total: int | None = None, obs_mask=None,
               obs_scale=None):
    """SSGP regression y = Φ_θ(x) s + ε, ε ~ N(0, σ_n²) (Hoang et al. 2017, eq. 3; Tan et al. 2016, eq. 5), or
    y ~ p(y | f = Φ_θ(x) s) under the entry's likelihood (Student-t, probit, Poisson; Wei et al. 2021, §2).

    x: (b, d) inputs of this (mini)batch; y: (b,) targets or None; n_total: training-set size
    when x is a minibatch (the batch likelihood is scaled by n_total / b); obs_mask: (b,) bool,
    rows that count (padded partition blocks); obs_scale: explicit likelihood scale, e.g. p/a
    when a of p partitions are drawn (Hoang et al. 2017, §4.1, eq. 7), overriding n_total / b.
    """
    b, d = x.shape
    if d != spec.d:
        raise SSGPError(f"inputs have {d} columns but the model was built for {spec.d}")
    lik = spec.lik
    noise = _hyper("noise", spec.noise) if lik.has_scale else None
    signal = _hyper("signal", spec.signal)
    freq = frequencies_of(spec, d)
    phi = spectral.features(x, freq)  # (b, 2m)
    if spec.nuisance == "marginalized":
        if lik.name != "gaussian":
            raise SSGPError(f"s can be integrated out only under the Gaussian likelihood, not {lik.name}")
        if (n_total is not None and n_total != b) or obs_mask is not None or obs_scale is not None:
            raise SSGPError("the marginalized-nuisance likelihood does not factorise: no minibatches")
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


# --------------------------------------------------------------------------- predictive rules


def marginal_predictive(x_train, y_train, x_test, frequencies, signal, noise):
    """Exact SSGP predictive of f* given θ with s integrated on all training data (LG 2010 eq. 7).

    mean = φ*ᵀA⁻¹Φᵀy, var = σ_n² φ*ᵀA⁻¹φ*, A = ΦᵀΦ + (mσ_n²/σ_s²) I. Returns (mean, var) of f*.
    """
    phi = spectral.features(x_train, frequencies)
    phi_star = spectral.features(x_test, frequencies)
    two_m = phi.shape[1]
    a = phi.T @ phi + (two_m // 2) * noise**2 / signal**2 * jnp.eye(two_m, dtype=phi.dtype)
    chol = cholesky(a)  # jitter escalation (ssgp_ppl.linalg)
    w = jax.scipy.linalg.cho_solve((chol, True), phi.T @ y_train)
    v = solve_triangular(chol, phi_star.T, lower=True)  # (2m, n*)
    return phi_star @ w, noise**2 * jnp.sum(v**2, axis=0)


def degenerate_predictive(x_test, frequencies, nuisance, nuisance_tril=None):
    """γ = 1 test conditional f* = φ_θ(x*)ᵀ s (Hoang et al. 2017, Prop. 1 with γ = 1; VSSGP).

    With ``nuisance_tril`` L, ``nuisance`` is the mean of a Gaussian q(s | θ) = N(μ, LLᵀ) and s is
    integrated out: f* | θ ~ N(φ*ᵀμ, ‖Lᵀφ*‖²) (the same predictive, Rao-Blackwellised over s).
    """
    phi = spectral.features(x_test, frequencies)
    mean = phi @ nuisance
    if nuisance_tril is None:
        return mean, jnp.zeros_like(mean)
    return mean, jnp.sum((phi @ nuisance_tril) ** 2, axis=-1)


def local_conditional(x_test, test_block, x_train, y_train, blocks, mask, frequencies, nuisance,
                      signal, noise, gamma: float, *, block_batch: int = 32, test_batch: int = 1024):
    """γ-family test conditional with the test point's local data (Hoang et al. 2017, Prop. 1), one draw α.

    For x* in partition k: μ = γ φ*ᵀs + (1−γ) φ*ᵀΓ_k⁻¹Φ_kᵀy_k, σ² = (1−γ²) σ_n² φ*ᵀΓ_k⁻¹φ*,
    Γ_k = Φ_kᵀΦ_k + σ_n²Λ⁻¹ = Φ_kᵀΦ_k + (mσ_n²/σ_s²) I (Φ_k the (n_k, 2m) design matrix).
    γ = 1 is VSSGP's degenerate conditional; γ = 0 is SSGP's predictive on the local data.

    test_block: (n*,) index into ``blocks``/``mask`` ((u, size) padded rows of the partitions
    that hold test points). Memory is bounded by ``block_batch`` blocks and ``test_batch`` test
    points at a time.
    """
    if nuisance is None and gamma != 0.0:
        raise SSGPError("the local conditional with gamma != 0 needs the nuisance draw s")
    two_m = 2 * frequencies.shape[0]
    ratio = (two_m // 2) * noise**2 / signal**2

    def block(args):
        idx, msk = args
        phi = spectral.features(x_train[idx], frequencies) * msk[:, None]
        a = phi.T @ phi + ratio * jnp.eye(two_m, dtype=phi.dtype)
        chol = cholesky(a)  # jitter escalation (ssgp_ppl.linalg)
        w = jax.scipy.linalg.cho_solve((chol, True), phi.T @ (y_train[idx] * msk))
        return chol, w

    chols, ws = jax.lax.map(block, (blocks, mask), batch_size=block_batch)

    def point(args):
        x, k = args
        phi = spectral.features(x[None], frequencies)[0]
        v = solve_triangular(chols[k], phi, lower=True)
        mean = (1.0 - gamma) * phi @ ws[k]
        if nuisance is not None:
            mean = mean + gamma * phi @ nuisance
        return mean, (1.0 - gamma**2) * noise**2 * v @ v

    return jax.lax.map(point, (x_test, test_block), batch_size=test_batch)


RULES = ("marginal", "degenerate", "local")


class LocalData(NamedTuple):
    """What the ``local`` rule needs besides the draws: the padded blocks holding test points,
    each test point's index into them, and γ."""

    blocks: jax.Array  # (u, size) int32
    mask: jax.Array  # (u, size) bool
    test_block: jax.Array  # (n*,) int32 in [0, u)
    gamma: float


def local_data(partitions, x_test, gamma: float) -> LocalData:
    """Assign test inputs to their nearest partition and keep only the blocks they use."""
    if not -1.0 <= gamma <= 1.0:
        raise SSGPError(f"gamma must be in [-1, 1], got {gamma}")
    assign = partitions.assign(x_test)
    used, test_block = np.unique(assign, return_inverse=True)
    return LocalData(jnp.asarray(partitions.blocks[used]), jnp.asarray(partitions.mask[used]),
                     jnp.asarray(test_block.astype(np.int32)), float(gamma))


@partial(jax.jit, static_argnames=("gamma",))
def _local_draws(sites, x_train, y_train, x_test, blocks, mask, test_block, *, gamma):
    """local_conditional for each draw in turn (lax.map bounds memory to one draw at a time)."""

    def one(site):
        return local_conditional(x_test, test_block, x_train, y_train, blocks, mask,
                                 site["frequencies"], site.get("nuisance"), site["signal"],
                                 site["noise"], gamma)

    return jax.lax.map(one, sites)


DRAW_BATCH = 8  # draws evaluated at once: memory (draws × n × 2m) stays bounded at any S


@jax.jit
def _marginal_draws(sites, x_train, y_train, x_test):
    return jax.lax.map(lambda st: marginal_predictive(x_train, y_train, x_test, st["frequencies"],
                                                      st["signal"], st["noise"]),
                       sites, batch_size=DRAW_BATCH)


@jax.jit
def _degenerate_draws(sites, x_test):
    return jax.lax.map(lambda st: degenerate_predictive(x_test, st["frequencies"], st["nuisance"],
                                                        st.get("nuisance_tril")),
                       sites, batch_size=DRAW_BATCH)


def check_test_inputs(x_train, x_test) -> None:
    """Test inputs must have the training inputs' columns (one clear error, not a shape error)."""
    if x_train is None:  # rules that do not read the training data
        return
    d, d_star = np.shape(x_train)[-1], np.shape(x_test)[-1]
    if np.ndim(x_test) != 2 or d_star != d:
        raise SSGPError(f"test inputs have {d_star if np.ndim(x_test) == 2 else np.shape(x_test)} "
                        f"columns but the model was built for {d} (the training inputs')")


def predict_draws(rule: str, sites: dict, x_train, y_train, x_test, local: LocalData | None = None):
    """Per-draw predictive (mean_f, var_f) (S, n*) under ``rule`` from site values (S, ...)."""
    check_test_inputs(x_train, x_test)
    if rule == "local":
        if local is None:
            raise SSGPError("the local rule needs partitions (LocalData)")
        if local.gamma != 0.0 and "nuisance" not in sites:
            raise SSGPError("the local rule with gamma != 0 needs sampled nuisance variables s")

        keep = {k: sites[k] for k in ("frequencies", "nuisance", "signal", "noise") if k in sites}
        return _local_draws(keep, x_train, y_train, x_test, local.blocks, local.mask,
                            local.test_block, gamma=local.gamma)
    if rule == "marginal":
        keep = {k: sites[k] for k in ("frequencies", "signal", "noise")}
        return _marginal_draws(keep, x_train, y_train, x_test)
    if rule == "degenerate":
        if "nuisance" not in sites:
            raise SSGPError("the degenerate predictive needs sampled nuisance variables s")
        keep = ("frequencies", "nuisance", "nuisance_tril")
        return _degenerate_draws({k: sites[k] for k in keep if k in sites}, x_test)
    raise SSGPError(f"unknown predictive rule {rule!r}; known: {', '.join(RULES)}")
