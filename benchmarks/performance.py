"""Performance and scale: each subcommand prints one JSON document (--out also writes it).

  python benchmarks/performance.py nuts      # pendulum, ssgp_svi at m = 20, 4 chains × (1000 + 1000)
  python benchmarks/performance.py ncvmp     # NCVMP (Algorithm 2, 10 restarts), n = 400, m = 20
  python benchmarks/performance.py local     # adaptive neighbourhoods, 100 test points, k = 60
  python benchmarks/performance.py airline   # `ssgp-ppl fit svbssgp --data airline`, p = 2000: wall, peak RSS
  python benchmarks/performance.py devices   # svbssgp SVI step time on 1, 2, 4 JAX devices

Times "after compilation" are the median of warm repeats of the same call; the first call (JIT
compilation included) is reported beside them. The process has 4 host devices (XLA's
--xla_force_host_platform_device_count=4, as the CLI sets) so that 4 NUTS chains run in parallel;
`devices` compares sharding the SVI step over 1, 2 and 4 of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ssgp_ppl/__init__.py, before numpy

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from ssgp_ppl import pipeline  # noqa: E402
from ssgp_ppl.data import datasets  # noqa: E402
from ssgp_ppl.entry import load_entry  # noqa: E402
from ssgp_ppl.inference import ncvmp  # noqa: E402
from ssgp_ppl.inference.methods.ncvmp import algorithm_settings, spectral_candidates  # noqa: E402
from ssgp_ppl.inference.neighbourhoods import local_predict  # noqa: E402
from ssgp_ppl.runtime.io import print_json  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
            "python": platform.python_version()}


def _timed(fn, repeats: int):
    """(first call seconds, median of ``repeats`` warm calls, result)."""
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t
    warm = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        warm.append(time.perf_counter() - t)
    return first, float(np.median(warm)), warm, out


def nuts(a) -> dict:
    """ssgp_svi's NUTS reference on pendulum at m = 20; ESS per second on the invariant quantities
    (σ_n, σ_s, frequency spread, kernel at lags, f at test inputs: the symmetries of the posterior
    leave them unchanged, so their ESS is meaningful where the sites' is not)."""
    from arviz_stats import ess, rhat

    base = load_entry(a.model)
    data = datasets.load("pendulum", x_scaling=base.config["data"]["x_scaling"])
    entry = base.with_overrides(
        [f"m={a.m}", f"nuts.warmup={a.warmup}", f"nuts.samples={a.samples}", f"nuts.chains={a.chains}"])
    t = time.perf_counter()
    res = pipeline.fit(entry, data, "nuts", seed=a.seed, progress=False)
    wall = time.perf_counter() - t
    inv = res.datatree["invariants"].to_dataset()
    stats = res.datatree["sample_stats"]
    steps = np.asarray(stats["n_steps"]) if "n_steps" in stats else None
    out = {"experiment": "nuts", "model": a.model, "m": a.m, "chains": a.chains,
           "warmup": a.warmup, "samples": a.samples, "chain_method":
           "parallel" if jax.local_device_count() >= a.chains else "vectorized",
           "wall_seconds": wall, "nuts_seconds": res.info.fit_seconds,
           "divergences": res.info.method.divergences, "quantities": {}}
    if steps is not None:  # leapfrog steps (gradient evaluations) per draw, post-warm-up draws
        out["leapfrog_per_draw_mean"] = float(steps.mean())
        out["leapfrog_per_draw_max"] = int(steps.max())
        out["share_at_max_tree_depth"] = float(np.mean(steps >= 1023))
    for name in inv.data_vars:
        bulk = np.asarray(ess(inv[name], method="bulk")).ravel()
        tail = np.asarray(ess(inv[name], method="tail")).ravel()
        rh = np.asarray(rhat(inv[name], method="rank")).ravel()
        out["quantities"][name] = {
            "components": int(bulk.size), "ess_bulk_min": float(np.nanmin(bulk)),
            "ess_bulk_median": float(np.nanmedian(bulk)), "ess_tail_min": float(np.nanmin(tail)),
            "ess_bulk_min_per_s": float(np.nanmin(bulk) / res.info.fit_seconds),
            "rhat_max": float(np.nanmax(rh))}
    out["metrics"] = {k: res.metrics[k] for k in ("nmse", "mnlp", "coverage_90")}
    return out


def _kin40k_400():
    """Table 1's setting of Tan et al. 2016 (n ≈ 400, m = 20); kin40k rows stand in for its data."""
    return datasets.load("kin40k", subsample=440, x_scaling="minmax")


def ncvmp_bench(a) -> dict:
    """NCVMP (the catalog's tan_va settings: Algorithm 2 with its restarts) on 400 rows, m = 20."""
    data = _kin40k_400()
    entry = load_entry("tan_va").with_overrides(["m=20"])
    spec = entry.spec(data.n_features)
    prior, settings = ncvmp.tan_prior(spec), algorithm_settings(entry)
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    sets = spectral_candidates(entry, spec, settings.restarts)
    first, warm, all_warm, res = _timed(lambda: ncvmp.fit_ncvmp(x, y - y.mean(), sets, prior, settings),
                                        a.repeats)
    return {"experiment": "ncvmp", "n": data.n_train, "m": spec.m, "d": spec.d,
            "algorithm": settings.algorithm, "restarts": settings.restarts,
            "iterations": int(res.iterations), "first_call_seconds": first, "seconds": warm,
            "repeats": all_warm, "target_seconds": 0.5}


def local_bench(a) -> dict:
    """Adaptive-neighbourhood prediction (Tan et al. 2016, §6; tan_local's settings) of 100 test points
    with k = 60 from 1000 training rows: two local NCVMP fits per point (Euclidean, then eq. 16)."""
    data = datasets.load("kin40k", subsample=1200, x_scaling="minmax")  # 1098 / 102 rows
    entry = load_entry("tan_local").with_overrides(["m=20", f"k={a.k}"])
    spec = entry.spec(data.n_features)
    prior, settings = ncvmp.tan_prior(spec), algorithm_settings(entry)
    lc = entry.settings("local")
    x_test = data.x_test[: a.points]
    x_train, y_train = data.x_train[:1000], data.y_train[:1000]

    def run():
        return local_predict(x_train, y_train, x_test, prior, m=spec.m, k=lc["k"],
                             settings=settings, key=jax.random.PRNGKey(0), adapt=lc["adapt"],
                             batch=lc["batch"], progress=False).mean

    first, warm, all_warm, _ = _timed(run, a.repeats)
    return {"experiment": "local", "n_train": len(x_train), "points": len(x_test), "k": lc["k"],
            "m": spec.m, "restarts": settings.restarts, "batch": lc["batch"],
            "first_call_seconds": first, "seconds": warm, "repeats": all_warm, "target_seconds": 10.0}


def airline(a) -> dict:
    """The whole CLI run on AIRLINE (2,055,733 rows, 5% test): k-means (p = 2000), SVI to the
    convergence stop, γ = 0 local predictions of the 102,787 test rows; wall and peak RSS."""
    out_dir = Path(a.run_dir or tempfile.mkdtemp(prefix="airline-"))
    cmd = [sys.executable, "-m", "ssgp_ppl.cli", "fit", "svbssgp", "--data", "airline",
           "--set", f"partitions.count={a.partitions}", "--no-progress", "--out", str(out_dir),
           *sum((["--set", s] for s in a.sets), [])]
    log(" ".join(cmd))
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: kilobytes
    m = json.loads((out_dir / "metrics.json").read_text())
    keep = ("n_train", "n_test", "rmse", "mnlp", "coverage_90", "steps", "converged", "stop",
            "improvement_per_1k", "improvement_se", "fit_seconds",
            "predict_seconds", "partitions")
    return {"experiment": "airline", "command": " ".join(cmd[1:]), "wall_seconds": wall,
            "peak_rss_gb": peak_kb / 2**20, "metrics": {k: m[k] for k in keep if k in m},
            "targets": {"wall_seconds": 600, "peak_rss_gb": 2.0}}


def devices(a) -> dict:
    """Steady-state svbssgp step time (AIRLINE rows, a = 10 blocks of 100 rows = 1000 rows a step)
    with the step's rows split over 1, 2 and 4 JAX devices (ssgp_ppl.runtime.sharding)."""
    from ssgp_ppl.inference.partitions import kmeans_partitions
    from ssgp_ppl.inference.runners import Batching, Schedule, run_svi

    data = datasets.load("airline", subsample=a.rows)
    entry = load_entry("svbssgp").with_overrides(["m=20"])
    spec = entry.spec(data.n_features)
    model = entry.model(spec)
    guide = entry.guide(spec, model)
    parts = kmeans_partitions(data.x_train, data.n_train // 100, seed=0, max_size_factor=1.0, pad_to=100)
    rows = []
    for dev in [d for d in (1, 2, 4) if d <= len(jax.devices())]:
        runs = []
        for rep in range(a.repeats):
            res = run_svi(model, guide, data.x_train, data.y_train,
                          Schedule(a.steps, chunk=a.chunk, tol=0.0, min_steps=10**9),
                          batching=Batching(partitions=parts, per_step=10), seed=rep,
                          progress=False, devices=dev)
            runs.append((res.seconds - res.first_chunk[1]) / (res.steps - res.first_chunk[0]))
        rows.append({"devices": dev, "ms_per_step": 1e3 * float(np.median(runs)),
                     "repeats_ms": [1e3 * r for r in runs], "first_chunk_seconds": res.first_chunk[1]})
        log(json.dumps(rows[-1]))
    return {"experiment": "devices", "rows": data.n_train, "partitions": parts.count,
            "block": int(parts.blocks.shape[1]), "per_step": 10, "results": rows}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="experiment", required=True)
    q = sub.add_parser("nuts")
    q.add_argument("--model", default="ssgp_svi", help="a catalog entry with NUTS (ssgp_svi, tan_va_svi)")
    q.add_argument("--m", type=int, default=20)
    q.add_argument("--chains", type=int, default=4)
    q.add_argument("--warmup", type=int, default=1000)
    q.add_argument("--samples", type=int, default=1000)
    q.add_argument("--seed", type=int, default=0)
    for name in ("ncvmp", "local"):
        q = sub.add_parser(name)
        q.add_argument("--repeats", type=int, default=5 if name == "ncvmp" else 2)
        if name == "local":
            q.add_argument("--points", type=int, default=100)
            q.add_argument("--k", type=int, default=60)
    q = sub.add_parser("airline")
    q.add_argument("--partitions", type=int, default=2000)
    q.add_argument("--set", dest="sets", action="append", default=[])
    q.add_argument("--run-dir")
    q = sub.add_parser("devices")
    q.add_argument("--rows", type=int, default=100_000)
    q.add_argument("--steps", type=int, default=2500)
    q.add_argument("--chunk", type=int, default=500)
    q.add_argument("--repeats", type=int, default=3)
    for q in sub.choices.values():
        q.add_argument("--out")
    a = p.parse_args()
    fn = {"nuts": nuts, "ncvmp": ncvmp_bench, "local": local_bench, "airline": airline,
          "devices": devices}[a.experiment]
    result = {"machine": machine(), "command": "python benchmarks/performance.py " + " ".join(sys.argv[1:]),
              **fn(a)}
    print_json(result, a.out)


if __name__ == "__main__":
    main()
