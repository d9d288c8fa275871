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
# # Quickstart: SSGP baselines and a Bayesian SSGP, VI against NUTS, on pendulum
#
# The pendulum data (Lázaro-Gredilla et al. 2010; 315 train / 315 test as Tan et al. 2016 §7.1)
# ships with the package. We fit the two SSGP baselines by type-II maximum likelihood, then the
# Bayesian SSGP by SVI and by NUTS, and compare test metrics in the original units.
#
# Set `SSGP_PPL_SMALL=1` to run everything with small budgets (what the test suite does).

# %%
import os

import numpy as np

from ssgp_ppl.datasets import load
from ssgp_ppl.entry import load_entry
from ssgp_ppl.pipeline import fit

SMALL = os.environ.get("SSGP_PPL_SMALL") == "1"
data = load("pendulum", split=0)
print(data.n_train, data.n_test, data.n_features)

# %% [markdown]
# ## SSGP (optimized) and SSGP (fixed)
# Both maximise the marginal likelihood p(y | θ) with the nuisance s integrated out in O(n m²).

# %%
budget = ["ml.steps=400"] if SMALL else []
baselines = {name: fit(load_entry(name).with_overrides(budget), data, "ml", progress=False)
             for name in ("ssgp", "ssgp_fixed")}
for name, r in baselines.items():
    print(f"{name:11s}", {k: round(v, 3) for k, v in r.metrics.items()})

# %% [markdown]
# SSGP (optimized) gets a good NMSE but a very poor MNLP and coverage: with m free frequencies
# fitted by maximum likelihood it is over-confident (the overfitting Lázaro-Gredilla et al. report).

# %% [markdown]
# ## Bayesian SSGP: SVI with a full-rank Gaussian guide vs NUTS

# %%
entry = load_entry("ssgp_svi")
if SMALL:
    entry = entry.with_overrides(["svi.steps=300", "svi.min_steps=0", "samples=20",
                                  "nuts.warmup=50", "nuts.samples=50", "nuts.chains=2"])
vi = fit(entry, data, "svi", progress=False)
mc = fit(entry, data, "nuts", progress=False)
for r in (vi, mc):
    print(f"{r.method:5s}", {k: round(v, 3) for k, v in r.metrics.items()})

# %% [markdown]
# Posterior standard deviation of the noise level under each method (VI tends to under-state it):

# %%
for r in (vi, mc):
    print(r.method, float(np.std(r.sites["noise"])), float(np.mean(r.sites["noise"])))
