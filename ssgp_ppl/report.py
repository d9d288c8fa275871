"""``compare``: fit an entry's methods plus its NUTS reference on one split, write a report.

Writes ``comparison.json`` (per method: the ``fit`` metrics, coverage curve, PSIS-LOO, the
posterior comparison with NUTS; NUTS health and modes), a self-contained ``report.html``
(tables, plots embedded as PNG: predictive bands, coverage curve, PIT and LOO-PIT Δ-ECDFs,
VI-vs-NUTS marginals, loss traces) and each method's DataTree as ``posterior_<method>.nc``.

Every VI-vs-NUTS figure and every NUTS diagnostic is computed on quantities the SSGP's
symmetries leave unchanged (:mod:`ssgp_ppl.invariants`), never on individual frequencies; a
reference that did not converge is labelled so in every table and plot that uses it.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

from ssgp_ppl import invariants, methods
from ssgp_ppl.calibration import loo_summary, nuts_health
from ssgp_ppl.datasets import Dataset
from ssgp_ppl.entry import CatalogEntry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.io import write_json, write_text_atomic
from ssgp_ppl.metrics import DEFAULT_LEVELS as LEVELS
from ssgp_ppl.metrics import coverage_curve
from ssgp_ppl.pipeline import fit, metrics_record
from ssgp_ppl.posterior import Handoff, Posterior

# settings of a quick run (notebooks and tests at SSGP_PPL_SMALL=1): every method still runs
SMALL_SETTINGS = ("svi.steps=400", "svi.min_steps=0", "ml.steps=300", "nuts.warmup=100",
                  "nuts.samples=100", "nuts.chains=2", "nuts.max_tree_depth=6",
                  "ncvmp.restarts=2", "ncvmp.max_iter=60", "local.k=25", "predictive.samples=60")


def small(entry: CatalogEntry, data: Dataset, n_train: int = 80, n_test: int = 30):
    """(entry, data) cut down for a quick run: SMALL_SETTINGS and the first rows of each split
    (the scalers stay those of the full training split)."""
    return (entry.with_overrides(list(SMALL_SETTINGS)),
            data._replace(x_train=data.x_train[:n_train], y_train=data.y_train[:n_train],
                          x_test=data.x_test[:n_test], y_test=data.y_test[:n_test]))


REPORT_FORMAT = 2  # comparison.json layout (1: before calibration and VI-vs-NUTS sections)
NUTS_MAX_ROWS = 5000  # NUTS references are for small data (pendulum, Auto-MPG, subsamples)


def methods_to_run(entry: CatalogEntry, n_train: int = 0) -> list[str]:
    """The entry's methods, plus NUTS when the model has latent sites (on a model with type-II
    hyperparameters NUTS conditions on the entry's own estimates: an empirical-Bayes reference)
    and the training split has at most NUTS_MAX_ROWS rows."""
    names = list(entry.methods)
    ref = methods.reference()
    if ref.name not in names and entry.latent_sites and n_train <= NUTS_MAX_ROWS:
        names.append(ref.name)
    return names


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _reference_label(records: list[dict]) -> str:
    nuts = [r for r in records if "nuts" in r]
    if not nuts:
        return ""
    d = nuts[0]["nuts"]
    name = methods.reference().name
    return name if d["converged"] else f"{name} (NOT CONVERGED, {d['modes']} modes)"


def _label(r: Posterior, ref_label: str) -> str:
    return ref_label if methods.get(r.method).reference and ref_label else r.method


def _plots(results: list[Posterior], records: list[dict], data: Dataset,
           ref_label: str, loo_pit: dict) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = np.asarray(data.y_scaler.inverse(data.y_test))
    order = np.argsort(results[0].mean)
    figs = []
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.4), squeeze=False)
    for ax, r in zip(axes[0], results, strict=True):
        sd = np.sqrt(r.var[order])
        idx = np.arange(len(order))
        ax.fill_between(idx, r.mean[order] - 1.645 * sd, r.mean[order] + 1.645 * sd, alpha=0.3,
                        label="90% interval")
        ax.plot(idx, r.mean[order], lw=1, label="mean")
        ax.plot(idx, y[order], ".", ms=2, color="k", label="observed")
        ax.set_title(f"{_label(r, ref_label)}: test predictions", fontsize=9)
        ax.set_xlabel("test point (sorted by first method's mean)")
    axes[0][0].legend(fontsize=7)
    figs.append(("Predictive bands on the test set", _png(fig)))

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for r, rec in zip(results, records, strict=True):  # the curves compare() already computed
        c = rec["coverage_curve"]
        ax.plot(c["nominal"], c["empirical"], "o-", label=_label(r, ref_label))
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_xlabel("nominal central-interval level")
    ax.set_ylabel("empirical coverage (test)")
    ax.legend(fontsize=8)
    figs.append(("Coverage of central intervals, 10% to 90% (test set)", _png(fig)))

    figs.append(("PIT Δ-ECDF on the test set (exact PIT of the predictive mixture; "
                 "arviz_plots.plot_ecdf_pit, simultaneous 99% band)",
                 _pit_plot({_label(r, ref_label): np.asarray(
                     r.datatree["predictions_constant_data"]["pit"]) for r in results})))
    loo_pits = {_label(r, ref_label): loo_pit[r.method] for r in results if r.method in loo_pit}
    if loo_pits:
        figs.append(("LOO-PIT Δ-ECDF on the training rows (PSIS; VI draws importance-corrected)",
                     _pit_plot(loo_pits)))

    marg = _marginals_plot(results, ref_label)
    if marg:
        figs.append(("VI vs NUTS: posterior marginals of symmetry-invariant quantities", marg))

    traced = [r for r in results if r.losses is not None]
    if traced:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for r in traced:
            ax.plot(r.losses, lw=0.7, label=r.method)
        ax.set_yscale("symlog")
        ax.set_xlabel("step (SVI/ML) or iteration (NCVMP)")
        ax.set_ylabel("loss (negative ELBO / bound)")
        ax.legend()
        figs.append(("Loss traces", _png(fig)))
    return figs


def _pit_plot(pits: dict[str, np.ndarray]) -> str:
    import matplotlib.pyplot as plt
    from arviz_base import from_dict
    from arviz_plots import plot_ecdf_pit

    dt = from_dict({"pit": {k: np.asarray(v).reshape(1, -1) for k, v in pits.items()}})
    plot_ecdf_pit(dt, group="pit", backend="matplotlib",
                  figure_kwargs={"figsize": (3.6 * len(pits), 3.0)})
    return _png(plt.gcf())


def _marginals_plot(results: list[Posterior], ref_label: str) -> str | None:
    """Histograms of each method's draws of the scalar invariants and a few f* components."""
    import matplotlib.pyplot as plt

    with_draws = [r for r in results if "invariants" in r.datatree.children
                  and r.datatree["invariants"].sizes["chain"] * r.datatree["invariants"].sizes[
                      "draw"] > 1]
    if not with_draws:
        return None
    inv0 = with_draws[0].datatree["invariants"]
    panels = [("noise", {}), ("signal", {})]
    panels += [("frequency_spread", {"input": j}) for j in range(inv0.sizes["input"])]
    n_test = inv0.sizes["test"]
    panels += [("f_test", {"test": int(i)}) for i in np.linspace(0, n_test - 1, 3).round()]
    panels += [("kernel", {"input": 0, "lag": inv0.sizes["lag"] // 4})]
    cols = 4
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.5 * rows), squeeze=False)
    for ax, (name, sel) in zip(axes.flat, panels, strict=False):
        for r in with_draws:
            v = np.asarray(r.datatree["invariants"][name].isel(sel)).ravel()
            if invariants.varies(v):
                ax.hist(v, bins=40, density=True, histtype="step", label=_label(r, ref_label))
            else:
                ax.axvline(v[0], ls=":", color="gray")
        where = ", ".join(f"{k} {v}" for k, v in sel.items())
        ax.set_title(f"{name} [{where}]" if where else name, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    handles: dict = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower right", fontsize=8)
    return _png(fig)


def _table(rows: list[dict], cols: list[str]) -> str:
    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{fmt(r.get(c, ''))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _nuts_record(res: Posterior) -> dict:
    """NUTS health (:func:`~ssgp_ppl.calibration.nuts_health`) plus the modes the chains visited."""
    dt = res.datatree
    health = nuts_health(dt)
    lp = np.asarray(dt["sample_stats"]["lp"])
    health.update(invariants.count_modes(dt["invariants"].to_dataset(), extra={"lp": lp}))
    return health


def compare(entry: CatalogEntry, data: Dataset, out: Path, *, seed: int = 0,
            progress: bool = True) -> list[dict]:
    """Fit every method of ``entry`` (plus NUTS where possible) on one split, write the report.

    Per method: the ``fit`` metrics, the coverage curve (10%..90%), PSIS-LOO (importance-
    corrected for VI draws), and for VI methods the posterior comparison with NUTS on the
    invariant quantities; for NUTS its health and modes. Returns the per-method records.
    """
    lik = entry.config["model"]["likelihood"]
    if lik != "gaussian":
        raise SSGPError(f"{entry.name}: compare's calibration report (coverage, PIT, CRPS) is for "
                        f"Gaussian-likelihood entries; this one is {lik} (use `ssgp-ppl fit`)")
    out.mkdir(parents=True, exist_ok=True)
    results, records = [], []
    loo_pit: dict = {}
    # built once, shared by every method
    partitions = entry.partitions(data.x_train, seed=seed) if entry.uses_partitions else None
    # what the entry's own method hands the others (type-II estimates, NCVMP's spectral points)
    handoff = Handoff(partitions=partitions)
    y_test = np.asarray(data.y_scaler.inverse(data.y_test))
    for i, method in enumerate(methods_to_run(entry, data.n_train)):
        res = fit(entry, data, method, seed=seed, progress=progress, inputs=handoff)
        if i == 0:
            handoff = Handoff(res.handoff.type2, res.handoff.spectral_points, partitions)
        rec = metrics_record(res, data)
        rec["loo_seconds"] = float(res.info.loo_seconds)
        rec["coverage_curve"] = {"nominal": LEVELS.tolist(),
                                 "empirical": coverage_curve(y_test, res.mean, res.var,
                                                             LEVELS)[1].tolist()}
        loo = loo_summary(res.datatree)
        if loo is not None:
            rec["loo"], loo_pit[method] = loo
        if methods.get(method).reference:
            rec["nuts"] = _nuts_record(res)
        results.append(res)
        records.append(rec)
        res.save(out / f"posterior_{method}.nc")
    ref = next((r for r in results if methods.get(r.method).reference), None)
    ref_label = _reference_label(records)
    if ref is not None:
        ref_inv = ref.datatree["invariants"].to_dataset()
        for r, rec in zip(results, records, strict=True):
            if r is ref or "invariants" not in r.datatree.children:
                continue
            inv = r.datatree["invariants"].to_dataset()
            if inv.sizes["chain"] * inv.sizes["draw"] > 1:
                rec["vs_nuts"] = invariants.posterior_comparison(inv, ref_inv, seed=seed)
                rec["vs_nuts"]["reference_converged"] = records[results.index(ref)]["nuts"][
                    "converged"]
    write_json(out / "comparison.json", {"format": REPORT_FORMAT, "model": entry.name,
                                         "dataset": data.name, "split": data.split, "seed": seed,
                                         "methods": records})
    write_text_atomic(out / "report.html", _html(entry, data, seed, records, results, ref_label,
                                                 loo_pit))
    return records


def _html(entry, data, seed, records, results, ref_label, loo_pit) -> str:
    cols = ["method", "rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90",
            "fit_seconds", "predict_seconds"]
    rows = [{**r, "method": _label(res, ref_label)} for r, res in zip(records, results, strict=True)]
    parts = [f"<h1>{html.escape(entry.name)} on {html.escape(data.name)}</h1>",
             f"<p>{html.escape(entry.description)}<br>n_train = {data.n_train}, "
             f"n_test = {data.n_test}, split {data.split}, seed {seed}. Metrics on the test set "
             "in original units of the target; MNLP and CRPS lower is better.</p>",
             "<h2>Predictive metrics (test set)</h2>", _table(rows, cols)]
    cov = [{"method": row["method"], **{f"{lv:.0%}": e for lv, e in zip(
        r["coverage_curve"]["nominal"], r["coverage_curve"]["empirical"], strict=True)}}
        for row, r in zip(rows, records, strict=True)]
    parts += ["<h2>Coverage of central intervals (nominal vs empirical, test set)</h2>",
              _table(cov, list(cov[0]))]
    loo = [{"method": row["method"], **r["loo"]} for row, r in zip(rows, records, strict=True)
           if "loo" in r]
    if loo:
        parts += ["<h2>PSIS-LOO on the training rows</h2>",
                  "<p>VI draws use <code>loo_approximate_posterior</code> (importance ratios "
                  "p(θ, y) / q(θ)); Pareto k̂ above good_k flags rows where q is too far from the "
                  "posterior for the estimate to be trusted.</p>", _table(loo, list(loo[0]))]
    nuts = [r for r in records if "nuts" in r]
    if nuts:
        d = nuts[0]["nuts"]
        status = "converged" if d["converged"] else (
            "NOT CONVERGED: every comparison with it below is against an unreliable reference")
        flat = {"divergences": d["divergences"], "modes": d["modes"],
                "chain_mode": str(d["chain_mode"]), "bfmi_min": min(d["bfmi"])}
        health = [{"quantity": q, "rhat_max": d["rhat_max"][q], "ess_bulk_min": d["ess_bulk_min"][q],
                   "ess_tail_min": d["ess_tail_min"][q]} for q in d["rhat_max"]]
        parts += [f"<h2>NUTS reference: {status}</h2>",
                  "<p>Diagnostics on symmetry-invariant quantities (rank R-hat, bulk/tail ESS: "
                  "worst component); modes = groups of chains whose two-chain R-hat on the "
                  "scalar invariants and log density stays below 1.1.</p>",
                  _table([flat], list(flat))] + ([_table(health, list(health[0]))] if health else [])
        if entry.learned_sites:
            parts.append("<p>Empirical-Bayes reference: NUTS conditions on the type-II "
                         f"hyperparameters estimated by {html.escape(entry.methods[0])}.</p>")
        vs = []
        for row, r in zip(rows, records, strict=True):
            for q, v in r.get("vs_nuts", {}).items():
                if isinstance(v, dict):
                    vs.append({"method": row["method"], "quantity": q, **v})
        if vs:
            note = "" if d["converged"] else " (reference NOT CONVERGED)"
            parts += [f"<h2>VI vs NUTS on invariant quantities{note}</h2>",
                      "<p>W1: Wasserstein-1 per component, averaged (original units; scaled: in "
                      "NUTS sd); KL(VI ‖ NUTS) by nearest neighbours; std ratio sd_VI / sd_NUTS "
                      "(median, min, max over components; below 1 VI understates uncertainty)."
                      "</p>", _table(vs, list(vs[0]))]
    elif not entry.latent_sites:
        parts.append("<p>No NUTS reference: this entry has no latent variables (all its "
                     "parameters are type-II point estimates).</p>")
    elif any(not res.sites for res in results):
        parts.append("<p>No NUTS reference for local fits: each test point has its own "
                     "posterior on its neighbourhood.</p>")
    else:
        parts.append(f"<p>No NUTS reference: n_train = {data.n_train} exceeds {NUTS_MAX_ROWS} "
                     "rows (use --subsample for a NUTS comparison).</p>")
    for title, png in _plots(results, records, data, ref_label, loo_pit):
        parts.append(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
                     f"src='data:image/png;base64,{png}'>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}img{max-width:100%}"
             "table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;"
             "padding:3px 8px;font-size:90%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(entry.name)}"
            f"</title><style>{style}</style></head><body>{''.join(parts)}</body></html>")


def compare_named(name: str, dataset: str, out_root: Path | str = "reports", *,
                  small_run: bool = False, reuse: bool = False, seed: int = 0,
                  progress: bool = False) -> dict:
    """:func:`compare` for catalog entry ``name`` on data set ``dataset`` (inputs scaled as the
    entry's ``[data] x_scaling`` says) into ``out_root/<name>-<dataset>``; returns the
    comparison.json content. ``small_run``: :func:`small`; ``reuse``: read an existing
    comparison.json instead of refitting (the notebooks share their full-size runs)."""
    import json

    from ssgp_ppl.datasets import load
    from ssgp_ppl.entry import load_entry

    out = Path(out_root) / f"{name}-{dataset}"
    if reuse and (out / "comparison.json").exists():
        saved = json.loads((out / "comparison.json").read_text())
        trees = [out / f"posterior_{m['method']}.nc" for m in saved["methods"]]
        # older reports lack sections; a fresh clone has the JSON but not the (ignored) trees
        if saved.get("format") == REPORT_FORMAT and all(t.exists() for t in trees):
            return saved
    entry = load_entry(name)
    data = load(dataset, x_scaling=entry.config["data"]["x_scaling"])
    if small_run:
        entry, data = small(entry, data)
    compare(entry, data, out, seed=seed, progress=progress)
    return json.loads((out / "comparison.json").read_text())


def summary_rows(result: dict) -> list[dict]:
    """One flat row per method of a comparison.json: metrics, 90% coverage, LOO k̂, and the
    VI-vs-NUTS std ratios and W1 (scaled) of f*, the kernel and the noise."""
    rows = []
    nuts = next((m["nuts"] for m in result["methods"] if "nuts" in m), None)
    for m in result["methods"]:
        row = {"model": result["model"], "method": m["method"], "nmse": m["nmse"],
               "mnlp": m["mnlp"], "crps": m["crps"], "coverage_90": m["coverage_90"]}
        if "loo" in m:
            row["pareto_k_bad_frac"] = m["loo"]["pareto_k_bad_frac"]
        for q in ("f_test", "kernel", "noise", "frequency_spread"):
            v = m.get("vs_nuts", {}).get(q)
            if isinstance(v, dict):
                row[f"std_ratio_{q}"] = v["std_ratio"]
                row[f"w1_scaled_{q}"] = v["w1_scaled"]
        if nuts is not None:
            row["nuts_converged"] = nuts["converged"]
            row["nuts_modes"] = nuts["modes"]
        rows.append(row)
    return rows
