"""The SVI / type-II stop rule on the catalog: every entry fitted by ``svi`` or ``ml`` with its
default settings (or with ``--set`` overrides), on pendulum and Auto-MPG.

Usage: python benchmarks/convergence.py [--data pendulum autompg] [--models ...] [--set K=V ...]
Each record (entry, data, overrides): steps run and the budget, converged or not, the loss's
improvement per 1,000 steps at the end with its SE and the tolerance (nats;
``ssgp_ppl.inference.runners._Convergence``), test NMSE and MNLP, fit and wall seconds. Written to
``reports/convergence/convergence.json`` after each fit (atomically); records already there are
skipped, so an interrupted sweep resumes. A fit that fails (an entry that cannot take the data)
is recorded with its error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ssgp_ppl/__init__.py, before numpy

from ssgp_ppl import api  # noqa: E402
from ssgp_ppl.entry import list_entries, load_entry  # noqa: E402
from ssgp_ppl.errors import SSGPError  # noqa: E402
from ssgp_ppl.inference.fitinfo import StopReading  # noqa: E402
from ssgp_ppl.inference.runners import PER_STEPS, TOL_PER_POINT  # noqa: E402
from ssgp_ppl.runtime.io import write_json  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "reports" / "convergence" / "convergence.json"
STOPPED = ("ml", "svi")  # the methods that stop by the rule


def entries() -> list[str]:
    """The catalog entries whose own method is ``svi`` or ``ml``."""
    return [n for n in list_entries() if load_entry(n).methods[0] in STOPPED]


def key(rec: dict) -> tuple:
    return rec["model"], rec["data"], tuple(rec["overrides"])


def one(name: str, data: str, overrides: list[str]) -> dict:
    """Fit ``name`` on ``data`` with ``overrides`` and read how it stopped."""
    entry = load_entry(name).with_overrides(overrides) if overrides else load_entry(name)
    method = entry.methods[0]
    rec = {"model": name, "data": data, "overrides": overrides, "method": method,
           "max_steps": int(entry.config["inference"][method]["steps"])}
    t0 = time.perf_counter()
    try:
        post = api.fit(entry, data=data)
    except SSGPError as e:
        return rec | {"error": str(e), "wall_seconds": time.perf_counter() - t0}
    i = post.info
    r = i.reading or StopReading()
    return rec | {"steps": i.steps, "converged": i.converged, "improvement_per_1k": r.improvement,
                  "improvement_se": r.improvement_se, "tolerance_per_1k": r.tolerance,
                  "nmse": post.metrics.get("nmse"), "mnlp": post.metrics.get("mnlp"),
                  "error_rate": post.metrics.get("error_rate"),
                  "fit_seconds": i.fit_seconds, "wall_seconds": time.perf_counter() - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=["pendulum", "autompg"])
    p.add_argument("--models", nargs="+", default=None)
    p.add_argument("--set", dest="sets", action="append", default=[],
                   help="a catalog override for every fit (KEY=VALUE), recorded with it")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    doc = json.loads(args.out.read_text()) if args.out.is_file() else {
        "tol_per_point": TOL_PER_POINT, "per_steps": PER_STEPS,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "records": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    have = {key(r) for r in doc["records"]}
    for name in args.models or entries():
        for data in args.data:
            k = (name, data, tuple(args.sets))
            if k in have:
                continue
            rec = one(name, data, list(args.sets))
            doc["records"].append(rec)
            have.add(k)
            write_json(args.out, doc)
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
