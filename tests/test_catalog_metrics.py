"""The archived catalog metrics (reports/catalog_metrics.json, written by
benchmarks/catalog_metrics.py) are what the code computes today: a refactor that changes a
number shows here. Cheap entries of each method family, full default settings, split 0."""

import json
from pathlib import Path

import pytest

from ssgp_ppl.datasets import load
from ssgp_ppl.entry import load_entry
from ssgp_ppl.pipeline import fit, metrics_record

ARCHIVE = Path(__file__).resolve().parent.parent / "reports" / "catalog_metrics.json"
METRICS = ("rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90", "nll")
REL_SPREAD = 2e-3  # relative: across machines of this class (measured 4.2e-4, see below)
STEP_SPREAD = 500  # steps: two chunks of the stop rule
CASES = [("ssgp", "ml", "pendulum"), ("ssgp_fixed", "ml", "autompg"),
         ("vssgp", "svi", "autompg"), ("tan_va", "ncvmp", "autompg")]


@pytest.mark.parametrize(("model", "method", "dataset"), CASES)
def test_archived_catalog_metrics_are_reproduced(model, method, dataset):
    records = json.loads(ARCHIVE.read_text())["records"]
    want = next(r for r in records if (r["model"], r["method"], r["dataset"], r["split"])
                == (model, method, dataset, 0))
    data = load(dataset, split=0)
    got = metrics_record(fit(load_entry(model), data, method, seed=0, progress=False), data)
    # float noise only. The same machine reproduces its own run to ~1e-8, but another machine of
    # this class (other CPU features, other thread count) gave tan_va-ncvmp-autompg's RMSE
    # 2.99170 against 2.99296 archived: 4.2e-4 relative, from float32 rounding carried through a
    # long optimisation. REL_SPREAD leaves ~5x that room, still far below what a changed method
    # moves; the stop rule reads the loss trace, so its step can move by a chunk or two as well.
    for k in METRICS:
        if k in want:
            assert got[k] == pytest.approx(want[k], rel=REL_SPREAD), (k, got[k], want[k])
    if want.get("steps") is not None:
        assert abs(got["steps"] - want["steps"]) <= STEP_SPREAD, (got["steps"], want["steps"])
