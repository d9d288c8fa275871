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
# # sVBSSGP vs VSSGP: the γ-family of test conditionals (Hoang et al. 2017, Prop. 1)
#
# sVBSSGP fits a joint affine guide α = vec(θ, s) = Mz + b with gradients from k-means partitions
# (Hoang et al. 2017, §3.1, §4.1); its predictions use the test point's local data through γ:
# μ = γ φᵀs + (1−γ) φᵀΓ_k⁻¹Φ_kᵀy_k. VSSGP's mean-field guide predicts with γ = 1.
# One trained q(α) is scored for every γ (γ only enters the test conditional): the posterior's
# predictive rule is swapped for the same rule with another γ (`Posterior.replace`).
#
# `SSGP_PPL_SMALL=1` (the test suite) uses a 3000-row subsample of kin40k and few steps.

# %%
import dataclasses
import json
import os
from pathlib import Path

import matplotlib.pyplot as plt

import ssgp_ppl
from ssgp_ppl.data.datasets import frames
from ssgp_ppl.diagnostics.metrics import rmse

SMALL = os.environ.get("SSGP_PPL_SMALL") == "1"
subsample = 3000 if SMALL else None
p = 15 if SMALL else 200
# both entries build the same k-means partitions of the training rows (p of them, seed 0)
settings = {"partitions.count": p} | ({"svi.steps": 300, "svi.min_steps": 0} if SMALL else {})
train, test = frames("kin40k", subsample=subsample)  # the rows fit(data="kin40k") uses

# %%
sv = ssgp_ppl.fit("svbssgp", data="kin40k", subsample=subsample, settings=settings)
vs = ssgp_ppl.fit("vssgp", data="kin40k", subsample=subsample, settings=settings)
print(len(train), len(test), sv.info.partitions)
print("svbssgp", {k: round(v, 3) for k, v in sv.metrics.items()})
print("vssgp  ", {k: round(v, 3) for k, v in vs.metrics.items()})

# %%
x_test, y_test = test.iloc[:, :-1], test.iloc[:, -1].to_numpy()


def with_gamma(post, gamma: float):
    """The same q(α) predicting with the γ-conditional of another γ."""
    return post.replace(rule=dataclasses.replace(post.rule, gamma=gamma))


gammas = [-0.3, 0.0, 0.1, 0.2, 0.3, 0.6, 1.0]
scores = [rmse(y_test, with_gamma(sv, g).predict(x_test).mean) for g in gammas]
for g, r in zip(gammas, scores, strict=True):
    print(f"gamma={g:+.1f}  rmse={r:.4f}")
plt.plot(gammas, scores, "o-", label="sVBSSGP, local γ-conditional")
plt.axhline(vs.metrics["rmse"], color="k", ls="--", label="VSSGP (γ = 1, mean-field)")
plt.xlabel("γ")
plt.ylabel("test RMSE")
plt.legend()
plt.show()

# %% [markdown]
# ## Benchmark curves (if `benchmarks/svbssgp_paper.py` has written them)

# %%
for path in sorted(Path("../reports/svbssgp").glob("*.json")):
    exp = json.loads(path.read_text())
    if "runs" not in exp:  # n-scan, baselines, end-to-end records: no curves to plot
        continue
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for run in exp["runs"]:
        labels = sorted({r["label"] for r in run["curve"]})
        for lab in labels:
            pts = [(r["step"], r["rmse"]) for r in run["curve"] if r["label"] == lab
                   and not r.get("final")]
            ax.plot(*zip(*pts, strict=True), "o-", ms=3, label=lab)
    ax.set_xscale("log")
    ax.set_xlabel("SVI step")
    ax.set_ylabel("test RMSE")
    ax.set_title(exp["experiment"])
    ax.legend(fontsize=7)
