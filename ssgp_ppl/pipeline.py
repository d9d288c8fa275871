"""The pipeline of every fit: method → posterior → test predictions → scores → DataTree.

:func:`fit` is what :func:`ssgp_ppl.fit`, the CLI's ``fit`` and ``compare`` call. The methods
themselves are plug-ins (:mod:`ssgp_ppl.inference.methods`); what one needs from the entry's own method
(type-II estimates for an empirical-Bayes NUTS reference, the spectral points NCVMP kept) is
fitted here first by :func:`prerequisites` and handed over explicitly.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import warnings

import jax
import numpy as np
import xarray as xr
from scipy.special import ndtr

from ssgp_ppl.data.checks import check_scaled_range
from ssgp_ppl.data.datasets import Dataset
from ssgp_ppl.diagnostics import datatree
from ssgp_ppl.diagnostics.calibration import is_vi, vi_loo_weights
from ssgp_ppl.diagnostics.metrics import (
    coverage_off,
    likelihood_metrics,
    lognormal_metrics,
    regression_metrics,
)
from ssgp_ppl.entry import CatalogEntry
from ssgp_ppl.errors import PrecisionWarning, SSGPError, check_seed
from ssgp_ppl.inference import methods, paths, sizing
from ssgp_ppl.inference.fitinfo import FitInfo, LocalInfo, StopReading, SVIInfo, stop_text
from ssgp_ppl.model.linalg import check_finite, resolution
from ssgp_ppl.model.predictive import check_test_inputs
from ssgp_ppl.posterior import Handoff, Posterior
from ssgp_ppl.runtime import resources
from ssgp_ppl.runtime.checkpoint import Checkpoint, run_fingerprint


def prerequisites(entry: CatalogEntry, data: Dataset, method: methods.Method, *, seed: int = 0,
                  progress: bool = True, partitions=None) -> Handoff:
    """What ``method`` needs from the entry's own method on ``data``: that method is run (not the
    whole pipeline) and its hand-over returned; with nothing needed, just ``partitions``."""
    if entry.m_auto:  # sized where the entry meets its data, with the caller's budget
        raise SSGPError(f"{entry.name}: m = 'auto' is sized to the data before its hand-over is "
                        "fitted (ssgp_ppl.inference.sizing.resolve), or give m a number")
    own = methods.get(entry.methods[0])
    need = set(method.requires(entry))
    need |= {k for k in method.accepts if k in own.provides and own is not method}
    if not need:
        return Handoff(partitions=partitions)
    if own is method:
        raise SSGPError(f"{entry.name}: {method.name} needs {', '.join(sorted(need))} from another "
                        "method; list that method first in inference.methods")
    post = own.run(entry, data, seed=seed, progress=progress, inputs=Handoff(partitions=partitions))
    h = post.handoff
    return Handoff(h.type2 if "type2" in need else None,
                   h.spectral_points if "spectral_points" in need else None,
                   partitions if partitions is not None else h.partitions)


def fit(entry: CatalogEntry, data: Dataset, method: str | None = None, *, seed: int = 0,
        steps: int | None = None, progress: bool = True, inputs: Handoff | None = None,
        checkpoint: Checkpoint | None = None, client=None, force: bool = False,
        budget: float | None = None) -> Posterior:
    """Fit ``entry`` on ``data`` with ``method`` (default: the entry's own), predict the test split,
    score it and build the DataTree. A fit whose memory estimate exceeds the machine's is refused
    unless ``force`` (:mod:`ssgp_ppl.runtime.resources`). An entry with ``m = "auto"`` is sized to
    ``data`` and ``budget`` seconds first (:func:`ssgp_ppl.inference.sizing.resolve`).

    ``inputs``: the hand-over from the entry's own method (type-II estimates, spectral points,
    partitions); default: fitted here by :func:`prerequisites` when the method needs it.
    ``checkpoint`` (methods that checkpoint): saved / resumed as
    :func:`~ssgp_ppl.inference.runners.run_svi` says, its fingerprint this run's. ``client`` (a
    ``distributed.Client``): the test predictions, and the local fits, run in chunks on it.
    A process near the kernel's memory-map limit first drops JAX's compiled programs
    (:func:`ssgp_ppl.runtime.resources.release_compiled`).
    """
    m = methods.get(method or entry.methods[0])
    seed = check_seed(seed)
    resources.release_compiled()
    entry = sizing.resolve(entry, data, budget=budget, seed=seed, steps=steps, method=m.name,
                           progress=progress)
    needs = resources.check(entry, data.n_train, data.n_features, data.n_test, m.name, force=force)
    if needs.guide_params > resources.GUIDE_PARAMS_LOUD and progress:
        print(f"ssgp-ppl: {entry.name}: the {needs.guide} guide has {needs.guide_params:.3g} "
              f"parameters ({needs.what}); every step updates all of them, so steps are slow",
              file=sys.stderr)
    if steps is not None and steps < 1:
        raise SSGPError(f"--steps must be >= 1, got {steps}")
    check_test_inputs(data.x_train, data.x_test)
    if data.y_scaler.log and not entry.lik.conjugate:
        raise SSGPError(f"{entry.name}: a log-transformed target needs the gaussian likelihood (y* "
                        f"log-normal given each draw), not {entry.lik.name}")
    entry.lik.check_target(data.y_train, f"{data.name}: training targets")
    entry.lik.check_target(data.y_test, f"{data.name}: test targets")
    check_scaled_range(data.x_test, "test inputs", data.feature_names)
    if m.name not in entry.methods:
        m.check(entry, entry.path.name)
    if inputs is None:
        inputs = prerequisites(entry, data, m, seed=seed, progress=progress)
    if checkpoint is not None:
        if not m.checkpoints:
            raise SSGPError(f"method {m.name!r} does not checkpoint (only "
                            f"{', '.join(k for k, v in methods.REGISTRY.items() if v.checkpoints)} do)")
        given = {"spectral_points": inputs.spectral_points, "type2": inputs.type2,
                 "partitions": None if inputs.partitions is None else inputs.partitions.blocks}
        checkpoint = checkpoint._replace(fingerprint=run_fingerprint(entry, data, m.name, seed,
                                                                     steps, given))
    k, how = m.paths(entry)
    if k > 1:  # multi-path: K runs from dispersed starts, combined (ssgp_ppl.inference.paths)
        post = paths.run(m, entry, data, paths=k, how=how, seed=seed, steps=steps,
                         progress=progress, inputs=inputs, checkpoint=checkpoint, client=client)
    else:
        post = m.run(entry, data, seed=seed, steps=steps, progress=progress, inputs=inputs,
                     checkpoint=checkpoint, client=client)
    post = check_precision(post.replace(feature_names=data.feature_names, encoding=data.encoding),
                           data)
    if post.info.precision is not None:
        warnings.warn(f"{entry.name}:{m.name}: {post.info.precision}", PrecisionWarning,
                      stacklevel=2)
    return evaluate(post, data, seed=seed, client=client, progress=progress)


def check_precision(post: Posterior, data: Dataset) -> Posterior:
    """``post`` with FitInfo's ``precision``, ``noise_floor`` and ``jitter``
    (:func:`ssgp_ppl.model.linalg.resolution` on the training inputs) where it is Gaussian SSGP
    regression with frequencies per draw; the jitter is checked where the fit factors A (s
    integrated out, or the marginal predictive)."""
    sites = post.flat_sites
    if not post.entry.lik.conjugate or "frequencies" not in sites:
        return post
    count = len(sites["frequencies"])
    spec = None

    def per_draw(name):
        nonlocal spec
        if name in sites:
            return sites[name]
        spec = spec or post.entry.spec(data.n_features)
        return np.full(count, float(getattr(spec, name).value))

    config = post.entry.config
    factors = config["model"]["nuisance"] == "marginalized" or (
        config["predictive"]["rule"] == "marginal" and not post.rule.closed_form)
    res = resolution(data.x_train, np.asarray(data.y_train) - post.y_centre, sites["frequencies"],
                     per_draw("signal"), per_draw("noise"), jitter=factors)
    y_scale = float(np.ravel(data.y_scaler.scale)[0])
    return post.replace(info=dataclasses.replace(
        post.info, precision=res.text(y_scale), noise_floor=res.noise_floor * y_scale,
        jitter=res.jitter if factors else None))


def _local_convergence(info: FitInfo, pred) -> FitInfo:
    """``info`` of the local fits with what their predictions report: converged when every
    local fit (M₁ and M₂ of each test point) converged by NCVMP's bound rule, and how many did not
    (``info`` as it is without test predictions or a LocalInfo)."""
    extra = {} if pred is None else pred.extra or {}
    if "converged" not in extra or not isinstance(info.method, LocalInfo):
        return info
    own = np.ravel(extra["converged"]).astype(bool)
    flags = own if not info.method.adapt else np.concatenate(
        [own, np.ravel(extra["converged_euclidean"]).astype(bool)])
    return dataclasses.replace(info, converged=bool(flags.all()), method=dataclasses.replace(
        info.method, fits=int(flags.size), unconverged=int(np.sum(~flags))))


def evaluate(post: Posterior, data: Dataset, *, seed: int = 0, client=None,
             progress: bool = False) -> Posterior:
    """``post`` with its test-split prediction, scores (original units) and DataTree (without the
    prediction groups when ``data`` has no test rows)."""
    lik = post.entry.lik
    flat = post.flat_sites
    pred = metrics = None
    predict_seconds = 0.0
    if data.n_test:
        t1 = time.perf_counter()
        pred = post.predict_standardised(data.x_test, seed=seed, client=client, progress=progress)
        predict_seconds = time.perf_counter() - t1
        check_finite(f"{post.model}:{post.method} predictions of the test rows", pred.mean, pred.var)
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported just below
            metrics = _scores(post, pred, data, lik, flat)
        bad = [k for k, v in metrics.items() if not np.isfinite(v)]
        if bad:  # never a null in metrics.json: say what overflowed
            y_test = np.asarray(data.y_test, np.float64)
            raise SSGPError(f"test metrics {', '.join(bad)} are not finite: the test targets reach "
                            f"{np.max(np.abs(y_test)):.3g} training standard deviations from the "
                            "training mean (check the test data; --x64 computes in float64)")
    t_loo = time.perf_counter()
    x, y = jax.numpy.asarray(data.x_train), jax.numpy.asarray(data.y_train)
    loglik, y_rep = datatree.train_draws(flat, x, y - post.y_centre, seed + 3, lik) if flat \
        else (None, None)
    if y_rep is not None:
        y_rep = y_rep + post.y_centre
    loo_seconds = time.perf_counter() - t_loo
    draw = pred  # per-draw f* for the DataTree: q's own draws where the predictive is closed form
    if pred is not None and flat and post.rule.closed_form:
        draw = post.draw_moments(data.x_test)
    dt = datatree.assemble(
        sites=flat or None, chains=post.chains, data=data,
        mean_f=None if draw is None else draw.mean_f, var_f=None if draw is None else draw.var_f,
        test_pit=None if pred is None else _pit(pred, data), y_pred=None if pred is None else pred.draws,
        loglik=loglik, y_rep=y_rep, log_p=None if post.log_p is None else np.ravel(post.log_p),
        log_q=None if post.log_q is None else np.ravel(post.log_q),
        extra=pred.extra and {"local_fits": pred.extra} if pred is not None else None, seed=seed)
    if post.sample_stats is not None:  # a sampler's own statistics (energy, divergences, lp)
        dt["sample_stats"] = xr.DataTree(post.sample_stats)
    if post.path_of_draw is not None and "posterior" in dt.children:  # a multi-path mixture
        ds = dt["posterior"].to_dataset().assign_coords(
            path=("draw", np.asarray(post.path_of_draw)))
        ds.attrs.update(combine=post.info.paths.combine, path_weights=list(post.info.paths.weights))
        dt["posterior"] = xr.DataTree(ds)
    vi = is_vi(dt)
    if vi and "log_likelihood" in dt.children:  # what makes arviz_stats.loo treat q's draws right
        dt["loo_log_weights"] = xr.DataTree(vi_loo_weights(dt))
    datatree.label_units(dt)
    # what the posterior group's draws are: LOO and compare treat them accordingly
    sampler = post.sample_stats is not None or post.log_p is not None  # not VI: a sampler's lp
    dt.attrs["draws"] = ("variational approximation q" if vi else "posterior sampler"
                         if sampler else "none (point estimate)"
                         if not flat else "approximate (no log density)")
    dt.attrs.update(model=post.model, method=post.method, dataset=data.name,
                    inputs=list(data.feature_names), target=data.target_name)
    dt.attrs.update(datatree.sizing_attrs(post.entry))
    if data.y_scaler.log:
        dt.attrs.update(target_transform="log", target_note=LOG_NOTE)
    if metrics is not None and "coverage_90" in metrics:
        off = coverage_off(metrics["coverage_90"], data.n_test)
        if off is not None:
            dt.attrs["calibration"] = off
    if data.preparation is not None:  # a user's table: columns, rows dropped, encodings
        dt.attrs["data_preparation"] = json.dumps(data.preparation)
    fit_seconds = post.info.fit_seconds
    info = post.info
    if post.rule.fits_at_prediction:  # the local fits are the fit, even though predict runs them
        fit_seconds, predict_seconds = fit_seconds + predict_seconds, 0.0
        info = _local_convergence(info, pred)
    info = dataclasses.replace(info, fit_seconds=fit_seconds, predict_seconds=predict_seconds,
                               loo_seconds=post.info.loo_seconds + loo_seconds)
    dt.attrs.update(datatree.stop_attrs(info))
    dt.attrs.update(datatree.precision_attrs(info))
    return post.replace(test=pred, metrics=metrics, datatree=dt, info=info)


def _scores(post, pred, data, lik, flat) -> dict:
    """The test scores in the target's original units; a log target's by the log-normal of its
    moment-matched Gaussian on log y (:func:`~ssgp_ppl.diagnostics.metrics.lognormal_metrics`), its exact
    test NLL with the Jacobian log y."""
    y_test = np.asarray(data.y_scaler.inverse(data.y_test))
    log = data.y_scaler.log
    if post.rule.closed_form:  # NCVMP's and the local fits' one Gaussian per point
        out = {} if log else regression_metrics(y_test, pred.mean, pred.var)
    else:
        out = likelihood_metrics(lik, y_test, None if log else pred.mean, pred.mean_f, pred.var_f,
                                 flat.get("noise"), var=pred.var, y_model=data.y_test,
                                 y_scale=pred.y_scale)
    if not log:
        return out
    log_y = data.y_scaler.inverse_affine(np.asarray(data.y_test, np.float64))
    out = lognormal_metrics(y_test, pred.mean, *pred.matched()) | out
    if "nll" in out:
        out["nll"] += float(np.mean(log_y))  # −log q(y*) = −log q(log y*) + log y*
    return out


def _pit(pred, data) -> np.ndarray:
    """The exact PIT of each test target under the predictive mixture (NaN where y* | draw is not
    Gaussian)."""
    if not pred.gaussian:
        return np.full(data.n_test, np.nan)
    return ndtr((np.asarray(data.y_test, np.float64)[None] - pred.mean_f)
                / np.sqrt(pred.var_y)).mean(0)


LOG_NOTE = ("the model is fitted on log(target): predictions and metrics are in the target's "
            "original units (log-normal given each draw); the posterior, invariants, "
            "log_likelihood and y_scale / y_mean are of log(target)")


def metrics_record(post: Posterior, data: Dataset) -> dict:
    """The ``metrics.json`` record of the CLI's ``fit`` command."""
    info = post.info
    svi = info.method if isinstance(info.method, SVIInfo) else SVIInfo()
    reading = info.reading or StopReading()
    optional = {"objective": svi.objective, "beta": svi.beta, "steps": info.steps,
                "converged": info.converged, "improvement_per_1k": reading.improvement,
                "improvement_se": reading.improvement_se, "tolerance_per_1k": reading.tolerance,
                "stop": stop_text(info), "interrupted": info.interrupted,
                "precision": info.precision}
    if info.precision is not None:  # what the warning is about, in numbers
        optional.update(noise_floor=info.noise_floor, jitter=info.jitter)
    if data.y_scaler.log:
        optional["target_transform"] = "log"
    if post.entry.sizing is not None:
        optional["sizing"] = post.entry.sizing.to_json()
    if post.metrics and "coverage_90" in post.metrics:
        optional["calibration"] = coverage_off(post.metrics["coverage_90"], data.n_test)
    return {"model": post.model, "method": post.method, "dataset": post.dataset,
            "n_train": data.n_train, "n_test": data.n_test, "m": post.entry.config["model"]["m"],
            **{k: float(v) for k, v in post.metrics.items()},
            **{k: v for k, v in optional.items() if v is not None},
            "fit_seconds": float(info.fit_seconds), "predict_seconds": float(info.predict_seconds)}


__all__ = ["check_precision", "evaluate", "fit", "metrics_record", "prerequisites"]
