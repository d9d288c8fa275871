"""Variational guides as classes (as numpyro's AutoGuide): the class says what a guide can do.

A guide is called like the model, ``guide(x, y=None, **model_kwargs)``; its params are named
``{site}_{role}``. A guide class declares its catalog ``name``, its ``Settings`` (the entry's
``[inference.svi.<name>]`` table), a ``description`` and what the ``svi`` method reads
(``noncentring``, ``needs_gaussian_density``, ``start_in_params``, :meth:`Guide.param_count`,
:meth:`Guide.make`). :data:`GUIDES` holds the classes (instances of :class:`GuideType`);
:func:`register` adds one. A built guide has these optional abilities, with defaults in
:class:`Guide`, which the objectives, the predictive and the β selection call directly:

* :meth:`Guide.nuisance_conditional` — q(s | rest) is Gaussian in closed form
  (``gaussian_nuisance`` is True): its mean and Cholesky factor per draw, so that the objectives
  integrate s exactly and the degenerate predictive can integrate it per draw;
* :meth:`Guide.conditional_and_marginal` — that conditional plus log q(rest) from a factor the
  objective already computes (None by default: the objective then subtracts log q(s | rest) from
  log q);
* :meth:`Guide.own_objective` — a guide-specific estimator of an objective (the mixture's
  score-function ELBO; None by default);
* ``components`` — mixture components (1 by default).

The registered guides: NumPyro's autoguides (``auto_normal``, ``auto_mvn``, ``auto_lowrank``,
``auto_delta``) and the papers' guides:

* ``joint_affine`` (sVBSSGP, Hoang et al. 2017, §3.1 Lemma 1): α = vec(θ, s) = M z + b with an
  invertible M (``alpha_matrix``, lower triangular: every q(α) of the family has such a factor)
  and b (``alpha_loc``), z ~ ψ = N(0, I) or a multivariate Student-t with ν degrees of freedom;
  q(α) = ψ(M⁻¹(α − b)) / |det M|.
* ``gaussian_lambda`` (Tan et al. 2016, eq. 11): q(λ)q(α)q(σ)q(γ), Gaussian λ and α with
  full covariances, square-root inverse-gamma scales (the NCVMP family fitted by SVI).
* ``mixture`` (Nguyen & Bonilla 2014): K equal-weight diagonal Gaussians over α = vec(θ, s), fitted
  by the score-function ELBO of :mod:`ssgp_ppl.model.mixture`.
* ``mean_field`` (VSSGP, Gal & Turner 2015 as Hoang et al. 2017, Remark 2 describes it):
  independent Gaussians over each frequency vector r_i and over s.

``joint_affine`` and ``mean_field`` also fit the collapsed model (``nuisance = "marginalized"``):
α = θ alone, and s has its exact conditional p(s | θ, y) given each draw of θ — the family
q(θ) p(s | θ, y), which contains the best q(s | θ) for every q(θ). The joint Gaussian q(θ, s) can
only couple s to θ linearly: with many features the ELBO then prefers q(θ) near the prior and
explains y as noise (pendulum, m = 50: VSSGP test NMSE 0.83, collapsed 0.27; ``benchmarks/mscan.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import partial
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints
from numpyro.infer import autoguide, init_to_median, init_to_sample, init_to_value

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import spectral
from ssgp_ppl.model.ssgp import SSGPSpec, hyper_site
from ssgp_ppl.plugins import Registry
from ssgp_ppl.settings import Settings, setting, validate

PSI = ("normal", "student_t")


class GuideType(type):
    """The type of a guide class: :data:`GUIDES` holds the classes themselves, each with its
    ``name``."""


class Guide(metaclass=GuideType):
    """Base class of every guide: a NumPyro guide callable plus the optional abilities.

    ``Guide(spec, settings)``, or ``Guide(spec, **options)`` with the options validated against
    ``Settings`` (defaults for the rest).
    """

    name: ClassVar[str] = "guide"
    Settings: ClassVar[type[Settings]] = Settings  # no settings
    description: ClassVar[str] = ""
    # how it fits svi.noncentred (θ·2πℓ instead of θ): "guide" (it standardises its own
    # coordinates, standard_scales), "model" (the method reparameterises the model), None (it cannot)
    noncentring: ClassVar[str | None] = None
    needs_gaussian_density: ClassVar[bool] = False  # needs the Gaussian prior on θ of the SE density
    # its params depend on a path's start only through their initial values: one jitted update
    # then serves every path of a multi-path fit
    start_in_params: ClassVar[bool] = False
    gaussian_nuisance: bool = False  # q(s | rest) Gaussian in closed form
    components: int = 1

    def __init__(self, spec: SSGPSpec, settings: Settings | None = None, **options):
        self.spec = spec
        if settings is None:
            settings = self.Settings(**validate(options, self.Settings.schema(), "",
                                                f"guide {self.name!r}"))
        elif options:
            raise SSGPError(f"guide {self.name!r}: give settings or options, not both")
        self.settings = settings

    @classmethod
    def make(cls, model: Callable, spec: SSGPSpec, settings: Settings | None = None, *,
             noncentred: bool = False) -> Guide:
        """This guide for ``model`` (a partial of ``ssgp_model`` with ``spec``) with ``settings``
        (None: the defaults); ``noncentred`` where :attr:`noncentring` is "guide"."""
        if cls.noncentring == "guide":
            return cls(spec, settings, noncentred=noncentred)
        return cls(spec, settings)

    @classmethod
    def param_count(cls, dim: int) -> int:
        """Its parameters over D = ``dim`` latent coordinates, for the memory estimate (a location
        and a scale per coordinate unless the guide says otherwise)."""
        return 2 * dim

    def __call__(self, x, y=None, **kwargs):
        raise NotImplementedError

    def nuisance_conditional(self, params: dict, draw: dict):
        """(loc (2m,), scale_tril (2m, 2m)) of q(s | the other latents of ``draw``)."""
        raise SSGPError(f"guide {self.name!r} has no closed-form Gaussian q(s | rest)")

    def conditional_and_marginal(self, params: dict, draw: dict):
        """(loc, scale_tril, log q(rest)) where the guide computes log q(rest) from its own factor;
        None where it does not (the objective then uses log q − log q(s | rest))."""
        return None

    def own_objective(self, name: str):
        """A guide-specific estimator of objective ``name`` (a plain loss function), or None."""
        return None


class AutoMultivariateNormal(autoguide.AutoMultivariateNormal):
    """NumPyro's AutoMultivariateNormal, q(z) = N(μ, LLᵀ), whose draw z = μ + Lε keeps ε: its log
    density is log N(ε; 0, I) − Σ log L_ii, exact in any precision. NumPyro's recovers
    L⁻¹(z − μ) from z, where the rounding of z − μ is amplified by cond(L); in float32 with a
    concentrated posterior (cond(L) ≳ 1e7) that term falls without bound, and the ELBO's loss with
    it (same parameters, values and gradients otherwise)."""

    def _get_posterior(self):
        loc = numpyro.param(f"{self.prefix}_loc", self._init_latent)
        scale_tril = numpyro.param(f"{self.prefix}_scale_tril",
                                   jnp.identity(self.latent_dim) * self._init_scale,
                                   constraint=self.scale_tril_constraint)
        return dist.TransformedDistribution(self.get_base_dist(),
                                            dist.transforms.LowerCholeskyAffine(loc, scale_tril))


class NumPyroAutoGuide(Guide):
    """A NumPyro autoguide (``numpyro_class``), started at :func:`initial_values`."""

    numpyro_class: ClassVar[type] = AutoMultivariateNormal
    noncentring = "model"
    start_in_params = True

    def __init__(self, spec: SSGPSpec, model: Callable, settings: Settings | None = None):
        super().__init__(spec, settings)
        self.auto = self.numpyro_class(model, init_loc_fn=init_to_value(values=initial_values(spec)))

    @classmethod
    def make(cls, model, spec, settings=None, *, noncentred=False):
        return cls(spec, model, settings)

    def __call__(self, x, y=None, **kwargs):
        return self.auto(x, y, **kwargs)


class AutoNormalGuide(NumPyroAutoGuide):
    name = "auto_normal"
    numpyro_class = autoguide.AutoNormal
    description = "independent Gaussians over the unconstrained latents (NumPyro's AutoNormal)"


class AutoMVNGuide(NumPyroAutoGuide):
    name = "auto_mvn"
    numpyro_class = AutoMultivariateNormal
    description = ("full-rank Gaussian over the unconstrained latents (NumPyro's "
                   "AutoMultivariateNormal, log q from the draw's ε)")

    @classmethod
    def param_count(cls, dim):
        return dim * (dim + 1) // 2 + dim  # scale_tril and loc


class AutoLowRankGuide(NumPyroAutoGuide):
    name = "auto_lowrank"
    numpyro_class = autoguide.AutoLowRankMultivariateNormal
    description = "low-rank plus diagonal Gaussian (NumPyro's AutoLowRankMultivariateNormal)"


class AutoDeltaGuide(NumPyroAutoGuide):
    name = "auto_delta"
    numpyro_class = autoguide.AutoDelta
    description = "point masses: the MAP point of every latent site (NumPyro's AutoDelta)"


def check_alpha_sites(name: str, spec: SSGPSpec) -> None:
    """The papers' α-guides cover exactly θ and s of the free parameterisation (θ alone where s
    is integrated out)."""
    want = ("frequencies",) if spec.nuisance == "marginalized" else ("frequencies", "nuisance")
    if spec.parameterization != "free" or spec.latent_sites() != want:
        raise SSGPError(
            f"guide {name!r} covers exactly the frequencies θ and nuisance s of the free "
            f"parameterisation (θ alone with s integrated out); this model's latent sites are "
            f"{', '.join(spec.latent_sites())} (make the hyperparameters learned or fixed)"
        )


@dataclasses.dataclass(frozen=True)
class AlphaSettings(Settings):
    init_scale: float = setting((int, float), 0.1, "initial scale × the prior std of each "
                                "coordinate", low=0, open_low=True)


@dataclasses.dataclass(frozen=True)
class JointAffineSettings(AlphaSettings):
    psi: str = setting(str, "normal", "distribution ψ of the base draw z", choices=PSI)
    df: float = setting((int, float), 5.0, "degrees of freedom ν of ψ = student_t", low=0,
                        open_low=True)


@dataclasses.dataclass(frozen=True)
class MixtureSettings(AlphaSettings):
    components: int = setting(int, 3, "number K of diagonal Gaussian components", low=1)
    spread: float = setting((int, float), 1.0, "spread of the components' starting means, in "
                            "prior standard deviations", low=0)


def alpha_init(spec: SSGPSpec, init_scale: float, noncentred: bool = False):
    """b₀ = vec(θ₀, 0) and the per-coordinate scale: ``init_scale`` × the prior std of θ, s
    (θ alone where s is integrated out). Non-centred: the same for the standardised coordinates
    (θ·2πℓ, s·√m/σ_s), whose prior std is 1."""
    theta0 = initial_values(spec)["frequencies"]
    theta_sd = jnp.full(theta0.shape, 1.0 / (spectral.TWO_PI * spec.lengthscales.value))
    s_sd = jnp.full((2 * spec.m,), spec.signal.value / jnp.sqrt(spec.m))
    if noncentred:
        theta0, theta_sd, s_sd = theta0 / theta_sd, jnp.ones_like(theta_sd), jnp.ones_like(s_sd)
    if spec.nuisance == "marginalized":
        return theta0.ravel(), init_scale * theta_sd.ravel()
    loc = jnp.concatenate([theta0.ravel(), jnp.zeros(2 * spec.m)])
    return loc, init_scale * jnp.concatenate([theta_sd.ravel(), s_sd])


def standard_scales(spec: SSGPSpec, params: dict | None = None):
    """(θ scale (d,), s scale ()) of the non-centred α-guides: θ = ε / 2πℓ, s = η σ_s/√m with ε, η
    standard a priori (under the SE density), so that a step of ℓ or σ_s moves every draw. ℓ and
    σ_s are the model's own statements (inside a guide call: the shared type-II params), or their
    fitted values in ``params``."""

    def value(name, shape=()):
        if params is not None and getattr(spec, name).role == "learned":
            return jnp.asarray(params[name])
        return hyper_site(name, getattr(spec, name), shape)

    return 1.0 / (spectral.TWO_PI * value("lengthscales", (spec.d,))), value("signal") / math.sqrt(spec.m)


class JointAffineGuide(Guide):
    """sVBSSGP guide α = vec(θ, s) = M z + b, z ~ ψ (Hoang et al. 2017, §3.1, Lemma 1).

    The base draw z is an auxiliary site; θ and s are Delta sites whose log-density carries
    −log|det M|, so log q(α) = log ψ(z) − log|det M| and the ELBO gradient is the paper's eq. (6).
    M is lower triangular with a positive diagonal, θ's coordinates first: q(α) depends on M only
    through MMᵀ (ψ normal or Student-t, both spherical), which has exactly one such factor, so the
    family is the paper's full one with D(D + 1)/2 parameters instead of D², log|det M| is the sum
    of log diag M (no D × D factorisation per step), and q(s | θ) is read off M's blocks.
    The param ``alpha_matrix`` holds U with M = diag(σ₀) U, σ₀ = ``init_scale`` × the prior std of
    each coordinate (U starts at I): Adam's per-coordinate steps are then relative. Under
    ψ = Student-t, s | θ is not Gaussian and is drawn. With s integrated out (the collapsed model),
    α = θ. ``noncentred``: α holds the standardised (θ·2πℓ, s·√m/σ_s) (:func:`standard_scales`),
    so that the type-II ℓ and σ_s rescale every draw instead of only the prior's density.
    """

    name = "joint_affine"
    Settings = JointAffineSettings
    description = "sVBSSGP: α = vec(θ, s) = M z + b, z ~ ψ (Hoang et al. 2017, Lemma 1)"
    noncentring = "guide"

    def __init__(self, spec: SSGPSpec, settings: JointAffineSettings | None = None, *,
                 noncentred: bool = False, **options):
        check_alpha_sites(self.name, spec)
        super().__init__(spec, settings, **options)
        s = self.settings
        self.psi, self.df, self.noncentred = s.psi, s.df, noncentred
        self.collapsed = spec.nuisance == "marginalized"
        self.gaussian_nuisance = s.psi == "normal" and not self.collapsed
        self.n_theta = spec.m * spec.d
        self.loc0, self.scale0 = alpha_init(spec, s.init_scale, noncentred)
        self.dim = self.loc0.shape[0]
        self.log_scale0 = jnp.sum(jnp.log(self.scale0))

    @classmethod
    def param_count(cls, dim):
        return dim * (dim + 1) // 2 + dim  # M (lower triangular) and b

    def __call__(self, x, y=None, **kwargs):
        m, d, dim = self.spec.m, self.spec.d, self.dim
        unit = numpyro.param("alpha_matrix", jnp.eye(dim), constraint=constraints.lower_cholesky)
        loc = numpyro.param("alpha_loc", self.loc0)  # b, (D,)
        mat = self.scale0[:, None] * unit  # M (D, D), lower triangular
        if self.psi == "normal":
            base = dist.Normal(jnp.zeros(dim), 1.0).to_event(1)
        else:
            base = dist.MultivariateStudentT(self.df, jnp.zeros(dim), jnp.eye(dim))
        z = numpyro.sample("alpha_base", base, infer={"is_auxiliary": True})
        alpha = mat @ z + loc
        log_det = self.log_scale0 + jnp.sum(jnp.log(jnp.diagonal(unit)))  # log|det M|
        theta, s = alpha[:self.n_theta].reshape(m, d), alpha[self.n_theta:]
        if self.noncentred:  # α = vec(ε, η) → (θ, s): log q gains −log|dα'/dα| of the rescaling
            theta_scale, s_scale = standard_scales(self.spec)
            theta, s = theta * theta_scale, s * s_scale
            log_det = log_det + m * jnp.sum(jnp.log(theta_scale))
            if not self.collapsed:
                log_det = log_det + s.shape[0] * jnp.log(s_scale)
        numpyro.sample("frequencies", dist.Delta(theta, -log_det, event_dim=2))
        if not self.collapsed:
            numpyro.sample("nuisance", dist.Delta(s, event_dim=1))

    def conditional_and_marginal(self, params, draw):
        """q(s | θ) = N(b_s + L_sθ w, L_ss L_ssᵀ) with θ − b_θ = L_θθ w, L = M, and log q(θ) =
        log N(θ | b_θ, L_θθ L_θθᵀ) from the same factor: the objectives' KL term needs
        log q(θ, s) − log q(s | θ)."""
        if not self.gaussian_nuisance:
            return None
        n_theta = self.n_theta
        low = self.scale0[:, None] * params["alpha_matrix"]
        loc = params["alpha_loc"]
        theta = draw["frequencies"]
        s_scale, log_jac = 1.0, 0.0
        if self.noncentred:
            theta_scale, s_scale = standard_scales(self.spec, params)
            theta = theta / theta_scale
            log_jac = self.spec.m * jnp.sum(jnp.log(theta_scale))
        w = solve_triangular(low[:n_theta, :n_theta], theta.ravel() - loc[:n_theta], lower=True)
        log_q_theta = (-0.5 * (w @ w) - jnp.sum(jnp.log(jnp.diagonal(low)[:n_theta]))
                       - 0.5 * n_theta * math.log(2 * math.pi) - log_jac)
        return (s_scale * (loc[n_theta:] + low[n_theta:, :n_theta] @ w),
                s_scale * low[n_theta:, n_theta:], log_q_theta)

    def nuisance_conditional(self, params, draw):
        if not self.gaussian_nuisance:
            return super().nuisance_conditional(params, draw)
        return self.conditional_and_marginal(params, draw)[:2]


class MeanFieldGuide(Guide):
    """VSSGP guide: q(θ, s) = Π_i N(r_i | μ_i, diag σ_i²) · N(s | μ_s, diag σ_s²)
    (Hoang et al. 2017, Remark 2); q(θ) alone where s is integrated out. ``noncentred``: the
    params are those of the standardised (θ·2πℓ, s·√m/σ_s), as :class:`JointAffineGuide`'s."""

    name = "mean_field"
    Settings = AlphaSettings
    description = ("VSSGP: independent Gaussians over each frequency vector and s (Gal & Turner "
                   "2015)")
    noncentring = "guide"

    def __init__(self, spec: SSGPSpec, settings: AlphaSettings | None = None, *,
                 noncentred: bool = False, **options):
        check_alpha_sites(self.name, spec)
        super().__init__(spec, settings, **options)
        self.collapsed = spec.nuisance == "marginalized"
        self.gaussian_nuisance = not self.collapsed
        self.noncentred = noncentred
        self.loc0, self.scale0 = alpha_init(spec, self.settings.init_scale, noncentred)
        self.n_theta = spec.m * spec.d

    def __call__(self, x, y=None, **kwargs):
        shape, n_theta = (self.spec.m, self.spec.d), self.n_theta
        fl = numpyro.param("frequencies_loc", self.loc0[:n_theta].reshape(shape))
        fs = numpyro.param("frequencies_scale", self.scale0[:n_theta].reshape(shape),
                           constraint=constraints.positive)
        theta_scale, s_scale = standard_scales(self.spec) if self.noncentred else (1.0, 1.0)
        numpyro.sample("frequencies", dist.Normal(fl * theta_scale, fs * theta_scale).to_event(2))
        if self.collapsed:
            return
        nl = numpyro.param("nuisance_loc", self.loc0[n_theta:])
        ns = numpyro.param("nuisance_scale", self.scale0[n_theta:], constraint=constraints.positive)
        numpyro.sample("nuisance", dist.Normal(nl * s_scale, ns * s_scale).to_event(1))

    def nuisance_conditional(self, params, draw):
        if self.collapsed:
            return super().nuisance_conditional(params, draw)
        s_scale = standard_scales(self.spec, params)[1] if self.noncentred else 1.0
        return s_scale * params["nuisance_loc"], jnp.diag(s_scale * params["nuisance_scale"])


def sqrt_inverse_gamma(shape, rate):
    """σ with σ² ~ InverseGamma(shape, rate): the family of the ``gaussian_lambda`` scales."""
    return dist.TransformedDistribution(dist.InverseGamma(shape, rate),
                                        dist.transforms.PowerTransform(0.5))


class GaussianLambdaGuide(Guide):
    """Tan et al. 2016's factorisation q(λ) q(α) q(σ) q(γ) fitted by SVI (the "NCVMP-equivalent"
    family).

    * q(λ) = N(μ_λ, Σ_λ) with full Σ_λ = LLᵀ, L = √0.5·U (``inverse_lengthscales_loc``,
      ``inverse_lengthscales_scale_unit`` = U, lower triangular), started at §4's μ_λ = 0.5·1,
      Σ_λ = 0.5 I;
    * q(α) = N(μ_α, Σ_α) full, Σ_α^{1/2} = σ₀·U, σ₀ = ``init_scale`` × the prior std of α
      (``nuisance_loc``, ``nuisance_scale_unit`` = U);
    * q(σ), q(γ): σ² ~ InverseGamma(a, b) with free shape and rate (``signal_shape``,
      ``signal_rate``, ``noise_shape``, ``noise_rate``). The optimal densities of §3.1 are
      q(σ²) ∝ (σ²)^{−(m − ½) − 1} e^{−C/σ²} / (A² + σ²) (and n/2 − ½ for γ²): an inverse gamma times
      the half-Cauchy factor 1/(A² + σ²), which is flat to within σ²/A² (< 0.2% for σ < 1 with
      Tan et al. 2016's A = 25). NumPyro has no reparameterised sampler for the exact density; the
      inverse gamma is reparameterised (implicit gamma gradients), contains the A → ∞ limit of the
      optimum exactly, and its free shape lets SVI absorb the remaining factor.

    Each Cholesky factor is σ₀·U with U (``*_scale_unit``) starting at I: Adam's sign-like steps
    then move U relative to σ₀; with the factor itself as the parameter its off-diagonal entries
    random-walk to ~15× the diagonal on Auto-MPG within 40 steps.
    """

    name = "gaussian_lambda"
    Settings = AlphaSettings
    description = "Tan et al. 2016's q(λ)q(α)q(σ)q(γ) (the NCVMP family) fitted by SVI"
    gaussian_nuisance = True

    def __init__(self, spec: SSGPSpec, settings: AlphaSettings | None = None, **options):
        want = ("noise", "signal", "inverse_lengthscales", "nuisance")
        if spec.parameterization != "scaled" or sorted(spec.latent_sites()) != sorted(want):
            raise SSGPError(
                "guide 'gaussian_lambda' covers Tan et al. 2016's sites noise, signal, "
                "inverse_lengthscales and nuisance of the scaled parameterisation; this model's "
                f"latent sites are {', '.join(spec.latent_sites())}")
        super().__init__(spec, settings, **options)
        self.lam_scale0 = math.sqrt(0.5)  # §4: Σ_λ = 0.5 I at the start
        self.a_scale0 = self.settings.init_scale * spec.signal.value / math.sqrt(spec.m)

    def __call__(self, x, y=None, n_total=None, **kwargs):
        m, d = self.spec.m, self.spec.d
        n = n_total or x.shape[0]
        lam_loc = numpyro.param("inverse_lengthscales_loc", jnp.full((d,), 0.5))
        lam_unit = numpyro.param("inverse_lengthscales_scale_unit", jnp.eye(d),
                                 constraint=constraints.lower_cholesky)
        numpyro.sample("inverse_lengthscales",
                       dist.MultivariateNormal(lam_loc, scale_tril=self.lam_scale0 * lam_unit))
        a_loc = numpyro.param("nuisance_loc", jnp.zeros(2 * m))
        a_unit = numpyro.param("nuisance_scale_unit", jnp.eye(2 * m),
                               constraint=constraints.lower_cholesky)
        numpyro.sample("nuisance", dist.MultivariateNormal(a_loc, scale_tril=self.a_scale0 * a_unit))
        # shapes start at the optimum's (m − ½, (n − 1)/2), rates put the mode of σ² at init²
        for site, hyper, shape0 in (("signal", self.spec.signal, m - 0.5),
                                    ("noise", self.spec.noise, (n - 1) / 2)):
            shape = numpyro.param(f"{site}_shape", jnp.asarray(float(shape0)),
                                  constraint=constraints.greater_than(0.5))
            rate = numpyro.param(f"{site}_rate", jnp.asarray((shape0 + 1.0) * hyper.value**2),
                                 constraint=constraints.positive)
            numpyro.sample(site, sqrt_inverse_gamma(shape, rate))

    def nuisance_conditional(self, params, draw):
        return params["nuisance_loc"], self.a_scale0 * params["nuisance_scale_unit"]


def gaussian_lambda_params(spec: SSGPSpec, state, n: int, init_scale: float = 0.1) -> dict:
    """``gaussian_lambda`` params holding an NCVMP solution (:class:`ssgp_ppl.inference.ncvmp.NCVMPState`):
    the same q(λ), q(α), and q(σ²) = IG(m − ½, C_σ), q(γ²) = IG((n − 1)/2, C_γ), the optimal
    densities of Tan et al. 2016, §3.1 without their 1/(A² + ·) factor. Warm-starts SVI at the NCVMP fit."""
    from ssgp_ppl.inference.ncvmp import to_nuisance

    m = spec.m
    perm = to_nuisance(jnp.arange(2 * m))
    chol_a = jnp.linalg.cholesky(state.sigma_alpha[perm][:, perm])
    return {
        "inverse_lengthscales_loc": state.mu_lambda,
        "inverse_lengthscales_scale_unit": jnp.linalg.cholesky(state.sigma_lambda) / math.sqrt(0.5),
        "nuisance_loc": to_nuisance(state.mu_alpha),
        "nuisance_scale_unit": chol_a / (init_scale * spec.signal.value / math.sqrt(m)),
        "signal_shape": jnp.asarray(m - 0.5), "signal_rate": jnp.asarray(state.c_signal),
        "noise_shape": jnp.asarray((n - 1) / 2), "noise_rate": jnp.asarray(state.c_noise),
    }


def initial_components(spec, components: int, init_scale: float, spread: float):
    """Starting means (K, D) and scales (K, D) of :class:`MixtureGuide`'s components."""
    loc0, scale0 = alpha_init(spec, init_scale)
    jitter = np.random.default_rng(0).standard_normal((components, loc0.shape[0]))
    jitter[0] = 0.0
    locs0 = loc0 + spread * (scale0 / init_scale) * jnp.asarray(jitter, loc0.dtype)
    return locs0, jnp.broadcast_to(scale0, locs0.shape)


class MixtureGuide(Guide):
    """K equal-weight diagonal Gaussians over α = vec(θ, s) (Nguyen & Bonilla 2014; free
    parameterisation), fitted by its own score-function ELBO (:func:`ssgp_ppl.model.mixture.avi_elbo`).

    Component means start at b₀ = vec(θ₀, 0) plus ``spread`` × the prior std × a fixed N(0, 1)
    draw (distinct starting points break the symmetry between components); scales at
    ``init_scale`` × the prior std. Draws for predictions pick k, then α (eq. 36 by Monte Carlo).
    """

    name = "mixture"
    Settings = MixtureSettings
    description = "K equal-weight diagonal Gaussians over α = vec(θ, s) (Nguyen & Bonilla 2014)"
    needs_gaussian_density = True

    def __init__(self, spec: SSGPSpec, settings: MixtureSettings | None = None, **options):
        check_alpha_sites(self.name, spec)
        if not spec.density.gaussian:
            raise SSGPError(f"guide 'mixture' needs a Gaussian spectral density (its E_q log p(θ) "
                            f"is closed-form), not {spec.density.name!r}")
        super().__init__(spec, settings, **options)
        s = self.settings
        self.components = s.components
        self.locs0, self.scales0 = initial_components(spec, s.components, s.init_scale, s.spread)

    def __call__(self, x, y=None, **kwargs):
        m, d, kc = self.spec.m, self.spec.d, self.components
        n_theta = m * d
        loc = numpyro.param("alpha_loc", self.locs0)
        scale = numpyro.param("alpha_scale", self.scales0, constraint=constraints.positive)
        k = numpyro.sample("alpha_component", dist.Categorical(logits=jnp.zeros(kc)),
                           infer={"is_auxiliary": True})
        base = dist.Normal(0.0, 1.0).expand([loc.shape[1]]).to_event(1)
        z = numpyro.sample("alpha_base", base, infer={"is_auxiliary": True})
        alpha = loc[k] + scale[k] * z
        log_mix = logsumexp(dist.Normal(loc, scale).log_prob(alpha).sum(-1)) - math.log(kc)
        # the trace's densities sum to log q(α): log(1/K) + log N(z) + this Delta's log density
        extra = log_mix + math.log(kc) - base.log_prob(z)
        numpyro.sample("frequencies", dist.Delta(alpha[:n_theta].reshape(m, d), extra, event_dim=2))
        numpyro.sample("nuisance", dist.Delta(alpha[n_theta:], event_dim=1))

    def own_objective(self, name: str):
        if name != "elbo":
            return None
        from ssgp_ppl.model.mixture import avi_elbo

        return avi_elbo


GUIDES: Registry[GuideType] = Registry("guide", GuideType, (
    AutoNormalGuide, AutoMVNGuide, AutoLowRankGuide, AutoDeltaGuide, JointAffineGuide,
    MeanFieldGuide, GaussianLambdaGuide, MixtureGuide))


def register(guide: GuideType) -> GuideType:
    """Add the guide class ``guide`` (a :class:`Guide` subclass with its own ``name`` and
    ``Settings``) to :data:`GUIDES`: a catalog entry then names it in ``[inference.svi] guide``
    and sets its settings in ``[inference.svi.<name>]``. An installed package can instead declare
    it under the entry-point group ``ssgp_ppl.guides`` (:mod:`ssgp_ppl.plugins`)."""
    if not (isinstance(guide, type) and issubclass(guide, Guide)):
        raise SSGPError("register_guide() takes a Guide subclass (the class, not an instance), "
                        f"got {type(guide).__name__}")
    return GUIDES.register(guide)


def initial_values(spec: SSGPSpec) -> dict:
    """Deterministic starting point shared by all fits of a spec (VI, MAP, ML): the catalog's
    ``init`` values, frequencies r = s/2πℓ₀ from the fixed spectral points, and s = 0."""
    d = spec.d
    values = {
        "noise": jnp.asarray(spec.noise.value),
        "signal": jnp.asarray(spec.signal.value),
        "lengthscales": jnp.full((d,), spec.lengthscales.value),
        "inverse_lengthscales": jnp.full((d,), spec.inverse_lengthscales.value),
        "frequencies": spec.spectral_points / (spectral.TWO_PI * spec.lengthscales.value),
        "nuisance": jnp.zeros(2 * spec.m),
    }
    # the non-centred frequencies θ·2πℓ₀ of a reparameterised model start at the spectral points
    values["frequencies_decentered"] = spec.spectral_points
    return {k: v for k, v in values.items() if k.removesuffix("_decentered") in spec.latent_sites()}


def make_guide(name: str, model: Callable, spec: SSGPSpec, settings: Settings | None = None, *,
               noncentred: bool = False) -> Guide:
    """The registered guide ``name`` for ``model`` (a partial of ``ssgp_model`` with ``spec``),
    with ``settings`` (its Settings; None: the defaults)."""
    return GUIDES.get(name).make(model, spec, settings, noncentred=noncentred)


class EmptyGuide(Guide):
    """Guide of a model with no latent sample sites (type-II maximum likelihood)."""

    name = "none"

    def __call__(self, x, y=None, **kwargs):
        return None


class MAPGuide(AutoDeltaGuide):
    """Point estimates of the latent sites (MAP where the entry has priors)."""


def nuts_init(site=None):
    """NUTS start: medians of 15 prior draws for hyperparameters, a prior draw for θ and s, so that
    chains start apart (needed for R-hat to mean anything)."""
    if site is None:
        return partial(nuts_init)
    if site["name"].split("_decentered")[0] in ("frequencies", "nuisance"):
        return init_to_sample(site)
    return init_to_median(site, num_samples=15)


__all__ = ["GUIDES", "AutoMultivariateNormal", "EmptyGuide", "GaussianLambdaGuide", "Guide",
           "JointAffineGuide", "MAPGuide", "MeanFieldGuide", "MixtureGuide", "NumPyroAutoGuide",
           "GuideType", "initial_values", "make_guide", "nuts_init", "register"]
