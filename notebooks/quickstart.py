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
# # Quickstart: SSGP baselines and a Bayesian SSGP, VI against the reference, on pendulum
#
# The pendulum data (Lázaro-Gredilla et al. 2010; 315 train / 315 test as Tan et al. 2016 §7.1)
# ships with the package. We fit the two SSGP baselines by type-II maximum likelihood, then the
# Bayesian SSGP by SVI and by the reference (tempered SMC, then NUTS), compare test metrics in
# the original units, and plot the fitted function.
#
# Everything here is the public API: `ssgp_ppl.fit` returns a `Posterior` with `metrics`,
# `predict`, `datatree` and `save`; `ssgp_ppl.load` reads a saved one back.
# Set `SSGP_PPL_SMALL=1` to run everything with small budgets (what the test suite does).

# %%
import os
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import ssgp_ppl
from ssgp_ppl.data.datasets import frames
from ssgp_ppl.diagnostics.calibration import reference_health

SMALL = os.environ.get("SSGP_PPL_SMALL") == "1"
train, test = frames("pendulum")  # the rows fit(data="pendulum") uses, in original units
TARGET = train.columns[-1]
print(len(train), len(test), train.shape[1] - 1)

# %% [markdown]
# ## SSGP (optimized) and SSGP (fixed)
# Both maximise the marginal likelihood p(y | θ) with the nuisance s integrated out in O(n m²).

# %%
budget = {"ml.steps": 400} if SMALL else {}
baselines = {name: ssgp_ppl.fit(name, data="pendulum", method="ml", settings=budget)
             for name in ("ssgp", "ssgp_fixed")}
for name, r in baselines.items():
    print(f"{name:11s}", {k: round(v, 3) for k, v in r.metrics.items()})

# %% [markdown]
# SSGP (optimized) gets a good NMSE but a very poor MNLP and coverage: with m free frequencies
# fitted by maximum likelihood it is over-confident (the overfitting Lázaro-Gredilla et al. report).

# %% [markdown]
# ## Bayesian SSGP: stacked VI vs the reference
# `ssgp_svi` integrates s out, fits a full-rank Gaussian over the non-centred frequencies and the
# hyperparameters from several starts and stacks the fits (the posterior is multimodal: one VI
# run sits in one mode). The reference is tempered SMC followed by NUTS chains from its particles;
# `reference_health` says whether it converged and, if not, why.

# %%
settings = {}
if SMALL:
    settings = {"svi.steps": 300, "svi.min_steps": 0, "svi.paths": 2, "samples": 20,
                "smc.particles": 64, "smc.mcmc_steps": 3, "smc.chains": 2, "smc.warmup": 50,
                "smc.samples": 50}
vi = ssgp_ppl.fit("ssgp_svi", data="pendulum", method="svi", settings=settings)
ref = ssgp_ppl.fit("ssgp_svi", data="pendulum", method="smc", settings=settings)
for r in (vi, ref):
    print(f"{r.method:5s}", {k: round(v, 3) for k, v in r.metrics.items()})
health = reference_health(ref.datatree, ref.info)
print("reference:", "CONVERGED" if health["converged"] else
      "NOT CONVERGED: " + "; ".join(health["reasons"]))
print("stacking weights of the VI paths:", np.round(vi.info.paths.weights, 3))

# %% [markdown]
# Posterior mean and standard deviation of the noise level under each (standardised units):

# %%
for r in (vi, ref):
    print(r.method, float(np.mean(r.sites["noise"])), float(np.std(r.sites["noise"])))

# %% [markdown]
# Each posterior's ArviZ DataTree holds the draws, the symmetry-invariant quantities, the test
# predictions and the training rows' log-likelihood (PSIS-LOO):

# %%
print(sorted(vi.datatree.children))
print(vi.datatree["invariants"]["noise"].mean().item(), "noise sd (original units)")

# %% [markdown]
# ## The fitted function
# `predict` takes new inputs in the training columns and units (here a DataFrame, by column
# name) and returns the predictive of y*: mean, variance, draws and `interval(level)`. Pendulum has
# nine inputs; the slice below varies `x6` (the input most correlated with the target) over its
# training range and holds the other eight at their training medians. The training rows are
# drawn against `x6` alone: their other inputs vary, so they scatter about the slice.

# %%
inputs = train.drop(columns=TARGET)
grid = np.linspace(inputs["x6"].min(), inputs["x6"].max(), 200)
x_slice = pd.DataFrame(np.repeat(inputs.median().to_numpy()[None], len(grid), axis=0),
                       columns=inputs.columns)
x_slice["x6"] = grid
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
for ax, r in zip(axes, (vi, ref), strict=True):
    pred = r.predict(x_slice)
    lo, hi = pred.interval(0.9)
    ax.plot(inputs["x6"], train[TARGET], "k.", ms=3, alpha=0.5, label="training rows")
    ax.fill_between(grid, lo, hi, alpha=0.3, label="90% interval")
    ax.plot(grid, pred.mean, lw=1.5, label="predictive mean")
    ax.set_title(f"{r.method}: other inputs at their medians")
    ax.set_xlabel("input x6")
axes[0].set_ylabel("change in angular velocity")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## The predictive on the test set
# Test targets sorted by the reference's predictive mean, with each method's 90% interval (original
# units of the target). At full size the two means are close and the methods differ mainly in
# the intervals' width; a small run (`SSGP_PPL_SMALL=1`) differs in both.

# %%
y_test = test[TARGET].to_numpy()
order = np.argsort(ref.mean)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
for ax, r in zip(axes, (vi, ref), strict=True):
    lo, hi = r.test.interval(0.9)
    ax.fill_between(np.arange(len(test)), lo[order], hi[order], alpha=0.3, label="90% interval")
    ax.plot(r.mean[order], lw=1, label="predictive mean")
    ax.plot(y_test[order], "k.", ms=2, label="test target")
    ax.set_title(f"{r.method}: NMSE {r.metrics['nmse']:.3f}, 90% coverage "
                 f"{r.metrics['coverage_90']:.2f}")
    ax.set_xlabel("test point (sorted by the reference's mean)")
axes[0].set_ylabel("change in angular velocity")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Save and load
# A saved posterior predicts as the fitted one did, in this process or another.

# %%
path = Path(tempfile.mkdtemp()) / "pendulum_vi.nc"
vi.save(path)
again = ssgp_ppl.load(path).predict(test.drop(columns=TARGET))
print("largest difference of the test means:", float(np.max(np.abs(again.mean - vi.mean))))
