"""Multimodal posteriors: the reference's verdict and time, single vs stacked VI, for every catalog
entry with latent variables (Gaussian likelihood) on pendulum and Auto-MPG; writes JSON.

Per (entry, data set): the reference (the stored gold reference of the target where there is
one, its label in ``gold``; otherwise tempered SMC + NUTS polishing computed here: seconds, verdict and its
reasons, modes, SMC log evidence per run, test NMSE/MNLP, and the same chains stacked per chain),
the entry's own method as one path and as K stacked paths (test NMSE, MNLP, 90% coverage,
seconds, weights). Records are written after each entry (atomically), ``--resume`` skips those
already in the file.

Usage: python benchmarks/multimodal.py [--entries ...] [--data pendulum autompg]
       [--out reports/multimodal.json] [--resume] [--small] [--set smc.particles=512 ...]
       [--reference-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ssgp_ppl/__init__.py, before numpy

from ssgp_ppl.data.datasets import load  # noqa: E402
from ssgp_ppl.diagnostics.calibration import reference_health  # noqa: E402
from ssgp_ppl.entry import list_entries, load_entry  # noqa: E402
from ssgp_ppl.inference import methods, sizing  # noqa: E402
from ssgp_ppl.inference.paths import combine, split_chains  # noqa: E402
from ssgp_ppl.pipeline import evaluate, fit, prerequisites  # noqa: E402
from ssgp_ppl.report import reference_fit, small  # noqa: E402
from ssgp_ppl.runtime.io import write_json  # noqa: E402

KEEP = ("nmse", "mnlp", "coverage_90")
PATHS = {"svi": 8, "ncvmp": 10}  # K of the stacked form of each VI method


def latent_gaussian_entries() -> list[str]:
    out = []
    for name in list_entries():
        e = load_entry(name)
        if e.latent_sites and e.config["model"]["likelihood"] == "gaussian":
            out.append(name)
    return out


def scores(post, seconds: float) -> dict:
    return {k: float(post.metrics[k]) for k in KEEP} | {"seconds": round(seconds, 1)}


def run_one(name: str, dataset: str, *, quick: bool, sets: list[str], vi: bool = True) -> dict:
    entry = load_entry(name).with_overrides(sets) if sets else load_entry(name)
    data = load(dataset, x_scaling=entry.config["data"]["x_scaling"])
    if quick:
        entry, data = small(entry, data)
    entry = sizing.resolve(entry, data)  # m = "auto": sized once, for the reference and VI alike
    own = methods.get(entry.methods[0])
    rec = {"entry": name, "dataset": dataset, "n_train": data.n_train, "method": own.name,
           "settings": sets}
    ref = methods.reference()
    handoff = prerequisites(entry, data, ref, progress=False)
    t0 = time.perf_counter()
    # the stored gold reference of this target where there is one (no SMC here), else fitted
    post, g = reference_fit(entry, data, ref.name, handoff=handoff, fresh=quick)
    h = g.verdict if g is not None else reference_health(post.datatree, post.info)
    ref_seconds = g.provenance["wall_seconds"] if g is not None else time.perf_counter() - t0
    rec["reference"] = scores(post, ref_seconds) | {
        k: h.get(k) for k in ("converged", "reasons", "modes", "mode_weights", "log_evidence",
                              "runs_rhat", "log_density_spread", "divergences")} | {
        "rhat_max": max(h["rhat_max"].values()) if h["rhat_max"] else None,
        "smc_seconds": post.info.method.smc_seconds, "particles": post.info.method.particles,
        "gold": None if g is None else g.label()}
    chains = split_chains(post)
    if len(chains) > 1:  # the polishing chains as paths, stacked
        stacked = evaluate(combine(chains, data, "stacking", seconds=ref_seconds), data)
        rec["reference_chains_stacked"] = scores(stacked, ref_seconds) | {
            "weights": list(stacked.info.paths.weights)}
    if not vi:
        return rec
    if own.name in PATHS:
        k = PATHS[own.name]
        for label, paths in (("single", 1), ("stacked", k)):
            e = entry.with_overrides([f"inference.{own.name}.paths={paths}"])
            t0 = time.perf_counter()
            vi = fit(e, data, own.name, progress=False)
            rec[label] = scores(vi, time.perf_counter() - t0)
            if paths > 1:
                rec[label].update(paths=paths, weights=list(vi.info.paths.weights),
                                  path_loo=list(vi.info.paths.loo))
    else:  # a method without paths (the local fits)
        t0 = time.perf_counter()
        rec["single"] = scores(fit(entry, data, own.name, progress=False), time.perf_counter() - t0)
    return rec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", nargs="+", default=None)
    p.add_argument("--data", nargs="+", default=["pendulum", "autompg"])
    p.add_argument("--out", default="reports/multimodal.json")
    p.add_argument("--resume", action="store_true", help="skip records already in --out")
    p.add_argument("--small", action="store_true", help="the quick settings of the test suite")
    p.add_argument("--set", nargs="+", default=[], dest="sets", metavar="KEY=VALUE",
                   help="catalog overrides for every entry (e.g. smc.particles=512)")
    p.add_argument("--reference-only", action="store_true", help="skip the VI fits")
    args = p.parse_args()
    out = Path(args.out)
    done = json.loads(out.read_text())["records"] if args.resume and out.exists() else []
    have = {(r["entry"], r["dataset"]) for r in done}
    records = list(done)
    for name in args.entries or latent_gaussian_entries():
        for dataset in args.data:
            if (name, dataset) in have:
                continue
            rec = run_one(name, dataset, quick=args.small, sets=args.sets,
                          vi=not args.reference_only)
            print(json.dumps(rec), file=sys.stderr, flush=True)
            records.append(rec)
            write_json(out, {"machine": f"{platform.machine()} {os.cpu_count()} cpu",
                             "small": args.small, "records": records})


if __name__ == "__main__":
    main()
