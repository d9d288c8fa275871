"""ELBO vs β-ELBO vs log-loss DLM vs square-loss DLM (Wei et al. 2021, §6), test NLL and MSE; prints JSON.

Regression (Gaussian likelihood, the sVBSSGP model and joint affine guide of
``svbssgp_dlm_log``): on each data set, ELBO (β = 1) and, with β selected on a validation split
over [n, n/2, …, 0.01] (Wei et al. 2021, §6.1), β-ELBO, log-DLM and square-DLM; each refitted on the whole
training split with its β and scored on the test split. Non-conjugate: ``ssgp_probit`` on
Auto-MPG (class: mpg above the training median) and ``ssgp_poisson`` on BLOG comment counts (2000
rows): ELBO, β-ELBO and log-DLM (probit: exact log Φ; Poisson: bMC with 10 draws).

Usage: python benchmarks/dlm_objectives.py [--data pendulum autompg concrete] [--steps N]
       [--skip-nonconjugate] > reports/dlm/objectives.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from ssgp_ppl.data.datasets import load
from ssgp_ppl.entry import load_entry
from ssgp_ppl.inference.selection import select_beta
from ssgp_ppl.pipeline import fit

KEEP = ("nll", "nmse", "rmse", "mnlp", "coverage_90", "error_rate", "mre")


def run(entry, data, label, steps, select: bool, seed: int = 0) -> dict:
    t0 = time.perf_counter()
    rec = {"dataset": data.name, "objective": label, "n_train": data.n_train, "n_test": data.n_test}
    if select:
        sel = select_beta(entry, data, seed=seed, steps=steps)
        rec.update(beta=sel.beta, criterion=sel.criterion, grid=sel.grid, validation=sel.scores,
                   selection_seconds=sel.seconds)
        entry = entry.with_overrides([f"inference.svi.beta={sel.beta!r}"])
    else:
        rec["beta"] = entry.settings("svi")["beta"]
    res = fit(entry, data, seed=seed, steps=steps, progress=False)
    rec.update({k: float(v) for k, v in res.metrics.items() if k in KEEP})
    rec.update(steps=res.info.steps, seconds=time.perf_counter() - t0)
    print(json.dumps({k: v for k, v in rec.items() if k not in ("grid", "validation")}),
          file=sys.stderr, flush=True)
    return rec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=["pendulum", "autompg", "concrete"])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--particles", type=int, default=4, help="θ draws per step (num_particles)")
    p.add_argument("--skip-nonconjugate", action="store_true")
    args = p.parse_args()
    base = load_entry("svbssgp_dlm_log")
    out = []
    for name in args.data:
        data = load(name)
        for label, obj, select in (("elbo", "beta_elbo", False), ("beta_elbo", "beta_elbo", True),
                                   ("dlm_log", "dlm_log", True), ("dlm_square", "dlm_square", True)):
            entry = base.with_overrides([f"objective={obj}", "beta=1.0",
                                         f"num_particles={args.particles}"])
            out.append(run(entry, data, label, args.steps, select))
    if not args.skip_nonconjugate:
        problems = [("ssgp_probit", load("autompg", target_kind="binary"), "dlm_log", []),
                    ("ssgp_poisson", load("blog", subsample=2000, target_kind="count"), "dlm_log",
                     ["gradient=bmc", "mc_samples=10"])]
        for name, data, dlm, extra in problems:
            for label, obj, select in (("elbo", "beta_elbo", False), ("beta_elbo", "beta_elbo", True),
                                       (dlm, dlm, True)):
                entry = load_entry(name).with_overrides([f"objective={obj}", "beta=1.0",
                                                         f"num_particles={args.particles}"] + extra)
                out.append(run(entry, data, label, args.steps, select) | {"model": name})
    print(json.dumps({"machine": f"{platform.machine()} {os.cpu_count()} cpu",
                      "python": platform.python_version(), "steps": args.steps,
                      "particles": args.particles, "records": out},
                     indent=1))


if __name__ == "__main__":
    main()
