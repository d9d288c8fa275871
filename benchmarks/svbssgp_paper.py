"""sVBSSGP experiments of Hoang et al. 2017, §5 on this machine; prints JSON (and writes it with --out).

  python benchmarks/svbssgp_paper.py airline  # 2.06M rows, p = 2000, 2m = 40: sVBSSGP γ=0 r=5, VSSGP, SSGP
  python benchmarks/svbssgp_paper.py kin40k   # AIMPEAK stand-in, p = 200, 2m = 40: γ sweep, VSSGP, SSGP
  python benchmarks/svbssgp_paper.py blog     # 60 inputs, 60k rows, p = 200, 2m = 10: r ∈ {1, 5, 20}
  python benchmarks/svbssgp_paper.py nscan    # step time at n ∈ {10k, 100k, 1M, 2.06M}, ~1000-row blocks

RMSE-vs-iterations curves come from one training run per model: γ enters only the test
conditional (Prop. 1) and r only the predictive average (§4.2), so every (γ, r) is scored from the
same q_t(α) at each checkpoint. Checkpoint RMSEs use a fixed random subset of the test split
(--eval-rows); the final row of each curve uses the whole test split. "iteration" = one SVI step
(a partitions × b draws of z); epochs = steps · a / p. SSGP's marginal likelihood does not
factorise, so on AIRLINE it is fitted by type-II ML on a random subset of the training rows
(--ssgp-rows) and predicts with the exact SSGP predictive from that subset.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ssgp_ppl/__init__.py, before numpy loads

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import Trace_ELBO  # noqa: E402

from ssgp_ppl.data.datasets import load  # noqa: E402
from ssgp_ppl.diagnostics.metrics import mnlp, rmse  # noqa: E402
from ssgp_ppl.entry import load_entry  # noqa: E402
from ssgp_ppl.inference.partitions import kmeans_partitions  # noqa: E402
from ssgp_ppl.inference.runners import Batching, Schedule, guide_draws, run_svi, site_values  # noqa: E402
from ssgp_ppl.model.guides import EmptyGuide  # noqa: E402
from ssgp_ppl.model.predictive import predict_sites  # noqa: E402
from ssgp_ppl.runtime.io import print_json  # noqa: E402

EXTRA_SETS: list[str] = []  # --set overrides applied to the svbssgp and vssgp runs


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def curve(name, data, overrides, *, steps, checkpoints, evals, eval_rows, seed=0, partitions=None,
          train_rows=None):
    """Train ``name`` once; score every (label, rule, gamma, r) of ``evals`` at ``checkpoints``."""
    entry = load_entry(name).with_overrides(overrides + (EXTRA_SETS if name != "ssgp" else []))
    train = data
    if train_rows is not None and train_rows < data.n_train:
        rows = np.random.default_rng(seed).choice(data.n_train, train_rows, replace=False)
        train = data._replace(x_train=data.x_train[rows], y_train=data.y_train[rows])
    spec = entry.spec(data.n_features)
    model = entry.model(spec)
    method = entry.methods[0]
    cfg = entry.settings(method)
    pcfg = entry.config["partitions"]
    t0 = time.perf_counter()
    if partitions is None and entry.uses_partitions:
        partitions = entry.partitions(train.x_train, seed=seed)
    partition_seconds = time.perf_counter() - t0
    guide = EmptyGuide(spec) if method == "ml" else entry.guide(spec, model)
    sub = np.random.default_rng(seed + 7).choice(data.n_test, min(eval_rows, data.n_test), False)
    y_all = np.asarray(data.y_scaler.inverse(data.y_test))
    r_max = max(e[3] for e in evals)
    rows, spent = [], [0.0]

    def score(step, params, test_rows):
        t = time.perf_counter()
        x, y = jnp.asarray(train.x_train), jnp.asarray(train.y_train)
        draws = {} if isinstance(guide, EmptyGuide) else guide_draws(
            guide, params, x, y, num_samples=r_max, seed=seed + step)
        sites = site_values(model, params, draws, x[:1])
        for label, rule, gamma, r in evals:
            s = {k: v[:r] for k, v in sites.items()}
            pred = predict_sites(s, train, rule, gamma=gamma, partitions=partitions,
                                 x_test=data.x_test[test_rows])
            mean, var = pred.mean, pred.var
            yt = y_all[test_rows]
            rows.append({"model": name, "label": label, "step": step,
                         "epochs": step * max(pcfg["per_step"], 1) / (partitions.count if
                                                                      partitions else 1),
                         "test_rows": int(len(test_rows)), "rmse": rmse(yt, mean),
                         "mnlp": mnlp(yt, mean, var)})
            log(json.dumps(rows[-1]))
        spent[0] += time.perf_counter() - t

    def callback(step, params):
        if step in checkpoints:
            score(step, params, sub)

    res = run_svi(model, guide, train.x_train, train.y_train,
                  Schedule(steps, lr=cfg["lr"], lr_halflife=cfg.get("lr_halflife", 0.0),
                           chunk=min(checkpoints), tol=0.0, min_steps=steps),
                  batching=Batching(None, partitions if pcfg["per_step"] else None,
                                    max(pcfg["per_step"], 1)),
                  loss=Trace_ELBO(num_particles=cfg.get("num_particles", 1)), seed=seed,
                  progress=False, callback=callback)
    train_seconds = res.seconds - spent[0]  # SVI time without the checkpoint scoring
    first_steps, first_seconds = res.first_chunk  # the first chunk includes compilation
    ms_per_step = 1e3 * (train_seconds - first_seconds) / max(res.steps - first_steps, 1)
    score(res.steps, res.params, np.arange(data.n_test))
    rows[-len(evals):] = [r | {"final": True} for r in rows[-len(evals):]]
    return {"model": name, "overrides": overrides, "steps": res.steps,
            "partitions": None if partitions is None else partitions.count,
            "partition_seconds": partition_seconds,
            "train_seconds": train_seconds, "ms_per_step": ms_per_step,
            "n_train": train.n_train, "curve": rows}, partitions


def mean_predictor(data) -> dict:
    """RMSE and MNLP of predicting the training mean and variance: the floor to beat."""
    y = np.asarray(data.y_scaler.inverse(data.y_test))
    yt = np.asarray(data.y_scaler.inverse(data.y_train))
    mean, var = np.full_like(y, yt.mean()), np.full_like(y, yt.var())
    return {"rmse": rmse(y, mean), "mnlp": mnlp(y, mean, var)}


def checkpoints_for(steps):
    pts = {s for s in (50, 100, 200, 500, 1000, 2000, 3000, 5000, 8000, 12000) if s <= steps}
    return sorted(pts | {steps})


def exp_airline(a):
    t = time.perf_counter()
    data = load("airline", split=a.split, subsample=a.subsample, test_fraction=0.05)
    load_s = time.perf_counter() - t
    cps = checkpoints_for(a.steps)
    out = {"experiment": "airline", "n_train": data.n_train, "n_test": data.n_test,
           "load_seconds": load_s, "mean_predictor": mean_predictor(data)}
    common = ["m=20", "partitions.count=2000"]
    sv, parts = curve("svbssgp", data, common + ["samples=5"], steps=a.steps, checkpoints=cps,
                      evals=[("svbssgp γ=0 r=5", "local", 0.0, 5)], eval_rows=a.eval_rows)
    vs, _ = curve("vssgp", data, common + ["samples=5"], steps=a.steps, checkpoints=cps,
                  evals=[("vssgp γ=1 r=5", "degenerate", 1.0, 5)], eval_rows=a.eval_rows,
                  partitions=parts)
    ss, _ = curve("ssgp", data, ["m=20"], steps=a.ssgp_steps,
                  checkpoints=checkpoints_for(a.ssgp_steps),
                  evals=[(f"ssgp ({a.ssgp_rows} rows)", "marginal", 0.0, 1)],
                  eval_rows=a.eval_rows, train_rows=a.ssgp_rows)
    out["runs"] = [sv, vs, ss]
    return out


def exp_kin40k(a):
    data = load("kin40k", split=a.split)
    cps = checkpoints_for(a.steps)
    common = ["m=20", "partitions.count=200"]
    gammas = [0.0, 0.1, 0.2, 0.3, 1.0]
    sv, parts = curve("svbssgp", data, common + ["samples=20"], steps=a.steps, checkpoints=cps,
                      evals=[(f"svbssgp γ={g} r=20", "local", g, 20) for g in gammas],
                      eval_rows=a.eval_rows)
    vs, _ = curve("vssgp", data, common + ["samples=20"], steps=a.steps, checkpoints=cps,
                  evals=[("vssgp γ=1 r=20", "degenerate", 1.0, 20)], eval_rows=a.eval_rows,
                  partitions=parts)
    ss, _ = curve("ssgp", data, ["m=20"], steps=min(a.steps, 3000),
                  checkpoints=checkpoints_for(min(a.steps, 3000)),
                  evals=[("ssgp", "marginal", 0.0, 1)], eval_rows=a.eval_rows)
    return {"experiment": "kin40k", "n_train": data.n_train, "n_test": data.n_test,
            "mean_predictor": mean_predictor(data), "runs": [sv, vs, ss]}


def exp_blog(a):
    data = load("blog", split=a.split)
    cps = checkpoints_for(a.steps)
    sv, _ = curve("svbssgp", data, ["m=5", "partitions.count=200"],
                  steps=a.steps, checkpoints=cps,
                  evals=[(f"svbssgp γ=0 r={r}", "local", 0.0, r) for r in (1, 5, 20)],
                  eval_rows=a.eval_rows)
    return {"experiment": "blog", "n_train": data.n_train, "n_test": data.n_test,
            "mean_predictor": mean_predictor(data), "runs": [sv]}


def exp_baselines(a):
    """Mean-predictor RMSE/MNLP on each experiment's test split (for runs archived earlier)."""
    return {"experiment": "baselines", "rows": {
        "airline": mean_predictor(load("airline", split=a.split, test_fraction=0.05)),
        "kin40k": mean_predictor(load("kin40k", split=a.split)),
        "blog": mean_predictor(load("blog", split=a.split))}}


def exp_nscan(a):
    """Steady-state SVI step time of svbssgp vs n: blocks capped at ~1000 rows (k-means clusters
    above that are cut) and padded to 1024, one block per step, so the per-step work is fixed."""
    entry = load_entry("svbssgp").with_overrides(["m=20", "per_step=1"])
    out = []
    full = load("airline", split=a.split, test_fraction=0.05)
    x_all = np.concatenate([full.x_train, full.x_test])  # every one of the 2,055,733 rows
    y_all = np.concatenate([full.y_train, full.y_test])
    for n in a.sizes:
        rows = np.random.default_rng(0).choice(len(x_all), min(n, len(x_all)), replace=False)
        x, y = x_all[rows], y_all[rows]
        t = time.perf_counter()
        # blocks cut at n/p ≈ 1000 rows and all padded to 1024: the same work per step at every n
        parts = kmeans_partitions(x, max(1, n // 1000), seed=0, max_size_factor=1.0, pad_to=1024)
        kmeans_s = time.perf_counter() - t
        spec = entry.spec(x.shape[1])
        model = entry.model(spec)
        guide = entry.guide(spec, model)
        runs = []
        for rep in range(a.repeats):  # steady state: total minus the first chunk (JIT included)
            res = run_svi(model, guide, x, y,
                          Schedule(a.short + a.long, chunk=a.short, tol=0.0, min_steps=10**9),
                          batching=Batching(partitions=parts, per_step=1), seed=rep,
                          progress=False, devices=1)
            runs.append((res.seconds - res.first_chunk[1]) / (res.steps - res.first_chunk[0]))
        ms = 1e3 * float(np.median(runs))
        out.append({"n": len(x), "partitions": parts.count, "block_size": int(parts.blocks.shape[1]),
                    "kmeans_seconds": kmeans_s, "ms_per_step": ms})
        log(json.dumps(out[-1]))
    return {"experiment": "nscan", "rows": out}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("experiment", choices=["airline", "kin40k", "blog", "nscan", "baselines"])
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--split", type=int, default=0)
    p.add_argument("--subsample", type=int, help="AIRLINE rows (default all 2,055,733)")
    p.add_argument("--eval-rows", type=int, default=5000)
    p.add_argument("--ssgp-rows", type=int, default=50000)
    p.add_argument("--ssgp-steps", type=int, default=1500, help="AIRLINE SSGP type-II ML steps")
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, 2_055_733])
    p.add_argument("--short", type=int, default=250)
    p.add_argument("--long", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="catalog override for the svbssgp/vssgp runs, e.g. --set per_step=1")
    a = p.parse_args()
    EXTRA_SETS.extend(a.sets)
    t = time.perf_counter()
    res = {"airline": exp_airline, "kin40k": exp_kin40k, "blog": exp_blog,
           "nscan": exp_nscan, "baselines": exp_baselines}[a.experiment](a)
    res.update(machine=f"{platform.machine()}, {os.cpu_count()} CPUs, {jax.default_backend()}",
               jax=jax.__version__, wall_seconds=time.perf_counter() - t, args=vars(a))
    print_json(res, a.out)


if __name__ == "__main__":
    main()
