"""Variational guides by catalog name.

A guide is a plain callable with the model's signature ``guide(x, y=None, **model_kwargs)``;
its params are named ``{site}_{role}``. NumPyro's autoguides are available by name, and the
papers' guides:

* ``joint_affine`` (sVBSSGP, seed 001 §3.1 Lemma 1): α = vec(θ, s) = M z + b with a full
  invertible M (``alpha_matrix``) and b (``alpha_loc``), z ~ ψ = N(0, I) or a multivariate
  Student-t with ν degrees of freedom; q(α) = ψ(M⁻¹(α − b)) / |det M|. θ and s interact a posteriori.
* ``mean_field`` (VSSGP, Gal & Turner 2015 as seed 001 Remark 2 describes it): independent
  Gaussians over each frequency vector r_i (``frequencies_loc``, ``frequencies_scale``) and over
  s (``nuisance_loc``, ``nuisance_scale``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
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
    """sVBSSGP guide α = vec(θ, s) = M z + b, z ~ ψ (seed 001 §3.1, Lemma 1).

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

    return guide


def mean_field_guide(spec: SSGPSpec, init_scale: float = 0.1, **_) -> Callable:
    """VSSGP guide: q(θ, s) = Π_i N(r_i | μ_i, diag σ_i²) · N(s | μ_s, diag σ_s²) (seed 001 Rem. 2)."""
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

    return guide


CUSTOM_GUIDES.update(joint_affine=joint_affine_guide, mean_field=mean_field_guide)


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
