"""Variational guides by catalog name.

A guide is a plain callable with the model's signature ``guide(x, y=None, *, n_total=None)``.
The Foundation ships NumPyro's autoguides; the papers' guides register here under their names.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax.numpy as jnp
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

# custom guides: name -> builder(model, spec) -> guide callable (filled by later modules)
CUSTOM_GUIDES: dict[str, Callable] = {}


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


def make_guide(name: str, model: Callable, spec: SSGPSpec) -> Callable:
    """Build the guide ``name`` for ``model`` (a partial of ``ssgp_model`` with ``spec``)."""
    if name in CUSTOM_GUIDES:
        return CUSTOM_GUIDES[name](model, spec)
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
