"""uPS vs bMC (Wei et al. 2021, §3-4, Fig. 1 g-h): gradient bias and time per gradient; prints JSON.

The Poisson count model of ``ssgp_poisson`` on BLOG comment counts (2000 rows, the training
split; for the bias, the rows with at most ``--max-count`` comments, 30 by default):
q(fᵢ | θ) = N(μᵢ, vᵢ) for one fixed θ draw, at the guide's initialisation and after
``--trained-steps`` ELBO steps. The exact gradient of Σᵢ log E_q p(yᵢ | fᵢ) in (μ, v) is the
Laplace-centred Gauss-Hermite quadrature (64 nodes); each estimator is repeated ``--reps`` times
and its relative bias is ‖mean gradient − exact‖ / ‖exact‖ (with the Monte Carlo floor
‖standard error‖ / ‖exact‖); time per gradient is the median of 5 jitted calls.

Then log-DLM (β = 1) is trained with each estimator (quadrature as the exact reference; bMC with
L = 1, 10, 100; uPS with L = 10 for fewer steps) and scored on the test split (NLL, MRE),
with the time per step.

Usage: python benchmarks/ups_vs_bmc.py [--reps 200] > reports/dlm/ups_vs_bmc.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from ssgp_ppl.data.datasets import load
from ssgp_ppl.entry import load_entry
from ssgp_ppl.inference import objectives
from ssgp_ppl.pipeline import fit


def moments(entry, data, params):
    spec = entry.spec(data.n_features)
    model = entry.model(spec)
    guide = entry.guide(spec, model)
    x = jnp.asarray(data.x_train)
    p = objectives.particle(jax.random.PRNGKey(11), params, model, guide, x, {})
    return p.mu, p.var


def estimates(name, lik, y, mu, var, samples, reps):
    fns = {"bmc": objectives.bmc_log_expected, "ups": objectives.ups_log_expected}

    def grad(key):
        return jax.grad(lambda a: jnp.sum(fns[name](key, lik, y, a[0], a[1], 1.0, samples)))(
            jnp.stack([mu, var]))

    g = jax.jit(grad)
    keys = jax.random.split(jax.random.PRNGKey(0), reps)
    out = np.stack([np.asarray(g(k)) for k in keys])
    times = []
    for k in keys[:5]:
        t = time.perf_counter()
        jax.block_until_ready(g(k))
        times.append(time.perf_counter() - t)
    extra = {}
    if name == "ups":
        _, rounds, missed = jax.jit(lambda k: objectives.product_samples(k, lik, y, mu, var, 1.0, samples))(
            keys[0])
        extra = {"rounds": int(rounds), "not_accepted": float(missed)}
    return out.reshape(reps, -1), float(np.median(times)), extra


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--trained-steps", type=int, default=1000)
    p.add_argument("--learn-steps", type=int, default=1500, help="log-DLM training run per estimator")
    p.add_argument("--ups-steps", type=int, default=300, help="uPS training steps (slow sampler)")
    p.add_argument("--max-count", type=float, default=30,
                   help="bias part: rows with counts up to this (BLOG's tail reaches 1062; the "
                   "paper's abalone counts are 1-29)")
    args = p.parse_args()
    data = load("blog", subsample=2000, target_kind="count")
    entry = load_entry("ssgp_poisson")
    y = jnp.asarray(data.y_train)
    lik = entry.spec(1).lik
    init = fit(entry, data, steps=1, progress=False).params
    trained = fit(entry, data, steps=args.trained_steps, progress=False).params
    records = []
    for stage, params in (("initialisation", init), (f"after {args.trained_steps} ELBO steps", trained)):
        mu, var = moments(entry, data, {k: jnp.asarray(v) for k, v in params.items()})
        keep = np.asarray(data.y_train) <= args.max_count  # abalone-like counts (Wei et al. 2021, Fig. 1)
        mu, var, y = mu[keep], var[keep], jnp.asarray(data.y_train[keep])
        exact = np.asarray(jax.grad(lambda a, y=y: jnp.sum(
            lik.log_expected_prob(y, a[0], a[1], 1.0, nodes=64)))(jnp.stack([mu, var]))).ravel()
        norm = np.linalg.norm(exact)
        for name, sizes in (("bmc", (1, 10, 100)), ("ups", (1, 10))):
            for samples in sizes:
                g, sec, extra = estimates(name, lik, y, mu, var, samples, args.reps)
                rec = {"stage": stage, "estimator": name, "samples": samples,
                       "relative_bias": float(np.linalg.norm(g.mean(0) - exact) / norm),
                       "relative_se": float(np.linalg.norm(g.std(0) / np.sqrt(len(g))) / norm),
                       "relative_rmse": float(np.sqrt(np.mean(np.sum((g - exact) ** 2, 1))) / norm),
                       "seconds_per_gradient": sec, "rows": int(y.shape[0])} | extra
                records.append(rec)
                print(json.dumps(rec), file=sys.stderr, flush=True)
    y = jnp.asarray(data.y_train)
    learning = []
    for gradient, samples, steps in (("quadrature", 32, args.learn_steps),
                                     ("bmc", 1, args.learn_steps), ("bmc", 10, args.learn_steps),
                                     ("bmc", 100, args.learn_steps), ("ups", 10, args.ups_steps)):
        e = entry.with_overrides(["objective=dlm_log", "beta=1.0", f"gradient={gradient}",
                                  f"mc_samples={samples}", "svi.min_steps=0", "chunk=50"])
        t = time.perf_counter()
        res = fit(e, data, steps=steps, progress=False)
        learning.append({"gradient": gradient, "samples": samples, "steps": res.info.steps,
                         "nll": res.metrics["nll"], "mre": res.metrics["mre"],
                         "seconds_per_step": res.info.fit_seconds / res.info.steps,
                         "wall_seconds": time.perf_counter() - t})
        print(json.dumps(learning[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"machine": f"{platform.machine()} {os.cpu_count()} cpu",
                      "python": platform.python_version(), "reps": args.reps, "records": records,
                      "learning": learning}, indent=1))


if __name__ == "__main__":
    main()
