"""This project's entries side by side with the peers a user would pick instead: GPyTorch's SVGP,
GPJax's SVGP and an exact GP, on the same train/test rows; the inputs standardised, except for
entries whose ``[data] x_scaling`` asks otherwise (Tan et al. 2016's: [-1, 1]).

  python benchmarks/peers.py                      # every set below, every method; resumes
  python benchmarks/peers.py --sets pendulum,kin40k --methods gpytorch_svgp,svbssgp_collapsed
  python benchmarks/peers.py --quick              # small budgets: checks the script end to end
  python benchmarks/peers.py --seeds 0,1,2        # three seeds (and splits, where the set has them)

Each (set, method) result is written atomically to ``reports/peers/<set>/<method>.json`` as soon
as it is measured, and a rerun skips the ones already there (``--overwrite`` measures again), so an
interrupted run resumes; ``reports/peers/peers.json`` gathers them with the machine, and for each
set the best peer, this project's best Bayesian entry and their ratios against the targets
(NMSE ≤ 1.0× and MNLP ≤ best peer + 0.02, at ≤ 0.5× the GPyTorch SVGP's fit time).

One thread per library (``XLA_FLAGS``, ``torch.set_num_threads(1)``, BLAS threads): the figures of
a 2-core machine are noisy, their ratios are what the benchmark is for. Peers need the ``bench``
extra (``pip install -e ".[bench]"``); a method whose library is missing is recorded as skipped.
Metrics are :func:`ssgp_ppl.diagnostics.metrics.regression_metrics` in the target's original units for every
method: test NMSE, MNLP, 90% coverage; fit and predict seconds. On the large sets the SVGPs record
an accuracy-vs-time trajectory (test NMSE and MNLP every ``eval_every`` steps, the evaluation
excluded from the clock).

With several ``--seeds``, seed k fits with seed k on split k (every set ships at least 5 splits;
a seed past a set's last split is one error line) and is written to ``<method>.seed<k>.json``
(seed 0 keeps ``<method>.json``). The summary then compares means over the seeds and says, for
each target, whether it is met or missed by more than the standard errors of both sides ("met",
"missed") or not told apart ("within se").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_fits  # noqa: E402

from ssgp_ppl import pipeline  # noqa: E402
from ssgp_ppl.data import datasets  # noqa: E402
from ssgp_ppl.diagnostics.metrics import regression_metrics  # noqa: E402
from ssgp_ppl.entry import load_entry  # noqa: E402
from ssgp_ppl.errors import SSGPError, one_line  # noqa: E402
from ssgp_ppl.inference import sizing  # noqa: E402
from ssgp_ppl.runtime.io import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "reports" / "peers"

# name -> (data set, training-row subsample or None, large: SVGP trajectories)
SETS = {
    "pendulum": ("pendulum", None, False),
    "autompg": ("autompg", None, False),
    "yacht": ("yacht", None, False),
    "concrete": ("concrete", None, False),
    "energy": ("energy", None, False),
    "wine-red": ("wine-red", None, False),
    "kin8nm": ("kin8nm", None, False),
    "elevators": ("elevators", None, True),
    "pol": ("pol", None, True),
    "kin40k": ("kin40k", None, True),
    "protein": ("protein", None, True),
    "airline-100k": ("airline", 100_000, True),
    "airline-1m": ("airline", 1_000_000, True),
    "airline-2m": ("airline", None, True),
}
PEERS = ("gpytorch_svgp", "gpjax_svgp", "sklearn_exact")
EXACT_MAX_ROWS = 2000  # the exact GP fits all rows up to here, a random subsample of them above
SVGP_STEPS = 2000
# this project's entries at their catalog settings; the Bayesian ones are what the targets are about
BAYESIAN = ("svbssgp", "vssgp", "svbssgp_collapsed", "vssgp_collapsed", "ssgp_svi", "tan_va")
OURS = ("ssgp", *BAYESIAN)  # ssgp: type-II (Lázaro-Gredilla et al. 2010), shown for reference
TARGETS = {"nmse_ratio": 1.0, "mnlp_above": 0.02, "time_ratio": 0.5}
# What one fit of an entry that sees every row at every step costs, by how the fit iterates: SVI or
# type-II steps over the (2m)² Gram matrix, or NCVMP iterations over the expected Gram matrix's
# pair terms (Tan et al. 2016, App. A).
COST_FORMULA = {"steps": "steps × paths × n × (2m)²", "ncvmp": "iterations × n × m² × d²"}
# Above this an entry is recorded as skipped, not run. On one thread of the machine the tables come from that
# is ten to forty minutes: the collapsed entries at m = 100 ran 1e10 a second (kin40k's 4,500-row
# subsample, 6,000 steps, 1.1e12: 109 s), the type-II ssgp at m = 20, whose features cost more
# beside its small Gram matrix, 2.4e9 (AIRLINE 100k, 4.6e11: 189 s).
FULL_BATCH_MAX = 6e12
QUICK_BUDGET = 10.0  # --quick: the seconds an m = "auto" entry is sized within


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def machine() -> dict:
    import jax

    return {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
            "device_kind": sorted({d.device_kind for d in jax.devices()}),
            "threads_per_library": 1}


def load_set(name: str, data_dir=None, split: int = 0, x_scaling: str = "standard"):
    """Set ``name``'s split, its inputs scaled as ``x_scaling`` says (an entry's ``[data]
    x_scaling``: Tan et al. 2016's entries take inputs in [-1, 1]; the peers standardised ones)."""
    data, subsample, _ = SETS[name]
    return datasets.load(data, split=split, subsample=subsample, data_dir=data_dir,
                         x_scaling=x_scaling)


def record_path(out: Path, set_name: str, method: str, seed: int) -> Path:
    return out / set_name / (f"{method}.json" if seed == 0 else f"{method}.seed{seed}.json")


def _scores(ds, mean, var) -> dict:
    """Test metrics of a standardised prediction, in the target's original units."""
    ys = ds.y_scaler
    scores = regression_metrics(ys.inverse(np.asarray(ds.y_test)), ys.inverse(np.asarray(mean)),
                                ys.inverse_std(np.sqrt(np.asarray(var))) ** 2)
    return {k: round(float(v), 6) for k, v in scores.items()}


def run_peer(name: str, ds, *, large: bool, quick: bool, seed: int) -> dict:
    x, y, xt = (np.asarray(a, np.float64) for a in (ds.x_train, ds.y_train, ds.x_test))
    traj = []
    options: dict = {}
    rows = None
    if name.endswith("_exact"):
        if len(x) > EXACT_MAX_ROWS:
            idx = np.random.default_rng(seed).choice(len(x), EXACT_MAX_ROWS, replace=False)
            x, y, rows = x[idx], y[idx], EXACT_MAX_ROWS
    else:
        options = {"steps": 200 if quick else SVGP_STEPS, "inducing": 64 if quick else 512}
        if large:
            options["eval_every"] = max(options["steps"] // 20, 1)
            options["on_eval"] = lambda sec, mean, var: traj.append(
                {"seconds": round(sec, 3), **_scores(ds, mean, var)})
    fit = peer_fits.PEERS[name](x, y, xt, seed=seed, **options)
    out = {"fit_seconds": round(fit.fit_seconds, 3), "predict_seconds": round(fit.predict_seconds, 3),
           **_scores(ds, fit.mean, fit.var), "settings": fit.settings}
    if rows:
        out["training_rows_used"] = rows
    if traj:
        out["trajectory"] = traj
    return out


def full_batch_cost(entry, n: int, d: int) -> tuple[float, str] | None:
    """The cost of an entry that sees every row at every step and the ``COST_FORMULA`` it follows
    (None for the partition-sampled and minibatch ones, whose steps do not grow with n, and for
    m = "auto", sized within its time budget). NCVMP runs at most ``max_iter`` + ``restarts`` ×
    ``restart_iters`` iterations."""
    cfg = entry.config
    method = cfg["inference"]["methods"][0]
    if cfg["partitions"]["per_step"] > 0 or sizing.rows_per_step(entry, n, method) < n \
            or entry.m_auto:
        return None
    mc, m = cfg["inference"][method], cfg["model"]["m"]
    if method == "ncvmp":
        iters = mc["max_iter"] + mc["restarts"] * mc["restart_iters"]
        return float(iters * n * m**2 * d**2), COST_FORMULA["ncvmp"]
    return float(mc["steps"] * mc.get("paths", 1) * n * (2 * m) ** 2), COST_FORMULA["steps"]


def run_ours(name: str, ds, *, quick: bool, seed: int, budget: float | None = None) -> dict:
    entry = load_entry(name)
    overrides = ["svi.steps=300", "svi.min_steps=0"] if quick and "svi" in entry.config["inference"] \
        else []
    if overrides:
        entry = entry.with_overrides(overrides)
    if entry.m_auto:  # sized here, so that an m no budget allows is a skip, not an error
        try:
            entry = sizing.resolve(entry, ds, budget=budget, seed=seed)
        except sizing.SizingError as e:  # no m fits: a skip; a failed pilot is an error
            return {"skipped": e.reason}
    cost = full_batch_cost(entry, ds.n_train, ds.n_features)
    if cost is not None and cost[0] > FULL_BATCH_MAX:
        return {"skipped": f"every step sees all {ds.n_train} rows: {cost[1]} = {cost[0]:.2g} > "
                           f"{FULL_BATCH_MAX:.0e}"}
    t = time.perf_counter()
    post = pipeline.fit(entry, ds, None, seed=seed, progress=False, budget=budget)
    wall = time.perf_counter() - t
    met = post.metrics
    sized = post.entry.sizing
    pilot = 0.0 if sized is None else sized.pilot_seconds  # part of the fit: it chose m
    out = {"fit_seconds": round(post.info.fit_seconds + pilot, 3),
           "predict_seconds": round(post.info.predict_seconds, 3), "wall_seconds": round(wall, 3),
           **{k: round(float(met[k]), 6) for k in ("rmse", "nmse", "mnlp", "crps", "coverage_50",
                                                    "coverage_90")},
           "settings": {"m": post.entry.config["model"]["m"], "method": post.method,
                        "steps": post.info.steps, "converged": post.info.converged,
                        "overrides": overrides}}
    if sized is not None:
        out["sizing"] = sized.to_json()
    return out


def measure(set_name: str, method: str, *, out: Path, quick: bool, seed: int, overwrite: bool,
            data_dir=None, budget: float | None = None) -> dict:
    path = record_path(out, set_name, method, seed)
    if path.exists() and not overwrite:
        return json.loads(path.read_text())
    kind = "peer" if method in peer_fits.PEERS else "ours"
    scaling = "standard" if kind == "peer" else load_entry(method).config["data"]["x_scaling"]
    ds = load_set(set_name, data_dir, split=seed, x_scaling=scaling)
    rec = {"set": set_name, "method": method, "kind": kind, "bayesian": method in BAYESIAN,
           "n_train": int(ds.n_train), "n_test": int(ds.n_test), "d": int(ds.n_features),
           "quick": quick, "seed": seed, "split": int(ds.split), "x_scaling": scaling}
    log(f"{set_name} · {method} (n = {ds.n_train}, d = {ds.n_features}) …")
    try:
        if kind == "peer":
            rec.update(run_peer(method, ds, large=SETS[set_name][2], quick=quick, seed=seed))
        else:
            rec.update(run_ours(method, ds, quick=quick, seed=seed, budget=budget))
    except ImportError as e:
        rec["skipped"] = one_line(e)
    except Exception as e:  # a failed fit is a result too: recorded, the run goes on
        rec["error"] = f"{type(e).__name__}: {one_line(e)}"
        log(traceback.format_exc())
    log(f"  {json.dumps({k: rec.get(k) for k in ('nmse', 'mnlp', 'fit_seconds', 'error', 'skipped')})}")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, rec)
    return rec


def at_time(traj: list[dict], seconds: float, key: str) -> float | None:
    """The SVGP's ``key`` at the last trajectory point reached by ``seconds`` (None before the first)."""
    reached = [p for p in traj if p["seconds"] <= seconds]
    return reached[-1][key] if reached else None


def _meets(r: dict, best_nmse: dict, best_mnlp: dict, svgp: dict | None) -> dict:
    return {"nmse": r["nmse"] / best_nmse["nmse"] <= TARGETS["nmse_ratio"],
            "mnlp": r["mnlp"] - best_mnlp["mnlp"] <= TARGETS["mnlp_above"],
            "time": svgp is not None and r["fit_seconds"] / svgp["fit_seconds"] <= TARGETS["time_ratio"]}


SEED_KEYS = ("nmse", "mnlp", "rmse", "fit_seconds", "predict_seconds")


def over_seeds(records: list[dict]) -> list[dict]:
    """One record per (set, method): seed 0's, with the means over every seed's measured record of
    SEED_KEYS, their standard errors (``<key>_se``, sd / √k; 0 with one seed) and ``seeds``."""
    groups: dict = {}
    for r in records:
        if "nmse" in r:
            groups.setdefault((r["set"], r["method"]), []).append(r)
    out = []
    for rows in groups.values():
        rows.sort(key=lambda r: r.get("seed", 0))
        m = dict(rows[0])
        k = len(rows)
        for key in SEED_KEYS:
            v = np.array([r[key] for r in rows if r.get(key) is not None], float)
            if len(v):
                m[key] = float(v.mean())
                m[f"{key}_se"] = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0
        m["seeds"] = k
        ms = [r["settings"]["m"] for r in rows if "m" in r.get("settings", {})]
        if m["kind"] == "ours" and ms:  # the m each seed's fit used (sized to its split: "auto")
            m["m_by_seed"] = ms
            m["m_sized"] = all("sizing" in r for r in rows)
        stops = [r.get("settings", {}).get("converged") for r in rows]
        if m["kind"] == "ours" and None not in stops:  # seeds whose fit its stop rule declared done
            m["converged_seeds"] = sum(bool(c) for c in stops)
        out.append(m)
    return out


def decided(value: float, threshold: float, se: float) -> str:
    """A target read with its standard error: "met" (``value`` below ``threshold`` by at least
    ``se``), "missed" (above it by more than ``se``) or "within se"."""
    if value + se <= threshold:
        return "met"
    if value - se > threshold:
        return "missed"
    return "within se"


def summarise(records: list[dict]) -> dict:
    """Per set: the best peer by NMSE and by MNLP, this project's best Bayesian entry (by NMSE),
    and the ratios the targets are about, on the means over seeds (:func:`over_seeds`); with
    several seeds, ``decided`` says per target whether it is met or missed by more than the
    standard errors."""
    out = {}
    records = over_seeds(records)
    for s in SETS:
        rows = [r for r in records if r["set"] == s and "nmse" in r]
        peers = [r for r in rows if r["kind"] == "peer"]
        ours = [r for r in rows if r["bayesian"]]
        if not peers or not ours:
            continue
        best_nmse = min(peers, key=lambda r: r["nmse"])
        best_mnlp = min(peers, key=lambda r: r["mnlp"])
        svgp = next((r for r in peers if r["method"] == "gpytorch_svgp"), None)
        best = min(ours, key=lambda r: r["nmse"])
        summ = {"best_peer_nmse": [best_nmse["method"], best_nmse["nmse"]],
                "best_peer_mnlp": [best_mnlp["method"], best_mnlp["mnlp"]],
                "best_bayesian": best["method"], "m": best.get("m_by_seed"),
                "m_sized": best.get("m_sized"),
                "nmse": best["nmse"], "mnlp": best["mnlp"],
                "fit_seconds": best["fit_seconds"], "predict_seconds": best["predict_seconds"],
                "nmse_ratio": round(best["nmse"] / best_nmse["nmse"], 4),
                "mnlp_above_best": round(best["mnlp"] - best_mnlp["mnlp"], 4)}
        if svgp is not None:
            summ["time_ratio"] = round(best["fit_seconds"] / svgp["fit_seconds"], 4)
            if svgp.get("trajectory"):
                summ["svgp_rmse_at_equal_time"] = at_time(svgp["trajectory"], best["fit_seconds"], "rmse")
                summ["rmse"] = best["rmse"]
        summ["meets"] = _meets(best, best_nmse, best_mnlp, svgp)
        summ["seeds"] = min(best["seeds"], best_nmse["seeds"], best_mnlp["seeds"])
        if summ["seeds"] > 1:
            ratio_se = summ["nmse_ratio"] * np.hypot(best["nmse_se"] / best["nmse"],
                                                     best_nmse["nmse_se"] / best_nmse["nmse"])
            above_se = float(np.hypot(best["mnlp_se"], best_mnlp["mnlp_se"]))
            summ.update(nmse_se=best["nmse_se"], mnlp_se=best["mnlp_se"],
                        nmse_ratio_se=round(float(ratio_se), 4),
                        mnlp_above_best_se=round(above_se, 4))
            summ["decided"] = {"nmse": decided(summ["nmse_ratio"], TARGETS["nmse_ratio"], ratio_se),
                               "mnlp": decided(summ["mnlp_above_best"], TARGETS["mnlp_above"],
                                               above_se)}
            if svgp is not None:
                t_se = summ["time_ratio"] * np.hypot(best["fit_seconds_se"] / best["fit_seconds"],
                                                     svgp["fit_seconds_se"] / svgp["fit_seconds"])
                summ["decided"]["time"] = decided(summ["time_ratio"], TARGETS["time_ratio"], t_se)
        # the best entry by NMSE may be slow: which Bayesian entries meet all three targets
        summ["all_three"] = sorted(r["method"] for r in ours
                                   if all(_meets(r, best_nmse, best_mnlp, svgp).values()))
        out[s] = summ
    return out


def not_measured(records: list[dict]) -> dict:
    """Per set, the methods without a record yet (a skipped or failed fit is a record)."""
    done = {(r["set"], r["method"]) for r in records}
    out = {s: [m for m in (*PEERS, *OURS) if (s, m) not in done] for s in SETS}
    return {s: missing for s, missing in out.items() if missing}


def gather(out: Path) -> dict:
    records = [json.loads(p.read_text()) for p in sorted(out.glob("*/*.json"))
               if p.parent.name in SETS]  # not gpu/: whole peers.json documents of other runs
    records.sort(key=lambda r: (list(SETS).index(r["set"]) if r["set"] in SETS else 99, r["method"]))
    return {"format": 1, "machine": machine(), "targets": TARGETS, "full_batch_max": FULL_BATCH_MAX,
            "cost_formula": COST_FORMULA, "records": records, "by_method": over_seeds(records),
            "summary": summarise(records),
            "not_measured": not_measured(records)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated, of: " + ", ".join(SETS))
    ap.add_argument("--methods", default=",".join(PEERS + OURS),
                    help="comma-separated, of: " + ", ".join(tuple(peer_fits.PEERS) + OURS))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (seed k on split k where "
                    "the set has that many splits)")
    ap.add_argument("--quick", action="store_true", help="small budgets (an end-to-end check; "
                    f"m = \"auto\" sized within {QUICK_BUDGET:g} s)")
    ap.add_argument("--overwrite", action="store_true", help="measure again what is already there")
    ap.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help="the time budget an entry with m = \"auto\" is sized within (default: "
                    f"the package's, {sizing.DEFAULT_BUDGET:g} s)")
    ap.add_argument("--gather", action="store_true",
                    help="measure nothing: gather the records already in --out into peers.json")
    a = ap.parse_args(argv)
    sets = [s for s in a.sets.split(",") if s]
    methods = [m for m in a.methods.split(",") if m]
    bad = [s for s in sets if s not in SETS] + [m for m in methods
                                                if m not in peer_fits.PEERS and m not in OURS]
    if bad:
        print(f"peers.py: unknown set or method: {', '.join(bad)}", file=sys.stderr)
        return 2
    try:
        seeds = [int(k) for k in a.seeds.split(",") if k != ""]
    except ValueError:
        print(f"peers.py: --seeds takes comma-separated integers, got {a.seeds!r}", file=sys.stderr)
        return 2
    try:
        for seed in [] if a.gather else seeds:
            for s in sets:
                for m in methods:
                    measure(s, m, out=a.out, quick=a.quick, seed=seed, overwrite=a.overwrite,
                            data_dir=a.data_dir,
                            budget=QUICK_BUDGET if a.quick and a.budget is None else a.budget)
    except SSGPError as e:  # a set that cannot be loaded (no such split, missing files)
        print(f"peers.py: {one_line(e)}", file=sys.stderr)
        return 2
    doc = gather(a.out)
    write_json(a.out / "peers.json", doc)
    print(json.dumps(doc["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
