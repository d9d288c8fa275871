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
# Bayesian SSGP by SVI and by the reference (tempered SMC, then NUTS), and compare test metrics
# in the original units.
#
# Set `SSGP_PPL_SMALL=1` to run everything with small budgets (what the test suite does).

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

from ssgp_ppl.calibration import reference_health
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
# ## Bayesian SSGP: stacked VI vs the reference
# `ssgp_svi` integrates s out, fits a full-rank Gaussian over the non-centred frequencies and the
# hyperparameters from several starts and stacks the fits (the posterior is multimodal: one VI
# run sits in one mode). The reference is tempered SMC followed by NUTS chains from its particles;
# `reference_health` says whether it converged and, if not, why.

# %%
entry = load_entry("ssgp_svi")
if SMALL:
    entry = entry.with_overrides(["svi.steps=300", "svi.min_steps=0", "svi.paths=2", "samples=20",
                                  "smc.particles=64", "smc.mcmc_steps=3", "smc.chains=2",
                                  "smc.warmup=50", "smc.samples=50"])
vi = fit(entry, data, "svi", progress=False)
ref = fit(entry, data, "smc", progress=False)
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
# ## The predictive on the test set
# Test targets sorted by the reference's predictive mean, with each method's 90% interval (original
# units of the target). At full size the two means are close and the methods differ mainly in
# the intervals' width; a small run (`SSGP_PPL_SMALL=1`) differs in both.

# %%
order = np.argsort(ref.mean)
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
for ax, r in zip(axes, (vi, ref), strict=True):
    lo, hi = r.test.interval(0.9)
    ax.fill_between(np.arange(data.n_test), lo[order], hi[order], alpha=0.3, label="90% interval")
    ax.plot(r.mean[order], lw=1, label="predictive mean")
    ax.plot(data.y_scaler.inverse(data.y_test)[order], "k.", ms=2, label="test target")
    ax.set_title(f"{r.method}: NMSE {r.metrics['nmse']:.3f}, 90% coverage "
                 f"{r.metrics['coverage_90']:.2f}")
    ax.set_xlabel("test point (sorted by the reference's mean)")
axes[0].set_ylabel("change in angular velocity")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()
