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
# # Tan et al. (2016): NCVMP, its SVI twin, and adaptive neighbourhoods
#
# The model is the catalog's base SSGP model in its λ parameterisation: y = Zα + ε with fixed
# spectral points, λ ~ N(μ⁰, Σ⁰), α ~ N(0, σ²/m I), half-Cauchy σ and γ. The variational family
# q(α)q(λ)q(σ)q(γ) is fitted two ways: nonconjugate variational message passing (Algorithms 1 and 2,
# closed-form expectations of App. A) and SVI with the `gaussian_lambda` guide. Local fits on
# adaptive neighbourhoods (§6) follow.
#
# The fits are `ssgp_ppl.fit`; the first section calls the NCVMP solver itself (`ssgp_ppl.inference.ncvmp`)
# on the entry's model and the scaled data (`ssgp_ppl.entry.load_entry`, `ssgp_ppl.data.datasets.load`),
# since it plots the solver's step sizes, which a fitted posterior does not keep.
#
# `SSGP_PPL_SMALL=1` (the test suite) uses m = 10, few restarts and 6 test points for §6, and leaves
# the SVI twin and the reference to tests/inference/test_tan.py and the Auto-MPG VI-vs-reference notebook.

# %%
import json
import os
from pathlib import Path

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import ssgp_ppl
from ssgp_ppl.data.datasets import frames, load
from ssgp_ppl.entry import load_entry
from ssgp_ppl.inference import ncvmp

SMALL = os.environ.get("SSGP_PPL_SMALL") == "1"
m = 10 if SMALL else 20
settings = {"m": m} | ({"restarts": 3} if SMALL else {})
train, test = frames("autompg")
print(len(train), len(test), train.shape[1] - 1)

# %% [markdown]
# ## Algorithm 1 vs Algorithm 2 on one spectral set
# Algorithm 2 multiplies its natural-gradient step a_t by ρ = 1.5 while the bound rises and falls
# back to a_t = 1 when a cycle fails (§4); both stop when the relative increase is below 10⁻⁶.

# %%
va = load_entry("tan_va").with_settings(settings.items())
data = load("autompg", x_scaling=va.config["data"]["x_scaling"])  # inputs scaled to [−1, 1]
spec = va.spec(data.n_features)
prior = ncvmp.tan_prior(spec)
x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
runs = {alg: ncvmp.fit_ncvmp(x, y - y.mean(), spec.spectral_points[None], prior,
                             ncvmp.NCVMPSettings(algorithm=alg, restarts=1))
        for alg in (1, 2)}
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
for alg, r in runs.items():
    b = np.asarray(r.bounds)
    ax[0].plot(b[np.isfinite(b)], label=f"Algorithm {alg}: {int(r.iterations)} iterations")
ax[0].set_xlabel("iteration t")
ax[0].set_ylabel("lower bound L")
ax[0].legend()
a = np.asarray(runs[2].step_sizes)
ax[1].plot(a[np.isfinite(a)][1:], drawstyle="steps-mid")
ax[1].set_xlabel("iteration t")
ax[1].set_ylabel("step size a_t (Algorithm 2)")
plt.tight_layout()
plt.show()
for alg, r in runs.items():
    print(f"Algorithm {alg}: bound {float(r.bound):.3f}, iterations {int(r.iterations)}")

# %% [markdown]
# ## Global VA (§7's ten spectral sets), its SVI twin and the reference
# The reference (tempered SMC with α integrated out, then NUTS chains from its particles) samples
# the same model on the spectral set NCVMP kept.

# %%
res_va = ssgp_ppl.fit("tan_va", data="autompg", method="ncvmp", settings=settings)
kept = res_va.handoff.spectral_points  # the set NCVMP's restarts kept
res_svi = None if SMALL else ssgp_ppl.fit("tan_va_svi", data="autompg", method="svi",
                                          settings={"m": m}, spectral_points=kept)
res_ref = None if SMALL else ssgp_ppl.fit("tan_va", data="autompg", method="smc",
                                          settings=settings, spectral_points=kept)
for name, r in (("VA (NCVMP)", res_va), ("VA (SVI)", res_svi), ("reference", res_ref)):
    if r is not None:
        print(f"{name:11s}", {k: round(v, 3) for k, v in r.metrics.items()})

# %%
d = res_va.n_features
lam = {name: r.sites["inverse_lengthscales"].reshape(-1, d)
       for name, r in (("NCVMP", res_va), ("SVI", res_svi), ("reference", res_ref)) if r is not None}
fig, ax = plt.subplots(figsize=(8, 3.5))
colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
for i, (name, v) in enumerate(lam.items()):
    ax.boxplot(v, positions=np.arange(d) * 4 + i, widths=0.8, showfliers=False,
               boxprops={"color": colours[i]}, medianprops={"color": colours[i]},
               whiskerprops={"color": colours[i]}, capprops={"color": colours[i]})
    ax.plot([], [], color=colours[i], label=name)
ax.legend(fontsize=8)
ax.set_xticks(np.arange(d) * 4 + 1, res_va.feature_names, rotation=30)
ax.set_ylabel("λ (inverse lengthscale)")
ax.set_title("q(λ) by each method (|λ| is identified; the sign of λ with α_b is not)")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Adaptive neighbourhoods (§6)
# M₁ on the k Euclidean neighbours, M₂ on the k nearest under the λ-weighted distance (eq. 16).

# %%
local = {"m": m} | ({"restarts": 2, "k": 40} if SMALL else {})
# a quick run scores 6 test rows: the training rows as a table, the test rows given
res_local = ssgp_ppl.fit("tan_local", data=train, test=test.head(6) if SMALL else test,
                         method="local", settings=local)
print("local VA", {k: round(v, 3) for k, v in res_local.metrics.items()})
lf = res_local.datatree["local_fits"]
mean_abs = np.abs(lf["mu_lambda_euclidean"]).mean(("chain", "draw", "test")).values
print("mean |μ_λ| of M₁ per input:", np.round(mean_abs, 2))

# %% [markdown]
# ## Archived runs (`benchmarks/tan_paper.py`, `reports/tan/`)

# %%
archive = Path("..") / "reports" / "tan"
for path in sorted(archive.glob("*.json")):
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError:  # a run still writing its file
        continue
    if "records" not in doc:
        continue
    auto = [r for r in doc["records"] if r.get("experiment") == "autompg"]
    for r in auto[:6]:
        print(path.name, r["method"], r.get("k", ""), "nmse", round(r["nmse"], 3), "mnlp",
              round(r["mnlp"], 3))
