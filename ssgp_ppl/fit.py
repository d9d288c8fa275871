"""Fit a catalog entry on a data set with one method, predict the test split, score it.

:func:`fit` is what the CLI's ``fit`` and ``compare`` commands call. Methods:

* ``ml``: type-II maximum likelihood (MAP where the entry has priors) by Adam inside one jit;
* ``svi``: the entry's guide, ELBO by Adam inside one jit, predictions averaged over guide draws;
* ``nuts``: the same model with priors, non-centred, several chains;
* ``ncvmp``: Tan et al. 2016'sAlgorithm 2 (or 1) with the closed-form predictive of §5;
* ``local``: Tan et al. 2016's adaptive neighbourhoods (§6), a local NCVMP fit per test point.

Predictions of y* are the moment-matched mixture over draws (law of total variance, noise added
per draw) and are reported in the original units of the target.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import xarray as xr
from arviz_base import from_dict, from_numpyro
from numpyro import handlers
from numpyro.infer import autoguide, init_to_value
from numpyro.infer.util import log_density
from scipy.special import ndtr

from ssgp_ppl import invariants, likelihoods, ncvmp, spectral
from ssgp_ppl.catalog import METHODS, TAN_METHODS, CatalogEntry
from ssgp_ppl.checkpoint import Checkpoint
from ssgp_ppl.checkpoint import fingerprint as checkpoint_fingerprint
from ssgp_ppl.datasets import Dataset
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.guides import initial_values, nuts_init
from ssgp_ppl.inference import (
    empty_guide,
    guide_draws_with_density,
    reparam_for_nuts,
    run_nuts,
    run_svi,
    site_values,
)
from ssgp_ppl.linalg import check_finite
from ssgp_ppl.metrics import likelihood_metrics, mixture_moments, regression_metrics
from ssgp_ppl.model import check_test_inputs, local_data, predict_draws
from ssgp_ppl.neighbourhoods import local_predict
from ssgp_ppl.objectives import make_objective
from ssgp_ppl.partitions import Partitions

DIMS = {
    "frequencies": ["frequency", "input"],
    "lengthscales": ["input"],
    "inverse_lengthscales": ["input"],
    "nuisance": ["feature"],
    "mu_lambda_euclidean": ["test", "input"],
    "mu_lambda": ["test", "input"],
    "bound": ["test"],
    "iterations": ["test"],
    "f_mean_euclidean": ["test"],
    "y": ["obs"],
    "f_mean": ["test"],
    "f_var": ["test"],
    "y_pred": ["test"],
}


class FitResult(NamedTuple):
    """A fitted entry: posterior site values, test predictions (original units), metrics."""

    model: str
    method: str
    dataset: str
    sites: dict  # name -> (chains, draws, ...) numpy arrays; type-II params repeated per draw
    mean: np.ndarray  # (n_test,) predictive mean of y*, original units
    var: np.ndarray  # (n_test,) predictive variance of y*, original units
    metrics: dict
    losses: np.ndarray | None
    datatree: xr.DataTree
    info: dict


def _by_chain(tree: dict, chains: int) -> dict:
    return {k: np.asarray(v).reshape((chains, -1) + np.shape(v)[1:]) for k, v in tree.items()}


LOGLIK_MAX_VALUES = 20_000_000  # draws × rows kept in the log_likelihood group
# VI draws where PSIS-LOO is computed (its Pareto tail needs ≥ 5 of them: S ≥ 25; k̂ is noisy
# below ~100): the predictive then averages over these draws too, not just the entry's r
LOO_MIN_DRAWS = 100


def _train_draws(sites: dict, x, y, seed: int, lik=None):
    """Per draw: log N(y_i | φ(x_i)ᵀs, σ_n²) and a replicate y_rep_i ~ N(φ(x_i)ᵀs, σ_n²), (S, n)
    each (the log_likelihood and posterior_predictive groups). (None, None) when s was integrated
    out (the likelihood does not factorise over rows) or when S × n exceeds LOGLIK_MAX_VALUES
    (AIRLINE-sized data: LOO is not the tool there)."""
    if "nuisance" not in sites or sites["signal"].shape[0] * x.shape[0] > LOGLIK_MAX_VALUES:
        return None, None
    lik = lik or likelihoods.GAUSSIAN
    count = sites["signal"].shape[0]
    noise = sites["noise"] if "noise" in sites else jnp.ones(count)

    @jax.jit
    def run(freq, s, noise, keys, x, y):
        def one(args):
            fr, sv, nz, k = args
            f = spectral.features(x, fr) @ sv
            return lik.log_prob(y, f, nz), lik.distribution(f, nz).sample(k).astype(f.dtype)

        return jax.lax.map(one, (freq, s, noise, keys))

    keys = jax.random.split(jax.random.PRNGKey(seed), count)
    loglik, y_rep = run(sites["frequencies"], sites["nuisance"], noise, keys, x, y)
    return np.asarray(loglik), np.asarray(y_rep)


def _test_draws(mean_f, var_y, data: Dataset, seed: int, num: int = 1):
    """y* draws (original units) and the PIT of each test target under the predictive mixture.

    mean_f, var_y (S, n_test), standardised: the predictive of y* is the equal-weight mixture of
    N(mean_f[s], var_y[s]); its PIT at y_i is mean_s Φ((y_i − mean_f[s, i]) / sd[s, i]) (exact).
    One y* draw per component, or ``num`` draws when S = 1 (a closed-form Gaussian predictive).
    """
    from scipy.special import ndtr

    mean_f = np.asarray(mean_f, np.float64)
    sd = np.sqrt(np.asarray(var_y, np.float64))
    y_test = np.asarray(data.y_test, np.float64)
    pit = ndtr((y_test - mean_f) / sd).mean(axis=0)
    rng = np.random.default_rng(seed + 2)
    reps = num if mean_f.shape[0] == 1 else 1
    y_pred = np.repeat(mean_f, reps, 0) + np.repeat(sd, reps, 0) * rng.standard_normal(
        (mean_f.shape[0] * reps, mean_f.shape[1]))
    return np.asarray(data.y_scaler.inverse(y_pred)), pit


def _likelihood_draws(lik, mean_f, var_f, noise, seed: int):
    """One y* draw per posterior draw: f ~ N(mean_f, var_f), y* ~ p(y | f)."""
    key_f, key_y = jax.random.split(jax.random.PRNGKey(seed + 2))
    mean_f, var_f = jnp.asarray(mean_f), jnp.asarray(var_f)
    f = mean_f + jnp.sqrt(var_f) * jax.random.normal(key_f, mean_f.shape, mean_f.dtype)
    scale = jnp.ones(()) if noise is None else jnp.asarray(noise)[:, None]
    return np.asarray(lik.distribution(f, scale).sample(key_y), np.float64)


def _assemble(*, sites: dict | None, chains: int, data: Dataset, mean_f, var_f,
              test_pit, y_pred, loglik=None, y_rep=None, log_p=None, log_q=None,
              extra: dict | None = None, seed: int = 0) -> xr.DataTree:
    """The fit's DataTree: posterior (model sites, standardised units), invariants (original
    units, :mod:`ssgp_ppl.invariants`), log_likelihood and posterior_predictive (training rows),
    sample_stats (lp = log p, log_q for VI draws), observed_data, predictions (test: per-draw f*
    moments, y* draws, PIT of each test target), predictions_constant_data (x*, y*).

    For NCVMP the per-draw f* moments are q's draws (f_var = 0) while y_pred and the PIT come from
    the §5 closed-form predictive that the metrics score; for local fits the one "draw" is the
    closed form itself and f_var is the variance of y* (the local fits do not separate noise)."""
    scale = float(np.asarray(data.y_scaler.scale))
    shift = float(np.asarray(data.y_scaler.inverse(np.zeros(()))))
    groups: dict = {
        "observed_data": {"y": np.asarray(data.y_train)},
        "predictions": _by_chain({"f_mean": mean_f, "f_var": var_f, "y_pred": y_pred}, chains),
        "predictions_constant_data": {"x_test": np.asarray(data.x_test),
                                      "y_test": np.asarray(data.y_scaler.inverse(data.y_test)),
                                      "pit": np.asarray(test_pit)},
        **(extra or {}),
    }
    if sites is not None:
        groups["posterior"] = _by_chain(sites, chains)
    if loglik is not None:
        groups["log_likelihood"] = {"y": loglik.reshape(chains, -1, loglik.shape[-1])}
        groups["posterior_predictive"] = {"y": y_rep.reshape(chains, -1, y_rep.shape[-1])}
    if log_p is not None:
        groups["sample_stats"] = _by_chain({"lp": log_p, "log_q": log_q}, chains)
    dt = from_dict(groups, dims=DIMS, pred_dims=DIMS)
    if sites is not None and "frequencies" in sites:
        inv = invariants.invariant_draws(sites["frequencies"], sites["signal"], sites.get("noise"),
                                         mean_f, var_f, y_scale=scale, y_shift=shift, seed=seed)
        dt["invariants"] = xr.DataTree(invariants.as_dataset(inv, chains))
    dt.attrs.update(y_scale=scale, y_shift=shift)
    return dt


def predict(sites: dict, data: Dataset, rule: str, *, gamma: float = 0.0,
            partitions: Partitions | None = None, x_test=None, lik=None):
    """Predictive of y* at ``x_test`` (default: the test split) from per-draw site values.

    Returns (mean, var) of y* in original units (moment-matched mixture over the S draws) and
    the per-draw (mean_f, var_f, var_y) in standardised units. Under the probit likelihood
    mean is P(y* = 1) = mean_s Φ(μ_s/√(1 + v_s)); under the Poisson E[y*] = mean_s exp(μ_s + v_s/2).
    """
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    x_test = np.asarray(data.x_test if x_test is None else x_test)
    local = local_data(partitions, x_test, gamma) if rule == "local" else None
    mean_f, var_f = predict_draws(rule, sites, x, y, jnp.asarray(x_test), local)
    lik = lik or likelihoods.GAUSSIAN
    if lik.target != "continuous":  # probit / Poisson: moments of y* from the likelihood
        mf, vf = np.asarray(mean_f, np.float64), np.asarray(var_f, np.float64)
        if lik.name == "probit":
            p = np.mean(ndtr(mf / np.sqrt(1.0 + vf)), axis=0)
            return p, p * (1.0 - p), mean_f, var_f, var_f
        rate = np.exp(mf + 0.5 * vf)  # E[e^f], E[e^{2f}] per draw; Var y = E rate + Var rate
        mean = rate.mean(0)
        return mean, mean + np.mean(np.exp(2 * mf + 2 * vf), 0) - mean**2, mean_f, var_f, var_f
    var_y = var_f + lik.noise_variance(sites["noise"][:, None])
    mean, var = mixture_moments(np.asarray(mean_f, np.float64), np.asarray(var_y, np.float64))
    mean = np.asarray(data.y_scaler.inverse(mean))
    var = var * np.asarray(data.y_scaler.scale) ** 2
    return mean, var, mean_f, var_f, var_y


def fit(
    entry: CatalogEntry,
    data: Dataset,
    method: str | None = None,
    *,
    seed: int = 0,
    steps: int | None = None,
    progress: bool = True,
    type2: dict | None = None,
    partitions: Partitions | None = None,
    spectral_points=None,
    checkpoint: Checkpoint | None = None,
    client=None,
) -> FitResult:
    """Fit ``entry`` on ``data`` with ``method`` (default: the entry's own), predict, score.

    NUTS on a model with type-II hyperparameters conditions on their estimates (empirical Bayes):
    ``type2`` gives them, else the entry's own method is fitted first to get them.
    ``partitions`` reuses k-means partitions of ``data.x_train`` (built when the entry needs them).
    ``spectral_points`` (m, d) replaces the entry's fixed spectral points; SVI and NUTS on an entry
    whose own method is ``ncvmp`` use the set NCVMP's restarts picked (the same model as the VI fit).
    ``checkpoint`` (``svi`` and ``ml``): save the optimiser state as :func:`run_svi` says, or resume
    from it; its fingerprint is this run's (:func:`run_fingerprint`). After a Ctrl-C the result
    holds the predictions of the parameters so far and ``info["interrupted"]`` is True.
    ``client`` (a ``distributed.Client``, :mod:`ssgp_ppl.cluster`): the test rows' predictions,
    and the adaptive-neighbourhood fits of ``local``, run in chunks on that Dask cluster.
    """
    method = method or entry.methods[0]
    if method not in METHODS:
        raise SSGPError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    if steps is not None and steps < 1:
        raise SSGPError(f"--steps must be >= 1, got {steps}")
    check_test_inputs(data.x_train, data.x_test)
    if checkpoint is not None:
        if method not in ("svi", "ml"):
            raise SSGPError(f"method {method!r} does not checkpoint (only svi and ml do)")
        given = {"spectral_points": spectral_points, "type2": type2,
                 "partitions": None if partitions is None else partitions.blocks}
        checkpoint = checkpoint._replace(fingerprint=run_fingerprint(entry, data, method, seed,
                                                                     steps, given))
    if method in TAN_METHODS:
        return _fit_tan(entry, data, method, seed=seed, steps=steps, progress=progress,
                        spectral_points=spectral_points, client=client)
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    spec = entry.spec(data.n_features)
    if spectral_points is None and entry.methods[0] == "ncvmp":
        spectral_points = fit(entry, data, "ncvmp", seed=seed, progress=False).info[
            "spectral_points"]
    if spectral_points is not None:
        spec = dataclasses.replace(spec, spectral_points=jnp.asarray(spectral_points))
    model = entry.model(spec)
    cfg = entry.settings(method)
    pcfg = entry.config["partitions"]
    if partitions is None and entry.uses_partitions:
        partitions = entry.partitions(data.x_train, seed=seed)
    info: dict = {"partitions": None if partitions is None else partitions.count}
    losses = log_p = log_q = None
    loo_seconds = 0.0
    t0 = time.perf_counter()
    desc = f"{entry.name}:{method}"
    guide = None
    if method == "nuts":
        learned = spec.learned_sites()
        if learned and type2 is None:
            own = entry.methods[0]
            if own == "nuts" or not spec.latent_sites():
                raise SSGPError(f"{entry.name}: NUTS needs priors on {', '.join(learned)}")
            type2 = fit(entry, data, own, seed=seed, progress=progress,
                        partitions=partitions).info["type2"]
            t0 = time.perf_counter()  # NUTS time only
        if learned:  # empirical Bayes: condition on the type-II estimates
            model = handlers.substitute(model, data={k: jnp.asarray(type2[k]) for k in learned})
            info["type2"] = {k: np.asarray(type2[k]) for k in learned}
        reparam = ("nuisance",) + (("frequencies",) if spec.density == "se" else ())
        # f (n values per draw) is not collected: NUTS would keep chains × draws × n of them
        model = handlers.block(model, hide=["f"])
        model = reparam_for_nuts(model, [s for s in reparam if s in spec.latent_sites()])
        mcmc = run_nuts(model, x, y, warmup=cfg["warmup"], samples=cfg["samples"] if steps is None else steps,
                        chains=cfg["chains"], seed=seed, target_accept=cfg["target_accept"],
                        max_tree_depth=cfg["max_tree_depth"], progress=progress,
                        init_strategy=nuts_init)
        chains = cfg["chains"]
        params: dict = {}
        draws = mcmc.get_samples()
        info["divergences"] = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
    else:
        per_step = 0
        objective = None
        if method == "ml":
            if spec.latent_sites():  # MAP for entries with priors
                guide = autoguide.AutoDelta(model, init_loc_fn=init_to_value(
                    values=initial_values(spec)))
            else:
                guide = empty_guide
            batch = None
        else:
            if not spec.latent_sites():
                raise SSGPError(f"{entry.name}: SVI needs latent sites; this model has none")
            guide = entry.guide(spec, model)
            objective = make_objective(cfg["objective"], beta=cfg["beta"],
                                       particles=cfg["num_particles"], gradient=cfg["gradient"],
                                       samples=cfg["mc_samples"], guide=guide)
            info.update(objective=cfg["objective"], beta=cfg["beta"])
            batch = cfg["batch_size"] or None
            per_step = min(pcfg["per_step"], partitions.count) if pcfg["per_step"] else 0
        n_steps = cfg["steps"] if steps is None else steps
        res = run_svi(model, guide, x, y, steps=n_steps, lr=cfg["lr"],
                      lr_halflife=cfg.get("lr_halflife", 0.0),
                      batch_size=batch, partitions=partitions if per_step else None,
                      per_step=max(per_step, 1), chunk=cfg["chunk"], seed=seed, tol=cfg["tol"],
                      min_steps=min(cfg["min_steps"], n_steps),
                      num_particles=cfg.get("num_particles", 1), progress=progress, desc=desc,
                      loss=objective, checkpoint=checkpoint)
        params, losses, chains = res.params, res.losses, 1
        info.update(steps=res.steps, converged=res.converged, interrupted=res.interrupted,
                    params={k: np.asarray(v) for k, v in params.items()},
                    type2={k: np.asarray(params[k]) for k in spec.learned_sites()})
        n = 1 if guide is empty_guide or method == "ml" else entry.config["predictive"]["samples"]
        if guide is empty_guide:
            draws = {}
        else:  # densities for PSIS-LOO where a pointwise log-likelihood will exist
            dens = method == "svi" and spec.nuisance == "sampled" and \
                max(n, LOO_MIN_DRAWS) * data.n_train <= LOGLIK_MAX_VALUES
            n = max(n, LOO_MIN_DRAWS) if dens else n
            t_loo = time.perf_counter()
            draws, log_p, log_q = guide_draws_with_density(model, guide, params, x, y,
                                                           num_samples=n, seed=seed + 1,
                                                           densities=dens)
            jax.block_until_ready(draws)
            # the densities are LOO bookkeeping, not fitting: kept out of fit_seconds
            loo_seconds = time.perf_counter() - t_loo if dens else 0.0
    sites = site_values(model, params, draws, x[:1])  # site values do not depend on n
    jax.block_until_ready(sites)
    fit_seconds = time.perf_counter() - t0 - loo_seconds

    t1 = time.perf_counter()
    pred = entry.config["predictive"]
    lik = spec.lik
    pred_sites = sites
    cond = getattr(guide, "nuisance_conditional", None) if method == "svi" else None
    if pred["integrate_nuisance"] and cond is not None and pred["rule"] == "degenerate":
        loc, tril = jax.vmap(lambda d: cond(params, d))(draws)
        pred_sites = {**sites, "nuisance": loc, "nuisance_tril": tril}
    if client is None:
        mean, var, mean_f, var_f, var_y = predict(pred_sites, data, pred["rule"], gamma=pred["gamma"],
                                                  partitions=partitions, lik=lik)
    else:
        from ssgp_ppl.cluster import predict_distributed

        mean, var, mean_f, var_f, var_y = predict_distributed(
            pred_sites, data, pred["rule"], gamma=pred["gamma"], partitions=partitions, lik=lik,
            client=client)
    predict_seconds = time.perf_counter() - t1
    y_test = np.asarray(data.y_scaler.inverse(data.y_test))
    check_finite(f"{entry.name}:{method} predictions of the test rows", mean, var)
    metrics = likelihood_metrics(lik, y_test, mean, mean_f, var_f, sites.get("noise"),
                                 y_model=data.y_test, y_scale=float(np.asarray(data.y_scaler.scale)))
    if lik.target == "continuous":
        metrics = regression_metrics(y_test, mean, var) | metrics
    if lik.name == "gaussian":
        y_pred, pit = _test_draws(mean_f, var_y, data, seed)
    else:  # y* draws from the likelihood; the Gaussian PIT does not apply
        y_pred = np.asarray(data.y_scaler.inverse(_likelihood_draws(lik, mean_f, var_f,
                                                                     sites.get("noise"), seed)))
        pit = np.full(data.n_test, np.nan)
    t_loo = time.perf_counter()
    loglik, y_rep = _train_draws(sites, x, y, seed + 3, lik)
    loo_seconds += time.perf_counter() - t_loo
    sites_np = _by_chain(sites, chains)
    dt = _assemble(sites={k: np.asarray(v) for k, v in sites.items()}, chains=chains, data=data,
                   mean_f=mean_f, var_f=var_f, test_pit=pit, y_pred=y_pred,
                   loglik=loglik, y_rep=y_rep, log_p=log_p, log_q=log_q, seed=seed)
    if method == "nuts":  # NUTS's own sample stats (energy, divergences, lp) for BFMI etc.
        dt["sample_stats"] = from_numpyro(mcmc, dims=DIMS, log_likelihood=False)["sample_stats"]
    dt.attrs.update(model=entry.name, method=method, dataset=data.name)
    info.update(fit_seconds=fit_seconds, predict_seconds=predict_seconds, loo_seconds=loo_seconds)
    return FitResult(entry.name, method, data.name, sites_np, mean, var, metrics, losses, dt, info)


def ncvmp_settings(entry: CatalogEntry, steps: int | None = None) -> ncvmp.NCVMPSettings:
    """The entry's ``[inference.ncvmp]`` settings (``steps`` overrides max_iter)."""
    c = entry.settings("ncvmp")
    return ncvmp.NCVMPSettings(algorithm=c["algorithm"], rho=c["rho"],
                               max_iter=c["max_iter"] if steps is None else steps, tol=c["tol"],
                               restarts=c["restarts"], restart_iters=c["restart_iters"])


def spectral_candidates(entry: CatalogEntry, spec, restarts: int):
    """§7's candidate spectral sets (R, m, d): the entry's own points first, then fresh draws."""
    key = jax.random.PRNGKey(entry.config["model"]["spectral_seed"])
    extra = ncvmp.spectral_sets(jax.random.fold_in(key, 1), restarts - 1, spec.m, spec.d,
                                spec.spectral_points.dtype)
    return jnp.concatenate([spec.spectral_points[None], extra])


def _fit_tan(entry: CatalogEntry, data: Dataset, method: str, *, seed: int, steps: int | None,
             progress: bool, spectral_points=None, client=None) -> FitResult:
    """Tan et al. 2016: NCVMP on the training split (``ncvmp``) or adaptive neighbourhoods (``local``)."""
    spec = entry.spec(data.n_features)
    if spectral_points is not None:
        spec = dataclasses.replace(spec, spectral_points=jnp.asarray(spectral_points))
    prior = ncvmp.tan_prior(spec)
    settings = ncvmp_settings(entry, steps)
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    ncvmp.check_data(x, y, spec.m)
    n = data.n_train
    t0 = time.perf_counter()
    info: dict = {"algorithm": settings.algorithm, "partitions": None}
    x_test = jnp.asarray(data.x_test)
    if method == "ncvmp":
        sets = spectral_candidates(entry, spec, settings.restarts) if spectral_points is None \
            else spec.spectral_points[None]
        ybar = jnp.mean(y)
        res = ncvmp.fit_ncvmp(x, y - ybar, sets, prior, settings)
        jax.block_until_ready(res)
        fit_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        mean_s, var_s = ncvmp.predictive(res.state, res.points, x_test, n, prior)
        mean_s = mean_s + ybar
        jax.block_until_ready(mean_s)
        predict_seconds = time.perf_counter() - t1
        t_loo = time.perf_counter()  # draws of q, densities, log-likelihood: LOO bookkeeping
        num = entry.config["predictive"]["samples"]
        num = max(num, LOO_MIN_DRAWS) if num * n <= LOGLIK_MAX_VALUES else num
        draws = ncvmp.sample_q(jax.random.PRNGKey(seed + 1), res.state, n, spec.m, prior, num)
        model = entry.model(dataclasses.replace(spec, spectral_points=res.points))
        sites = site_values(model, {}, draws, x[:1])  # adds the deterministic frequencies
        bounds = np.asarray(res.bounds)
        losses = -bounds[np.isfinite(bounds)]
        info.update(bound=float(res.bound), iterations=int(res.iterations),
                    converged=bool(res.converged), spectral_points=np.asarray(res.points),
                    steps=int(res.iterations))
        # per-draw f* of q (invariants), the closed form for metrics and PIT; densities for LOO
        mean_f = predict_draws("degenerate", sites, x, y, x_test)[0] + ybar
        var_f = jnp.zeros_like(mean_f)
        yc = y - ybar
        log_p = jax.jit(lambda v: jax.lax.map(lambda d: log_density(model, (x, yc), {}, d)[0], v))(
            {k: sites[k] for k in draws}) if num * n <= LOGLIK_MAX_VALUES else None
        log_q = ncvmp.log_q(draws, res.state, n, spec.m, prior)
        loglik, y_rep = _train_draws(sites, x, yc, seed + 3)
        if y_rep is not None:
            y_rep = y_rep + float(ybar)
        jax.block_until_ready(log_q)
        loo_seconds = time.perf_counter() - t_loo
        extra = {}
    else:
        lc = entry.settings("local")
        kw = dict(m=spec.m, k=lc["k"], settings=settings,
                  key=jax.random.PRNGKey(entry.config["model"]["spectral_seed"]),
                  adapt=lc["adapt"], batch=lc["batch"])
        if client is None:
            out = local_predict(np.asarray(x), np.asarray(y), np.asarray(x_test), prior,
                                progress=progress, desc=f"{entry.name}:local", **kw)
        else:
            from ssgp_ppl.cluster import local_predict_distributed

            out = local_predict_distributed(np.asarray(x), np.asarray(y), np.asarray(x_test), prior,
                                            client=client, **kw)
        fit_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        mean_s, var_s = jnp.asarray(out.mean), jnp.asarray(out.var)
        predict_seconds = time.perf_counter() - t1
        loo_seconds, num = 0.0, 1  # one closed-form predictive per test point
        losses = None
        sites = mean_f = var_f = loglik = y_rep = log_p = log_q = None
        info.update(k=lc["k"], adapt=lc["adapt"], iterations=float(np.mean(out.iterations)))
        extra = {"local_fits": {"mu_lambda_euclidean": out.mu_lambda_euclidean[None, None],
                                "mu_lambda": out.mu_lambda[None, None],
                                "bound": out.bound[None, None],
                                "iterations": out.iterations[None, None],
                                "f_mean_euclidean": out.mean_euclidean[None, None]}}
    scale = float(np.asarray(data.y_scaler.scale))
    mean = np.asarray(data.y_scaler.inverse(np.asarray(mean_s, np.float64)))
    var = np.asarray(var_s, np.float64) * scale**2
    check_finite(f"{entry.name}:{method} predictions of the test rows", mean, var)
    metrics = regression_metrics(np.asarray(data.y_scaler.inverse(data.y_test)), mean, var)
    mean_s, var_s = np.asarray(mean_s)[None], np.asarray(var_s)[None]
    # y* draws from the closed form, as many as q's draws of f* (NCVMP) or one (local fits)
    y_pred, pit = _test_draws(mean_s, var_s, data, seed, num=num)
    if sites is None:  # local fits: no global posterior; f_var holds the variance of y* (the
        mean_f, var_f = mean_s, var_s  # local fits do not separate the noise)
    sites_np = None if sites is None else {k: np.asarray(v) for k, v in sites.items()}
    dt = _assemble(sites=sites_np, chains=1, data=data, mean_f=mean_f, var_f=var_f,
                   test_pit=pit, y_pred=y_pred, loglik=loglik, y_rep=y_rep, log_p=log_p,
                   log_q=log_q, extra=extra, seed=seed)
    dt.attrs.update(model=entry.name, method=method, dataset=data.name)
    info.update(fit_seconds=fit_seconds, predict_seconds=predict_seconds, loo_seconds=loo_seconds)
    return FitResult(entry.name, method, data.name, _by_chain(sites_np or {}, 1), mean, var,
                     metrics, losses, dt, info)


def _sha(*arrays) -> str:
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()[:16]


def run_fingerprint(entry: CatalogEntry, data: Dataset, method: str, seed: int,
                    steps: int | None, given: dict | None = None) -> dict:
    """What a checkpoint must match to be resumed: the entry and its full configuration, the
    data (name, split, sizes and a hash of the scaled training rows), seed, method, steps, the
    float width, the arrays ``given`` to :func:`fit` (spectral points, type-II values,
    partitions; hashed) and the JAX / NumPyro versions (another version need not reproduce the
    same bits)."""
    extra = {f"{k}_sha256": _sha(*[np.asarray(v) for v in (a.values() if isinstance(a, dict)
                                                           else [a])])
             for k, a in (given or {}).items() if a is not None}
    return checkpoint_fingerprint(model=entry.name, config=entry.config, data=data.name,
                                  split=data.split, n_train=data.n_train,
                                  n_features=data.n_features,
                                  data_sha256=_sha(data.x_train, data.y_train), seed=seed,
                                  method=method, steps=steps,
                                  x64=bool(jax.config.read("jax_enable_x64")),
                                  jax=jax.__version__, numpyro=numpyro.__version__, **extra)


def metrics_record(result: FitResult, data: Dataset) -> dict:
    """The ``metrics.json`` record of the CLI's ``fit`` command."""
    return {
        "model": result.model,
        "method": result.method,
        "dataset": result.dataset,
        "n_train": data.n_train,
        "n_test": data.n_test,
        **{k: float(v) for k, v in result.metrics.items()},
        **{k: result.info[k] for k in ("objective", "beta") if k in result.info},
        **{k: result.info[k] for k in ("steps", "converged", "interrupted") if k in result.info},
        "fit_seconds": float(result.info["fit_seconds"]),
        "predict_seconds": float(result.info["predict_seconds"]),
    }
