"""Bias of the tempered SMC log evidence: on the correlated 11-d Gaussian (exact log Z) per
configuration (mass: diagonal, dense or the exact tempered covariance; HMC moves; target ESS;
float width; adaptive vs a pilot run's temperatures, step sizes and masses), and on the
Tan et al. 2016 model (``tan_va``) on pendulum against an importance sampling value; writes JSON.

Each Gaussian record: mean, se and sd of log Ẑ − log Z over ``--seeds`` independent runs (one
vectorised call) and its seconds. Each pendulum record: the runs' log Ẑ, their mean, se and sd
of log Ẑ − (the importance sampling log Z), and the importance sampling value, its se and k̂.
Records are merged into the file by (target, name).

Usage: python benchmarks/smc_evidence.py [gaussian] [pendulum] [pendulum-is] [--seeds 20]
       [--out reports/smc_evidence/smc_evidence.json] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

OUT = Path("reports/smc_evidence/smc_evidence.json")
BASE = {"mass": "diag", "particles": 256, "mcmc_steps": 20, "target_ess": 0.5, "x64": True,
        "pilot": False}
GAUSSIAN = {  # name: the settings that differ from BASE
    "diag": {},
    "dense": {"mass": "dense"},
    "diag_pilot": {"pilot": True},
    "dense_pilot": {"mass": "dense", "pilot": True},
    "dense_exact": {"mass": "exact"},
    "dense_exact_pilot": {"mass": "exact", "pilot": True},
    "diag_steps5": {"mcmc_steps": 5},
    "dense_steps5": {"mass": "dense", "mcmc_steps": 5},
    "diag_steps50": {"mcmc_steps": 50},
    "dense_steps50": {"mass": "dense", "mcmc_steps": 50},
    "dense_ess0.8": {"mass": "dense", "target_ess": 0.8},
    "dense_ess0.3": {"mass": "dense", "target_ess": 0.3},
    "diag_f32": {"x64": False},
    "dense_f32": {"mass": "dense", "x64": False},
    "dense_p1024": {"mass": "dense", "particles": 1024},
    "diag_p1024": {"particles": 1024},
    "dense_ess0.8_pilot": {"mass": "dense", "target_ess": 0.8, "pilot": True},
    "dense_steps5_pilot": {"mass": "dense", "mcmc_steps": 5, "pilot": True},
    "dense_ess0.8_steps10": {"mass": "dense", "target_ess": 0.8, "mcmc_steps": 10},
    "dense_ess0.8_steps10_pilot": {"mass": "dense", "target_ess": 0.8, "mcmc_steps": 10,
                                   "pilot": True},
}
PENDULUM = {"diag": {"mass": "diag", "pilot": False}, "dense": {"mass": "dense", "pilot": False},
            "dense_pilot": {"mass": "dense", "pilot": True},
            "diag_pilot": {"mass": "diag", "pilot": True}}
PENDULUM_RUNS = 4
PENDULUM_PARTICLES = 128  # the tan_va entry's setting
IS_DRAWS = 60_000
PENDULUM_X64 = False  # the SMC runs in float32, as the reference runs by default
RUNS = Path("/tmp/smc_evidence_runs")  # each configuration's saved runs (not committed)


def summary(errors: np.ndarray) -> dict:
    e = np.asarray(errors, float)
    return {"mean": float(e.mean()), "se": float(e.std(ddof=1) / math.sqrt(len(e))),
            "sd": float(e.std(ddof=1)), "n": int(len(e))}


def gaussian_record(name: str, cfg: dict, seeds: int) -> dict:
    from ssgp_ppl.diagnostics.evidence import correlated_gaussian
    from ssgp_ppl.inference.smc import tempered_smc_runs

    jax.config.update("jax_enable_x64", cfg["x64"])
    target = correlated_gaussian(0)
    dens = target.log_densities()
    mass = target.tempered_cov if cfg["mass"] == "exact" else cfg["mass"]
    kw = dict(particles=cfg["particles"], mcmc_steps=cfg["mcmc_steps"],
              target_ess=cfg["target_ess"], mass=mass, log_densities=dens)
    t0 = time.perf_counter()
    runs = tempered_smc_runs(None, None, None, runs=seeds, seed=1, pilot=cfg["pilot"], **kw)
    seconds = time.perf_counter() - t0
    err = np.array([r.log_evidence for r in runs]) - target.log_z
    return {"target": "gaussian", "name": name, **cfg, **summary(err), "seconds": seconds,
            "log_z": target.log_z, "errors": err.tolist(),
            "temperatures": float(np.mean([r.temperatures for r in runs])),
            "acceptance": float(np.mean([r.acceptance for r in runs]))}


def pendulum_target(spectral_points=None):
    """(log prior, log likelihood, model, x, y, λ columns) of the tan_va reference target on
    pendulum, as the smc method builds it (entry's spectral set, s integrated out), or with the
    given spectral points (the entry's set is drawn in the current float width, and float32 and
    float64 draw different sets). Its posterior is symmetric under λ → −λ (cos unchanged, sin's
    sign taken by s ~ N(0, σ²/m I))."""
    import jax.numpy as jnp

    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.inference.methods import common
    from ssgp_ppl.inference.methods.smc import SMC, target_model
    from ssgp_ppl.inference.smc import potentials

    entry = load_entry("tan_va")
    data = load("pendulum", x_scaling=entry.config["data"]["x_scaling"])
    spec = common.spec_for(entry, data, None)
    if spectral_points is not None:
        spec = dataclasses.replace(spec, spectral_points=jnp.asarray(spectral_points))
    model, _ = target_model(entry, spec, None, SMC.settings(entry).collapse)
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    log_prior, log_lik, unravel, names, _ = potentials(model, x, y)
    index = unravel(jnp.arange(len(names) - 1 + data.x_train.shape[1], dtype=float))  # λ: d
    lam = np.asarray(index["inverse_lengthscales"], int).ravel()
    return log_prior, log_lik, model, x, y, lam


def pendulum_runs(name: str, seed: int = 0) -> None:
    """The K SMC runs of one pendulum configuration, saved (particles, log Ẑ, seconds) under RUNS."""
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.inference.methods.smc import SMC
    from ssgp_ppl.inference.smc import tempered_smc_runs

    jax.config.update("jax_enable_x64", PENDULUM_X64)
    _, _, model, x, y, lam = pendulum_target()
    steps = SMC.settings(load_entry("tan_va")).mcmc_steps
    t0 = time.perf_counter()
    runs = tempered_smc_runs(model, x, y, runs=PENDULUM_RUNS, particles=PENDULUM_PARTICLES,
                             mcmc_steps=steps, seed=seed, **PENDULUM[name])
    seconds = time.perf_counter() - t0
    print(name, [r.log_evidence for r in runs], f"{seconds:.0f} s", flush=True)
    RUNS.mkdir(parents=True, exist_ok=True)
    np.savez(RUNS / f"{name}.npz", positions=np.stack([r.positions for r in runs]),
             log_z=np.array([r.log_evidence for r in runs]), seconds=seconds, mcmc_steps=steps,
             temperatures=np.array([r.temperatures for r in runs]), lam=lam)


def pendulum_records(seed: int = 0) -> list[dict]:
    """One record per saved configuration against the importance sampling log Z (float64) from a
    proposal fitted to all saved particles and their mirror images (λ → −λ)."""
    from ssgp_ppl.diagnostics.evidence import importance_log_evidence

    jax.config.update("jax_enable_x64", PENDULUM_X64)  # the runs' spectral set, then float64
    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.inference.methods import common

    entry = load_entry("tan_va")
    data = load("pendulum", x_scaling=entry.config["data"]["x_scaling"])
    points = np.asarray(common.spec_for(entry, data, None).spectral_points, np.float64)
    jax.config.update("jax_enable_x64", True)
    log_prior, log_lik, _, _, _, lam = pendulum_target(points)
    saved = {n: dict(np.load(RUNS / f"{n}.npz")) for n in PENDULUM if (RUNS / f"{n}.npz").exists()}
    pooled = np.concatenate([np.concatenate(list(v["positions"])) for v in saved.values()])
    mirrored = pooled.copy()
    mirrored[:, lam] *= -1
    axis = np.linalg.svd(pooled[:, lam] - pooled[:, lam].mean(0), full_matrices=False)[2][0]
    t0 = time.perf_counter()
    is_z, is_se, khat = importance_log_evidence(log_prior, log_lik,
                                                np.concatenate([pooled, mirrored]),
                                                draws=IS_DRAWS, seed=seed)
    is_seconds = time.perf_counter() - t0
    one = importance_log_evidence(log_prior, log_lik, pooled, draws=IS_DRAWS, seed=seed + 1)
    print("IS", is_z, is_se, khat, f"{is_seconds:.0f} s; unmirrored", one, flush=True)
    out = []
    for name, v in saved.items():
        z = v["log_z"]
        out.append({"target": "tan_va_pendulum", "name": name, **PENDULUM[name],
                    "particles": PENDULUM_PARTICLES, "mcmc_steps": int(v["mcmc_steps"]),
                    "target_ess": 0.5, "x64": PENDULUM_X64, **summary(z - is_z),
                    "seconds": float(v["seconds"]), "log_z_runs": z.tolist(), "is_log_z": is_z,
                    "is_se": is_se, "is_khat": khat, "is_draws": IS_DRAWS,
                    "is_seconds": is_seconds, "is_particles": 2 * int(len(pooled)),
                    "is_unmirrored": dict(zip(("log_z", "se", "khat"), one, strict=True)),
                    "positive_mode_fraction": [float(np.mean(p[:, lam] @ axis > 0))
                                               for p in v["positions"]],
                    "temperatures": v["temperatures"].tolist()})
    return out


def merge(path: Path, records: list[dict]) -> None:
    old = json.loads(path.read_text())["records"] if path.exists() else []
    keys = {(r["target"], r["name"]) for r in records}
    kept = [r for r in old if (r["target"], r["name"]) not in keys] + records
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                               "jax": jax.__version__, "records": kept}, indent=1))
    tmp.replace(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", default=["gaussian", "pendulum", "pendulum-is"])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    if "gaussian" in args.parts:
        for name, diff in GAUSSIAN.items():
            if args.only and name not in args.only:
                continue
            rec = gaussian_record(name, {**BASE, **diff}, args.seeds)
            print(f"{name:16s} {rec['mean']:+.3f} ± {rec['se']:.3f}  sd {rec['sd']:.3f}  "
                  f"{rec['seconds']:.0f} s  T {rec['temperatures']:.1f} acc "
                  f"{rec['acceptance']:.2f}", flush=True)
            merge(args.out, [rec])
    if "pendulum" in args.parts:
        for name in PENDULUM:
            if not args.only or name in args.only:
                pendulum_runs(name)
    if "pendulum-is" in args.parts:
        merge(args.out, pendulum_records())


if __name__ == "__main__":
    main()
