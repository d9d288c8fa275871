"""Test metrics of every catalog entry (each listed method) on pendulum and Auto-MPG; prints JSON.

Usage: python benchmarks/catalog_metrics.py [--data pendulum autompg] [--models ...] [--splits 0]
One JSON record per (model, method, dataset, split) on stdout, as a list.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ssgp_ppl/__init__.py, before numpy

from ssgp_ppl.data.datasets import load  # noqa: E402
from ssgp_ppl.entry import list_entries, load_entry  # noqa: E402
from ssgp_ppl.inference.fitinfo import NUTSInfo, SMCInfo  # noqa: E402
from ssgp_ppl.pipeline import fit, metrics_record  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=["pendulum", "autompg"])
    p.add_argument("--models", nargs="+", default=list_entries())
    p.add_argument("--splits", nargs="+", type=int, default=[0])
    args = p.parse_args()
    out = []
    for name in args.models:
        entry = load_entry(name)
        for data_name in args.data:
            for split in args.splits:
                data = load(data_name, split=split)
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
    print(json.dumps({"machine": f"{platform.machine()} {os.cpu_count()} cpu",
                      "records": out}, indent=1))


if __name__ == "__main__":
    main()
