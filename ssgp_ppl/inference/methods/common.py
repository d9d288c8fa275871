"""What several methods share: the spec with handed-over spectral points, partitions, the rule."""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from ssgp_ppl.diagnostics.datatree import LOGLIK_MAX_VALUES, LOO_MIN_DRAWS, by_chain
from ssgp_ppl.inference.fitinfo import FitInfo, MethodInfo, StopReading
from ssgp_ppl.inference.runners import guide_draws_with_density, site_values
from ssgp_ppl.model import spectral
from ssgp_ppl.model.guides import EmptyGuide
from ssgp_ppl.model.predictive import SiteRule
from ssgp_ppl.model.ssgp import draw_nuisance, with_start
from ssgp_ppl.posterior import Handoff, Posterior

__all__ = ["LOGLIK_MAX_VALUES", "LOO_MIN_DRAWS", "by_chain", "spec_for", "partitions_for",
           "site_rule", "with_nuisance", "finish", "loo_draws"]


def loo_draws(entry, n: int) -> int | None:
    """The draws of a VI fit on n training rows that keeps densities for PSIS-LOO: the entry's
    predictive samples, at least :data:`LOO_MIN_DRAWS`; None where that many draws' pointwise
    log-likelihood (draws × n values) would exceed :data:`LOGLIK_MAX_VALUES`. (Where the model
    integrates s out, a Gaussian likelihood, s is drawn from its exact conditional: log p(θ, y) /
    q(θ) is then the importance ratio of (θ, s).)"""
    num = max(int(entry.config["predictive"]["samples"]), LOO_MIN_DRAWS)
    return num if num * n <= LOGLIK_MAX_VALUES else None


def spec_for(entry, data, inputs):
    """The entry's model spec for the data's columns; the spectral points handed over (the set
    NCVMP's restarts kept) replace the entry's own, and a handed-over start (a path of a
    multi-path fit) sets the initial values."""
    spec = entry.spec(data.n_features)
    if inputs is not None and inputs.spectral_points is not None:
        spec = dataclasses.replace(spec, spectral_points=jnp.asarray(inputs.spectral_points))
    if inputs is not None and inputs.start is not None:
        spec = with_start(spec, inputs.start)
    return spec


def partitions_for(entry, data, inputs, seed: int):
    """The k-means partitions handed over, else built as ``[partitions]`` says (None when the
    entry uses none)."""
    if inputs is not None and inputs.partitions is not None:
        return inputs.partitions
    return entry.partitions(data.x_train, seed=seed) if entry.uses_partitions else None


def site_rule(entry, sites: dict, data, partitions) -> SiteRule:
    """The entry's ``[predictive]`` rule over flat site draws (S, ...)."""
    pred = entry.config["predictive"]
    needs_data = pred["rule"] != "degenerate"
    return SiteRule(pred["rule"], {k: jnp.asarray(v) for k, v in sites.items()},
                    np.asarray(data.x_train) if needs_data else None,
                    np.asarray(data.y_train) if needs_data else None, float(pred["gamma"]),
                    partitions if pred["rule"] == "local" else None)


NUISANCE_BATCH_VALUES = 2**23  # feature values held at once when s is drawn per draw of θ


def with_nuisance(sites: dict, x, y, seed: int, spec) -> dict:
    """``sites`` with s drawn from its exact Gaussian conditional given each draw of θ, σ_s, σ_n
    (:func:`ssgp_ppl.model.ssgp.draw_nuisance`): a sampler or guide over the collapsed model gives the
    same sites as the uncollapsed one (the pointwise log-likelihood and the degenerate rule use s).
    A fixed σ_s or σ_n (not a site) is the spec's value."""
    n = len(sites["frequencies"])
    keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), 7), n)

    def per_draw(name, hyper):
        return jnp.asarray(sites[name]) if name in sites else jnp.full((n,), hyper.value)

    signal, noise = per_draw("signal", spec.signal), per_draw("noise", spec.noise)
    x, y = jnp.asarray(x), jnp.asarray(y)
    freq = jnp.asarray(sites["frequencies"])
    # a few draws at a time: all S feature matrices at once would hold S × n × 2m values
    batch = int(min(n, max(1, NUISANCE_BATCH_VALUES // (x.shape[0] * 2 * freq.shape[1]))))
    s = jax.jit(lambda *a: jax.lax.map(
        lambda b: draw_nuisance(b[0], spectral.features(x, b[1]), y, b[2], b[3]), a,
        batch_size=batch))(keys, freq, signal, noise)
    return {**sites, "nuisance": s}


def finish(entry, data, method: str, model, guide, params, res, *, spec, partitions, seed: int,
           num: int, densities: bool, t0: float, method_info: MethodInfo | None = None) -> Posterior:
    """Draws of a fitted guide → a Posterior (shared by ``svi`` and ``ml``); ``method_info``: the
    method's own info (:mod:`ssgp_ppl.inference.fitinfo`)."""
    x, y = jax.numpy.asarray(data.x_train), jax.numpy.asarray(data.y_train)
    log_p = log_q = None
    loo_seconds = 0.0
    if isinstance(guide, EmptyGuide):
        draws = {}
    else:
        t_loo = time.perf_counter()
        draws, log_p, log_q = guide_draws_with_density(model, guide, params, x, y, num_samples=num,
                                                       seed=seed + 1, densities=densities)
        jax.block_until_ready(draws)
        loo_seconds = time.perf_counter() - t_loo if densities else 0.0  # LOO bookkeeping
    sites = site_values(model, params, draws, x[:1])  # site values do not depend on n
    if spec.nuisance == "marginalized" and draws:  # s from its conditional per draw
        sites = with_nuisance(sites, x, y, seed, spec)
    jax.block_until_ready(sites)
    fit_seconds = time.perf_counter() - t0 - loo_seconds
    pred = entry.config["predictive"]
    rule_sites = dict(sites)
    if pred["integrate_nuisance"] and guide.gaussian_nuisance and pred["rule"] == "degenerate":
        loc, tril = jax.vmap(lambda d: guide.nuisance_conditional(params, d))(draws)
        rule_sites.update(nuisance=loc, nuisance_tril=tril)
    fit_info = FitInfo(fit_seconds=fit_seconds, loo_seconds=loo_seconds, steps=res.steps,
                       converged=res.converged,
                       reading=StopReading(improvement=res.improvement,
                                           improvement_se=res.improvement_se,
                                           tolerance=res.tolerance),
                       interrupted=res.interrupted,
                       stop_signal=res.stop_signal,
                       partitions=None if partitions is None else partitions.count,
                       method=method_info)
    type2 = {k: np.asarray(params[k]) for k in spec.learned_sites()}
    return Posterior(entry=entry, method=method, dataset=data.name, sites=by_chain(sites, 1),
                     rule=site_rule(entry, rule_sites, data, partitions), x_scaler=data.x_scaler,
                     y_scaler=data.y_scaler, info=fit_info,
                     log_p=None if log_p is None else np.asarray(log_p)[None],
                     log_q=None if log_q is None else np.asarray(log_q)[None], losses=res.losses,
                     handoff=Handoff(type2=type2, partitions=partitions),
                     params={k: np.asarray(v) for k, v in params.items()})
