"""The result of every inference method: a typed :class:`Posterior` that predicts, saves and loads.

A method (:mod:`ssgp_ppl.methods`) returns the posterior draws of the model's sites, the fitted
scalers, the predictive rule (:mod:`ssgp_ppl.predictive`) and typed :class:`FitInfo`; the pipeline
(:func:`ssgp_ppl.pipeline.fit`) adds the test-split prediction, its scores and the ArviZ DataTree.
:meth:`Posterior.predict` takes raw inputs in original units and returns the predictive of y* in
original units; :meth:`Posterior.save` / :func:`load` round-trip everything it needs in one netCDF
file.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import xarray as xr

from ssgp_ppl.datasets import Scaler
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.partitions import Partitions
from ssgp_ppl.predictive import (
    Moments,
    Prediction,
    SiteRule,
    check_test_inputs,
    prediction,
    rule_from_state,
)
from ssgp_ppl.tables import TableEncoding

if TYPE_CHECKING:  # pragma: no cover
    from ssgp_ppl.entry import CatalogEntry

SAVE_FORMAT = 1
TEST_ARRAYS = ("mean", "var", "mean_f", "var_f", "var_y", "draws")
STATE_GROUP = "ssgp_ppl_state"  # the group of a saved posterior that holds what predict needs


@dataclass(frozen=True)
class FitInfo:
    """What a method reports besides its draws; None where the method has no such quantity."""

    fit_seconds: float = 0.0
    predict_seconds: float = 0.0
    loo_seconds: float = 0.0  # densities and pointwise log-likelihoods for PSIS-LOO
    steps: int | None = None  # SVI/ML steps, NCVMP iterations
    converged: bool | None = None  # SVI / type-II: by the stop rule (ssgp_ppl.inference); NCVMP: its bound
    improvement: float | None = None  # SVI / type-II: the loss's improvement per 1,000 steps at the
    improvement_se: float | None = None  # end, its standard error and the rule's tolerance (nats)
    tolerance: float | None = None
    interrupted: bool | None = None  # stopped by Ctrl-C after a whole chunk (checkpointed fits)
    stop_signal: str | None = None  # the signal that stopped it (SIGINT, SIGTERM, SIGHUP)
    objective: str | None = None  # SVI objective and its β
    beta: float | None = None
    partitions: int | None = None  # k-means partitions used
    divergences: int | None = None  # NUTS
    algorithm: int | None = None  # NCVMP algorithm and final bound
    bound: float | None = None
    k: int | None = None  # adaptive neighbourhoods
    adapt: bool | None = None
    log_evidence: tuple[float, ...] | None = None  # tempered SMC: log p(y) of each run
    temperatures: tuple[int, ...] | None = None  # tempering steps of each run
    smc_seconds: float | None = None
    particles: int | None = None
    collapsed: bool | None = None  # s integrated out by the sampler, drawn afterwards
    runs_rhat: float | None = None  # max rank R-hat of the scalar invariants across SMC runs
    paths: int | None = None  # multi-path fits (ssgp_ppl.paths): number of paths, how combined,
    combine: str | None = None  # each path's weight, LOO log score and final objective, and the
    path_weights: tuple[float, ...] | None = None  # mixture's LOO log score
    path_loo: tuple[float, ...] | None = None
    path_objective: tuple[float, ...] | None = None
    path_objective_kind: tuple[str, ...] | None = None  # paths.OBJECTIVE_KINDS
    path_pareto_k_bad: tuple[int, ...] | None = None  # rows whose PSIS k̂ exceeds good_k
    path_noise: tuple[float | None, ...] | None = None  # posterior mean σ_n (standardised)
    stacked_loo: float | None = None
    precision: str | None = None  # the fit vs its precision in words where it warns (linalg.resolution)
    noise_floor: float | None = None  # σ_floor in the target's units (Gaussian SSGP fits)
    jitter: float | None = None  # largest jitter ε × mean diag A at the fitted values (where A is factored)


def stop_text(info: FitInfo) -> str | None:
    """How an iterative fit stopped, in words (None for a fit without a stop rule): converged, or
    stopped by the step budget with the objective's improvement per 1,000 steps at the end (a
    posterior saved without that reading says "unknown")."""
    if info.converged is None:
        return None
    if info.interrupted:
        return f"stopped by {info.stop_signal or 'SIGINT'} at step {info.steps}"
    if info.bound is not None:  # NCVMP's bound-based rule
        return ("converged (relative increase of the bound below its tolerance)" if info.converged
                else "stopped by the iteration budget before the bound converged")
    if info.improvement is None:
        return ("converged" if info.converged else "stopped by the step budget") + \
            " (improvement per 1,000 steps unknown)"
    tol = "" if info.tolerance is None else f"; tolerance {info.tolerance:.3g}"
    rate = f"{info.improvement:.3g} ± {info.improvement_se or 0.0:.2g} nats per 1,000 steps{tol}"
    if info.converged:
        return f"converged (improvement {rate})"
    if info.improvement > 0:
        return f"stopped by the step budget, objective still improving by {rate}"
    return f"stopped by the step budget, not shown to have converged (improvement {rate})"


@dataclass(frozen=True)
class Handoff:
    """What one method's fit gives another: type-II estimates (for an empirical-Bayes
    reference), the spectral points NCVMP's restarts kept, the k-means partitions, and where a
    path of a multi-path fit starts (:mod:`ssgp_ppl.paths`)."""

    type2: dict | None = None
    spectral_points: np.ndarray | None = None
    partitions: Partitions | None = None
    start: dict | None = None  # starting values of the sites (a multi-path fit's dispersed start)


@dataclass(eq=False)
class Posterior:
    """A fitted catalog entry: draws, predictive rule, scalers and method info.

    ``sites``: name -> (chain, draw, ...) in the model's standardised units (type-II values repeated
    per draw); ``log_p`` / ``log_q``: (chain, draw) joint log density and the guide's log density
    where defined (VI draws, for PSIS-LOO); ``y_centre``: the training mean a closed-form fit was
    centred on (NCVMP); ``test``, ``metrics`` and ``datatree`` are set by the pipeline when there is
    a test split.
    """

    entry: CatalogEntry
    method: str
    dataset: str
    sites: dict
    rule: object  # SiteRule | NCVMPRule | LocalFitsRule
    x_scaler: Scaler
    y_scaler: Scaler
    info: FitInfo = field(default_factory=FitInfo)
    log_p: np.ndarray | None = None
    log_q: np.ndarray | None = None
    losses: np.ndarray | None = None
    y_centre: float = 0.0
    handoff: Handoff = field(default_factory=Handoff)
    sample_stats: xr.Dataset | None = None  # a sampler's own statistics (NUTS: energy, …)
    params: dict | None = None  # fitted guide / type-II parameters (constrained; SVI and ML)
    feature_names: tuple = ()  # the training inputs' columns (a DataFrame given to predict)
    encoding: TableEncoding | None = None  # a user table's encoding (applied to predict's DataFrame)
    path_of_draw: np.ndarray | None = None  # multi-path fits: the path of each draw (S,)
    path_posteriors: tuple = ()  # multi-path fits: each path's own posterior (not saved)
    test: Prediction | None = None
    metrics: dict | None = None
    datatree: xr.DataTree | None = None

    @property
    def model(self) -> str:
        return self.entry.name

    @property
    def n_features(self) -> int:
        return int(np.shape(self.x_scaler.mean)[0])

    @property
    def chains(self) -> int:
        return int(next(iter(self.sites.values())).shape[0]) if self.sites else 1

    @property
    def flat_sites(self) -> dict:
        """Site draws with (chain, draw) flattened to one axis S."""
        return {k: np.reshape(v, (-1,) + np.shape(v)[2:]) for k, v in self.sites.items()}

    @property
    def mean(self) -> np.ndarray:
        """Predictive mean of y* on the test split (original units)."""
        return self._test().mean

    @property
    def var(self) -> np.ndarray:
        """Predictive variance of y* on the test split (original units)."""
        return self._test().var

    def _test(self) -> Prediction:
        if self.test is None:
            raise SSGPError("this posterior has no test-split prediction; use predict(x_new)")
        return self.test

    def replace(self, **changes) -> Posterior:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ prediction

    def draw_moments(self, x_std, *, client=None, progress: bool = False) -> Moments:
        """Per-draw f* moments at standardised inputs: the rule's own, or, for a closed-form rule
        with draws of q (NCVMP), the degenerate f* of each draw (for the invariants)."""
        if isinstance(self.rule, SiteRule) or not self.sites:
            return self.rule.moments(x_std, client=client, progress=progress)
        rule = SiteRule("degenerate", self.flat_sites)
        mom = rule.moments(x_std)
        return mom._replace(mean_f=mom.mean_f + self.y_centre, var_f=np.zeros_like(mom.var_f))

    def predict_standardised(self, x_std, *, seed: int = 0, client=None,
                             progress: bool = False) -> Prediction:
        """:meth:`predict` at inputs already in the model's standardised units."""
        x_std = np.asarray(x_std, np.float64)
        check_test_inputs(np.zeros((1, self.n_features)), x_std)
        if len(x_std) == 0:
            raise SSGPError("predict: no rows to predict")
        num = int(np.prod(next(iter(self.sites.values())).shape[:2])) if self.sites else 1
        return prediction(self.rule, self.entry.lik, x_std, self.y_scaler, seed=seed, num=num,
                          client=client, progress=progress)

    def predict(self, x_new, *, seed: int = 0, client=None, progress: bool = False) -> Prediction:
        """The predictive of y* at ``x_new`` (n*, d) raw inputs in the training data's columns and
        units: mean, variance, one y* draw per posterior draw, ``interval(level)``; original units
        of the target."""
        if isinstance(x_new, pd.DataFrame) and self.encoding is not None:  # as the training table
            x_new = self.encoding.transform(x_new, "predict's DataFrame", target=False)[0]
        elif isinstance(x_new, pd.DataFrame):  # the training inputs' columns, by name
            x_new = x_new.rename(columns=str)
            missing = [c for c in self.feature_names if c not in x_new.columns]
            if missing or not self.feature_names:
                raise SSGPError(f"predict: the DataFrame lacks the input columns {missing} the model "
                                "was fitted on" if missing else "predict: this posterior has no "
                                "column names; pass an array in the training column order")
            x_new = x_new[list(self.feature_names)]
        x_new = np.asarray(x_new, np.float64)
        if x_new.ndim == 1:  # n* values of a single input, or one row of d inputs
            x_new = x_new[:, None] if self.n_features == 1 else x_new[None]
        check_test_inputs(np.zeros((1, self.n_features)), x_new)  # before the scaler broadcasts
        return self.predict_standardised(self.x_scaler.transform(x_new), seed=seed, client=client,
                                         progress=progress)

    # ------------------------------------------------------------------ save / load

    def save(self, path: str | Path) -> Path:
        """One netCDF file: the DataTree (if any) plus a group with the rule's arrays, the sites,
        the scalers and, as JSON attributes, the catalog configuration, method and info."""
        from ssgp_ppl.io import write_datatree

        path = Path(path)
        arrays, rule_attrs = self.rule.state()
        arrays, rule_attrs = dict(arrays), dict(rule_attrs)
        # the draws are stored once: in the DataTree's posterior group where it holds them as they
        # are, else here; the rule's copy of a site draw is then a reference to them
        post = self.datatree["posterior"] if self.datatree is not None and \
            "posterior" in self.datatree.children else None
        in_tree = post is not None and all(
            k in post.data_vars and post[k].dtype == np.asarray(v).dtype
            and np.array_equal(post[k].values, v) for k, v in self.sites.items())
        if not in_tree:
            arrays.update({f"posterior_{k}": np.asarray(v) for k, v in self.sites.items()})
        flat = self.flat_sites
        shared = [k for k in flat if f"site_{k}" in arrays and arrays[f"site_{k}"].dtype ==
                  flat[k].dtype and np.array_equal(arrays[f"site_{k}"], flat[k])]
        for k in shared:
            del arrays[f"site_{k}"]
        rule_attrs["sites_from_posterior"] = shared
        for name, sc in (("x_scaler", self.x_scaler), ("y_scaler", self.y_scaler)):
            arrays[f"{name}_mean"], arrays[f"{name}_scale"] = np.asarray(sc.mean), np.asarray(sc.scale)
        for k, v in (("log_p", self.log_p), ("log_q", self.log_q), ("losses", self.losses),
                     ("path_of_draw", self.path_of_draw)):
            if v is not None:
                arrays[k] = np.asarray(v)
        arrays.update({f"params_{k}": np.asarray(v) for k, v in (self.params or {}).items()})
        if self.test is not None:  # the test split's predictive (post.mean, post.var)
            arrays.update({f"test_{k}": np.asarray(self.test._asdict()[k]) for k in TEST_ARRAYS})
        ds = xr.Dataset({k: (tuple(f"{k}_dim{i}" for i in range(np.ndim(v))), np.asarray(v))
                         for k, v in arrays.items()})
        meta = {"format": SAVE_FORMAT, "entry": {"name": self.entry.name, "path": str(self.entry.path),
                                                 "config": self.entry.config},
                "method": self.method, "dataset": self.dataset, "rule": rule_attrs,
                "info": dataclasses.asdict(self.info), "y_centre": self.y_centre,
                "feature_names": list(self.feature_names),
                "encoding": None if self.encoding is None else self.encoding.to_json(),
                "sites": list(self.sites), "sites_in_datatree": in_tree,
                "test": None if self.test is None else {"y_scale": self.test.y_scale,
                                                        "y_shift": self.test.y_shift,
                                                        "gaussian": bool(self.test.gaussian)},
                "metrics": self.metrics}
        ds.attrs["ssgp_ppl"] = json.dumps(meta, allow_nan=True)
        dt = self.datatree.copy() if self.datatree is not None else xr.DataTree()
        dt[STATE_GROUP] = xr.DataTree(ds)
        write_datatree(path, dt)
        return path


def load(path: str | Path, make_entry) -> Posterior:
    """A :class:`Posterior` saved by :meth:`Posterior.save` (it predicts as the saved one did);
    ``make_entry(name, path, config)`` rebuilds its catalog entry (:func:`ssgp_ppl.load`)."""
    path = Path(path)
    if not path.is_file():
        raise SSGPError(f"{path}: no such file (save a posterior with Posterior.save)")
    try:
        with xr.open_datatree(os.fspath(path), engine="h5netcdf") as opened:
            dt = opened.load()
    except (OSError, ValueError) as e:
        raise SSGPError(f"{path}: not a saved posterior ({type(e).__name__}: {e})") from None
    if STATE_GROUP not in dt.children:
        raise SSGPError(f"{path}: not a saved posterior (no '{STATE_GROUP}' group; posterior.nc "
                        "files of `ssgp-ppl fit` before save/load hold the DataTree only)")
    ds = dt[STATE_GROUP].to_dataset()
    meta = json.loads(ds.attrs["ssgp_ppl"])
    if meta.get("format") != SAVE_FORMAT:
        raise SSGPError(f"{path}: saved posterior format {meta.get('format')} is not {SAVE_FORMAT}")
    arrays = {k: np.asarray(v.values) for k, v in ds.data_vars.items()}
    e = meta["entry"]
    entry = make_entry(e["name"], Path(e["path"]), e["config"])
    if meta["sites_in_datatree"]:
        sites = {k: np.asarray(dt["posterior"][k].values) for k in meta["sites"]}
    else:
        sites = {k: arrays[f"posterior_{k}"] for k in meta["sites"]}
    for k in meta["rule"].get("sites_from_posterior", []):
        arrays[f"site_{k}"] = np.reshape(sites[k], (-1,) + sites[k].shape[2:])

    def scaler(name):
        return Scaler(arrays[f"{name}_mean"], arrays[f"{name}_scale"])

    tree = dt.copy()
    del tree[STATE_GROUP]
    info = FitInfo(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["info"].items()})
    params = {k[len("params_"):]: v for k, v in arrays.items() if k.startswith("params_")}
    test = None
    if meta.get("test") is not None:
        test = Prediction(*(arrays[f"test_{k}"] for k in TEST_ARRAYS), meta["test"]["y_scale"],
                          meta["test"]["y_shift"], meta["test"]["gaussian"])
    return Posterior(entry, meta["method"], meta["dataset"], sites, rule_from_state(arrays, meta["rule"]),
                     scaler("x_scaler"), scaler("y_scaler"), info, arrays.get("log_p"),
                     arrays.get("log_q"), arrays.get("losses"), float(meta["y_centre"]),
                     test=test, metrics=meta["metrics"], params=params or None,
                     path_of_draw=arrays.get("path_of_draw"),
                     feature_names=tuple(meta["feature_names"]),
                     encoding=TableEncoding.from_json(meta["encoding"]) if meta.get("encoding")
                     else None,
                     datatree=tree if tree.children else None)
