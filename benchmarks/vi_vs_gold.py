"""VI against the gold references: for every stored gold reference (``ssgp_ppl/references/``),
``compare`` of its catalog entry on its data set (the reference is the stored one, no SMC runs),
with the entry's VI as one path and as K stacked paths; writes JSON.

Per (entry, data set): the gold reference's label, verdict and test NMSE / MNLP with the spread
of its runs' test MNLP (the replicate floor of a predictive score), then for the single and the
stacked VI fit: test NMSE, MNLP, 90% coverage, how the fit stopped, and the Wasserstein-1 distance
to the gold posterior on each invariant quantity in reference standard deviations beside the
same distance between halves of the gold's own draws (the floor). Records are written after each
target (atomically); ``--resume`` skips those already in the file.

    python benchmarks/vi_vs_gold.py [--paths 4] [--only tan_va_svi:pendulum ...] [--resume]

``--only`` recomputes the targets it names and keeps every other record in the file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ssgp_ppl/__init__.py, before numpy

ROOT = Path(__file__).resolve().parents[1]
PATHS = 4  # K of the stacked VI
QUANTITIES = ("noise", "signal", "frequency_spread", "f_test")


def _vi_row(rec: dict, *, stacked: bool = False) -> dict:
    """A VI fit's scores; a stacked fit's converged / stop speak for every path (its ``steps``
    would be one path's, so it is left out)."""
    keep = ("nmse", "mnlp", "coverage_90", "converged") + (() if stacked else ("steps",))
    row = {k: rec[k] for k in keep}
    row["stop"] = rec.get("stop")
    vs = rec.get("vs_reference", {})
    row["w1_scaled"] = {q: {"value": vs[q]["w1_scaled"], "floor": vs[q].get("w1_scaled_floor")}
                        for q in QUANTITIES if isinstance(vs.get(q), dict)}
    return row


def run_one(g, *, paths: int, seed: int = 0) -> dict:
    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.report import compare

    p = g.provenance
    entry = load_entry(p["entry"])
    method = entry.methods[0]
    entry = entry.with_overrides([f"inference.{method}.paths={paths}"])
    data = load(p["dataset"], split=p["split"], x_scaling=entry.config["data"]["x_scaling"])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        records = compare(entry, data, Path(tmp), seed=seed, progress=False)
    seconds = time.perf_counter() - t0
    ref = next(r for r in records if "reference" in r)
    d = ref["reference"]
    if d.get("source") != "gold":
        raise RuntimeError(f"{g.path.name}: compare did not use the gold reference")
    run_nlpd = d["run_nlpd"]
    # the gold the comparison found: with K paths an entry's hand-over (NCVMP's spectral points)
    # can be another stored reference's target
    out = {"entry": p["entry"], "dataset": p["dataset"], "folder": d["folder"], "paths": paths,
           "seconds": round(seconds, 1),
           "gold": {"label": d["label"], "converged": d["converged"], "reasons": d["reasons"],
                    "nmse": ref["nmse"], "mnlp": ref["mnlp"], "coverage_90": ref["coverage_90"],
                    "run_mnlp_min": min(run_nlpd), "run_mnlp_max": max(run_nlpd)}}
    by = {r["method"]: r for r in records}
    out["single"] = _vi_row(by.get(f"{method}-one-path", by[method]))
    if f"{method}-one-path" in by:
        out["stacked"] = _vi_row(by[method], stacked=True) | {"weights": by[method]["paths"]["weights"]
                                                if "paths" in by[method] else None}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", help="targets ENTRY:DATA (default: every stored one)")
    p.add_argument("--paths", type=int, default=PATHS)
    p.add_argument("--out", default=str(ROOT / "reports" / "vi_vs_gold.json"))
    p.add_argument("--resume", action="store_true", help="skip records already in --out")
    args = p.parse_args(argv)
    from ssgp_ppl.diagnostics import gold
    from ssgp_ppl.runtime.io import write_json

    out = Path(args.out)
    # --only redoes the targets it names and keeps the other records; --resume skips done ones
    records = json.loads(out.read_text())["records"] \
        if (args.resume or args.only) and out.exists() else []
    have = {(r["entry"], r["dataset"]) for r in records} if args.resume else set()
    for g in gold.stored():
        target = (g.provenance["entry"], g.provenance["dataset"])
        if target in have or (args.only and ":".join(target) not in args.only):
            continue
        rec = run_one(g, paths=args.paths)
        print(json.dumps(rec), file=sys.stderr, flush=True)
        records = [r for r in records if (r["entry"], r["dataset"]) != target] + [rec]
        write_json(out, {"machine": f"{platform.machine()} {os.cpu_count()} cpu",
                         "records": records})
    return 0


if __name__ == "__main__":
    sys.exit(main())
