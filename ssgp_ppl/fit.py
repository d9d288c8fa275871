"""Fit a catalog entry on a data set with one method, predict the test split, score it.

:func:`fit` is what the CLI's ``fit`` and ``compare`` commands call. Methods:

* ``ml``: type-II maximum likelihood (MAP where the entry has priors) by Adam inside one jit;
* ``svi``: the entry's guide, ELBO by Adam inside one jit, predictions averaged over guide draws;
* ``nuts``: the same model with priors, non-centred, several chains;
* ``ncvmp``: seed 004's Algorithm 2 (or 1) with the closed-form predictive of §5;
* ``local``: seed 004's adaptive neighbourhoods (§6), a local NCVMP fit per test point.

Predictions of y* are the moment-matched mixture over draws (law of total variance, noise added
per draw) and are reported in the original units of the target.
"""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from arviz_base import from_dict, from_numpyro
from numpyro import handlers
from numpyro.infer import autoguide, init_to_value

from ssgp_ppl import ncvmp, spectral
from ssgp_ppl.catalog import METHODS, TAN_METHODS, CatalogEntry
from ssgp_ppl.datasets import Dataset
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.guides import initial_values, nuts_init
from ssgp_ppl.inference import (
    empty_guide,
    guide_draws,
    reparam_for_nuts,
    run_nuts,
    run_svi,
    site_values,
)
from ssgp_ppl.metrics import mixture_moments, regression_metrics
from ssgp_ppl.model import local_data, predict_draws
from ssgp_ppl.neighbourhoods import local_predict
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


def _pointwise_loglik(sites: dict, x, y) -> np.ndarray | None:
    """log N(y_i | φ(x_i)ᵀs, σ_n²) per draw (S, n); None when s was integrated out or when the
    group would exceed LOGLIK_MAX_VALUES (AIRLINE-sized data: LOO is not the tool there)."""
    if "nuisance" not in sites or sites["noise"].shape[0] * x.shape[0] > LOGLIK_MAX_VALUES:
        return None

    @jax.jit
    def run(freq, s, noise, x, y):
        def one(args):
            fr, sv, nz = args
            return jax.scipy.stats.norm.logpdf(y, spectral.features(x, fr) @ sv, nz)

        return jax.lax.map(one, (freq, s, noise))

    return np.asarray(run(sites["frequencies"], sites["nuisance"], sites["noise"], x, y))


def predict(sites: dict, data: Dataset, rule: str, *, gamma: float = 0.0,
            partitions: Partitions | None = None, x_test=None):
    """Predictive of y* at ``x_test`` (default: the test split) from per-draw site values.

    Returns (mean, var) of y* in original units (moment-matched mixture over the S draws) and
    the per-draw (mean_f, var_f, var_y) in standardised units.
    """
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    x_test = np.asarray(data.x_test if x_test is None else x_test)
    local = local_data(partitions, x_test, gamma) if rule == "local" else None
    mean_f, var_f = predict_draws(rule, sites, x, y, jnp.asarray(x_test), local)
    var_y = var_f + sites["noise"][:, None] ** 2
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
) -> FitResult:
    """Fit ``entry`` on ``data`` with ``method`` (default: the entry's own), predict, score.

    NUTS on a model with type-II hyperparameters conditions on their estimates (empirical Bayes):
    ``type2`` gives them, else the entry's own method is fitted first to get them.
    ``partitions`` reuses k-means partitions of ``data.x_train`` (built when the entry needs them).
    ``spectral_points`` (m, d) replaces the entry's fixed spectral points; SVI and NUTS on an entry
    whose own method is ``ncvmp`` use the set NCVMP's restarts picked (the same model as the VI fit).
    """
    method = method or entry.methods[0]
    if method not in METHODS:
        raise SSGPError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    if steps is not None and steps < 1:
        raise SSGPError(f"--steps must be >= 1, got {steps}")
    if method in TAN_METHODS:
        return _fit_tan(entry, data, method, seed=seed, steps=steps, progress=progress,
                        spectral_points=spectral_points)
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
    losses = None
    t0 = time.perf_counter()
    desc = f"{entry.name}:{method}"
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
            batch = cfg["batch_size"] or None
            per_step = min(pcfg["per_step"], partitions.count) if pcfg["per_step"] else 0
        n_steps = cfg["steps"] if steps is None else steps
        res = run_svi(model, guide, x, y, steps=n_steps, lr=cfg["lr"],
                      lr_halflife=cfg.get("lr_halflife", 0.0),
                      batch_size=batch, partitions=partitions if per_step else None,
                      per_step=max(per_step, 1), chunk=cfg["chunk"], seed=seed, tol=cfg["tol"],
                      min_steps=min(cfg["min_steps"], n_steps),
                      num_particles=cfg.get("num_particles", 1), progress=progress, desc=desc)
        params, losses, chains = res.params, res.losses, 1
        info.update(steps=res.steps, converged=res.converged,
                    params={k: np.asarray(v) for k, v in params.items()},
                    type2={k: np.asarray(params[k]) for k in spec.learned_sites()})
        n = 1 if guide is empty_guide or method == "ml" else entry.config["predictive"]["samples"]
        draws = {} if guide is empty_guide else guide_draws(guide, params, x, y, num_samples=n,
                                                            seed=seed + 1)
    sites = site_values(model, params, draws, x[:1])  # site values do not depend on n
    jax.block_until_ready(sites)
    fit_seconds = time.perf_counter() - t0

    t1 = time.perf_counter()
    pred = entry.config["predictive"]
    mean, var, mean_f, var_f, var_y = predict(sites, data, pred["rule"], gamma=pred["gamma"],
                                              partitions=partitions)
    predict_seconds = time.perf_counter() - t1
    y_test = np.asarray(data.y_scaler.inverse(data.y_test))
    metrics = regression_metrics(y_test, mean, var)

    key = jax.random.PRNGKey(seed + 2)
    y_pred = mean_f + jnp.sqrt(var_y) * jax.random.normal(key, mean_f.shape, mean_f.dtype)
    y_pred = data.y_scaler.inverse(np.asarray(y_pred))
    sites_np = _by_chain(sites, chains)
    groups = {
        "posterior": sites_np,
        "observed_data": {"y": np.asarray(data.y_train)},
        "predictions": _by_chain({"f_mean": mean_f, "f_var": var_f, "y_pred": y_pred}, chains),
    }
    if method == "nuts":
        # pointwise only when s is sampled (the marginalised likelihood is one joint value)
        pointwise = spec.nuisance == "sampled" and \
            chains * cfg["samples"] * data.n_train <= LOGLIK_MAX_VALUES
        dt = from_numpyro(mcmc, log_likelihood=pointwise, dims=DIMS)
        dt["predictions"] = from_dict({"predictions": groups["predictions"]},
                                      pred_dims=DIMS)["predictions"].to_dataset()
    else:
        loglik = _pointwise_loglik(sites, x, y)
        if loglik is not None:
            groups["log_likelihood"] = {"y": loglik.reshape(chains, -1, loglik.shape[-1])}
        dt = from_dict(groups, dims=DIMS, pred_dims=DIMS)
    dt.attrs.update(model=entry.name, method=method, dataset=data.name)
    info.update(fit_seconds=fit_seconds, predict_seconds=predict_seconds)
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
             progress: bool, spectral_points=None) -> FitResult:
    """Seed 004: NCVMP on the training split (``ncvmp``) or adaptive neighbourhoods (``local``)."""
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
        noise2 = ncvmp.noise_moments(res.state, n, prior)[0]
        draws = ncvmp.sample_q(jax.random.PRNGKey(seed + 1), res.state, n, spec.m, prior,
                               entry.config["predictive"]["samples"])
        bounds = np.asarray(res.bounds)
        losses = -bounds[np.isfinite(bounds)]
        info.update(bound=float(res.bound), iterations=int(res.iterations),
                    converged=bool(res.converged), spectral_points=np.asarray(res.points),
                    steps=int(res.iterations))
        posterior = {k: np.asarray(v)[None] for k, v in draws.items()}
        extra = {}
    else:
        lc = entry.settings("local")
        out = local_predict(np.asarray(x), np.asarray(y), np.asarray(x_test), prior, m=spec.m,
                            k=lc["k"], settings=settings,
                            key=jax.random.PRNGKey(entry.config["model"]["spectral_seed"]),
                            adapt=lc["adapt"], batch=lc["batch"], progress=progress,
                            desc=f"{entry.name}:local")
        fit_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        mean_s, var_s = jnp.asarray(out.mean), jnp.asarray(out.var)
        noise2 = jnp.zeros(())
        losses = None
        info.update(k=lc["k"], adapt=lc["adapt"], iterations=float(np.mean(out.iterations)))
        posterior = None
        extra = {"local_fits": {"mu_lambda_euclidean": out.mu_lambda_euclidean[None, None],
                                "mu_lambda": out.mu_lambda[None, None],
                                "bound": out.bound[None, None],
                                "iterations": out.iterations[None, None],
                                "f_mean_euclidean": out.mean_euclidean[None, None]}}
    scale = float(np.asarray(data.y_scaler.scale))
    mean = np.asarray(data.y_scaler.inverse(np.asarray(mean_s, np.float64)))
    var = np.asarray(var_s, np.float64) * scale**2
    predict_seconds = time.perf_counter() - t1
    metrics = regression_metrics(np.asarray(data.y_scaler.inverse(data.y_test)), mean, var)
    var_f = jnp.maximum(var_s - noise2, 0.0)
    y_pred = mean_s + jnp.sqrt(var_s) * jax.random.normal(jax.random.PRNGKey(seed + 2),
                                                          mean_s.shape, mean_s.dtype)
    groups = {
        "observed_data": {"y": np.asarray(data.y_train)},
        "predictions": {"f_mean": np.asarray(mean_s)[None, None], "f_var": np.asarray(var_f)[None, None],
                        "y_pred": np.asarray(data.y_scaler.inverse(np.asarray(y_pred)))[None, None]},
        **extra,
    }
    if posterior is not None:
        groups["posterior"] = posterior
    dt = from_dict(groups, dims=DIMS, pred_dims=DIMS)
    dt.attrs.update(model=entry.name, method=method, dataset=data.name)
    info.update(fit_seconds=fit_seconds, predict_seconds=predict_seconds)
    return FitResult(entry.name, method, data.name, posterior or {}, mean, var, metrics, losses,
                     dt, info)


def metrics_record(result: FitResult, data: Dataset) -> dict:
    """The ``metrics.json`` record of the CLI's ``fit`` command."""
    return {
        "model": result.model,
        "method": result.method,
        "dataset": result.dataset,
        "n_train": data.n_train,
        "n_test": data.n_test,
        **{k: float(v) for k, v in result.metrics.items()},
        "fit_seconds": float(result.info["fit_seconds"]),
        "predict_seconds": float(result.info["predict_seconds"]),
    }
