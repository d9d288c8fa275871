"""Variational guides by catalog name.

A guide is a plain callable with the model's signature ``guide(x, y=None, **model_kwargs)``;
its params are named ``{site}_{role}``. NumPyro's autoguides are available by name, and the
papers' guides:

* ``joint_affine`` (sVBSSGP, Hoang et al. 2017, §3.1 Lemma 1): α = vec(θ, s) = M z + b with a full
  invertible M (``alpha_matrix``) and b (``alpha_loc``), z ~ ψ = N(0, I) or a multivariate
  Student-t with ν degrees of freedom; q(α) = ψ(M⁻¹(α − b)) / |det M|. θ and s interact a posteriori.
* ``gaussian_lambda`` (Tan et al. 2016, eq. 11): q(λ)q(α)q(σ)q(γ), Gaussian λ and α with
  full covariances, square-root inverse-gamma scales (the NCVMP family fitted by SVI).
* ``mixture`` (Nguyen & Bonilla 2014, Nguyen & Bonilla 2014): K equal-weight diagonal Gaussians over
  α = vec(θ, s) (:mod:`ssgp_ppl.mixture`).
* ``mean_field`` (VSSGP, Gal & Turner 2015 as Hoang et al. 2017, Remark 2 describes it): independent
  Gaussians over each frequency vector r_i (``frequencies_loc``, ``frequencies_scale``) and over
  s (``nuisance_loc``, ``nuisance_scale``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.linalg import solve_triangular
from numpyro.distributions import constraints
from numpyro.infer import autoguide, init_to_median, init_to_sample, init_to_value

from ssgp_ppl import spectral
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.model import SSGPSpec

AUTOGUIDES: dict[str, type] = {
    "auto_normal": autoguide.AutoNormal,
    "auto_mvn": autoguide.AutoMultivariateNormal,
    "auto_lowrank": autoguide.AutoLowRankMultivariateNormal,
    "auto_delta": autoguide.AutoDelta,
}

# custom guides: name -> builder(spec, **options) -> guide callable
CUSTOM_GUIDES: dict[str, Callable] = {}
PSI = ("normal", "student_t")


def _check_alpha_sites(name: str, spec: SSGPSpec) -> None:
    want = ("frequencies", "nuisance")
    if spec.parameterization != "free" or spec.latent_sites() != want:
        raise SSGPError(
            f"guide {name!r} covers exactly the frequencies θ and nuisance s of the free "
            f"parameterisation; this model's latent sites are {', '.join(spec.latent_sites())} "
            "(make the hyperparameters learned or fixed)"
        )


def _alpha_init(spec: SSGPSpec, init_scale: float):
    """b₀ = vec(θ₀, 0) and the per-coordinate scale: ``init_scale`` × the prior std of θ, s."""
    theta0 = initial_values(spec)["frequencies"]
    theta_sd = jnp.full(theta0.shape, 1.0 / (spectral.TWO_PI * spec.lengthscales.value))
    s_sd = jnp.full((2 * spec.m,), spec.signal.value / jnp.sqrt(spec.m))
    loc = jnp.concatenate([theta0.ravel(), jnp.zeros(2 * spec.m)])
    return loc, init_scale * jnp.concatenate([theta_sd.ravel(), s_sd])


def joint_affine_guide(spec: SSGPSpec, psi: str = "normal", df: float = 5.0,
                       init_scale: float = 0.1) -> Callable:
    """sVBSSGP guide α = vec(θ, s) = M z + b, z ~ ψ (Hoang et al. 2017, §3.1, Lemma 1).

    The base draw z is an auxiliary site; θ and s are Delta sites whose log-density carries
    −log|det M| (computed by ``slogdet``, i.e. an LU factorisation: M need not be triangular), so
    log q(α) = log ψ(z) − log|det M| and the ELBO gradient is the paper's eq. (6). The param
    ``alpha_matrix`` holds U with M = diag(σ₀) U, σ₀ = ``init_scale`` × the prior std of each
    coordinate (U starts at I).
    """
    _check_alpha_sites("joint_affine", spec)
    if psi not in PSI:
        raise SSGPError(f"unknown ψ {psi!r}; known: {', '.join(PSI)}")
    m, d = spec.m, spec.d
    n_theta = m * d
    loc0, scale0 = _alpha_init(spec, init_scale)
    dim = loc0.shape[0]

    log_scale0 = jnp.sum(jnp.log(scale0))

    def guide(x, y=None, **kwargs):
        # M = diag(σ₀) U: U (D, D) is any invertible matrix, stored in units of each coordinate's
        # initial spread σ₀ so that Adam's per-coordinate steps are relative (with M itself as the
        # parameter the first sign-like steps of size lr on all D² entries dwarf σ₀ ~ 0.02)
        unit = numpyro.param("alpha_matrix", jnp.eye(dim))
        loc = numpyro.param("alpha_loc", loc0)  # b, (D,)
        mat = scale0[:, None] * unit
        if psi == "normal":
            base = dist.Normal(jnp.zeros(dim), 1.0).to_event(1)
        else:
            base = dist.MultivariateStudentT(df, jnp.zeros(dim), jnp.eye(dim))
        z = numpyro.sample("alpha_base", base, infer={"is_auxiliary": True})
        alpha = mat @ z + loc
        log_det = log_scale0 + jnp.linalg.slogdet(unit)[1]  # log|det M|
        numpyro.sample("frequencies", dist.Delta(alpha[:n_theta].reshape(m, d), -log_det,
                                                 event_dim=2))
        numpyro.sample("nuisance", dist.Delta(alpha[n_theta:], event_dim=1))

    def conditional_and_marginal(params, draw):
        """q(s | θ) = N(b_s + L_sθ L_θθ⁻¹(θ − b_θ), L_ss L_ssᵀ) with M = L Q (LQ factorisation),
        and log q(θ) = log N(θ | b_θ, L_θθ L_θθᵀ) from the same factor (θ − b_θ = L_θθ w): the
        objectives' KL term needs log q(θ, s) − log q(s | θ), which this gives without the
        slogdet (an LU of the D × D matrix M) and the s-solve that difference costs."""
        mat = scale0[:, None] * params["alpha_matrix"]
        q, r = jnp.linalg.qr(mat.T)
        low = r.T * jnp.sign(jnp.diagonal(r))[None, :]  # lower triangular, positive diagonal
        loc = params["alpha_loc"]
        w = solve_triangular(low[:n_theta, :n_theta], draw["frequencies"].ravel() - loc[:n_theta],
                             lower=True)
        log_q_theta = (-0.5 * (w @ w) - jnp.sum(jnp.log(jnp.diagonal(low)[:n_theta]))
                       - 0.5 * n_theta * math.log(2 * math.pi))
        return loc[n_theta:] + low[n_theta:, :n_theta] @ w, low[n_theta:, n_theta:], log_q_theta

    def nuisance_conditional(params, draw):
        return conditional_and_marginal(params, draw)[:2]

    nuisance_conditional.__doc__ = conditional_and_marginal.__doc__
    if psi == "normal":  # under ψ = Student-t, s | θ is not Gaussian: s is drawn
        guide.nuisance_conditional = nuisance_conditional
        guide.conditional_and_marginal = conditional_and_marginal
    return guide


def mean_field_guide(spec: SSGPSpec, init_scale: float = 0.1, **_) -> Callable:
    """VSSGP guide: q(θ, s) = Π_i N(r_i | μ_i, diag σ_i²) · N(s | μ_s, diag σ_s²) (Hoang et al. 2017, Rem. 2)."""
    _check_alpha_sites("mean_field", spec)
    loc0, scale0 = _alpha_init(spec, init_scale)
    n_theta = spec.m * spec.d
    shape = (spec.m, spec.d)

    def guide(x, y=None, **kwargs):
        fl = numpyro.param("frequencies_loc", loc0[:n_theta].reshape(shape))
        fs = numpyro.param("frequencies_scale", scale0[:n_theta].reshape(shape),
                           constraint=constraints.positive)
        numpyro.sample("frequencies", dist.Normal(fl, fs).to_event(2))
        nl = numpyro.param("nuisance_loc", loc0[n_theta:])
        ns = numpyro.param("nuisance_scale", scale0[n_theta:], constraint=constraints.positive)
        numpyro.sample("nuisance", dist.Normal(nl, ns).to_event(1))

    guide.nuisance_conditional = lambda params, draw: (params["nuisance_loc"],
                                                       jnp.diag(params["nuisance_scale"]))
    return guide


def sqrt_inverse_gamma(shape, rate):
    """σ with σ² ~ InverseGamma(shape, rate): the family of the ``gaussian_lambda`` scales."""
    return dist.TransformedDistribution(dist.InverseGamma(shape, rate),
                                        dist.transforms.PowerTransform(0.5))


def gaussian_lambda_guide(spec: SSGPSpec, init_scale: float = 0.1, **_) -> Callable:
    """Tan et al. 2016's factorisation q(λ) q(α) q(σ) q(γ) fitted by SVI (the "NCVMP-equivalent" family).

    * q(λ) = N(μ_λ, Σ_λ) with full Σ_λ = LLᵀ, L = √0.5·U (``inverse_lengthscales_loc``,
      ``inverse_lengthscales_scale_unit`` = U, lower triangular), started at §4's μ_λ = 0.5·1,
      Σ_λ = 0.5 I;
    * q(α) = N(μ_α, Σ_α) full, Σ_α^{1/2} = σ₀·U, σ₀ = ``init_scale`` × the prior std of α
      (``nuisance_loc``, ``nuisance_scale_unit`` = U);
    * q(σ), q(γ): σ² ~ InverseGamma(a, b) with free shape and rate (``signal_shape``,
      ``signal_rate``, ``noise_shape``, ``noise_rate``). The optimal densities of §3.1 are
      q(σ²) ∝ (σ²)^{−(m − ½) − 1} e^{−C/σ²} / (A² + σ²) (and n/2 − ½ for γ²): an inverse gamma times
      the half-Cauchy factor 1/(A² + σ²), which is flat to within σ²/A² (< 0.2% for σ < 1 with
      Tan et al. 2016's A = 25). NumPyro has no reparameterised sampler for the exact density; the inverse
      gamma is reparameterised (implicit gamma gradients), contains the A → ∞ limit of the optimum
      exactly, and its free shape lets SVI absorb the remaining factor.
    """
    want = ("noise", "signal", "inverse_lengthscales", "nuisance")
    if spec.parameterization != "scaled" or tuple(sorted(spec.latent_sites())) != tuple(sorted(want)):
        raise SSGPError(
            "guide 'gaussian_lambda' covers Tan et al. 2016's sites noise, signal, inverse_lengthscales and "
            f"nuisance of the scaled parameterisation; this model's latent sites are "
            f"{', '.join(spec.latent_sites())}")
    m, d = spec.m, spec.d
    lam_scale0 = math.sqrt(0.5)  # §4: Σ_λ = 0.5 I at the start
    a_scale0 = init_scale * spec.signal.value / math.sqrt(m)

    def guide(x, y=None, n_total=None, **kwargs):
        n = n_total or x.shape[0]
        # each Cholesky factor is σ₀·U with U (``*_scale_unit``) starting at I: Adam's sign-like
        # steps then move U relative to σ₀; with the factor itself as the parameter its
        # off-diagonal entries random-walk to ~15× the diagonal on Auto-MPG within 40 steps
        # (condition number 4e18, log q(α) of its own draws −1e21)
        lam_loc = numpyro.param("inverse_lengthscales_loc", jnp.full((d,), 0.5))
        lam_unit = numpyro.param("inverse_lengthscales_scale_unit", jnp.eye(d),
                                 constraint=constraints.lower_cholesky)
        numpyro.sample("inverse_lengthscales",
                       dist.MultivariateNormal(lam_loc, scale_tril=lam_scale0 * lam_unit))
        a_loc = numpyro.param("nuisance_loc", jnp.zeros(2 * m))
        a_unit = numpyro.param("nuisance_scale_unit", jnp.eye(2 * m),
                               constraint=constraints.lower_cholesky)
        numpyro.sample("nuisance", dist.MultivariateNormal(a_loc, scale_tril=a_scale0 * a_unit))
        # shapes start at the optimum's (m − ½, (n − 1)/2), rates put the mode of σ² at init²
        for site, shape0 in (("signal", m - 0.5), ("noise", (n - 1) / 2)):
            init = getattr(spec, site).value
            shape = numpyro.param(f"{site}_shape", jnp.asarray(float(shape0)),
                                  constraint=constraints.greater_than(0.5))
            rate = numpyro.param(f"{site}_rate", jnp.asarray((shape0 + 1.0) * init**2),
                                 constraint=constraints.positive)
            numpyro.sample(site, sqrt_inverse_gamma(shape, rate))

    guide.nuisance_conditional = lambda params, draw: (
        params["nuisance_loc"], a_scale0 * params["nuisance_scale_unit"])
    return guide


def gaussian_lambda_params(spec: SSGPSpec, state, n: int, init_scale: float = 0.1) -> dict:
    """``gaussian_lambda`` params holding an NCVMP solution (:class:`ssgp_ppl.ncvmp.NCVMPState`):
    the same q(λ), q(α), and q(σ²) = IG(m − ½, C_σ), q(γ²) = IG((n − 1)/2, C_γ), the optimal
    densities of Tan et al. 2016, §3.1 without their 1/(A² + ·) factor. Warm-starts SVI at the NCVMP fit."""
    from ssgp_ppl.ncvmp import to_nuisance

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


CUSTOM_GUIDES.update(joint_affine=joint_affine_guide, mean_field=mean_field_guide,
                     gaussian_lambda=gaussian_lambda_guide)


def _mixture(spec, **options):
    from ssgp_ppl.mixture import mixture_guide

    return mixture_guide(spec, **options)


CUSTOM_GUIDES["mixture"] = _mixture


def known_guides() -> tuple[str, ...]:
    return tuple(AUTOGUIDES) + tuple(CUSTOM_GUIDES)


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
    return {k: v for k, v in values.items() if k in spec.latent_sites()}


def make_guide(name: str, model: Callable, spec: SSGPSpec, **options) -> Callable:
    """Build the guide ``name`` for ``model`` (a partial of ``ssgp_model`` with ``spec``);
    ``options`` (ψ, ν, initial scale) go to the papers' guides."""
    if name in CUSTOM_GUIDES:
        return CUSTOM_GUIDES[name](spec, **options)
    if name not in AUTOGUIDES:
        raise SSGPError(f"unknown guide {name!r}; known: {', '.join(known_guides())}")
    init = init_to_value(values=initial_values(spec))
    return AUTOGUIDES[name](model, init_loc_fn=init)


def nuts_init(site=None):
    """NUTS start: medians of 15 prior draws for hyperparameters, a prior draw for θ and s, so that
    chains start apart (needed for R-hat to mean anything)."""
    if site is None:
        return partial(nuts_init)
    if site["name"].split("_decentered")[0] in ("frequencies", "nuisance"):
        return init_to_sample(site)
    return init_to_median(site, num_samples=15)
