"""The results tables of the docs site, made from the archived JSON in reports/ (never typed by
hand); ``docs/gen_pages.py`` writes one page per entry of :data:`TABLES` at every docs build.

    python scripts/results_tables.py SLUG    # print one table (catalog, multimodal, …)
"""

from __future__ import annotations

import json
import statistics
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
    head = ("| entry | data | reference s | verdict | modes | log evidence (runs) | reference "
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
        if ref.get("gold"):
            verdict = f"{ref['gold']}" + ("" if ref["converged"] else ": " + "; ".join(
                ref["reasons"]))
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


def _peers_doc() -> dict:
    return json.loads((ROOT / "reports" / "peers" / "peers.json").read_text())


PEERS_FIGURE = "peers-nmse-time.png"
# Why a set's best Bayesian entry misses a target, with the measurement behind it (shown only
# while the set misses)
MISS_REASONS = {
    "pendulum": "The exact GP fits all 315 rows; `vssgp_collapsed` keeps improving up to m = 200 "
                "(the m scan), where its 20,000 steps of the (2m)² features take 4× the SVGP's "
                "2,000 minibatch steps.",
    "yacht": "At m = 100 the stop rule needs about 27,000 steps (`svbssgp_collapsed`) or "
             "12,000-15,000 (`vssgp_collapsed`) on 277 rows; the exact GP on all rows is the best "
             "peer.",
    "concrete": "m = 100 is the largest m the 600 s budget allows (m = 200: an estimated "
                "1,010 s) and the pilot's score still rises there; the exact GP on all 927 rows "
                "predicts better (3 seeds).",
    "pol": "`svbssgp_collapsed`'s full-rank guide over 50 × 26 = 1,300 frequency coordinates "
           "costs about 9.5 ms a step, and its stop rule takes 28,000 steps.",
    "airline-1m": "One seed; the partition-sampled `vssgp` at m = 20 (NMSE 1.03×).",
}


def _peers_gpu() -> list[str]:
    """reports/peers/gpu: the same benchmark on a GPU, run twice (the second run with JAX's
    compilation cache filled by the first)."""
    folder = ROOT / "reports" / "peers" / "gpu"
    runs = {k: json.loads((folder / f"{k}.json").read_text())
            for k in ("first_run", "compilation_cached") if (folder / f"{k}.json").is_file()}
    if len(runs) < 2:
        return []
    first, cached = runs["first_run"], runs["compilation_cached"]
    m = first["machine"]
    gpu = ", ".join(m.get("device_kind") or m["devices"])
    out = ["", f"On a GPU ({gpu}, JAX {m['jax']}): the same command, run twice "
           "with JAX's persistent compilation cache (`JAX_COMPILATION_CACHE_DIR`), so the second "
           "run is what a user's next fit of the same shapes costs. Fit + predict, data loading "
           "aside:", "",
           "| set | n train | entry | NMSE | MNLP | fit + predict s, first run | "
           "fit + predict s, compilation cached |", "| --- | --- | --- | --- | --- | --- | --- |"]
    again = {(r["set"], r["method"]): r for r in cached["records"]}
    for r in first["records"]:
        if "nmse" not in r:
            continue
        c = again.get((r["set"], r["method"]))
        warm = "–" if c is None or "nmse" not in c else \
            f"{c['fit_seconds']:.1f} + {c['predict_seconds']:.1f} = " \
            f"{c['fit_seconds'] + c['predict_seconds']:.1f}"
        out.append(f"| {r['set']} | {r['n_train']} | `{r['method']}` | {r['nmse']:.4g} | "
                   f"{r['mnlp']:.3f} | {r['fit_seconds']:.1f} + {r['predict_seconds']:.1f} = "
                   f"{r['fit_seconds'] + r['predict_seconds']:.1f} | {warm} |")
    return out


def _m_text(ms, sized=False) -> str:
    """The m of each seed's fit, once where they agree ("–" for records without it), marked
    "sized" where ``m = "auto"`` chose it."""
    if not ms:
        return "–"
    text = str(ms[0]) if len(set(ms)) == 1 else "/".join(map(str, ms))
    return f"{text} (sized)" if sized else text


def peers() -> str:
    """reports/peers/peers.json (benchmarks/peers.py): the targets per set, then every method."""
    doc = _peers_doc()
    t, cost = doc["targets"], doc["cost_formula"]
    out = [f"Targets: this project's best Bayesian entry has test NMSE ≤ {t['nmse_ratio']:g}× the "
           f"best peer's and MNLP ≤ the best peer's + {t['mnlp_above']:g}, at ≤ {t['time_ratio']:g}× "
           "the GPyTorch SVGP's fit time. Machine: "
           f"{doc['machine']['cpus']} CPUs, one thread per library. An entry whose every step "
           f"sees every training row is recorded as skipped where {cost['steps']} (NCVMP: "
           f"{cost['ncvmp']}) exceeds {doc['full_batch_max']:.1e} (ten to forty minutes on one "
           "thread).", "",
           "| set | best peer NMSE | best peer MNLP | best Bayesian entry | m | NMSE (ratio) | "
           "MNLP (− best peer) | fit s (× SVGP) | targets met | entries meeting all three |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, s in doc["summary"].items():
        met = ", ".join(k for k, v in s["meets"].items() if v) or "none"
        if s.get("decided"):  # several seeds: met / missed by more than the standard errors
            met = ", ".join(f"{k} {v}" for k, v in s["decided"].items())
        tr = f" ({s['time_ratio']:.2f}×)" if "time_ratio" in s else ""

        def se(key, f, s=s):
            return f" ± {s[key + '_se']:{f}}" if s.get("seeds", 1) > 1 else ""

        out.append(f"| {name} | {s['best_peer_nmse'][1]:.4g} ({s['best_peer_nmse'][0]}) | "
                   f"{s['best_peer_mnlp'][1]:.3f} ({s['best_peer_mnlp'][0]}) | `{s['best_bayesian']}` | "
                   f"{_m_text(s.get('m'), s.get('m_sized'))} | "
                   f"{s['nmse']:.4g}{se('nmse', '.2g')} ({s['nmse_ratio']:.2f}×) | {s['mnlp']:.3f}"
                   f"{se('mnlp', '.3f')} ({s['mnlp_above_best']:+.3f}) | {s['fit_seconds']:.1f}{tr} | "
                   f"{met} | "
                   f"{', '.join(f'`{e}`' for e in s.get('all_three', [])) or 'none'} |")
    misses = []
    for name, s in doc["summary"].items():
        if s.get("all_three"):
            continue
        reads = s.get("decided") or {k: "met" if v else "missed" for k, v in s["meets"].items()}
        missed = [k for k, v in reads.items() if v == "missed"]
        if missed:
            why = MISS_REASONS.get(name, "not analysed yet")
            misses.append(f"- **{name}**: no entry meets all three; the best Bayesian entry misses "
                          f"{' and '.join(missed)}. {why}")
    if misses:
        out += ["", "Why the misses (the measurements behind each reading):", "", *misses]
    if doc["not_measured"]:
        out += ["", "Not measured yet (the run resumes from the records there): " + "; ".join(
            f"{k}: {', '.join(v)}" for k, v in doc["not_measured"].items()) + "."]
    eq = {k: s for k, s in doc["summary"].items() if s.get("svgp_rmse_at_equal_time") is not None}
    if eq:
        out += ["", "On the large sets, the best Bayesian entry's test RMSE against the GPyTorch "
                "SVGP's at the same fit time (its trajectory's last evaluation by then), and the "
                "entry's fit and prediction time:", "",
                "| set | best Bayesian entry | RMSE | SVGP's RMSE at equal time | fit + predict s |",
                "| --- | --- | --- | --- | --- |"]
        for name, s in eq.items():
            out.append(f"| {name} | `{s['best_bayesian']}` | {s['rmse']:.4g} | "
                       f"{s['svgp_rmse_at_equal_time']:.4g} | "
                       f"{s['fit_seconds'] + s['predict_seconds']:.1f} |")
    out += _peers_gpu()
    out += ["", f"![Test NMSE against fit time]({PEERS_FIGURE})", "",
            "Converged: of the seeds' fits, how many its stop rule declared done (the rest ended at "
            "their step budget; – where the record predates the count or the method has no stop "
            "rule).", "",
            "| set | n train | method | m | NMSE | MNLP | 90% coverage | fit s | predict s | "
            "converged |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in doc.get("by_method") or doc["records"]:
        name = f"`{r['method']}`" if r["kind"] == "ours" else r["method"]
        if "nmse" not in r:
            why = r.get("skipped") or r.get("error", "")
            out.append(f"| {r['set']} | {r['n_train']} | {name} | – | – | – | – | – | – ({why}) | – |")
            continue
        sub = f" ({r['training_rows_used']} rows)" if r.get("training_rows_used") else ""
        k = r.get("seeds", 1)
        pm = (lambda key, f, r=r: f"{r[key]:{f}} ± {r[key + '_se']:{f}}") if k > 1 else \
            (lambda key, f, r=r: f"{r[key]:{f}}")
        seeds = f" ({k} seeds)" if k > 1 else ""
        conv = f"{r['converged_seeds']}/{k}" if "converged_seeds" in r else "–"
        out.append(f"| {r['set']} | {r['n_train']} | {name}{sub}{seeds} | "
                   f"{_m_text(r.get('m_by_seed'), r.get('m_sized'))} | {pm('nmse', '.4g')} | "
                   f"{pm('mnlp', '.3f')} | {r['coverage_90']:.3f} | {pm('fit_seconds', '.1f')} | "
                   f"{r['predict_seconds']:.2f} | {conv} |")
    return "\n".join(out)


def peers_figure(fileobj) -> None:
    """Test NMSE against fit seconds per set: the SVGPs' trajectories as lines, every other fit
    as a point (PNG into ``fileobj``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = _peers_doc()
    records = doc.get("by_method") or doc["records"]  # means over seeds where there are several
    sets = list(dict.fromkeys(r["set"] for r in records if "nmse" in r))
    cols = min(3, len(sets))
    rows = -(-len(sets) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, name in zip(axes.ravel(), sets, strict=False):
        for r in (r for r in records if r["set"] == name and "nmse" in r):
            if r.get("trajectory"):
                tr = r["trajectory"]
                ax.plot([p["seconds"] for p in tr], [p["nmse"] for p in tr], "-", lw=1,
                        label=r["method"] + " (trajectory)")
            marker = "o" if r["kind"] == "ours" else "s"
            ax.plot(r["fit_seconds"], r["nmse"], marker, ms=5, label=r["method"])
        ax.set(xscale="log", yscale="log", title=name, xlabel="fit seconds", ylabel="test NMSE")
    for ax in axes.ravel()[len(sets):]:
        ax.axis("off")
    uniq = {}
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            uniq.setdefault(lab, h)
    fig.legend(uniq.values(), uniq.keys(), loc="lower center", ncol=4, fontsize=7)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(fileobj, format="png", dpi=90)
    plt.close(fig)


def sizing_choices() -> str:
    """reports/sizing/sizing.json (benchmarks/sizing_choices.py): the m that m = "auto" picks on
    each peers set, with the pilot's scores and the candidates the budget left out."""
    from ssgp_ppl.entry import load_entry

    doc = json.loads((ROOT / "reports" / "sizing" / "sizing.json").read_text())
    ladder = doc["ladder"]
    names = sorted({r["entry"] for r in doc["records"]})
    budgets = ", ".join(f"{load_entry(n).config['inference'][load_entry(n).methods[0]]['steps']:,}"
                        f" for `{n}`" for n in names)
    from ssgp_ppl.inference.sizing import PILOT_ROWS

    out = [f"Budget {doc['default_budget']:g} s (the default). Pilot score: the leave-one-out log "
           "density per row of the fixed-frequency type-II SSGP at each m, on at most "
           f"{PILOT_ROWS:,} training rows; – where the budget (or memory) left that m out. The "
           f"estimate counts every step of the entry's step budget ({budgets}) at its estimated "
           "cost, so that the fit can run to its stop rule.", "",
           "| set | n train | d | entry | m | " + " | ".join(f"m = {m}" for m in ladder)
           + " | pilot s |", "| --- " * (6 + len(ladder)) + "|"]
    for r in doc["records"]:
        if "sizing" not in r:  # why no m was chosen, short: why the smallest m was left out
            first = r.get("excluded", {}).get(str(ladder[0]))
            why = f"none fits (m = {ladder[0]}: {first})" if first else r.get("error", "")
            out.append(f"| {r['set']} | {r['n_train']} | {r['d']} | `{r['entry']}` | – | "
                       + " | ".join("–" for _ in ladder) + f" | {why} |")
            continue
        s = r["sizing"]
        cells = [f"**{s['scores'][str(m)]:.3f}**" if m == s["m"] else
                 f"{s['scores'][str(m)]:.3f}" if str(m) in s["scores"] else "–" for m in ladder]
        out.append(f"| {r['set']} | {r['n_train']} | {r['d']} | `{r['entry']}` | {s['m']} | "
                   + " | ".join(cells) + f" | {s['pilot_seconds']:.1f} |")
    return "\n".join(out + step_cost_check())


def step_cost_check() -> list[str]:
    """The estimate per step against the steps the peers benchmark's auto-sized fits took
    (their fit seconds less the pilot's, over their steps): how far the rule can be trusted."""
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.inference.sizing import fit_seconds

    rows = []
    for path in sorted((ROOT / "reports" / "peers").glob("*/*.json")):
        r = json.loads(path.read_text())
        st = r.get("settings", {})
        if "sizing" not in r or not st.get("steps"):
            continue
        took = (r["fit_seconds"] - r["sizing"]["pilot_seconds"]) / st["steps"]
        est = fit_seconds(load_entry(r["method"]), r["n_train"], st["m"], steps=1)
        rows.append((took / est, r["set"], r["method"], st["m"], r["d"]))
    if not rows:
        return []
    rows.sort()
    ratios = [q[0] for q in rows]
    top = "; ".join(f"{s} `{e}` m = {m} (d = {d}): {q:.2f}×" for q, s, e, m, d in rows[-3:][::-1])
    return ["", f"The estimate against the steps measured: over the {len(rows)} auto-sized fits "
            "of the peers benchmark, a step took "
            f"{min(ratios):.2f}× to {max(ratios):.2f}× the estimated seconds (median "
            f"{statistics.median(ratios):.2f}×), so the estimate is not an upper bound; the "
            f"largest: {top}. Fits that shared the cores with other runs count too."]


def mscan() -> str:
    """reports/mscan/mscan.json (benchmarks/mscan.py): test NMSE (MNLP) per number of features m."""
    doc = json.loads((ROOT / "reports" / "mscan" / "mscan.json").read_text())
    ms = sorted({r["m"] for r in doc["records"]})
    by: dict = {}
    for r in doc["records"]:
        by.setdefault((r["set"], r["entry"]), {})[r["m"]] = r
    out = ["| set | entry | " + " | ".join(f"m = {m}" for m in ms) + " | NMSE non-increasing |",
           "| --- | --- | " + " | ".join("---" for _ in ms) + " | --- |"]
    for (s, e), row in by.items():
        cells = [f"{row[m]['nmse']:.3f} ({row[m]['mnlp']:.2f})" if m in row else "–" for m in ms]
        ok = doc["verdict"][f"{s}/{e}"]["non_increasing"]
        out.append(f"| {s} | `{e}` | " + " | ".join(cells) + f" | {'yes' if ok else 'no'} |")
    if doc.get("memory"):
        steps = {(r["set"], r["entry"], r["m"]): r for r in doc["records"]}
        out += ["", "Each fit at the largest m: milliseconds per step (the scan's fit seconds / "
                "steps, compilation included), the process's peak resident memory, what it held "
                "before the fit (Python, JAX, the data) and `ssgp_ppl.runtime.resources.estimate`'s figure "
                "(`python benchmarks/mscan.py --memory`). The estimate counts the fit's arrays; "
                "most of the rest is XLA's compiled programs and their buffers, which a 315-row "
                "pendulum fit needs as much as a 4,500-row one.", "",
                "| set | entry | m | n train | ms / step | peak MB | before fit MB | estimate MB |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in doc["memory"]:
            st = steps.get((r["set"], r["entry"], r["m"]))
            ms_step = f"{st['ms_per_step']:.2f}" if st else "–"
            out.append(f"| {r['set']} | `{r['entry']}` | {r['m']} | {r['n_train']} | {ms_step} | "
                       f"{r['peak_rss_mb']:.0f} | {r['rss_before_fit_mb']:.0f} | "
                       f"{r['estimate_mb']:.1f} |")
    return "\n".join(out)


def _machine(m: dict) -> str:
    """A gold reference's machine in a few words: its GPU, or its CPU count."""
    if m.get("jax_backend") == "gpu":
        return ", ".join(m.get("devices", [])) or "a GPU"
    return f"{m.get('cpus')} CPUs"


def gold_references() -> str:
    """The stored gold references (ssgp_ppl/references/, benchmarks/gold_references.py): each
    one's verdict with the figures it rests on, then the verdict's thresholds."""
    from ssgp_ppl.diagnostics import gold

    out = ["| entry | data | runs × particles | machine | wall min | log Ẑ mean ± se (sd) | log Z by IS (k̂); "
           "by bridge sampling where k̂ > 0.5 | "
           "max R-hat | min ESS | run MNLP gap | test NMSE / MNLP | verdict |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes = []
    for g in gold.stored():
        p, v = g.provenance, g.verdict
        isc = v.get("is_check")
        ess = min(list(v["ess_bulk_min"].values()) + list(v["ess_tail_min"].values()))
        state = "CONVERGED"
        if not v["converged"]:  # the reasons under the table, one line each, not in a cell
            state = "NOT CONVERGED" + ("" if (lim := gold.limit(v)) is None else f", **{lim}**")
            why = "; ".join(v["reasons"] + [b for b in [gold.budget_text(v)] if b])
            notes.append(f"- `{p['entry']}` on {p['dataset']}: {why}.")
        out.append(
            f"| `{p['entry']}` | {p['dataset']} | {p['runs']} × {p['settings']['particles']} | "
            f"{_machine(p['machine'])} | "
            f"{p['wall_seconds'] / 60:.0f} | {v['log_evidence_mean']:.2f} ± "
            f"{v['log_evidence_se']:.2f} ({v['log_evidence_sd']:.2f}) | "
            + ("–" if isc is None else f"{isc['log_z']:.2f} ({isc['khat']:.2f})"
               + ("" if v.get("evidence_check") != "bridge sampling" else
                  f"; bridge {isc['bridge']['log_z']:.2f} ± {isc['bridge']['se']:.2f}"))
            + f" | {max(v['rhat_max'].values()):.3f} | {ess:.0f} | {v['nlpd_max_gap']:.3f} | "
            f"{p['metrics']['nmse']:.4f} / {p['metrics']['mnlp']:.3f} | {state} |")
    if len(out) == 2:
        out.append("| (none stored yet) | | | | | | | | | | | |")
    if notes:
        out += ["", "Why a reference is not converged:", ""] + notes
    rules = [f"- at least **{gold.MIN_RUNS}** independent runs, each from the prior with its own seed;",
             f"- rank R-hat **≤ {gold.RHAT_MAX:g}** on every symmetry-invariant quantity with each "
             "run as one chain, its particles shuffled first (resampling leaves them in ancestor "
             "order, which R-hat would read as a trend): the runs found the same distribution;",
             f"- pooled bulk and tail ESS **≥ {gold.ESS_MIN}** (Vehtari et al. 2021): enough draws "
             "for the tails the coverage checks use;",
             f"- each run's test MNLP within **{gold.NLPD_TOL:g}** nats of the pooled posterior's: "
             "the predictions a comparison scores do not depend on the run;",
             f"- the runs' log evidence with sd **≤ {gold.LOG_Z_SD_MAX:g}** nats: tempered SMC "
             "weighs modes by their evidence, so runs that disagree on log Z disagree on the "
             "weights of modes;",
             f"- where the target has at most **{gold.IS_MAX_DIM}** dimensions, importance sampling "
             "(180,000 draws from the equal mixture of a multivariate-t mixture fitted to the "
             "particles and a t-kernel density estimate on them: a defensive proposal, "
             "Hesterberg 1995, that follows both a few elongated modes and a posterior spread "
             "over many orthants; where flipping every frequency's sign leaves the target "
             "unchanged, as in the Tan et al. 2016 model, both are fitted to the particles and "
             "their mirror images and averaged over the two orientations, the symmetry checked "
             "at the particles first; two proposals, one fitted to every run's particles and one with "
             "another seed to the stored pooled draws, the worst counting) gives log Z with "
             "Pareto k̂ "
             f"**≤ {gold.IS_KHAT_MAX:g}** (Vehtari et al. 2024), and it lies within "
             f"**{gold.IS_MATCH:g}** nats of the runs' mean: agreeing runs could share a bias, "
             "an independent estimator could not share it. Where k̂ is larger, bridge sampling "
             "(Meng & Wong 1996) on the same proposal checks log Z instead: half the particles "
             "fit the proposal, the other half are the bridge's posterior draws, so a region the "
             "proposal underweights is met by posterior draws there; its standard error "
             f"(Frühwirth-Schnatter 2004) must be **≤ {gold.BRIDGE_SE_MAX:g}** nats and its "
             f"estimate within **{gold.IS_MATCH:g}** nats of the runs' mean.",
             "",
             "A reference that fails on its log evidence says how many particles a run would need "
             "(the variance of log Ẑ falls as 1/N; Del Moral, Doucet & Jasra 2006) and the hours "
             "that would take on the machine that computed it; above "
             f"**{gold.ATTAINABLE_HOURS:g}** hours it is labelled *not attainable on this "
             "hardware*. One whose runs disagree with each run in a mode of its own is labelled "
             "*runs in separate modes*: particles within one run sit in one mode, and more "
             "particles a run narrow the spread of log Ẑ without bringing the runs together. "
             "Comparisons use such a reference's runs pooled with equal weights."]
    return "\n".join(out + ["", "The verdict's thresholds (`ssgp_ppl.diagnostics.gold`):", ""] + rules
                     + ["", "Entries whose reference cannot be stored:", ""] + _conditional_entries())


def _conditional_entries() -> list[str]:
    """The catalog entries with latent variables and type-II (learned) sites: their reference
    samples the latent sites given the fit's own type-II estimates, so it is recomputed per fit."""
    from ssgp_ppl.entry import list_entries, load_entry

    rows = []
    for name in list_entries():
        e = load_entry(name)
        if e.latent_sites and e.learned_sites:
            rows.append(f"- `{name}`: samples {', '.join(e.latent_sites)} given "
                        f"{', '.join(e.learned_sites)}")
    return rows + [
        "",
        "Their reference samples the latent sites *given the type-II estimates of the fit being "
        "compared* (empirical Bayes): it is a different posterior for every fit, and a "
        "float32 optimisation's estimates differ from machine to machine beyond what a stored "
        "reference could be matched on. `compare` computes it with each fit and shows its own "
        "verdict ([Comparison reports](comparisons.md) give it for pendulum and Auto-MPG)."]


def vi_vs_gold() -> str:
    """reports/vi_vs_gold.json (benchmarks/vi_vs_gold.py): each stored gold reference against its
    entry's VI, one path and K stacked paths."""
    path = ROOT / "reports" / "vi_vs_gold.json"
    if not path.exists():
        return "(not measured yet: `python benchmarks/vi_vs_gold.py`)"
    doc = json.loads(path.read_text())
    out = ["| entry | data | fit | test NMSE | test MNLP | cov. 90% | stopped | W1 / floor: noise "
           "| signal | frequency spread | f* |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in doc["records"]:
        g = r["gold"]
        own = r["folder"].startswith(f"{r['entry']}-")  # else another entry's, same target
        label = g["label"] + ("" if own else f" (stored as `{r['folder']}`: the same target)")
        out.append(f"| `{r['entry']}` | {r['dataset']} | {label} | {g['nmse']:.4f} | "
                   f"{g['mnlp']:.3f} (runs {g['run_mnlp_min']:.3f}–{g['run_mnlp_max']:.3f}) | "
                   f"{g['coverage_90']:.3f} | – | | | | |")
        for kind in ("single", "stacked"):
            if kind not in r:
                continue
            v = r[kind]
            label = "VI, one path" if kind == "single" else f"VI, {r['paths']} paths stacked"
            if kind == "single":
                stop = f"{'converged' if v['converged'] else 'step budget'} at {v['steps']:,}"
            else:  # every path converged, or one stopped by its step budget
                stop = "every path converged" if v["converged"] else "a path at the step budget"
            w1 = [f"{v['w1_scaled'][q]['value']:.2f} / {v['w1_scaled'][q]['floor']:.2f}"
                  if q in v["w1_scaled"] and v["w1_scaled"][q]["floor"] is not None else "–"
                  for q in ("noise", "signal", "frequency_spread", "f_test")]
            out.append(f"| | | {label} | {v['nmse']:.4f} | {v['mnlp']:.3f} | "
                       f"{v['coverage_90']:.3f} | {stop} | " + " | ".join(w1) + " |")
    return "\n".join(out)


def _grouped_readings(rows: list[dict]) -> list[str]:
    """The quantities not read calibrated, grouped by name (kernel[0, 0.5], kernel[0, 1], … are
    one "kernel" group): each reading with how many of the group's components it has, e.g.
    "kernel: 18 of 18 biased low"; a scalar quantity by itself."""
    groups: dict[str, list[dict]] = {}
    for s in rows:
        groups.setdefault(s["quantity"].split("[")[0], []).append(s)
    out = []
    for name, members in groups.items():
        readings: dict[str, int] = {}
        for s in members:
            if not s["calibrated"]:
                why = s["verdict"].split(";")[0].removeprefix("NOT calibrated, ").split(":")[0]
                readings[why] = readings.get(why, 0) + 1
        if not readings:
            continue
        scalar = len(members) == 1 and "[" not in members[0]["quantity"]
        out.append(f"{name}: " + ", ".join(
            why if scalar else f"{k} of {len(members)} {why}" for why, k in readings.items()))
    return out


def _sbc_doc() -> dict | None:
    """reports/sbc.json (benchmarks/sbc.py); None before it is written."""
    path = ROOT / "reports" / "sbc.json"
    return json.loads(path.read_text()) if path.exists() else None


def _sbc_records() -> list[dict] | None:
    """reports/sbc.json's records (benchmarks/sbc.py); None before it is written."""
    doc = _sbc_doc()
    return None if doc is None else doc["records"]


def sbc_figures(records: list[dict] | None = None) -> list[Path]:
    """The entries' SBC figures (``reports/sbc/<entry>.png``, ``benchmarks/sbc.py``), in the
    order of the records (default: reports/sbc.json's)."""
    records = _sbc_records() if records is None else records
    names = [r["entry"] for r in records or []]
    return [f for f in (ROOT / "reports" / "sbc" / f"{n}.png" for n in names) if f.exists()]


def _minutes(seconds: float) -> str:
    """A wall time as minutes and seconds: ``28 min 34 s``; under a minute ``41 s``."""
    m, sec = divmod(int(round(seconds)), 60)
    return f"{m} min {sec} s" if m else f"{sec} s"


def sbc() -> str:
    """reports/sbc.json (benchmarks/sbc.py) as a Markdown table: per entry and SBC method, the
    quantities read calibrated, seconds per simulation, the fits that converged (VI: the stop
    rule; NCVMP: its bound; the reference: every temperature reached and no divergent NUTS
    transition, R-hat of the chains at most 1.01) and that failed, the entry's wall time (every
    method, batches taken from the store excepted) and the quantities that were not calibrated
    (with their reading)."""
    doc = _sbc_doc()
    if doc is None:
        return "*Not generated yet: run `python benchmarks/sbc.py` (writes `reports/sbc.json`).*"
    records, current = doc["records"], doc["settings"]
    head = ("| entry | method | simulations | calibrated | s / simulation | converged | failed | "
            "entry's time | not calibrated |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    lines = []
    for r in records:
        for m, tally in r["calibrated"].items():
            bad = _grouped_readings([s for s in r["summary"] if s["method"] == m])
            sims = f"{r['sims_done']}" + ("" if not r["stopped"] else f" of {r['sims']} (stopped)")
            sims += f" ({r['workers']} workers)" if r.get("workers", 1) > 1 else ""
            if r.get("settings", current) != current:  # run at other settings than the file's
                sims += f" at {', '.join(f'`{x}`' for x in r['settings'])}"
            label, shared = m, r.get("shared", {}).get(m)
            if shared:  # batches computed by another entry's run (the same model): say whose
                whose = ", ".join(f"`{e}`" for e in shared["computed_by"].split(", "))
                k = shared["simulations"]
                label = f"{m} ({'all' if k == r['sims_done'] else k} computed by {whose}'s run)"
            lines.append(f"| `{r['entry']}` | {label} | {sims} | {tally} | "
                         f"{r['seconds_per_simulation'][m]:.2f} | "
                         f"{r['converged'][m]} of {r['sims_done']} | {r['failed'][m]} | "
                         f"{_minutes(r['seconds'])} | {'; '.join(bad) or '–'} |")
    figs = [f"### `{f.stem}`\n\n![SBC of {f.stem}: rank histograms and ECDF − uniform with the "
            f"99% band](sbc-{f.name})" for f in sbc_figures(records)]
    if figs:
        figs.insert(0, "## Rank histograms and ECDF differences\n\nFor each entry: the noise, "
                    "signal, first input's frequency spread and kernel at lag 0.5, f at the "
                    "middle design point and the log-likelihood (the quantities it ranks), "
                    "methods side by side, the grey band the 99% simultaneous band.")
    return "\n\n".join(["\n".join([head, *lines]), *figs])


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
    "sbc": ("Simulation-based calibration",
            "`python benchmarks/sbc.py` (`reports/sbc.json`): every entry with latent variables, "
            "N simulations on 40 pendulum inputs at small size (m = 6, L = 99 draws, the "
            "reference's 10 HMC moves a temperature and NUTS warm-up of 100 steps a chain, at most "
            "2 SVI paths stacked; a row "
            "run at other settings names them), each SBC "
            "method that applies; a quantity is calibrated when the ECDF of its ranks stays in "
            "the 99% simultaneous band and the χ² test does not reject at 1% "
            "([Simulation-based calibration](../guide/sbc.md)). A fit converged when VI's stop "
            "rule or NCVMP's bound (in float64) said so, and for the reference when its SMC "
            "reached every temperature, no NUTS transition diverged and the rank R-hat of its "
            "chains' log density is at most 1.01. Seconds per simulation are those of the "
            "process that ran it: an entry run by 2 workers (two processes, a core each) took "
            "about half of that in wall time. The entry's time is its run's wall time, every "
            "method together, batches taken from the store excepted. A reference \"computed by\" "
            "another entry's run is that run's, taken from the benchmark's store: the two "
            "entries have one model and "
            "differ in their guide or objective alone (its seconds are that run's).", sbc),
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
    "peers": ("Against the peers: GPyTorch, GPJax, exact GPs",
              "`pip install -e \".[bench]\"` then `python benchmarks/peers.py` "
              "(`reports/peers/peers.json`): the same train/test rows for every method (split 0), "
              "the inputs standardised (Tan et al. 2016's `tan_va`: scaled to [-1, 1], as its "
              "entry's `[data] x_scaling` says), one thread per library; test metrics in the target's "
              "original units. GPyTorch and GPJax SVGPs: 512 k-means inducing points, minibatches "
              "of 1,024, Adam, 2,000 steps; the exact GP (scikit-learn, L-BFGS on the marginal "
              "likelihood) on at most 2,000 training rows. On a GPU: `JAX_COMPILATION_CACHE_DIR=DIR "
              "python benchmarks/peers.py --sets airline-2m --methods svbssgp,vssgp --out OUT` "
              "twice, the two `peers.json` kept as `reports/peers/gpu/first_run.json` and "
              "`compilation_cached.json`. With `--seeds 0,1,2` each method runs on three seeds "
              "(seed k on split k): the tables show means ± standard errors and each target "
              "reads met or missed by more than them, or \"within se\". This project's entries "
              "run at their catalog settings: `vssgp_collapsed` and `svbssgp_collapsed` with "
              "`m = \"auto\"` sized within the default 600 s (the m column; the pilot's seconds "
              "count in the fit's; [Sizing m to the data](../guide/sizing.md)). In the m column "
              "\"(sized)\" marks an m that rule chose; a plain number is the m the entry had when "
              "that record was measured. Above 2,000 training rows the collapsed entries step "
              "over batches of 2,000 different rows (their catalog setting).", peers),
    "gold": ("Gold references",
             "`python benchmarks/gold_references.py` (resumable; stored in "
             "`ssgp_ppl/references/`, shipped with the package): for each fully Bayesian "
             "entry and data set, independent tempered-SMC runs from the prior, pooled with equal "
             "weights, checked run against run. `ssgp-ppl compare` uses a stored reference when "
             "its target (model, data, split and the arrays handed over) matches, and says so.",
             gold_references),
    "vi-vs-gold": ("VI against the gold references",
                   "`python benchmarks/vi_vs_gold.py` (`reports/vi_vs_gold.json`): `compare` of "
                   "each stored gold reference's entry on its data set, the entry's VI as one "
                   "path and as stacked paths. W1: the Wasserstein-1 distance to the gold "
                   "posterior in its standard deviations; floor: the same distance between halves "
                   "of the gold's own draws (below about twice the floor is within its Monte "
                   "Carlo noise).", vi_vs_gold),
    "sizing": ("m = \"auto\" on the peers sets",
               "`python benchmarks/sizing_choices.py` (`reports/sizing/sizing.json`): the m that "
               "[Sizing m to the data](../guide/sizing.md) chooses on split 0 of every set of the "
               "peers benchmark, for each built-in entry that uses it, without fitting.",
               sizing_choices),
    "m-scan": ("More features: the variational entries as m grows",
               "`python benchmarks/mscan.py` (`reports/mscan/mscan.json`): test NMSE (MNLP) of "
               "the papers' guides over (θ, s) and of the same guides over θ with s integrated "
               "out, for m = 10 … 100 (kin40k and protein: a 5,000-row subsample, about 4,500 of "
               "them training rows).", mscan),
}


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in TABLES:
        print(f"usage: python scripts/results_tables.py {{{','.join(TABLES)}}}", file=sys.stderr)
        return 2
    print(TABLES[sys.argv[1]][2]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
