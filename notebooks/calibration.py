# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Calibration across the catalog
#
# Every catalog entry (new catalog files are picked up) on pendulum and Auto-MPG: coverage
# of central intervals from 10% to 90% on the test set, MNLP, CRPS, and PSIS-LOO's Pareto k̂ on the
# training rows (for VI draws importance-corrected with log p − log q). Runs of the two VI-vs-NUTS
# notebooks are reused from the reports folder; missing ones are run here.
#
# `SSGP_PPL_SMALL=1` (the test suite) fits nothing: it reads the committed full-size reports in
# `../reports` (their `comparison.json`), so it runs on its own, in any order with the others.

# %%
import os

# four host devices so that NUTS's four chains run in parallel (set before JAX starts)
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

import ssgp_ppl

SMALL = os.environ.get("SSGP_PPL_SMALL") == "1"
# the committed reports: beside notebooks/ (run from notebooks/ or from the repository root)
ROOT = next((p for p in ("../reports", "reports") if Path(p, "catalog_metrics.json").exists()),
            "../reports")
if not SMALL:
    ROOT = os.environ.get("SSGP_PPL_REPORTS", ROOT)
DATASETS = ("pendulum", "autompg")


def calibrated(entry: dict) -> bool:
    """Posterior approximations of the Gaussian model: ELBO or marginal-likelihood fits (DLM and
    β-ELBO entries are loss minimisers, the probit and Poisson entries have no Gaussian predictive
    to calibrate, the mixture has no report yet)."""
    return (entry["likelihood"] == "gaussian" and entry["guide"] != "mixture"
            and entry["objective"].split()[0] in ("elbo", "marginal"))


def result(name: str, data: str) -> ssgp_ppl.Comparison | None:
    out = Path(ROOT) / f"{name}-{data}"
    if (out / "comparison.json").exists():
        return ssgp_ppl.load_comparison(out)
    if SMALL:  # the quick run reads what the full runs wrote
        return None
    return ssgp_ppl.compare(name, data=data, out=out, progress=False)


results = {(e["name"], data): res for data in DATASETS for e in ssgp_ppl.catalog()
           if calibrated(e) if (res := result(e["name"], data)) is not None}
table = pd.concat([res.table.assign(dataset=data) for (name, data), res in results.items()],
                  ignore_index=True)
print(table[["dataset", "model", "method", "nmse", "mnlp", "crps", "coverage_90"]].to_string(
    index=False, float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# ## Coverage curves: nominal vs empirical (the diagonal is perfect calibration)

# %%
fig, axes = plt.subplots(1, len(DATASETS), figsize=(5.5 * len(DATASETS), 5), squeeze=False)
for ax, data in zip(axes[0], DATASETS, strict=True):
    for (name, d), res in results.items():
        if d != data:
            continue
        for m in res.records:
            c = m["coverage_curve"]
            ax.plot(c["nominal"], c["empirical"], marker=".", lw=0.8, label=f"{name}:{m['method']}")
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_title(data)
    ax.set_xlabel("nominal level")
    ax.set_ylabel("empirical coverage (test)")
axes[0, -1].legend(fontsize=6, ncol=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## PSIS-LOO diagnostics: share of training rows with Pareto k̂ above the threshold
# High shares for VI mean q is too far from the posterior for importance sampling to repair.

# %%
loo = [{"dataset": data, "model": name, "method": m["method"], **m["loo"]}
       for (name, data), res in results.items() for m in res.records if m.get("loo")]
print(pd.DataFrame(loo).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
