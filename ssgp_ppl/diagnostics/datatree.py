"""The ArviZ DataTree of a fit (:func:`assemble`) and the training-row draws behind PSIS-LOO."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions  # noqa: F401  (see below)
import xarray as xr
from arviz_base import from_dict  # after numpyro: see below

from ssgp_ppl.diagnostics import invariants
from ssgp_ppl.model import likelihoods, spectral

# arviz_base loads numpyro through lazy_loader; imported first, that leaves the numpyro package
# without its submodule attributes (numpyro.distributions.distribution, which numpyro.factor
# reads), so numpyro is imported here before arviz_base

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
    "converged": ["test"],
    "converged_euclidean": ["test"],
    "y": ["obs"],
    "f_mean": ["test"],
    "f_var": ["test"],
    "y_pred": ["test"],
    "x_test": ["test", "input"],
    "y_test": ["test"],
    "pit": ["test"],
}

# what the numbers of each group are in (the ``units`` attribute of each group): the model works
# on inputs and target scaled by the training split's scalers (root attributes x_mean, x_scale,
# y_mean, y_scale: original = standardised × scale + mean); metrics and predictions are in the
# original units of the target
UNITS = {
    "posterior": "standardised (inputs and target scaled as the root attributes say)",
    "invariants": "original units of the target (noise, signal, kernel, f_test); frequency_spread "
                  "in cycles per unit of the scaled inputs",
    "observed_data": "standardised target",
    "log_likelihood": "log densities of the standardised target (add log(y_scale) per row for "
                      "the original units)",
    "posterior_predictive": "standardised target",
    "predictions": "original units of the target",
    "predictions_constant_data": "x_test standardised inputs, y_test original units, pit "
                                 "probabilities",
    "sample_stats": "lp: log joint density of the model on the standardised data; VI: log_q, "
                    "the log density of q at each draw; samplers: their own statistics "
                    "(energy, diverging, tree depth)",
    "loo_log_weights": "Pareto-smoothed log importance weights of each draw for each left-out "
                       "training row, and their Pareto k",
    "local_fits": "per test point, its local fit (Tan et al. 2016, §6): q(λ) means on the scaled "
                  "inputs, lower bound, iterations and whether the bound converged (converged_euclidean: "
                  "the Euclidean fit M1's); f_mean_euclidean in standardised units",
}



def by_chain(tree: dict, chains: int) -> dict:
    return {k: np.asarray(v).reshape((chains, -1) + np.shape(v)[1:]) for k, v in tree.items()}


LOGLIK_MAX_VALUES = 20_000_000  # draws × rows kept in the log_likelihood group
# VI draws where PSIS-LOO is computed (its Pareto tail needs ≥ 5 of them: S ≥ 25; k̂ is noisy
# below ~100): the predictive then averages over these draws too, not just the entry's r
LOO_MIN_DRAWS = 100


def train_draws(sites: dict, x, y, seed: int, lik=None):
    """Per draw: log N(y_i | φ(x_i)ᵀs, σ_n²) and a replicate y_rep_i ~ N(φ(x_i)ᵀs, σ_n²), (S, n)
    each (the log_likelihood and posterior_predictive groups). (None, None) when the draws have no
    s (a type-II fit; collapsed fits draw s from its conditional afterwards) or when S × n exceeds
    LOGLIK_MAX_VALUES
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


def assemble(*, sites: dict | None, chains: int, data, mean_f, var_f,
              test_pit, y_pred, loglik=None, y_rep=None, log_p=None, log_q=None,
              extra: dict | None = None, seed: int = 0) -> xr.DataTree:
    """The fit's DataTree: posterior (model sites, standardised units), invariants (original
    units, :mod:`ssgp_ppl.diagnostics.invariants`), log_likelihood and posterior_predictive (training rows),
    sample_stats (lp = log p, log_q for VI draws), observed_data, predictions (test: per-draw f*
    moments, y* draws, PIT of each test target), predictions_constant_data (x*, y*).

    For NCVMP the per-draw f* moments are q's draws (f_var = 0) while y_pred and the PIT come from
    the §5 closed-form predictive that the metrics score; for local fits the one "draw" is the
    closed form itself and f_var is the variance of y* (the local fits do not separate noise)."""
    scale = float(np.asarray(data.y_scaler.scale))
    shift = float(np.asarray(data.y_scaler.inverse_affine(np.zeros(()))))  # log y's, if log
    groups: dict = {"observed_data": {"y": np.asarray(data.y_train)}, **(extra or {})}
    if y_pred is not None:  # a test split was predicted
        groups["predictions"] = by_chain({"f_mean": mean_f, "f_var": var_f, "y_pred": y_pred},
                                         chains)
        groups["predictions_constant_data"] = {
            "x_test": np.asarray(data.x_test),
            "y_test": np.asarray(data.y_scaler.inverse(data.y_test)), "pit": np.asarray(test_pit)}
    if sites is not None:
        groups["posterior"] = by_chain(sites, chains)
    if loglik is not None:
        groups["log_likelihood"] = {"y": loglik.reshape(chains, -1, loglik.shape[-1])}
        groups["posterior_predictive"] = {"y": y_rep.reshape(chains, -1, y_rep.shape[-1])}
    if log_p is not None:
        stats = {"lp": log_p} if log_q is None else {"lp": log_p, "log_q": log_q}
        groups["sample_stats"] = by_chain(stats, chains)
    dt = from_dict(groups, dims=DIMS, pred_dims=DIMS)
    if sites is not None and "frequencies" in sites:
        none = mean_f is None  # no test inputs: no f_test
        if none:
            mean_f = var_f = np.zeros((sites["signal"].shape[0], 1))
        inv = invariants.invariant_draws(sites["frequencies"], sites["signal"], sites.get("noise"),
                                         mean_f, var_f, y_scale=scale, y_shift=shift, seed=seed)
        if none:
            del inv["f_test"]
        dt["invariants"] = xr.DataTree(invariants.as_dataset(inv, chains))
    names = [str(c) for c in getattr(data, "feature_names", ()) or ()]
    if names and len(set(names)) == len(names) == np.shape(data.x_train)[1]:
        for path in [n.path for n in dt.subtree if "input" in n.dims]:  # the columns by name
            dt[path] = xr.DataTree(dt[path].to_dataset().assign_coords(input=names))
    dt.attrs.update(y_scale=scale, y_mean=shift,
                    x_mean=np.atleast_1d(np.asarray(data.x_scaler.mean, float)).tolist(),
                    x_scale=np.atleast_1d(np.asarray(data.x_scaler.scale, float)).tolist())
    return dt


def stop_attrs(info) -> dict:
    """How the fit stopped, as root attributes (netCDF has no None: unknown values are left out):
    ``stop`` in words (:func:`ssgp_ppl.posterior.stop_text`), ``converged`` (0/1), and the stop
    rule's ``improvement_per_1k`` with its ``improvement_se`` and ``tolerance_per_1k`` (nats)."""
    from ssgp_ppl.inference.fitinfo import StopReading, stop_text

    reading = info.reading or StopReading()
    out = {"stop": stop_text(info), "steps": info.steps,
           "converged": None if info.converged is None else int(info.converged),
           "improvement_per_1k": reading.improvement, "improvement_se": reading.improvement_se,
           "tolerance_per_1k": reading.tolerance}
    return {k: v for k, v in out.items() if v is not None}


def sizing_attrs(entry) -> dict:
    """The number of frequencies ``m`` and, where it was sized to the data (``m = "auto"``), how:
    ``sizing`` in words and its JSON record (:class:`ssgp_ppl.inference.sizing.Sizing`)."""
    out = {"m": int(entry.config["model"]["m"])}
    if entry.sizing is not None:
        out.update(sizing=entry.sizing.text(), sizing_record=json.dumps(entry.sizing.to_json()))
    return out


def precision_attrs(info) -> dict:
    """The fit against its working precision as root attributes, where it warns: ``precision``
    (:class:`ssgp_ppl.model.linalg.Resolution` in words), ``noise_floor`` (target units) and ``jitter``
    (× mean diag A)."""
    if info.precision is None:
        return {}
    out = {"precision": info.precision, "noise_floor": info.noise_floor, "jitter": info.jitter}
    return {k: v for k, v in out.items() if v is not None}


def label_units(dt: xr.DataTree) -> xr.DataTree:
    """Each group's ``units`` attribute (:data:`UNITS`), in place; returns ``dt``."""
    for name, text in UNITS.items():
        if name in dt.children:
            dt[name].attrs["units"] = text
    return dt


__all__ = ["DIMS", "UNITS", "assemble", "label_units", "precision_attrs", "sizing_attrs",
           "stop_attrs", "train_draws"]
