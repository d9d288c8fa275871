"""The archived catalog metrics (reports/catalog_metrics.json, written by
benchmarks/catalog_metrics.py) are what the code computes today: a refactor that changes a
number shows here. Cheap entries of each method family, full default settings, split 0.

XLA's CPU results depend on the instruction set and the thread count, and a long optimisation
carries float32 rounding into its result, so each record's tolerance comes from its measured
spread: benchmarks/metrics_spread.py refits each case under AVX-512, AVX2, AVX and SSE4.2 code on
one and two CPUs (reports/metrics_spread.json). Type-II ``ssgp`` on pendulum is not a case: its
free frequencies chase the noise to zero (test MNLP ≈ 60), and the fits under those settings stop
anywhere between 38,250 and 60,000 steps with RMSE 1.99–2.04 and MNLP 49–63; on Auto-MPG the same
code path converges in 3,000 steps to the same figures on every setting."""

import json
from pathlib import Path

import pytest

from ssgp_ppl.data.datasets import load
from ssgp_ppl.entry import load_entry
from ssgp_ppl.pipeline import fit, metrics_record

REPORTS = Path(__file__).resolve().parent.parent / "reports"
ARCHIVE = REPORTS / "catalog_metrics.json"
SPREAD = REPORTS / "metrics_spread.json"
METRICS = ("rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90", "nll")
# another machine of this class gave tan_va-ncvmp-autompg's RMSE 2.99170 against 2.99296 archived
# (4.2e-4 relative; on standard-scaled inputs, as that record was then), more than any setting on
# this one: REL_FLOOR leaves ~5x that room
REL_FLOOR = 2e-3
SAFETY = 3.0  # times the largest relative distance measured between the settings' fits
STEP_FLOOR = 500  # steps: two chunks of the stop rule
CASES = [("ssgp", "ml", "autompg"), ("ssgp_fixed", "ml", "autompg"),
         ("vssgp", "svi", "autompg"), ("tan_va", "ncvmp", "autompg")]


def tolerance(case: str, metric: str, n_test: int) -> tuple[float, float]:
    """(relative, absolute) tolerance of one archived metric: the floor or SAFETY times the
    measured spread, and for a coverage one test point either way (a point on an interval's
    edge goes in or out with the last bit)."""
    spread = json.loads(SPREAD.read_text())["spread"][case]
    rel = max(REL_FLOOR, SAFETY * spread[metric])
    return rel, (1.0 / n_test if metric.startswith("coverage") else 0.0)


@pytest.mark.parametrize(("model", "method", "dataset"), CASES)
def test_archived_catalog_metrics_are_reproduced(model, method, dataset):
    records = json.loads(ARCHIVE.read_text())["records"]
    want = next(r for r in records if (r["model"], r["method"], r["dataset"], r["split"])
                == (model, method, dataset, 0))
    entry = load_entry(model)
    data = load(dataset, split=0, x_scaling=entry.config["data"]["x_scaling"])
    got = metrics_record(fit(entry, data, method, seed=0, progress=False), data)
    case = f"{model}:{method}:{dataset}"
    for k in METRICS:
        if k in want:
            rel, abs_ = tolerance(case, k, want["n_test"])
            assert got[k] == pytest.approx(want[k], rel=rel, abs=abs_), (k, got[k], want[k])
    if want.get("steps") is not None:
        steps = json.loads(SPREAD.read_text())["spread"][case]["steps"]
        assert abs(got["steps"] - want["steps"]) <= max(STEP_FLOOR, SAFETY * steps), \
            (got["steps"], want["steps"])

