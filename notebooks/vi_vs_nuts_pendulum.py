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
# # VI vs NUTS on pendulum: every guide against its NUTS reference
#
# Each catalog entry with a variational method is fitted on the pendulum split together with NUTS
# on the same model (empirical Bayes where the entry has type-II hyperparameters), by
# `ssgp_ppl.report.compare`, the function behind `ssgp-ppl compare`. The posteriors are compared
# on quantities the SSGP's symmetries leave unchanged (permuting frequencies, flipping a frequency
# with its sine amplitude): noise, signal, each input's frequency spread (1 / effective
# lengthscale), the implied kernel at a grid of lags and the latent function at the test inputs.
#
# `SSGP_PPL_SMALL=1` (the test suite) runs every method briefly on 80 training and 30 test rows,
# writing to `$SSGP_PPL_REPORTS` (a temporary folder); the full run writes `reports/<entry>-pendulum/`
# (`SSGP_PPL_REUSE=1` reads existing reports instead of refitting).

# %%
import os

# four host devices so that NUTS's four chains run in parallel (set before JAX starts)
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import pandas as pd

from ssgp_ppl.report import compare_named, summary_rows

SMALL = os.environ.get("SSGP_PPL_SMALL") == "1"
ROOT = os.environ.get("SSGP_PPL_REPORTS", "../reports")
REUSE = os.environ.get("SSGP_PPL_REUSE") == "1"  # read existing reports instead of refitting
GUIDES = {"ssgp_svi": "auto_mvn (full-rank Gaussian)", "svbssgp": "joint_affine (sVBSSGP)",
          "vssgp": "mean_field (VSSGP)", "tan_va_svi": "gaussian_lambda (SVI)",
          "tan_va": "NCVMP (Tan et al.)"}
if SMALL:  # the quick run (test suite): two guide families (NCVMP runs in the Auto-MPG notebook)
    GUIDES = {k: GUIDES[k] for k in ("ssgp_svi", "svbssgp")}
results = {name: compare_named(name, "pendulum", ROOT, small_run=SMALL, reuse=REUSE) for name in GUIDES}

# %% [markdown]
# ## Predictive metrics and calibration on the test set, NUTS health
# `nuts_converged` is false when any rank R-hat on the invariants is ≥ 1.01, a bulk/tail ESS is
# below 400, a transition diverged or a chain's BFMI is below 0.3; `nuts_modes` counts groups of
# chains that agree (two-chain R-hat < 1.1 on the scalar invariants and the log density).

# %%
table = pd.DataFrame([r for res in results.values() for r in summary_rows(res)])
pd.set_option("display.width", 200)
print(table[["model", "method", "nmse", "mnlp", "crps", "coverage_90", "nuts_converged",
             "nuts_modes"]].to_string(index=False, float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# ## How much each guide under- or over-states uncertainty
# `std_ratio_*` = sd under VI / sd under NUTS (median over components): below 1 the guide is
# overconfident. `w1_scaled_*` is the Wasserstein-1 distance in units of the NUTS sd.

# %%
vi = table[table.method != "nuts"].copy()
vi.insert(1, "guide", vi.model.map(GUIDES))
cols = ["model", "guide", "coverage_90"] + [c for c in vi.columns if c.startswith(("std_ratio",
                                                                                  "w1_scaled"))]
print(vi[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# The per-entry HTML reports (`report.html` in each folder) hold the plots: predictive bands,
# coverage curves, PIT and LOO-PIT Δ-ECDFs, and the VI-vs-NUTS marginals.
