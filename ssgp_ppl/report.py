"""``compare``: fit an entry's methods plus its NUTS reference on one split, write a report.

Writes ``comparison.json`` (per method: the ``fit`` metrics, NUTS diagnostics) and a
self-contained ``report.html`` (tables, plots embedded as PNG), plus each method's ``posterior.nc``.

NUTS diagnostics are computed on quantities the SSGP's symmetries leave unchanged (permuting the
frequencies, flipping a frequency with its sine amplitude): noise, signal, lengthscales and the
latent function at the test inputs, never on individual frequencies.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

from ssgp_ppl.catalog import CatalogEntry
from ssgp_ppl.datasets import Dataset
from ssgp_ppl.fit import FitResult, fit, metrics_record
from ssgp_ppl.io import write_datatree, write_json, write_text_atomic
from ssgp_ppl.metrics import coverage_curve

INVARIANT = ("noise", "signal", "lengthscales")


def nuts_diagnostics(res: FitResult) -> dict:
    """Rank R-hat and bulk ESS on symmetry-invariant quantities; divergences."""
    from arviz_stats import ess, rhat

    dt = res.datatree
    posterior = dt["posterior"]
    # sampled hyperparameters only (type-II ones are constants under an empirical-Bayes reference)
    post = [v for v in INVARIANT if v in posterior.data_vars and float(posterior[v].std()) > 0]
    r_f = rhat(dt, group="predictions", var_names=["f_mean"])["f_mean"].values
    e_f = ess(dt, group="predictions", var_names=["f_mean"])["f_mean"].values
    out = {"divergences": int(res.info["divergences"])}
    if post:
        r_post, e_post = rhat(dt, var_names=post), ess(dt, var_names=post)
        out["rhat_max_hyper"] = float(max(float(r_post[v].max()) for v in post))
        out["ess_bulk_min_hyper"] = float(min(float(e_post[v].min()) for v in post))
    out["rhat_max_f_test"] = float(np.nanmax(r_f))
    out["ess_bulk_min_f_test"] = float(np.nanmin(e_f))
    out["converged"] = bool(out.get("rhat_max_hyper", 1.0) < 1.01 and out["rhat_max_f_test"] < 1.01
                            and out["divergences"] == 0)
    return out


NUTS_MAX_ROWS = 5000  # NUTS references are for small data (pendulum, Auto-MPG, subsamples)


def methods_to_run(entry: CatalogEntry, n_train: int = 0) -> list[str]:
    """The entry's methods, plus NUTS when the model has latent sites (on a model with type-II
    hyperparameters NUTS conditions on the entry's own estimates: an empirical-Bayes reference)
    and the training split has at most NUTS_MAX_ROWS rows."""
    methods = list(entry.methods)
    if "nuts" not in methods and entry.latent_sites and n_train <= NUTS_MAX_ROWS:
        methods.append("nuts")
    return methods


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _plots(results: list[FitResult], data: Dataset) -> list[tuple[str, str]]:
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
        ax.set_title(f"{r.method}: test predictions")
        ax.set_xlabel("test point (sorted by first method's mean)")
    axes[0][0].legend(fontsize=7)
    figs.append(("Predictive bands on the test set", _png(fig)))

    fig, ax = plt.subplots(figsize=(4, 4))
    levels = np.linspace(0.1, 0.9, 9)
    for r in results:
        _, emp = coverage_curve(y, r.mean, r.var, levels)
        ax.plot(levels, emp, "o-", label=r.method)
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_xlabel("nominal central-interval level")
    ax.set_ylabel("empirical coverage (test)")
    ax.legend()
    figs.append(("Coverage curve", _png(fig)))

    traced = [r for r in results if r.losses is not None]
    if traced:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for r in traced:
            ax.plot(r.losses, lw=0.7, label=r.method)
        ax.set_yscale("symlog")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend()
        figs.append(("Loss traces", _png(fig)))
    return figs


def _table(rows: list[dict], cols: list[str]) -> str:
    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{fmt(r.get(c, ''))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def compare(entry: CatalogEntry, data: Dataset, out: Path, *, seed: int = 0,
            progress: bool = True) -> list[dict]:
    """Fit every method of ``entry`` (plus NUTS where possible), write the report; return records."""
    out.mkdir(parents=True, exist_ok=True)
    results, records = [], []
    type2 = None
    # built once, shared by every method
    partitions = entry.partitions(data.x_train, seed=seed) if entry.uses_partitions else None
    spectral_points = None  # the set an ncvmp entry's restarts kept: SVI/NUTS reuse it
    for method in methods_to_run(entry, data.n_train):
        res = fit(entry, data, method, seed=seed, progress=progress, type2=type2,
                  partitions=partitions, spectral_points=spectral_points)
        if method == entry.methods[0] and method != "nuts":
            type2 = res.info.get("type2")
            spectral_points = res.info.get("spectral_points")
        rec = metrics_record(res, data)
        if method == "nuts":
            rec["nuts"] = nuts_diagnostics(res)
        results.append(res)
        records.append(rec)
        write_datatree(out / f"posterior_{method}.nc", res.datatree)
    write_json(out / "comparison.json", {"model": entry.name, "dataset": data.name,
                                         "split": data.split, "methods": records})
    cols = ["method", "rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90",
            "fit_seconds", "predict_seconds"]
    parts = [f"<h1>{html.escape(entry.name)} on {html.escape(data.name)}</h1>",
             f"<p>{html.escape(entry.description)}<br>n_train = {data.n_train}, "
             f"n_test = {data.n_test}, split {data.split}, seed {seed}. Metrics in original "
             "units of the target.</p>", _table(records, cols)]
    nuts = [r for r in records if "nuts" in r]
    if nuts:
        d = nuts[0]["nuts"]
        status = "converged" if d["converged"] else "NOT CONVERGED: treat the reference with care"
        parts += [f"<h2>NUTS reference ({status})</h2>",
                  "<p>Diagnostics on symmetry-invariant quantities (hyperparameters and the "
                  "latent function at test inputs).</p>", _table([d], list(d))]
        if entry.learned_sites:
            parts.append("<p>Empirical-Bayes reference: NUTS conditions on the type-II "
                         f"hyperparameters estimated by {html.escape(entry.methods[0])}.</p>")
    elif not entry.latent_sites:
        parts.append("<p>No NUTS reference: this entry has no latent variables (all its "
                     "parameters are type-II point estimates).</p>")
    else:
        parts.append(f"<p>No NUTS reference: n_train = {data.n_train} exceeds {NUTS_MAX_ROWS} "
                     "rows (use --subsample for a NUTS comparison).</p>")
    for title, png in _plots(results, data):
        parts.append(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
                     f"src='data:image/png;base64,{png}'>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}")
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(entry.name)}"
           f"</title><style>{style}</style></head><body>{''.join(parts)}</body></html>")
    write_text_atomic(out / "report.html", doc)
    return records
