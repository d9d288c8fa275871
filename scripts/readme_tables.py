"""Tables of the README generated from the archived JSON in reports/ (never typed by hand).

    python scripts/readme_tables.py          # rewrite the generated blocks of README.md
    python scripts/readme_tables.py --check  # exit 1 if README.md differs from the JSON

A generated block sits between ``<!-- generated: NAME -->`` and ``<!-- /generated -->``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def catalog_metrics() -> str:
    """reports/catalog_metrics.json (benchmarks/catalog_metrics.py) as a Markdown table."""
    doc = json.loads((ROOT / "reports" / "catalog_metrics.json").read_text())
    cols = ["rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90"]
    head = ("| entry | method | data | RMSE | NMSE | MNLP | CRPS | cov. 50% | cov. 90% | fit s |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = sorted(doc["records"], key=lambda r: (r["dataset"] != "pendulum", r["dataset"],
                                                 r["model"], r["method"] == "nuts"))
    lines = [f"| `{r['model']}` | {r['method']} | {r['dataset']} | "
             + " | ".join(f"{r[c]:.4g}" for c in cols) + f" | {r['fit_seconds']:.1f} |"
             for r in rows]
    return "\n".join([head, *lines])


def step_time() -> str:
    """reports/performance/step_time.json (benchmarks/step_time.py --plain-loop) as a table."""
    doc = json.loads((ROOT / "reports" / "performance" / "step_time.json").read_text())
    head = ("| entry | guide | objective (particles) | ms/step | reference | ratio | plain loop |\n"
            "| --- | --- | --- | --- | --- | --- | --- |")
    lines = [f"| `{e['name']}` | {e['guide'] if e['guide'] != '-' else 'type-II ML'} | "
             f"{e['objective']} ({e['particles']}) | {e['ms_per_step']:.2f} | "
             f"{e['ref_ms_per_step']:.2f} | {e['ratio']:.2f} | {e['plain_loop_ms_per_step']:.2f} |"
             for e in doc["entries"]]
    return "\n".join([head, *lines])


def multimodal() -> str:
    """reports/multimodal.json (benchmarks/multimodal.py) as a Markdown table."""
    doc = json.loads((ROOT / "reports" / "multimodal.json").read_text())
    head = ("| entry | data | reference s | verdict | modes | log evidence (2 runs) | reference "
            "NMSE / MNLP | chains stacked | single VI | stacked VI (K) | VI s (single / stacked) |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def pair(d):
        return f"{d['nmse']:.3f} / {d['mnlp']:.3f}" if d else "–"

    lines = []
    for r in doc["records"]:
        if "single" not in r:  # a reference-only record (--reference-only)
            continue
        ref = r["reference"]
        verdict = "converged" if ref["converged"] else "NOT CONVERGED: " + "; ".join(
            ref["reasons"])
        stacked = r.get("stacked")
        lz = ", ".join(f"{v:.1f}" for v in ref["log_evidence"])
        vi_s = f"{r['single']['seconds']:.0f}" + (f" / {stacked['seconds']:.0f}" if stacked else "")
        k = f" ({stacked['paths']})" if stacked else ""
        lines.append(
            f"| `{r['entry']}` | {r['dataset']} | {ref['seconds']:.0f} | {verdict} | "
            f"{ref['modes']} | {lz} | {pair(ref)} | {pair(r.get('reference_chains_stacked'))} | "
            f"{pair(r['single'])} | {pair(stacked)}{k} | {vi_s} |")
    return "\n".join([head, *lines])


BLOCKS = {"catalog_metrics": catalog_metrics, "step_time": step_time, "multimodal": multimodal}


def render(text: str) -> str:
    for name, make in BLOCKS.items():
        # the block's content up to its own end marker (lazy: an empty block stays one block)
        pattern = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- /generated -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no generated block '{name}'")
        text = pattern.sub(lambda m, make=make: m.group(1) + make() + "\n" + m.group(2), text)
    return text


def main() -> int:
    path = ROOT / "README.md"
    text = path.read_text()
    new = render(text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print("README.md's generated tables differ from reports/*.json: run "
                  "python scripts/readme_tables.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
