"""Simulation-based calibration of every catalog entry with latent variables (``ssgp_ppl.diagnostics.sbc``):
N simulations on the pendulum inputs at small size (40 design rows, m = 6, L = 99 draws, the
reference's 10 HMC moves a temperature and NUTS warm-up of 100 steps a chain:
``sbc.SMALL_SETTINGS``; at most ``sbc.SMALL_PATHS`` = 2 SVI paths stacked), every
SBC method that applies to the entry (one-path VI, stacked VI, NCVMP, the tempered-SMC
reference); writes JSON.

Per entry: the settings, simulations done (a run stopped by ``--max-minutes`` says so), seconds
per simulation of each method, failed and converged fits, and per method × quantity the χ² p, the
share of the ECDF outside the 99% simultaneous band and the reading. Each entry's run checkpoints
after every batch in ``--runs/<entry>``; ``--resume`` continues those runs and skips entries
already in the JSON. Records are written after each entry (atomically). The reference's batches
are kept in ``--store`` (default ``--runs/shared``) and reused by every entry with the same model
(entries that differ in their guide alone): an entry's record says which methods' simulations it
took from another entry's run (``shared``), with that run's seconds.

Each entry's rank histograms and ECDF-difference plots of a few quantities (noise, signal, the
first input's frequency spread and kernel value, f at the middle design point, the
log-likelihood: :data:`FIGURE_QUANTITIES`) go to ``reports/sbc/<entry>.png`` for the results
page; ``--figures`` draws them again from the runs' DataTrees without fitting anything.

Usage: python benchmarks/sbc.py [--entries ...] [--sims 200] [--data pendulum]
       [--max-minutes 15] [--out reports/sbc.json] [--runs runs/sbc] [--store DIR] [--resume]
       [--workers 2]
       [--set svi.steps=5000 ...] [--figures]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ssgp_ppl/__init__.py, before numpy

from ssgp_ppl.diagnostics import sbc  # noqa: E402
from ssgp_ppl.entry import list_entries, load_entry  # noqa: E402
from ssgp_ppl.runtime.io import write_json  # noqa: E402

FIGURE_QUANTITIES = ("noise", "signal", "frequency_spread[0]", "kernel[0, 0.5]", "f[20]",
                     "log_likelihood")


def save_figure(name: str, res: sbc.Result, folder: Path) -> Path:
    """``folder/<name>.png``: :data:`FIGURE_QUANTITIES` (those the entry ranks), methods side by
    side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    have = [str(q) for q in res.tree["ranks"]["quantity"].values]
    fig = sbc.figure(res, [q for q in FIGURE_QUANTITIES if q in have], cols=3)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def latent_entries() -> list[str]:
    """Catalog entries with latent sites that an SBC method other than the reference fits."""
    out = []
    for name in list_entries():
        e = load_entry(name)
        if e.latent_sites and any(m != sbc.Reference.name for m in sbc.methods_for(e)):
            out.append(name)
    return out


def record(name: str, res: sbc.Result, seconds: float) -> dict:
    doc = sbc.to_json(res)
    per = {}
    for r in res.summary:
        per.setdefault(r["method"], []).append(r["calibrated"])
    return {"entry": name, **{k: doc["attrs"][k] for k in ("data", "rows", "m", "inputs", "draws",
                                                          "seed", "sims", "sims_done")},
            "stopped": res.stopped, "seconds": round(seconds, 1),
            "seconds_per_simulation": doc["seconds_per_simulation"], "failed": doc["failed"],
            "converged": doc["converged"], **({"shared": doc["shared"]} if "shared" in doc else {}),
            "calibrated": {m: f"{sum(v)}/{len(v)}" for m, v in per.items()},
            "summary": res.summary}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", nargs="+", help="default: every latent-variable entry")
    p.add_argument("--sims", type=int, default=200)
    p.add_argument("--data", default="pendulum")
    p.add_argument("--max-minutes", type=float, default=15.0, help="per entry")
    p.add_argument("--out", default="reports/sbc.json")
    p.add_argument("--runs", default="runs/sbc", help="each entry's checkpointed run")
    p.add_argument("--store", help="reference batches shared between entries with the same "
                   "model (default: --runs/shared)")
    p.add_argument("--resume", action="store_true",
                   help="continue the runs in --runs from their checkpoints; records in --out are "
                   "kept, except those of the entries named in --entries, which are written anew")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0))
                   if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                   help="processes running an entry's batches side by side, a core each "
                   "(default: every core this process may use)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--figures", action="store_true",
                   help="draw the figures of the entries in --out again from their runs; no fits")
    args = p.parse_args(argv)
    out = Path(args.out)
    figures = out.parent / "sbc"
    if args.figures:
        for r in json.loads(out.read_text())["records"]:
            path = save_figure(r["entry"], sbc.load(Path(args.runs) / r["entry"]), figures)
            print(f"wrote {path}", file=sys.stderr)
        return 0
    doc = {"sims": args.sims, "data": args.data, "max_minutes": args.max_minutes,
           "settings": list(sbc.SMALL_SETTINGS) + args.sets, "machine": platform.machine(),
           "cpus": os.cpu_count(), "workers": args.workers, "records": []}
    if args.resume and out.exists():
        doc["records"] = json.loads(out.read_text())["records"]
    named = set(args.entries or ())
    earlier = {r["entry"]: r for r in doc["records"]}  # a resumed run adds its earlier seconds
    doc["records"] = [r for r in doc["records"] if r["entry"] not in named]
    done = {r["entry"] for r in doc["records"]}
    for name in args.entries or latent_entries():
        if name in done:
            continue
        run_dir = Path(args.runs) / name
        resume = args.resume and (run_dir / sbc.CHECKPOINT).exists()
        t0 = time.perf_counter()
        res = sbc.run(name, args.data, sims=args.sims, out=run_dir,
                      settings=tuple(sbc.SMALL_SETTINGS) + tuple(args.sets),
                      max_minutes=args.max_minutes, resume=resume,
                      progress=not args.no_progress, workers=args.workers,
                      store=args.store or Path(args.runs) / "shared")
        seconds = time.perf_counter() - t0
        if resume and name in earlier and earlier[name]["sims_done"] < earlier[name]["sims"]:
            seconds += earlier[name]["seconds"]
        rec = {**record(name, res, seconds), "workers": args.workers,
               "settings": list(sbc.SMALL_SETTINGS) + args.sets}
        doc["records"].append(rec)
        save_figure(name, res, figures)
        write_json(out, doc)
        print(f"{name}: {rec['sims_done']}/{args.sims} simulations in {rec['seconds']:.0f} s, "
              f"s/simulation {rec['seconds_per_simulation']}, calibrated {rec['calibrated']}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
