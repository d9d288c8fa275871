"""Typed fit info (ssgp_ppl.inference.fitinfo): each method's own diagnostics in its own type, saved and
loaded as written; a flat FitInfo table (saved format 1) maps to them; every predictive rule is a
PredictiveRule; a Posterior is built by keyword; an archived posterior still loads and predicts
the numbers its report archived."""

import dataclasses
import inspect
import json
from pathlib import Path

import numpy as np
import pytest

import ssgp_ppl
from ssgp_ppl.data import datasets
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.fitinfo import (
    FitInfo,
    LocalInfo,
    MLInfo,
    NCVMPInfo,
    NUTSInfo,
    PathsInfo,
    SMCInfo,
    StopReading,
    SVIInfo,
    info_from_flat,
    info_from_json,
    info_to_json,
    stop_text,
)
from ssgp_ppl.model import predictive
from ssgp_ppl.pipeline import evaluate, metrics_record
from ssgp_ppl.posterior import Posterior, PredictiveRule

ROOT = Path(__file__).resolve().parents[2]
ARCHIVED = ROOT / "tests" / "files" / "ssgp_fixed-autompg-posterior_ml.nc"  # a copy of the
COMPARISON = ROOT / "reports" / "ssgp_fixed-autompg" / "comparison.json"  # report's posterior_ml.nc

PATHS = PathsInfo(count=2, combine="stacking", weights=(0.75, 0.25), loo=(-10.5, -12.0),
                  objective=(3.5, 4.0), objective_kind=("loss", "loss"), pareto_k_bad=(0, 3),
                  noise=(0.2, None), stacked_loo=-10.25)
INFOS = [
    FitInfo(fit_seconds=1.5, steps=300, converged=False, interrupted=False, partitions=4,
            reading=StopReading(improvement=2.5, improvement_se=0.5, tolerance=0.1),
            method=SVIInfo(objective="beta_elbo", beta=0.5), paths=PATHS),
    FitInfo(steps=40, converged=True, reading=StopReading(tolerance=0.2), method=MLInfo()),
    FitInfo(method=NUTSInfo(divergences=7), precision="noise below resolution", jitter=1e-6),
    FitInfo(method=SMCInfo(log_evidence=(-10.0, -10.5), temperatures=(12, 13), smc_seconds=2.0,
                           particles=64, collapsed=True, runs_rhat=1.01, divergences=0)),
    FitInfo(steps=17, converged=True, method=NCVMPInfo(algorithm=2, bound=-123.5)),
    FitInfo(steps=9, converged=False, method=NCVMPInfo(algorithm=2, bound=-4.0,
                                                       budget_reached=False)),
    FitInfo(method=LocalInfo(k=20, adapt=False)),
    FitInfo(converged=False, method=LocalInfo(k=20, adapt=True, fits=8, unconverged=1)),
]


@pytest.mark.parametrize("info", INFOS, ids=lambda i: type(i.method).__name__)
def test_info_round_trips_through_its_saved_form(info):
    back = info_from_json(json.loads(json.dumps(info_to_json(info))))
    assert back == info and type(back.method) is type(info.method)


def test_a_flat_table_maps_each_field_to_its_type():
    """The flat FitInfo table of a saved multi-path SVI fit: the stop reading, the objective and
    the paths land in their own types, the common fields stay."""
    flat = {"fit_seconds": 1.5, "steps": 300, "converged": False, "improvement": 2.5,
            "improvement_se": 0.5, "tolerance": 0.1, "interrupted": False, "partitions": 4,
            "objective": "beta_elbo", "beta": 0.5, "divergences": None, "bound": None,
            "paths": 2, "combine": "stacking", "path_weights": [0.75, 0.25],
            "path_loo": [-10.5, -12.0], "path_objective": [3.5, 4.0],
            "path_objective_kind": ["loss", "loss"], "path_pareto_k_bad": [0, 3],
            "path_noise": [0.2, None], "stacked_loo": -10.25}
    assert info_from_flat(flat, "svi") == INFOS[0]
    smc = info_from_flat({"divergences": 3, "log_evidence": [-1.0, -2.0], "temperatures": [5, 6],
                          "particles": 32, "runs_rhat": 1.2, "bound": None}, "smc")
    assert smc.method == SMCInfo(divergences=3, log_evidence=(-1.0, -2.0), temperatures=(5, 6),
                                 particles=32, runs_rhat=1.2)
    assert smc.reading is None and smc.paths is None
    ncvmp = info_from_flat({"steps": 9, "converged": False, "algorithm": 1, "bound": -4.0}, "ncvmp")
    assert ncvmp.method == NCVMPInfo(algorithm=1, bound=-4.0)
    assert stop_text(ncvmp) == "stopped by the iteration budget before the bound converged"
    assert stop_text(INFOS[5]) == "stopped before the bound converged: no step size raised it"
    assert stop_text(INFOS[7]) == "1 of the 8 local fits stopped before their bound converged"
    assert info_from_flat({"k": 30, "adapt": True}, "local").method == LocalInfo(k=30, adapt=True)
    assert info_from_flat({"steps": 5}, "a_plug_in").method is None


def test_an_unknown_method_kind_is_refused():
    with pytest.raises(ValueError, match="unknown kind 'nope'"):
        info_from_json({"method": {"kind": "nope"}})


def test_every_predictive_rule_is_a_predictive_rule():
    rules = [c for _, c in inspect.getmembers(predictive, inspect.isclass)
             if c.__name__.endswith("Rule") and c.__module__ == predictive.__name__]
    assert {c.__name__ for c in rules} == {"SiteRule", "NCVMPRule", "LocalFitsRule", "StackedRule"}
    for cls in rules:  # the protocol's members, looked up statically on the class's instance
        assert isinstance(object.__new__(cls), PredictiveRule), cls
    stacked = predictive.StackedRule((predictive.SiteRule("degenerate", {}),), (1,))
    assert isinstance(stacked, PredictiveRule) and stacked.closed_form is False

    class NoState:
        closed_form = fits_at_prediction = False

        def moments(self, x, *, client=None, progress=False):
            return None

    assert not isinstance(NoState(), PredictiveRule)


def test_a_posterior_is_built_by_keyword():
    names = [f.name for f in dataclasses.fields(Posterior)]
    assert names[:3] == ["entry", "method", "dataset"]
    with pytest.raises(TypeError, match="positional"):
        Posterior(None, "svi", "pendulum", {}, None, None, None)


def test_an_archived_posterior_loads_and_predicts_its_reports_numbers():
    """The report's ssgp_fixed Auto-MPG type-II posterior (format 1: one flat FitInfo table)
    loads, and without refitting, its prediction of the report's test split scores the numbers
    comparison.json archived; its info says how the archived fit stopped."""
    comparison = json.loads(COMPARISON.read_text())
    rec = next(r for r in comparison["methods"] if r["method"] == "ml")
    post = ssgp_ppl.load(ARCHIVED)
    assert post.model == comparison["model"] and post.dataset == comparison["dataset"]
    assert isinstance(post.info.method, MLInfo) and post.info.steps == rec["steps"] == 2250
    assert post.info.reading.tolerance == rec["tolerance_per_1k"]
    assert stop_text(post.info) == rec["stop"]
    data = datasets.load(comparison["dataset"], split=comparison["split"])
    again = evaluate(post.replace(test=None, metrics=None, datatree=None), data,
                     seed=comparison["seed"])
    # float32 prediction on another processor: 9.3e-6 relative measured on one machine of this class
    np.testing.assert_allclose(again.mean, post.mean, rtol=5e-5)
    record = metrics_record(again, data)
    for k in ("rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90", "nll"):
        assert record[k] == pytest.approx(rec[k], rel=5e-5), k
    for k in ("steps", "converged", "improvement_per_1k", "improvement_se", "stop"):
        assert record[k] == rec[k], k


def test_a_posterior_of_an_unknown_format_says_how_to_refit(tmp_path):
    import xarray as xr

    from ssgp_ppl.posterior import CHECKSUM, STATE_GROUP

    with xr.open_datatree(ARCHIVED, engine="h5netcdf") as opened:
        dt = opened.load()
    state = dt[STATE_GROUP].to_dataset()
    meta = json.loads(state.attrs["ssgp_ppl"])
    meta["format"] = 99
    state.attrs["ssgp_ppl"] = json.dumps(meta)
    del state.attrs[CHECKSUM]
    dt[STATE_GROUP] = xr.DataTree(state)
    dt.to_netcdf(tmp_path / "future.nc", engine="h5netcdf")
    with pytest.raises(SSGPError) as e:
        ssgp_ppl.load(tmp_path / "future.nc")
    msg = str(e.value)
    assert "\n" not in msg and "format 99 is not one this version reads (1, 2, 3)" in msg
    assert "`ssgp-ppl fit ssgp_fixed --data DATA --out DIR`" in msg
