"""The results tables of the docs site, made from the archived JSON in reports/ (never typed by
hand); ``docs/gen_pages.py`` writes one page per entry of :data:`TABLES` at every docs build.

    python scripts/results_tables.py SLUG    # print one table (catalog, multimodal, …)
"""

from __future__ import annotations

import json
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


def _archived_tables(path: str):
    """A Markdown file a benchmark script writes from its JSON (e.g. benchmarks/tan_paper.py
    tables), without its own title."""
    def make() -> str:
        lines = (ROOT / path).read_text().splitlines()
        return "\n".join(ln[1:] if ln.startswith("### ") else ln for ln in lines
                         if not ln.startswith("# ")).strip()
    return make


# slug: (title, what produced it, the table)
TABLES = {
    "catalog": ("Catalog entries on pendulum and Auto-MPG",
                "`python benchmarks/catalog_metrics.py` (split 0, each entry's catalog settings; "
                "`reports/catalog_metrics.json`). Test metrics in original units of the target.",
                catalog_metrics),
    "multimodal": ("Multimodal posteriors: the reference, single and stacked VI",
                   "`python benchmarks/multimodal.py` (`reports/multimodal.json`): per entry with "
                   "latent variables, the reference's time and verdict (tempered SMC + NUTS "
                   "polishing), its log evidence per SMC run, and the test NMSE / MNLP of the "
                   "reference, of its chains stacked, of one VI run and of K stacked VI runs.",
                   multimodal),
    "step-time": ("Time per optimisation step",
                  "`python benchmarks/step_time.py --plain-loop` (`reports/performance/"
                  "step_time.json`): milliseconds per SVI / ML step of each catalog entry on "
                  "pendulum, against a hand-written reference loss and a plain Python loop.",
                  step_time),
    "tan-2016": ("Tan et al. 2016: the paper's experiments",
                 "`python benchmarks/tan_paper.py {pendulum,autompg,timing}` then "
                 "`python benchmarks/tan_paper.py tables reports/tan/*.json` "
                 "(`reports/tan/tables.md`).", _archived_tables("reports/tan/tables.md")),
    "hoang-2017": ("sVBSSGP and VSSGP: Hoang et al. 2017's experiments",
                   "`python benchmarks/svbssgp_paper.py {airline,kin40k,blog,nscan}` then "
                   "`python benchmarks/svbssgp_tables.py reports/svbssgp/*.json` "
                   "(`reports/svbssgp/tables.md`).", _archived_tables("reports/svbssgp/tables.md")),
}


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in TABLES:
        print(f"usage: python scripts/results_tables.py {{{','.join(TABLES)}}}", file=sys.stderr)
        return 2
    print(TABLES[sys.argv[1]][2]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
