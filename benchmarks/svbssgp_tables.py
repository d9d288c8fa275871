"""Markdown tables from the JSON of benchmarks/svbssgp_paper.py.

  python benchmarks/svbssgp_tables.py reports/svbssgp/*.json > reports/svbssgp/tables.md
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def curve_table(exp: dict) -> str:
    """RMSE (MNLP) per checkpoint step, one column per scored (model, γ, r)."""
    cells: dict = defaultdict(dict)
    labels: list[str] = []
    final: dict = {}
    for run in exp["runs"]:
        for row in run["curve"]:
            if row["label"] not in labels:
                labels.append(row["label"])
            key = "final" if row.get("final") else row["step"]
            (final if key == "final" else cells[key])[row["label"]] = row
    steps = sorted(cells)
    head = "| step | " + " | ".join(labels) + " |\n|" + " --- |" * (len(labels) + 1) + "\n"
    body = ""
    for s in steps:
        body += f"| {s} | " + " | ".join(
            f"{cells[s][lab]['rmse']:.4g}" if lab in cells[s] else "" for lab in labels) + " |\n"
    body += "| **final, all test rows** | " + " | ".join(
        f"**{final[lab]['rmse']:.4g}** (MNLP {final[lab]['mnlp']:.3g}, step {final[lab]['step']})"
        for lab in labels) + " |\n"
    return head + body


def markdown(header: list[str], rows: list[list]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def timing_table(exp: dict) -> str:
    return markdown(["model", "steps", "partitions p", "k-means s", "train ms/step", "n_train"],
                    [[r["model"], r["steps"], r["partitions"] or "-", f"{r['partition_seconds']:.2f}",
                      f"{r['ms_per_step']:.2f}", r["n_train"]] for r in exp["runs"]])


def nscan_table(exp: dict) -> str:
    return markdown(["n", "partitions", "padded block rows", "k-means + assignment s", "ms/step"],
                    [[f"{r['n']:,}", r["partitions"], r["block_size"], f"{r['kmeans_seconds']:.2f}",
                      f"{r['ms_per_step']:.3f}"] for r in exp["rows"]])


def baselines_table(exp: dict) -> str:
    return markdown(["data", "mean-predictor RMSE", "MNLP"],
                    [[name, f"{r['rmse']:.4g}", f"{r['mnlp']:.4g}"] for name, r in exp["rows"].items()])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", help="JSON files written by benchmarks/svbssgp_paper.py")
    for path in p.parse_args().paths:
        with open(path) as f:
            exp = json.load(f)
        if "experiment" not in exp:  # e.g. the archived end-to-end fit record
            continue
        print(f"### {exp['experiment']} ({path})\n")
        print(f"Machine: {exp['machine']}; jax {exp['jax']}; wall {exp['wall_seconds']:.0f} s; "
              f"args {json.dumps(exp['args'])}\n")
        if exp["experiment"] == "nscan":
            print(nscan_table(exp))
        elif exp["experiment"] == "baselines":
            print(baselines_table(exp))
        else:
            print(f"n_train = {exp['n_train']}, n_test = {exp['n_test']}. Test RMSE in original "
                  "units vs SVI step (checkpoints on a fixed test subset):\n")
            print(curve_table(exp))
            print(timing_table(exp))


if __name__ == "__main__":
    main()
