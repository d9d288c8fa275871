"""Test metrics of every catalog entry (each listed method) on pendulum and Auto-MPG; prints JSON.

Usage: python benchmarks/catalog_metrics.py [--data pendulum autompg] [--models ...] [--splits 0]
                                           [--update reports/catalog_metrics.json]
One JSON record per (model, method, dataset, split) on stdout, as a list; with ``--update FILE``
the records of the measured (model, dataset, split) replace those in FILE (written atomically)
and the rest of FILE is kept. Each entry's data is scaled as its ``[data] x_scaling`` says.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ssgp_ppl/__init__.py, before numpy

from ssgp_ppl.data.datasets import load  # noqa: E402
from ssgp_ppl.entry import list_entries, load_entry  # noqa: E402
from ssgp_ppl.inference.fitinfo import NUTSInfo, SMCInfo  # noqa: E402
from ssgp_ppl.pipeline import fit, metrics_record  # noqa: E402
from ssgp_ppl.runtime.io import print_json  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=["pendulum", "autompg"])
    p.add_argument("--models", nargs="+", default=list_entries())
    p.add_argument("--splits", nargs="+", type=int, default=[0])
    p.add_argument("--update", help="a catalog_metrics.json whose records of the measured "
                   "(model, dataset, split) are replaced")
    args = p.parse_args()
    old = None
    if args.update:  # read before hours of fitting, not after
        try:
            old = json.loads(Path(args.update).read_text())
            old["records"][0]["model"]
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            p.error(f"--update {args.update}: not a catalog_metrics.json ({type(e).__name__}: {e})")
    out = []
    for name in args.models:
        entry = load_entry(name)
        for data_name in args.data:
            for split in args.splits:
                data = load(data_name, split=split, x_scaling=entry.config["data"]["x_scaling"])
                for method in entry.methods:
                    res = fit(entry, data, method, seed=split, progress=False)
                    rec = metrics_record(res, data) | {"split": split}
                    own = res.info.method
                    div = own.divergences if isinstance(own, NUTSInfo | SMCInfo) else None
                    rec.update({k: v for k, v in (("divergences", div),
                                                  ("converged", res.info.converged))
                                if v is not None})
                    print(json.dumps(rec), file=sys.stderr, flush=True)
                    out.append(rec)
    doc = {"machine": f"{platform.machine()} {os.cpu_count()} cpu", "records": out}
    if old is not None:
        if old.get("machine") != doc["machine"]:  # records of two machines: each says which
            for r in out:
                r["machine"] = doc["machine"]
            doc["machine"] = old.get("machine")

        def key(r):
            return r["model"], r["dataset"], r["split"]

        new = {}
        for r in out:
            new.setdefault(key(r), []).append(r)
        measured, merged = set(new), []  # in the file's order: new records where the old were
        for r in old["records"]:
            merged.extend(new.pop(key(r), []) if key(r) in measured else [r])
        doc["records"] = merged + [r for rs in new.values() for r in rs]
    print_json(doc, args.update)


if __name__ == "__main__":
    main()
