"""Cross-machine spread of the archived catalog metrics (reports/catalog_metrics.json).

XLA's CPU results depend on the instruction set it compiles for and on the thread count, and a
long optimisation carries float32 rounding into its result. This script refits each record that
tests/test_catalog_metrics.py checks under the instruction sets a machine of this class may have
(``--xla_cpu_max_isa``) and under one and two CPUs, and writes, per record and metric, the largest
relative distance between any two of these fits and the archived value. The test's tolerance for
a record is read from that JSON (a safety factor above the measured spread), so that CI passes on a
machine it has not seen without loosening the records that do not vary.

Usage: python benchmarks/metrics_spread.py [--cases ssgp:ml:pendulum ...] [--out FILE]
Checkpointed: each finished (case, configuration) is kept in the output file and skipped on a rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE = ROOT / "reports" / "catalog_metrics.json"
OUT = ROOT / "reports" / "metrics_spread.json"
# the test's cases, and type-II ssgp on pendulum: the record the test leaves out, for its spread
CASES = ["ssgp:ml:pendulum", "ssgp:ml:autompg", "ssgp_fixed:ml:autompg", "vssgp:svi:autompg",
         "tan_va:ncvmp:autompg"]
METRICS = ("rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90", "nll")
# (name, XLA_FLAGS addition, CPUs): the instruction sets x86-64 machines of this class offer, and
# the thread count XLA's CPU client sizes its pool by
CONFIGS = [("avx512-2cpu", "", 2), ("avx2-2cpu", "--xla_cpu_max_isa=AVX2", 2),
           ("avx-2cpu", "--xla_cpu_max_isa=AVX", 2), ("sse4_2-2cpu", "--xla_cpu_max_isa=SSE4_2", 2),
           ("avx512-1cpu", "", 1), ("avx2-1cpu", "--xla_cpu_max_isa=AVX2", 1)]

CHILD = """
import json, sys
from ssgp_ppl.data.datasets import load
from ssgp_ppl.entry import load_entry
from ssgp_ppl.pipeline import fit, metrics_record
model, method, dataset = sys.argv[1].split(":")
entry = load_entry(model)
data = load(dataset, split=0, x_scaling=entry.config["data"]["x_scaling"])
rec = metrics_record(fit(entry, data, method, seed=0, progress=False), data)
print(json.dumps(rec))
"""


def refit(case: str, flags: str, cpus: int) -> dict:
    env = dict(os.environ)
    # the test suite's flags (tests/conftest.py), then the configuration's
    env["XLA_FLAGS"] = " ".join(f for f in (env.get("XLA_FLAGS", ""), flags) if f)
    cpu_list = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:cpus])
    out = subprocess.run(["taskset", "-c", cpu_list, sys.executable, "-c", CHILD, case],
                         env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> float:
    """The largest relative distance between any two values."""
    lo, hi = min(values), max(values)
    scale = max(abs(lo), abs(hi))
    return 0.0 if scale == 0 else (hi - lo) / scale


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=CASES)
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else {"fits": {}}
    archived = {f"{r['model']}:{r['method']}:{r['dataset']}": r
                for r in json.loads(ARCHIVE.read_text())["records"] if r["split"] == 0}
    if os.cpu_count() < 2:
        print("metrics_spread: needs 2 CPUs", file=sys.stderr)
        return 2
    for case in args.cases:
        for name, flags, cpus in CONFIGS:
            fits = doc["fits"].setdefault(case, {})
            if name in fits:
                continue
            fits[name] = refit(case, flags, cpus)
            print(f"{case} {name}: rmse {fits[name]['rmse']:.6g} steps {fits[name].get('steps')}",
                  file=sys.stderr, flush=True)
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            os.replace(tmp, out)
    doc["spread"] = {
        case: {k: spread([f[k] for f in fits.values()] + [archived[case][k]])
               for k in METRICS if k in archived[case]}
        | {"steps": max(f.get("steps") or 0 for f in fits.values())
           - min(f.get("steps") or 0 for f in fits.values())}
        for case, fits in doc["fits"].items()}
    doc["configurations"] = [{"name": n, "xla_flags": f, "cpus": c} for n, f, c in CONFIGS]
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out)
    print(json.dumps(doc["spread"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
