"""The archived comparison reports: ``compare`` of each catalog entry on pendulum and Auto-MPG
(split 0, seed 0) into reports/<entry>-<data>/ (comparison.json, report.html; the posteriors
stay local), against the stored gold reference where one matches, else the reference computed
there with its verdict. docs/gen_pages.py lists them on the results page "Comparison reports".

Usage: python benchmarks/comparisons.py [--only ENTRY:DATA ...] [--redo]
Resumable: a report already at the current format is kept unless --redo (or --only names it);
run it again to continue after a stop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ("pendulum", "autompg")
# one entry of each model family: the Tan et al. 2016 entries first (their gold references are
# stored), then the free-frequency ones
ENTRIES = ("tan_va_svi", "tan_va", "tan_local", "ssgp_svi", "vssgp", "svbssgp", "ssgp",
           "ssgp_fixed")


def main(argv=None) -> int:
    from ssgp_ppl.report import REPORT_FORMAT, compare_named

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", help="ENTRY:DATA (default: ENTRIES on both sets)")
    p.add_argument("--redo", action="store_true", help="recompute reports at the current format")
    p.add_argument("--out", default=str(ROOT / "reports"))
    args = p.parse_args(argv)
    targets = args.only or [f"{n}:{d}" for n in ENTRIES for d in DATASETS]
    for t in targets:
        name, data = t.split(":")
        comp = Path(args.out) / f"{name}-{data}" / "comparison.json"
        if comp.exists() and not (args.redo or args.only) and \
                json.loads(comp.read_text()).get("format") == REPORT_FORMAT:
            continue
        t0 = time.perf_counter()
        doc = compare_named(name, data, args.out)
        ref = next((m["reference"] for m in doc["methods"] if "reference" in m), None)
        verdict = "no reference" if ref is None else ref.get("label") or (
            "CONVERGED" if ref.get("converged") else "NOT CONVERGED")
        print(f"{t}: {time.perf_counter() - t0:.0f} s; reference: {verdict}", file=sys.stderr,
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
