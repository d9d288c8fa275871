"""``compare``: fit an entry's methods plus its reference on one split, write a report.

Writes ``comparison.json`` (per method: the ``fit`` metrics, coverage curve, PSIS-LOO, the
posterior comparison with the reference next to the reference's replicate floor; the reference's
verdict, its reasons and modes), a self-contained ``report.html`` (tables, plots embedded as PNG:
predictive bands, coverage curve, PIT and LOO-PIT Δ-ECDFs, VI-vs-reference marginals, loss traces)
and each method's DataTree as ``posterior_<method>.nc``.

The reference is the registry's (:func:`ssgp_ppl.inference.methods.reference`: tempered SMC polished by
NUTS). Every VI-vs-reference figure and every diagnostic is computed on quantities the SSGP's
symmetries leave unchanged (:mod:`ssgp_ppl.diagnostics.invariants`), never on individual frequencies; a
reference that did not converge is labelled so in every table and plot that uses it.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import html
import io
import json
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ssgp_ppl.data.datasets import Dataset
from ssgp_ppl.data.tables import DAY_NS
from ssgp_ppl.diagnostics import gold, invariants
from ssgp_ppl.diagnostics.calibration import (
    BFMI_MIN,
    ESS_MIN,
    LOG_DENSITY_SPREAD,
    LOG_EVIDENCE_SPREAD,
    PIT_BAND,
    RHAT_BELOW,
    RUNS_RHAT,
    PITReading,
    chain_loo,
    has_loo,
    is_vi,
    loo_summary,
    pit_reading,
    reference_health,
)
from ssgp_ppl.diagnostics.metrics import COVERAGE_OK, COVERAGE_SDS, coverage_curve, coverage_off
from ssgp_ppl.diagnostics.metrics import DEFAULT_LEVELS as LEVELS
from ssgp_ppl.entry import CatalogEntry, from_saved
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import methods, sizing
from ssgp_ppl.inference.fitinfo import Sizing
from ssgp_ppl.inference.paths import OBJECTIVE_KINDS, SCREEN_DRAWS, combine, split_chains
from ssgp_ppl.pipeline import evaluate, fit, metrics_record
from ssgp_ppl.posterior import Handoff, Posterior
from ssgp_ppl.posterior import load as load_posterior
from ssgp_ppl.runtime import rundir
from ssgp_ppl.runtime.io import write_bytes_atomic, write_json, write_text_atomic
from ssgp_ppl.runtime.status import step

# settings of a quick run (notebooks and tests at SSGP_PPL_SMALL=1): every method still runs
SMALL_SETTINGS = ("svi.steps=400", "svi.min_steps=0", "svi.paths=2", "ml.steps=300", "nuts.warmup=100",
                  "nuts.samples=100", "nuts.chains=2", "nuts.max_tree_depth=6",
                  "smc.particles=64", "smc.mcmc_steps=3", "smc.chains=2", "smc.warmup=60",
                  "smc.samples=60", "smc.max_tree_depth=6",
                  "ncvmp.restarts=2", "ncvmp.max_iter=60", "local.k=25", "predictive.samples=60")


def small(entry: CatalogEntry, data: Dataset, n_train: int = 80, n_test: int = 30):
    """(entry, data) cut down for a quick run: SMALL_SETTINGS and the first rows of each split
    (the scalers stay those of the full training split)."""
    return (entry.with_overrides(list(SMALL_SETTINGS)),
            data._replace(x_train=data.x_train[:n_train], y_train=data.y_train[:n_train],
                          x_test=data.x_test[:n_test], y_test=data.y_test[:n_test]))


REPORT_FORMAT = 3  # comparison.json layout (3: reference verdict and replicate floor)
REFERENCE_MAX_ROWS = 5000  # references are for small data (pendulum, Auto-MPG, subsamples)


def methods_to_run(entry: CatalogEntry, n_train: int = 0) -> list[str]:
    """The entry's methods, plus the reference when the model has latent sites (on a model with
    type-II hyperparameters it conditions on the entry's own estimates: an empirical-Bayes
    reference) and the training split has at most REFERENCE_MAX_ROWS rows."""
    names = list(entry.methods)
    ref = methods.reference()
    if ref.name not in names and entry.latent_sites and n_train <= REFERENCE_MAX_ROWS:
        names.append(ref.name)
    return names


def budget(entry: CatalogEntry, n_train: int = 0, **given: int | None) -> CatalogEntry:
    """``entry`` with ``compare``'s budget set for every method it runs: ``steps`` (SVI / ML
    steps, NCVMP iterations), ``samples`` and ``chains`` (the reference's draws per chain and
    chains). A budget left at None keeps the catalog's value."""
    sets, run = [], methods_to_run(entry, n_train)
    for flag, value in given.items():
        if value is None:
            continue
        for method in run:
            if (key := methods.get(method).budget.get(flag)) is not None:
                sets.append(f"inference.{method}.{key}={value}")
    return entry.with_overrides(sets) if sets else entry


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _reference_label(records: list[dict]) -> str:
    ref = [r for r in records if "reference" in r]
    if not ref:
        return ""
    d = ref[0]["reference"]
    if d.get("source") == "gold":
        return d["label"]
    name = ref[0]["method"]
    return name if d["converged"] else f"{name} (NOT CONVERGED, {d['modes']} mode{'s' * (d['modes'] != 1)})"


def _label(rec: dict, ref_label: str) -> str:
    return ref_label if "reference" in rec and ref_label else rec["method"]


NAMES = {"noise": "noise sd", "signal": "signal sd", "frequency_spread": "frequency spread",
         "kernel": "kernel", "f_test": "f at the test points"}


def _reference_verdict(rec: dict) -> str:
    """The reference's label and verdict in one sentence."""
    d = rec["reference"]
    reasons = "; ".join(d.get("reasons") or [])
    if d.get("source") == "gold":
        head = f"Reference: the stored {d['label']}"
        return head + ("." if d["converged"] else f": {reasons}." if reasons else ".")
    if d["converged"]:
        return f"Reference: {rec['method']} computed here, CONVERGED ({d['modes']} mode(s))."
    return (f"Reference: {rec['method']} computed here, NOT CONVERGED ({reasons}); every "
            "comparison with it is against an unreliable reference.")


def _positive_number(v, zero: bool = False) -> bool:
    return isinstance(v, int | float) and np.isfinite(v) and (v >= 0 if zero else v > 0)


def _is_vi_record(rec: dict) -> bool:
    """A record of the entry's own fits, not the reference nor its stacked chains."""
    chains = "paths" in rec and all(k == "log_density" for k in rec["paths"]["objective_kind"])
    return "reference" not in rec and not chains


def summary_lines(records: list[dict], ref_label: str = "") -> list[str]:
    """The report's opening lines, each a number from the records the tables show: the
    reference's verdict; the best method by test MNLP and its lead; the largest VI-vs-reference
    distance on the invariant quantities in units of the reference's replicate floor; the fits
    that stopped on their step budget; the methods whose 90% interval's test coverage is far from
    nominal (:func:`~ssgp_ppl.diagnostics.metrics.coverage_off`, as ``fit`` warns)."""
    lines = []
    ref = next((r for r in records if "reference" in r), None)
    if ref is not None:
        lines.append(_reference_verdict(ref))
    else:
        lines.append("No reference in this comparison: the VI fits are compared on the test set "
                     "only.")
    scored = sorted((r for r in records if np.isfinite(r.get("mnlp", np.nan))),
                    key=lambda r: r["mnlp"])
    if scored:
        b = scored[0]
        line = (f"Best test predictions: {_label(b, ref_label)}, MNLP {b['mnlp']:.4g} nats per "
                f"point (NMSE {b['nmse']:.4g}, 90% coverage {b['coverage_90']:.4g})")
        s = scored[1] if len(scored) > 1 else None
        if s is not None:
            gap = s["mnlp"] - b["mnlp"]
            line += (f"; next {_label(s, ref_label)} at {s['mnlp']:.4g}, {gap:.3g} nats per point "
                     f"({gap * b['n_test']:.3g} over the {b['n_test']} test rows) behind")
        vi = [r for r in scored if _is_vi_record(r)]
        if vi and not _is_vi_record(b) and vi[0] is not s:
            v = vi[0]
            line += (f"; the best VI fit, {v['method']}, at {v['mnlp']:.4g} "
                     f"({v['mnlp'] - b['mnlp']:.3g} nats per point behind)")
        lines.append(line + ".")
    worst = None
    for r in filter(_is_vi_record, records):  # not the reference's own stacked chains
        for q, v in r.get("vs_reference", {}).items():
            if not isinstance(v, dict) or not _positive_number(v.get("w1_scaled_floor")) \
                    or not _positive_number(v.get("w1_scaled"), zero=True):
                continue
            ratio = v["w1_scaled"] / v["w1_scaled_floor"]
            if worst is None or ratio > worst[0]:
                worst = (ratio, r, q, v)
    if worst is not None:
        ratio, r, q, v = worst
        means = ""
        if v.get("mean") is not None and len(v["mean"]) == 1:
            means = (f" (posterior mean {v['mean'][0]:.3g} against the reference's "
                     f"{v['mean_reference'][0]:.3g}, sd ratio {v['std_ratio']:.2g})")
        note = "" if ref is None or ref["reference"]["converged"] else \
            " The reference did NOT converge, so this distance is against an unreliable target."
        lines.append(f"Largest VI-vs-reference disagreement: {_label(r, ref_label)} on the "
                     f"{NAMES.get(q, q)}{means}: W1 {v['w1_scaled']:.3g} reference sds, "
                     f"{ratio:.3g}× the reference's replicate floor ({v['w1_scaled_floor']:.3g}; "
                     f"below ~2× is Monte Carlo noise).{note}")
    budget = [r for r in records if r.get("converged") is False]
    if budget:
        lines.append("Not converged when the fit ended: "
                     + "; ".join(f"{_label(r, ref_label)}: {r.get('stop', 'step budget')}"
                                 for r in budget) + ".")
    off = [f"{_label(r, ref_label)} {r['coverage_90']:.3g}" for r in records
           if "coverage_90" in r and r.get("n_test")
           and coverage_off(r["coverage_90"], int(r["n_test"])) is not None]
    if off:
        lo, hi = COVERAGE_OK
        lines.append(f"Test coverage of the 90% interval far from nominal (outside [{lo:g}, {hi:g}] "
                     f"and more than {COVERAGE_SDS:g} binomial sds from 0.9 for "
                     f"{records[0]['n_test']} rows): {', '.join(off)}.")
    return lines


def _plots(results: list[Posterior], records: list[dict], data: Dataset,
           ref_label: str, readings: dict) -> list[tuple[str, ...]]:
    import matplotlib.pyplot as plt  # the backend is the caller's (a notebook keeps its inline one)

    figs = []
    function = _function_plot(results, records, data, ref_label)
    if function:
        figs.append(function)
    title, fig = _bands_figure(results, records, data, ref_label)
    figs.append((title, _png(fig)))

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    for rec in records:  # the curves compare() already computed
        c = rec["coverage_curve"]
        ax.plot(c["nominal"], c["empirical"], "o-", label=_label(rec, ref_label))
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_xlabel("nominal central-interval level")
    ax.set_ylabel("empirical coverage (test)")
    ax.legend(fontsize=8)
    figs.append(("Coverage of central intervals, 10% to 90% (test set)", _png(fig)))

    figs.append(("PIT Δ-ECDF on the test set (exact PIT of the predictive mixture), with the "
                 "simultaneous 99% band of uniform PIT values and its reading",
                 _pit_plot({_label(rec, ref_label): readings[rec["method"]]["test"]
                            for rec in records})))
    loo_pits = {_label(rec, ref_label): readings[rec["method"]]["loo"] for rec in records
                if "loo" in readings[rec["method"]]}
    if loo_pits:
        figs.append(("LOO-PIT Δ-ECDF on the training rows (PSIS; VI draws importance-corrected)",
                     _pit_plot(loo_pits)))

    modes = _modes_plot(records, ref_label)
    if modes:
        figs.append(("Modes: the paths of multi-path fits (weight, LOO log score) and the "
                     "reference's modes (share of chains, mean log density)", modes))
    marg = _marginals_plot(results, records, ref_label, tuple(data.feature_names))
    if marg:
        figs.append(("VI vs reference: posterior marginals of symmetry-invariant quantities",
                     marg, f"Noise and signal sd, the frequency spread of each of the "
                     f"{data.x_train.shape[1]} inputs ({', '.join(_input_names(data))}), f at "
                     "three test points and the kernel at one lag."))

    traced = [(r, rec) for r, rec in zip(results, records, strict=True) if r.losses is not None
              and np.size(r.losses) > 1]
    if traced:  # one panel each: the early steps' losses would flatten the others' scale
        fig, axes = plt.subplots(1, len(traced), figsize=(4.6 * len(traced), 3.2), squeeze=False)
        for ax, (r, rec) in zip(axes[0], traced, strict=True):
            loss = np.asarray(r.losses, float)
            ax.plot(np.arange(1, len(loss) + 1), loss, lw=0.8)
            tail = loss[len(loss) // 10:]
            tail = tail[np.isfinite(tail)]
            if tail.size:
                lo, hi = np.percentile(tail, [0.5, 99.5])
                pad = 0.05 * (hi - lo) or 1.0
                ax.set_ylim(lo - pad, hi + pad)
            ax.set_xlabel("step (SVI/ML) or iteration (NCVMP)")
            ax.set_ylabel("loss (negative ELBO / bound)")
            ax.set_title(f"{_label(rec, ref_label)} (y-axis: after the first 10%)", fontsize=9)
            ax.ticklabel_format(axis="y", style="plain", useOffset=False)
        fig.tight_layout()
        figs.append(("Loss traces", _png(fig)))
    return figs


def _bands_figure(results: list[Posterior], records: list[dict], data: Dataset,
                  ref_label: str):
    """(title, figure) of each method's predictive mean and 90% band at every test point with the
    observed values: over time, on a date axis, where an input is a date column (the first
    such); else the points sorted by the first method's mean."""
    import matplotlib.pyplot as plt

    y = np.asarray(data.y_scaler.inverse(data.y_test))
    dates = _date_inputs(data)
    if dates:
        j = dates[0]
        when = _as_dates(np.asarray(data.x_scaler.inverse(data.x_test))[:, j])
        order = np.argsort(when, kind="stable")
        xs, xlabel = when[order], f"{_short(_input_names(data)[j])} (date of the test point)"
        title = (f"Predictive bands on the test set over time (against the date input "
                 f"{_input_names(data)[j]})")
    else:
        order = np.argsort(results[0].mean)
        xs, xlabel = np.arange(len(order)), "test point (sorted by first method's mean)"
        title = "Predictive bands on the test set, points sorted by the first method's mean"
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.4), squeeze=False)
    for ax, r, rec in zip(axes[0], results, records, strict=True):
        sd = np.sqrt(r.var[order])
        ax.fill_between(xs, r.mean[order] - 1.645 * sd, r.mean[order] + 1.645 * sd, alpha=0.3,
                        label="90% interval")
        ax.plot(xs, r.mean[order], lw=1, label="mean")
        ax.plot(xs, y[order], ".", ms=2, color="k", label="observed")
        ax.set_title(f"{_label(rec, ref_label)}: test predictions", fontsize=9)
        ax.set_xlabel(xlabel)
        if dates:
            _date_axis(ax)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return title, fig


def _date_inputs(data: Dataset) -> list[int]:
    """The inputs that are date columns of the user's table (kind ``date`` in its
    ``TableEncoding``, recorded when the table was read): their values are days since 1970-01-01."""
    encoding = getattr(data, "encoding", None)
    if encoding is None:
        return []
    dates = {name for name, kind, _ in encoding.columns if kind == "date"}
    return [j for j, name in enumerate(_input_names(data)) if name in dates]


def _as_dates(days) -> np.ndarray:
    """Days since 1970-01-01, a date input's values, as ``datetime64[ns]``."""
    return np.round(np.asarray(days, np.float64) * DAY_NS).astype(np.int64).astype("datetime64[ns]")


def _date_axis(ax) -> None:
    """A date x axis: ticks at round dates, each labelled by what changes there (year, month,
    day, hour) with the rest in the offset at the axis' end (matplotlib's concise formatter)."""
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=3, maxticks=7)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))



PD_INPUTS = 8  # the fitted-function figure's panels: the first inputs, at most this many
PD_GRID = 25  # grid values of each input
PD_ROWS = 60  # test rows the partial dependence averages over (evenly spaced when there are more)
# ... where a method fits at every point it predicts (the local fits: two NCVMP fits a point, 8
# inputs × 25 grid values × 60 rows would be 24,000 fits, ~40× its test set's on pendulum)
PD_ROWS_FITTING = 6


def _function_plot(results: list[Posterior], records: list[dict], data: Dataset,
                   ref_label: str) -> tuple[str, str, str] | None:
    made = _function_figure(results, records, data, ref_label)
    return None if made is None else ("The fitted function", _png(made[0]), made[1])


def _function_figure(results: list[Posterior], records: list[dict], data: Dataset,
                     ref_label: str = ""):
    """(figure, caption) of the fitted function, or None when no method predicts: for one input,
    each method's predictive mean and 90% band with the test data; for several, the partial
    dependence on each of the first PD_INPUTS inputs, the date inputs first (the predictive mean
    averaged over test rows with that input set to a grid value; the band: the rows' 5% and 95%
    predictive quantiles, mean ± 1.645 sd, averaged). A date input's panel has a date axis: the
    fit over time."""
    import matplotlib.pyplot as plt

    x_std = np.asarray(data.x_test, np.float64)
    x_all = np.concatenate([np.asarray(data.x_train, np.float64), x_std])
    x_raw = np.asarray(data.x_scaler.inverse(x_std))
    y = np.asarray(data.y_scaler.inverse(data.y_test))
    n, d = x_std.shape
    names = _input_names(data)
    dates = _date_inputs(data)
    panels = [*dates, *(j for j in range(d) if j not in dates)][:PD_INPUTS]  # input per panel
    fitting = list(dict.fromkeys(_label(rec, ref_label) for r, rec in
                                 zip(results, records, strict=True) if r.rule.fits_at_prediction))
    most = PD_ROWS_FITTING if fitting else PD_ROWS  # the same rows for every method
    rows = x_std if n <= most else x_std[np.linspace(0, n - 1, most).round().astype(int)]
    shown = len(panels)
    curves, skipped = {}, []  # label -> [(grid_raw, mean, lo, hi)] per panel
    for r, rec in zip(results, records, strict=True):
        label = _label(rec, ref_label)
        try:
            per_input = []
            for j in panels:
                grid = np.linspace(x_all[:, j].min(), x_all[:, j].max(), PD_GRID)
                xs = rows if d > 1 else grid[:, None]
                if d > 1:
                    xs = np.repeat(rows[None], PD_GRID, axis=0)
                    xs[:, :, j] = grid[:, None]
                    xs = xs.reshape(-1, d)
                p = r.predict_standardised(xs)
                m, sd = np.asarray(p.mean), np.sqrt(np.asarray(p.var))
                k = 1 if d == 1 else len(rows)
                m, lo, hi = (v.reshape(PD_GRID, k).mean(1) for v in
                             (m, m - 1.645 * sd, m + 1.645 * sd))
                g = np.zeros((PD_GRID, d))
                g[:, j] = grid
                per_input.append((np.asarray(data.x_scaler.inverse(g))[:, j], m, lo, hi))
            curves[label] = per_input
        except (SSGPError, ValueError, TypeError, NotImplementedError) as e:
            skipped.append(f"{label} ({type(e).__name__}: {str(e)[:80]})")
    if not curves:
        return None
    cols = min(shown, 4)
    nrows = -(-shown // cols)
    width = 4.4 * cols if cols > 1 else 8.0  # one input: one wide panel
    fig, axes = plt.subplots(nrows, cols, figsize=(width, 3.4 * nrows + 0.5), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ax in enumerate(axes.flat):
        if i >= shown:
            ax.axis("off")
            continue
        j = panels[i]
        when = _as_dates if j in dates else np.asarray  # a date input: plotted as dates
        ax.plot(when(x_raw[:, j]), y, ".", ms=3, color="k", label="test data")
        for c, (label, per_input) in enumerate(curves.items()):
            g, m, lo, hi = per_input[i]
            g = when(g)
            colour = colours[c % len(colours)]
            ax.plot(g, m, lw=1.4, color=colour, label=label)
            ax.fill_between(g, lo, hi, color=colour, alpha=0.06)
            for edge in (lo, hi):  # edges drawn: the methods' bands overlap
                ax.plot(g, edge, lw=0.8, ls="--", color=colour)
        ax.set_xlabel(_short(names[j]) + (" (date)" if j in dates else ""))
        ax.set_ylabel(str(getattr(data, "target_name", "y")) or "y")
        ax.tick_params(labelsize=8)
        if j in dates:
            _date_axis(ax)
    handles: dict = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="upper center",
               ncol=min(len(handles), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / (3.4 * nrows + 0.5)))
    over_time = [names[j] for j in dates if j in panels]
    if d == 1:
        caption = ("The fitted function: each method's predictive mean (line) and 90% interval "
                   "(band, mean ± 1.645 sd) against the input" + (" (a date: the fit over time)"
                                                                  if over_time else "")
                   + ", with the test data")
    else:
        which = "the date inputs, then the first others" if dates else f"the first {shown}"
        caption = (f"The fitted function, partial dependence on {shown} of the {d} inputs "
                   f"({', '.join(names[j] for j in panels)})"
                   + ("" if shown == d else f" ({which}; the other {d - shown} not shown)")
                   + f": the predictive mean averaged over {len(rows)} test rows "
                   + (f"(evenly spaced; only {len(rows)}: {', '.join(fitting)} "
                      + ("fits at every point it predicts" if len(fitting) == 1
                         else "fit at every point they predict") + ") "
                      if fitting and n > len(rows) else "")
                   + "with that input set to each grid value, the others as they are (line); band: "
                   "the rows' 5% and 95% predictive quantiles (mean ± 1.645 sd) averaged the "
                   "same way, not a quantile of the average; dots: the test data against that "
                   "input")
        if over_time:
            caption += (f"; {', '.join(over_time)} {'is a date' if len(over_time) == 1 else 'are dates'}"
                        ": its panel (the first) shows the fit over time")
    if skipped:
        caption += "; not shown: " + ", ".join(skipped)
    return fig, caption + "."


def _modes_plot(records: list[dict], ref_label: str) -> str | None:
    fig = modes_figure(records, ref_label)
    return None if fig is None else _png(fig)


MODES_COLUMNS = 2  # panels a row of the modes figure: legible at the docs site's width
MODES_FONT = 12  # its titles and axis labels (ticks one point smaller)


def modes_figure(records: list[dict], ref_label: str = ""):
    """The modes panel of a comparison's records (``comparison.json``'s ``methods``): each path
    of a multi-path fit (weight; LOO log score) and each mode of the reference (share of chains;
    mean log density), at most MODES_COLUMNS panels a row. A matplotlib figure, or None when there
    is neither."""
    import matplotlib.pyplot as plt

    panels = [(r["method"], r["paths"]) for r in records if "paths" in r]
    panels += [(ref_label or r["method"], r["reference"]) for r in records if "reference" in r]
    if not panels:
        return None
    cols = min(len(panels), MODES_COLUMNS)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 4.6 * rows), squeeze=False,
                             layout="constrained")
    for ax, (label, d) in zip(axes.flat, panels, strict=False):
        if "weights" in d:  # paths
            w, score, what = d["weights"], d["loo"], "LOO log score"
            ax.set_xlabel("path", fontsize=MODES_FONT)
            title = f"{label}: {len(w)} path{'' if len(w) == 1 else 's'}, {d['combine']}"
        else:  # reference modes
            w, score, what = d["mode_weights"], d["mode_log_density"], "mean log density"
            ax.set_xlabel("mode (chains grouped by two-chain R-hat)", fontsize=MODES_FONT)
            title = f"{label}: {d['modes']} mode{'' if d['modes'] == 1 else 's'}"
        # a gold reference's label is long: wrapped to the panel, not run into its neighbour
        ax.set_title("\n".join(textwrap.wrap(title, 56)), fontsize=MODES_FONT)
        k = np.arange(len(w))
        ax.bar(k, w, color="tab:blue", alpha=0.7)
        ax.set_ylabel("weight (bars)", color="tab:blue", fontsize=MODES_FONT)
        ax.set_ylim(0, 1)
        ax.set_xticks(k)
        ax.tick_params(labelsize=MODES_FONT - 1)
        twin = ax.twinx()
        twin.plot(k, score, "o", ms=8, color="tab:red")
        twin.set_ylabel(f"{what} (dots)", color="tab:red", fontsize=MODES_FONT)
        twin.tick_params(labelsize=MODES_FONT - 1)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    fig.get_layout_engine().set(wspace=0.08, hspace=0.06)  # a panel's right label, the next's left
    return fig


def _pit_plot(readings: dict[str, PITReading]) -> str:
    """One panel per method, each with its own y-axis: the PIT ECDF minus the uniform CDF, its
    simultaneous 99% band (shaded) and the one-line reading (:func:`calibration.pit_reading`)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(readings), figsize=(4.4 * len(readings), 3.6), squeeze=False)
    for ax, (label, r) in zip(axes[0], readings.items(), strict=True):
        ax.fill_between(r.points, r.lower, r.upper, step="post", color="0.85",
                        label=f"simultaneous {PIT_BAND:.0%} band")
        ax.step(r.points, r.delta, where="post", color="tab:blue", lw=1.2, label="ECDF − uniform")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlim(0, 1)
        ax.set_xlabel("PIT value")
        ax.set_ylabel("ECDF − uniform CDF")
        ok = r.verdict.startswith("calibrated")
        # wrapped to the panel's width: side by side, unwrapped titles ran into each other
        ax.set_title("\n".join([*textwrap.wrap(label, 48),
                                *textwrap.wrap(r.verdict.split(";")[0], 52)]), fontsize=8.5,
                     color="black" if ok else "tab:red")
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.tight_layout(w_pad=2.0)
    return _png(fig)


def _marginals_plot(results: list[Posterior], records: list[dict], ref_label: str,
                    names: tuple = ()) -> str | None:
    fig = _marginals_figure(results, records, ref_label, names)
    return None if fig is None else _png(fig)


def _marginals_figure(results: list[Posterior], records: list[dict], ref_label: str,
                      names: tuple = ()):
    """Histograms of each method's draws of the scalar invariants (every input's frequency
    spread, named by ``names``, the data's columns) and a few f* components."""
    import matplotlib.pyplot as plt

    with_draws = [(r, rec) for r, rec in zip(results, records, strict=True)
                  if "invariants" in r.datatree.children
                  and r.datatree["invariants"].sizes["chain"] * r.datatree["invariants"].sizes[
                      "draw"] > 1]
    if not with_draws:
        return None
    inv0 = with_draws[0][0].datatree["invariants"]
    n_test, lag = inv0.sizes["test"], inv0.sizes["lag"] // 4
    panels = [("noise", {}, "noise sd σ_n (units of y)"),
              ("signal", {}, "signal sd σ_s (units of y)")]
    d = inv0.sizes["input"]
    names = [str(v) for v in names] if len(names) == d else [f"input {j}" for j in range(d)]
    panels += [("frequency_spread", {"input": j}, f"frequency spread, {_short(names[j])}\n"
                "(1 / effective lengthscale, scaled inputs)") for j in range(d)]
    panels += [("f_test", {"test": int(i)}, f"f at test point {int(i)} (units of y)")
               for i in np.linspace(0, n_test - 1, 3).round()]
    at = float(inv0["lag"][lag]) if "lag" in inv0.coords else lag
    panels += [("kernel", {"input": 0, "lag": lag},
                f"kernel k(τ e) along {_short(names[0])}, lag {at:g} (units of y²)")]
    cols = 3
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.1 * rows + 0.6), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (name, sel, title) in zip(axes.flat, panels, strict=False):
        for c, (r, rec) in enumerate(with_draws):
            v = np.asarray(r.datatree["invariants"][name].isel(sel)).ravel()
            colour = colours[c % len(colours)]
            if invariants.varies(v):
                ax.hist(v, bins=40, density=True, histtype="step", lw=1.4, color=colour,
                        label=_label(rec, ref_label))
            else:
                ax.axvline(v[0], ls=":", color=colour, label=_label(rec, ref_label))
        ax.set_title(title, fontsize=9)
        ax.set_yticks([])
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles: dict = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=len(handles),
               fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (3.1 * rows + 0.6)))
    return fig


def _fmt(v) -> str:
    if isinstance(v, list) and v and all(isinstance(x, float) for x in v):  # per component
        return ", ".join(f"{x:.4g}" for x in v)
    return f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))


def _input_names(data: Dataset) -> list[str]:
    """The data's input columns (``input j`` where it has no names)."""
    d = np.shape(data.x_train)[1]
    names = tuple(data.feature_names or ())
    return [str(v) for v in names] if len(names) == d else [f"input {j}" for j in range(d)]


def _short(name: str, width: int = 28) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


def _table(rows: list[dict], cols: list[str]) -> str:
    fmt = _fmt

    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{fmt(r.get(c, ''))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"



def paths_record(post: Posterior, data: Dataset) -> dict:
    """A multi-path fit's paths: how they combine, each one's weight, LOO log score (PSIS over the
    path's draws of the closed-form p(yᵢ | y₋ᵢ, θ), :func:`ssgp_ppl.inference.paths.path_loo`; standardised
    units as the stacking uses it, and per training row in original units), the rows whose k̂
    makes that score unreliable, its final objective and what that objective is, its posterior
    mean noise sd (original units), and the mixture's LOO log score."""
    i = post.info.paths
    scale = float(np.asarray(post.y_scaler.scale))
    n = data.n_train
    # a log target's density of y has the Jacobian: log p(y) = log p(log y) − log y
    log_y = float(np.sum(data.y_scaler.inverse_affine(data.y_train))) if data.y_scaler.log else 0.0
    noise = list(i.noise) if i.noise is not None else [
        float(np.mean(p.flat_sites["noise"])) if "noise" in p.flat_sites else None
        for p in post.path_posteriors] or [None] * len(i.weights)
    kinds = list(i.objective_kind or ["loss"] * len(i.weights))
    return {"combine": i.combine, "weights": list(i.weights), "loo": list(i.loo),
            # −elpd per row in original units: comparable with the test MNLP
            "loo_per_row": [float(-(v - n * np.log(scale) - log_y) / n) for v in i.loo],
            "pareto_k_bad": list(i.pareto_k_bad or [None] * len(i.weights)),
            "objective": list(i.objective), "objective_kind": kinds,
            "noise": [None if v is None else v * scale for v in noise],
            "stacked_loo": i.stacked_loo,
            "stacked_loo_per_row": float(-(i.stacked_loo - n * np.log(scale) - log_y) / n)}


def replicate_floor(ref_inv, *, seed: int = 0) -> dict | None:
    """The reference compared with itself: :func:`~ssgp_ppl.diagnostics.invariants.posterior_comparison` of
    its first half of chains against its second half (None with fewer than 2 chains). A VI-vs-
    reference distance below about twice this floor is within the reference's own Monte Carlo
    noise."""
    chains = ref_inv.sizes["chain"]
    if chains < 2:
        return None
    half = chains // 2
    return invariants.posterior_comparison(ref_inv.isel(chain=slice(0, half)),
                                           ref_inv.isel(chain=slice(half, None)), seed=seed)


def _evaluate_record(r, label: str, data: Dataset, y_test, readings: dict) -> dict:
    """A run's record: the ``fit`` metrics, the coverage curve, PSIS-LOO and the readings of its
    test PIT and LOO-PIT (the readings themselves into ``readings[label]``, for the plots)."""
    rec = metrics_record(r, data) | {"method": label}
    rec["loo_seconds"] = float(r.info.loo_seconds)
    test = r._test()  # a log target's intervals are exp of log y's: its curve is log y's
    rec["coverage_curve"] = {"nominal": LEVELS.tolist(), "empirical": coverage_curve(
        test.modelled(y_test), *test.matched(), LEVELS)[1].tolist()}
    readings[label] = {"test": pit_reading(r.datatree["predictions_constant_data"]["pit"])}
    rec["pit_reading"] = readings[label]["test"].verdict
    loo = loo_summary(r.datatree)
    if loo is not None:
        rec["loo"], pits = loo
        readings[label]["loo"] = pit_reading(pits)
        rec["loo_pit_reading"] = readings[label]["loo"].verdict
    else:
        rec["loo_missing"] = _loo_missing(r, gold=label.startswith("gold reference"))
    return rec


def _loo_missing(r: Posterior, gold: bool = False) -> str:
    """Why a fit has no PSIS-LOO (:func:`~ssgp_ppl.diagnostics.calibration.loo_summary` returned None)."""
    dt = r.datatree
    if gold:
        return ("a stored gold reference keeps its runs' pooled SMC particles without a sampler's "
                "statistics: PSIS-LOO is not computed for it (its test scores are in the table above)")
    if r.info.paths:
        return (f"a mixture of {r.info.paths.count} paths has no single density ratio p/q for PSIS; "
                "its stacked LOO log score is in its paths table")
    if not has_loo(dt):
        if "log_likelihood" not in dt.children:
            return ("no pointwise log-likelihood (a closed-form predictive or point estimate: "
                    "no draws of the weights s)")
        return "fewer than 25 draws: too few for PSIS's Pareto tail"
    if not is_vi(dt):
        return "draws neither from a sampler nor from a VI q with its log density: no valid ratios"
    return "not computed"


def _gold_record(g) -> dict:
    """The reference record of a stored gold reference: its stored verdict, provenance and the
    label the tables use."""
    d = dict(g.verdict)
    p = g.provenance
    d.update(source="gold", label=g.label(), computed=p["computed"], wall_seconds=p["wall_seconds"],
             settings=p["settings"], machine=p["machine"], package_version=p["package_version"],
             folder=g.path.name, entry=p["entry"])
    return d


def reference_fit(entry, data, method, *, seed=0, progress=False, handoff=None, fresh=False,
                  gold_root=None):
    """(posterior, gold): the stored gold reference matching this comparison's target unless
    ``fresh`` (:func:`ssgp_ppl.diagnostics.gold.find`), else the reference fitted on the fly."""
    g = None if fresh else gold.find(entry, data, handoff, root=gold_root)
    if g is None:
        return fit(entry, data, method, seed=seed, progress=progress, inputs=handoff), None
    with step(f"{method}: {g.label()} ({g.path.name})", progress):
        return evaluate(g.posterior(), data, seed=seed), g


PROGRESS = "progress.json"  # in the staging directory: the settings and the finished methods
HANDOFF = "handoff.npz"  # in the staging directory: what the entry's own method hands the others


def compare(entry: CatalogEntry, data: Dataset, out: Path, *, seed: int = 0,
            progress: bool = True, fresh_reference: bool = False,
            gold_root: Path | None = None, overwrite: bool = False, resume: bool = False,
            run_record: dict | None = None, budget: float | None = None) -> list[dict]:
    """Fit every method of ``entry`` (plus the reference where possible) on one split, write the
    report; returns the per-method records (:func:`run_comparison` returns a
    :class:`Comparison` with the posteriors too).

    Per method: the ``fit`` metrics, the coverage curve (10%..90%), PSIS-LOO (importance-
    corrected for VI draws), and for VI methods the posterior comparison with the reference on
    the invariant quantities; for the reference its verdict and modes.

    The reference is the stored gold reference of this target where there is one
    (:mod:`ssgp_ppl.diagnostics.gold`; ``gold_root`` overrides where they are looked up), unless
    ``fresh_reference``; otherwise it is computed here, on the entry's own budget.

    ``out`` is held by this process (:mod:`ssgp_ppl.runtime.rundir`: a second run on it is refused). The
    run is written to ``out/.ssgp-ppl-staging`` and moved into ``out`` when complete; a run
    already in ``out`` is refused unless ``overwrite``. ``resume`` continues an interrupted
    comparison of the same settings (entry, data, seed), loading each method it finished.
    ``run_record`` is written as its ``run.json`` (what ``ssgp-ppl compare --resume`` reads).
    An entry with ``m = "auto"`` is sized first, once for every method
    (:func:`ssgp_ppl.inference.sizing.resolve` with ``budget`` seconds).
    """
    return _compare(entry, data, out, seed=seed, progress=progress,
                    fresh_reference=fresh_reference, gold_root=gold_root, overwrite=overwrite,
                    resume=resume, run_record=run_record, budget=budget)[0]


def run_comparison(entry: CatalogEntry, data: Dataset, out: Path, *, seed: int = 0,
                   progress: bool = True, fresh_reference: bool = False,
                   gold_root: Path | None = None, overwrite: bool = False,
                   resume: bool = False, budget: float | None = None) -> Comparison:
    """:func:`compare`, returning the :class:`Comparison` it wrote into ``out`` with every
    method's posterior."""
    records, posteriors = _compare(entry, data, out, seed=seed, progress=progress,
                                   fresh_reference=fresh_reference, gold_root=gold_root,
                                   overwrite=overwrite, resume=resume, budget=budget)
    saved = read_comparison(out, posteriors)
    if [m["method"] for m in saved.records] != [r["method"] for r in records]:
        raise SSGPError(f"{out / 'comparison.json'} was replaced while the comparison ran")
    return saved


def _compare(entry, data, out, *, seed, progress, fresh_reference, gold_root, overwrite, resume,
             run_record=None, budget=None) -> tuple[list[dict], dict[str, Posterior]]:
    """:func:`compare`'s records and the posteriors by method label."""
    if not entry.lik.conjugate:
        raise SSGPError(f"{entry.name}: compare's calibration report (coverage, PIT, CRPS) is for "
                        f"Gaussian-likelihood entries; this one is {entry.lik.name} (use "
                        "`ssgp-ppl fit`)")
    entry = sizing.resolve(entry, data, budget=budget, seed=seed, progress=progress)
    out = Path(out)
    with rundir.hold(out):
        stage = rundir.stage(out, resume=resume, overwrite=overwrite)
        state = _progress(stage, _fingerprint(entry, data, seed, fresh_reference, gold_root),
                          resume)
        if run_record is not None and not (stage / "run.json").exists():
            write_json(stage / "run.json", run_record)
        records, results = _compare_in(entry, data, stage, state, seed=seed, progress=progress,
                                       fresh_reference=fresh_reference, gold_root=gold_root)
        names = [p.name for p in stage.iterdir() if p.name not in (PROGRESS, HANDOFF)
                 and not p.name.startswith(".")]
        rundir.publish(out, stage, names)
    return records, {rec["method"]: r for rec, r in zip(records, results, strict=True)}


def _fingerprint(entry, data, seed, fresh_reference, gold_root) -> dict:
    """What an interrupted comparison must match to be continued: the entry and its settings,
    the training and test rows, the seed and where the reference comes from."""
    from ssgp_ppl.runtime.checkpoint import run_fingerprint

    given = {"test": {"x": np.asarray(data.x_test), "y": np.asarray(data.y_test)}}
    return {**run_fingerprint(entry, data, "compare", seed, None, given),
            "fresh_reference": fresh_reference,
            "gold_root": None if gold_root is None else str(Path(gold_root).resolve())}


def _progress(stage: Path, fingerprint: dict, resume: bool) -> dict:
    """The comparison's state in ``stage``: its fingerprint and its finished methods (method ->
    labels, reference record, hand-over), read back when resuming; a comparison of other
    settings is refused."""
    path = stage / PROGRESS
    if resume and path.is_file():
        try:
            state = json.loads(path.read_text())
            if not isinstance(state["fingerprint"], dict) or not isinstance(state["done"], dict):
                raise TypeError("not a mapping")
        except (ValueError, KeyError, TypeError) as e:
            raise SSGPError(f"{path} is corrupt ({type(e).__name__}: {e}); give --overwrite to "
                            "start afresh") from None
        theirs = state["fingerprint"]
        for k in sorted(set(fingerprint) | set(theirs)):
            if fingerprint.get(k) != theirs.get(k):
                raise SSGPError(f"{stage.parent} holds a comparison of other settings: {k} is "
                                f"{theirs.get(k)!r} there and {fingerprint.get(k)!r} here; give "
                                "its settings, or --overwrite to start afresh")
        return state
    state = {"fingerprint": fingerprint, "done": {}}
    _write_progress(stage, state)
    return state


def _write_progress(stage: Path, state: dict) -> None:
    # NaN kept as NaN: a resumed reference record reads as the fitted one
    write_text_atomic(stage / PROGRESS, json.dumps(state, indent=1) + "\n")


def finished_methods(out: Path) -> list[str]:
    """The methods an interrupted comparison in ``out`` finished (kept for ``--resume``)."""
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError, KeyError):
        return list(json.loads((out / rundir.STAGING / PROGRESS).read_text())["done"])
    return []


def _save_finished(stage: Path, state: dict, method: str, runs: list, reference: dict | None,
                   handoff: Handoff | None) -> None:
    """Save a finished method's posteriors (and the hand-over of the entry's own method), then
    record it as finished: a method is resumed only when all of it is on disk."""
    for label, r in runs:
        r.save(stage / f"posterior_{label}.nc")
    saved = {"labels": [label for label, _ in runs], "reference": reference}
    if handoff is not None:
        type2 = handoff.type2
        arrays = {f"type2_{k}": np.asarray(v) for k, v in (type2 or {}).items()}
        if handoff.spectral_points is not None:
            arrays["spectral_points"] = np.asarray(handoff.spectral_points)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        write_bytes_atomic(stage / HANDOFF, buf.getbuffer())
        saved["handoff"] = {"type2": None if type2 is None else sorted(type2),
                            "spectral_points": handoff.spectral_points is not None}
    state["done"][method] = saved
    _write_progress(stage, state)


def _load_finished(stage: Path, method: str, saved: dict | None, partitions, progress: bool):
    """(runs, handoff) of a method an interrupted comparison finished, loaded from ``stage``;
    None when it did not finish or its files do not load (it is then fitted again)."""
    if saved is None:
        return None
    try:
        with step(f"{method}: finished by the interrupted run, loading it from {stage}", progress):
            runs = [(label, _load(stage / f"posterior_{label}.nc")) for label in saved["labels"]]
            handoff = None
            if "handoff" in saved:
                h = saved["handoff"]
                with np.load(stage / HANDOFF, allow_pickle=False) as z:
                    handoff = Handoff(
                        None if h["type2"] is None else {k: z[f"type2_{k}"] for k in h["type2"]},
                        z["spectral_points"] if h["spectral_points"] else None, partitions)
    except (SSGPError, OSError, ValueError, KeyError, TypeError) as e:
        print(f"ssgp-ppl: {method}: its saved files do not load ({type(e).__name__}: {e}); "
              "fitting it again", file=sys.stderr)
        return None
    return runs, handoff


def _load(path: Path) -> Posterior:
    """A saved posterior (:func:`ssgp_ppl.load`)."""
    return load_posterior(path, from_saved)


def _compare_in(entry, data, stage: Path, state: dict, *, seed, progress, fresh_reference,
                gold_root) -> tuple[list[dict], list[Posterior]]:
    """:func:`compare` in the staging directory ``stage``; ``state``: its finished methods.
    Returns the records and the posteriors, in the same order."""
    done = state["done"]
    results, records = [], []
    readings: dict = {}  # label -> {"test": PITReading, "loo": PITReading}
    # built once, shared by every method
    partitions = entry.partitions(data.x_train, seed=seed) if entry.uses_partitions else None
    # what the entry's own method hands the others (type-II estimates, NCVMP's spectral points)
    handoff = Handoff(partitions=partitions)
    y_test = np.asarray(data.y_scaler.inverse(data.y_test))
    for i, method in enumerate(methods_to_run(entry, data.n_train)):
        is_ref = methods.get(method).reference
        loaded = _load_finished(stage, method, done.get(method), partitions, progress)
        if loaded is not None and i == 0 and loaded[1] is None:  # its hand-over was not saved
            loaded = None
        if loaded is not None:
            runs, given = loaded
            res = next(r for label, r in runs if label == method)
            ref_record = done[method]["reference"]
        else:
            g = None
            if is_ref:
                res, g = reference_fit(entry, data, method, seed=seed, progress=progress,
                                        handoff=handoff, fresh=fresh_reference, gold_root=gold_root)
            else:
                res = fit(entry, data, method, seed=seed, progress=progress, inputs=handoff)
            given = Handoff(res.handoff.type2, res.handoff.spectral_points, partitions)
            runs = [(method, res)]
            if res.path_posteriors:  # a multi-path fit: its first path alone is the single-run fit
                one = evaluate(res.path_posteriors[0], data, seed=seed)
                runs.insert(0, (f"{method}-one-path", one))
            if is_ref and len(chains := split_chains(res)) > 1:
                # the reference's chains as paths, stacked (Yao, Vehtari & Gelman 2022)
                stacked = evaluate(combine(chains, data, "stacking", seconds=res.info.fit_seconds),
                                   data, seed=seed)
                runs.append((f"{method}-chains-stacked", stacked))
            ref_record = None
            if is_ref:
                ref_record = _gold_record(g) if g is not None else \
                    reference_health(res.datatree, res.info)
                ref_record["chain_loo"] = chain_loo(res.datatree)
                ref_record = json.loads(json.dumps(ref_record))  # as a resumed run reads it
            _save_finished(stage, state, method, runs, ref_record, given if i == 0 else None)
        if i == 0:
            handoff = given
        for label, r in runs:
            with step(f"{label}: coverage and PSIS-LOO", progress):
                rec = _evaluate_record(r, label, data, y_test, readings)
            if r is res and is_ref:
                rec["reference"] = ref_record
            if r.info.paths is not None:
                rec["paths"] = paths_record(r, data)
            results.append(r)
            records.append(rec)
    ref = next((r for r, rec in zip(results, records, strict=True) if "reference" in rec), None)
    ref_label = _reference_label(records)
    if ref is not None:
        ref_inv = ref.datatree["invariants"].to_dataset()
        ref_rec = records[results.index(ref)]
        floor = replicate_floor(ref_inv, seed=seed)
        if floor is not None:
            ref_rec["reference"]["replicate_floor"] = floor
        for r, rec in zip(results, records, strict=True):
            if r is ref or "invariants" not in r.datatree.children:
                continue
            inv = r.datatree["invariants"].to_dataset()
            if inv.sizes["chain"] * inv.sizes["draw"] > 1:
                rec["vs_reference"] = invariants.posterior_comparison(inv, ref_inv, seed=seed)
                for q, v in rec["vs_reference"].items():
                    if floor is not None and q in floor:
                        v["w1_scaled_floor"] = floor[q]["w1_scaled"]
                    if q in invariants.SCALARS:  # per component (input): the summary quotes them
                        v["mean"] = _component_means(inv[q])
                        v["mean_reference"] = _component_means(ref_inv[q])
                rec["vs_reference"]["reference_converged"] = ref_rec["reference"]["converged"]
    write_json(stage / "comparison.json", {"format": REPORT_FORMAT, "model": entry.name,
                                         "dataset": data.name, "split": data.split, "seed": seed,
                                         "m": entry.config["model"]["m"],
                                         **({} if entry.sizing is None
                                            else {"sizing": entry.sizing.to_json()}),
                                         "summary": summary_lines(records, ref_label),
                                         "methods": records})
    with step(f"report: plots and {stage.parent / 'report.html'}", progress):
        page = _html(entry, data, seed, records, results, ref_label, readings)
    write_text_atomic(stage / "report.html", page)
    return records, results


def _component_means(da) -> list[float]:
    """The posterior mean of each component of an invariant (chain, draw, ...) array."""
    return [float(v) for v in np.ravel(da.mean(("chain", "draw")).values)]


def _health_rows(d: dict) -> list[dict]:
    """A reference verdict's worst R-hat and smallest bulk / tail ESS, one row per invariant."""
    return [{"quantity": q, "rhat_max": d["rhat_max"][q], "ess_bulk_min": d["ess_bulk_min"][q],
             "ess_tail_min": d["ess_tail_min"][q]} for q in d["rhat_max"]]


def _gold_html(d: dict) -> list[str]:
    """The gold reference's section: its verdict and reasons, provenance, per-run agreement
    (log evidence, test MNLP), the importance-sampling check and the invariants' diagnostics."""
    status = "CONVERGED" if d["converged"] else "NOT CONVERGED: " + "; ".join(d["reasons"])
    if (budget := gold.budget_text(d)) is not None:
        status += f". {budget[0].upper()}{budget[1:]}"
    if not d["converged"]:
        status += ("; the comparison below is against the spread of its runs pooled with "
                   "equal weights")
    st = d["settings"]
    isc = d.get("is_check")
    flat = {"runs": d["runs"], "particles a run": st["particles"],
            "HMC moves a temperature": st["mcmc_steps"], "draws kept a run": st["draws_per_run"],
            "log Ẑ mean ± se": f"{d['log_evidence_mean']:.2f} ± {d['log_evidence_se']:.2f}",
            "log Ẑ sd": d["log_evidence_sd"],
            "log Z by importance sampling": "not computed" if isc is None else
            f"{isc['log_z']:.2f} ± {isc['se']:.2f} (k̂ {isc['khat']:.2f})",
            "log Z by bridge sampling": "not computed" if not (isc or {}).get("bridge") else
            f"{isc['bridge']['log_z']:.2f} ± {isc['bridge']['se']:.2f}"
            + (" (the check: IS's k̂ is above its bound)"
               if d.get("evidence_check") == "bridge sampling" else ""),
            "pooled test MNLP": d["pooled_nlpd"], "largest run gap": d["nlpd_max_gap"],
            "computed": d["computed"], "wall time (min)": d["wall_seconds"] / 60,
            "package": d["package_version"]}
    per_run = [{"run": k, "log Ẑ": d["log_evidence"][k], "test MNLP": d["run_nlpd"][k],
                "temperatures": d["temperatures"][k], "mode": d["chain_mode"][k]}
               for k in range(d["runs"])]
    health = _health_rows(d)
    return [f"<h2>Reference: {html.escape(d['label'])}</h2>",
            f"<p><b>{html.escape(status)}</b>. A gold reference is computed once with a large "
            "budget (independent tempered-SMC runs from the prior, each one chain here), checked "
            "run against run, stored with the package and reused; nothing of it is recomputed by "
            f"this comparison (<code>--fresh-reference</code> does). {html.escape(gold.criteria_text())}"
            f" Stored as <code>{html.escape(d['folder'])}</code>.</p>",
            _table([flat], list(flat)), _table(per_run, list(per_run[0])),
            _table(health, list(health[0])) if health else ""]


def _paths_section(r: dict) -> list[str]:
    """The table of a multi-path fit's paths (or of the reference's stacked chains) and its
    prose."""
    d = r["paths"]
    chains = all(k == "log_density" for k in d["objective_kind"])
    def cell(v, mark):  # a value the path does not have: blank, with its footnote mark
        return v if v is not None and np.isfinite(v) else mark

    tab = [{"chain" if chains else "path": k, "weight": d["weights"][k],
            "loo_log_score": d["loo"][k], "loo −elpd per row": d["loo_per_row"][k],
            "rows k̂ > good_k": d["pareto_k_bad"][k],
            "final_objective": cell(d["objective"][k], "—*"),
            "objective is": OBJECTIVE_KINDS[d["objective_kind"][k]],
            "noise_sd": cell(d["noise"][k], "—†")} for k in range(len(d["weights"]))]
    notes = []
    if any(row["final_objective"] == "—*" for row in tab):
        notes.append("* no objective: the path has neither a loss trace nor a log density of "
                     "its draws.")
    if any(row["noise_sd"] == "—†" for row in tab):
        notes.append("† no noise sd: σ_n is not among the path's sampled or fitted sites.")
    if chains:
        what = ("Each path is one chain of the reference, stacked as if it were a run of its own "
                "(Yao, Vehtari & Gelman 2022). A chain has no loss: its final_objective is minus "
                "the mean log density of its draws (the lp of the modes table), lower is better "
                "as for a loss, but not comparable with a VI path's −ELBO.")
    else:
        what = ("Each path is a fit from its own start (path 0: the entry's own; the others: the "
                f"best of {SCREEN_DRAWS} prior draws by the collapsed log joint, or for NCVMP the "
                "next candidate spectral sets).")
    return [f"<h2>{html.escape(r['method'])}: {len(tab)} {'chains' if chains else 'paths'} "
            f"combined by {html.escape(d['combine'])}</h2>",
            f"<p>{what} LOO log score: Σᵢ log p(yᵢ | y₋ᵢ) over the training rows, the stacking "
            "criterion (Yao, Vehtari & Gelman 2022), computed the same way for every path and "
            "chain: PSIS over the path's own draws of the closed-form p(yᵢ | y₋ᵢ, θ) with s "
            "integrated out, θ left out by the ratios 1 / p(yᵢ | y₋ᵢ, θ) (Bürkner, Gabry & "
            "Vehtari 2021); in standardised units of y, as the weights use it (−elpd per row: "
            "the same in original units, next to the test MNLP). Rows with k̂ above good_k have "
            "an unreliable, typically optimistic estimate. noise_sd: the path's posterior mean "
            f"σ_n, original units. Mixture: {d['stacked_loo']:.2f} (−elpd per row "
            f"{d['stacked_loo_per_row']:.3f}; its test MNLP {r['mnlp']:.3f}).</p>",
            _table(tab, list(tab[0]))] + ([f"<p><small>{html.escape(' '.join(notes))}</small></p>"]
                                          if notes else [])


def _paths_contrast(records: list[dict]) -> list[str]:
    """The measured reasons why the reference's chains and the VI paths score differently."""
    fits = [r for r in records if "paths" in r
            and not all(k == "log_density" for k in r["paths"]["objective_kind"])]
    chains = [r for r in records if "paths" in r and r not in fits]
    if not fits or not chains:
        return []
    f, c = fits[0], chains[0]
    bf, bc = int(np.argmax(f["paths"]["loo"])), int(np.argmax(c["paths"]["loo"]))
    gap = c["paths"]["loo"][bc] - f["paths"]["loo"][bf]
    nf, nc = f["paths"]["noise"][bf], c["paths"]["noise"][bc]
    n = f["n_train"]
    noise = "" if nf is None or nc is None or nf == nc else (
        f" The best chain's posterior mean noise sd is {nc:.3g} against {nf:.3g} for the best "
        f"path (original units): the chains explain more of the training rows by the "
        f"frequencies; at a zero residual the smaller σ_n alone gives log({nf:.3g} / {nc:.3g}) "
        f"= {np.log(nf / nc):.2f} nats more per row, {n * np.log(nf / nc):.0f} over the {n} "
        "rows.")
    opt_f = f["mnlp"] - f["paths"]["stacked_loo_per_row"]
    opt_c = c["mnlp"] - c["paths"]["stacked_loo_per_row"]
    ref = next((r["reference"].get("chain_loo") for r in records if "reference" in r), None)
    check = "" if not ref else (
        " By another route, each chain's PSIS-LOO from its pointwise log-likelihood with s drawn "
        f"(not integrated out): {', '.join(f'{v:.1f}' for v in ref)}.")
    return [f"<h3>{html.escape(c['method'])} vs {html.escape(f['method'])}: LOO log scores</h3>",
            "<p>Both tables use one estimator on one scale (standardised y; per row in original "
            f"units). The best chain's LOO log score is {c['paths']['loo'][bc]:.1f}, the best VI "
            f"path's {f['paths']['loo'][bf]:.1f}: {gap:+.1f} nats.{check}{noise} How far each "
            "training-row LOO carries to the test set, test MNLP minus LOO −elpd per row: "
            f"{opt_c:+.3f} nats for the stacked chains ({c['mnlp']:.3f} vs "
            f"{c['paths']['stacked_loo_per_row']:.3f}), {opt_f:+.3f} for the stacked paths "
            f"({f['mnlp']:.3f} vs {f['paths']['stacked_loo_per_row']:.3f}); a larger value is a "
            "more optimistic LOO. Rows with k̂ above good_k: "
            f"{', '.join(str(k) for k in c['paths']['pareto_k_bad'])} (chains), "
            f"{', '.join(str(k) for k in f['paths']['pareto_k_bad'])} (paths).</p>"]


LOO_UNRELIABLE = 0.7  # share of rows with k̂ > good_k above which an elpd is shown as unreliable


def _loo_section(rows: list[dict], records: list[dict]) -> list[str]:
    """The PSIS-LOO table: a row per method; the reason where a method has none; an elpd whose
    k̂ exceeds good_k on more than LOO_UNRELIABLE of the rows greyed and marked unreliable."""
    cols = ["elpd_loo", "se", "p_loo", "pareto_k_max", "pareto_k_bad_frac", "good_k", "corrected"]
    head = "".join(f"<th>{c}</th>" for c in ["method", *cols])
    body = []
    for row, r in zip(rows, records, strict=True):
        name = f"<td>{html.escape(row['method'])}</td>"
        if "loo" not in r:
            why = html.escape(r.get("loo_missing", "not computed"))
            body.append(f"<tr class='noloo'>{name}<td colspan='{len(cols)}'>no PSIS-LOO: "
                        f"{why}</td></tr>")
            continue
        d = r["loo"]
        cells = [f"<td>{_fmt(d[c])}</td>" for c in cols]
        if d["pareto_k_bad_frac"] > LOO_UNRELIABLE:
            cells[0] = (f"<td class='unreliable'><s>{_fmt(d['elpd_loo'])}</s> unreliable (k̂ &gt; "
                        f"good_k on {d['pareto_k_bad_frac']:.0%} of rows)</td>")
            cells[1] = f"<td class='unreliable'>{_fmt(d['se'])}</td>"
        body.append(f"<tr>{name}{''.join(cells)}</tr>")
    return ["<h2>PSIS-LOO on the training rows</h2>",
            "<p>Σᵢ log p(yᵢ | y₋ᵢ) in standardised units of y, one row per method. VI draws use "
            "<code>loo_approximate_posterior</code> (importance ratios p(θ, y) / q(θ)); Pareto "
            "k̂ above good_k flags rows where the draws are too far from the leave-one-out "
            f"posterior for the estimate to be trusted; above {LOO_UNRELIABLE:.0%} of rows the "
            "elpd is struck through: it is not a usable number.</p>",
            f"<table><tr>{head}</tr>{''.join(body)}</table>"]


def _html(entry, data, seed, records, results, ref_label, readings) -> str:
    cols = ["method", "rmse", "nmse", "mnlp", "crps", "coverage_50", "coverage_90",
            "fit_seconds", "predict_seconds"]
    rows = [{**r, "method": _label(r, ref_label)} for r in records]
    stops = [{"method": row["method"], "steps": r.get("steps", ""), "stop": r["stop"]}
             for row, r in zip(rows, records, strict=True) if "stop" in r]
    parts = [f"<h1>{html.escape(entry.name)} on {html.escape(data.name)}</h1>",
             f"<p>{html.escape(entry.description)}<br>n_train = {data.n_train}, "
             f"n_test = {data.n_test}, split {data.split}, seed {seed}.<br>"
             + (html.escape(entry.sizing.text()) if entry.sizing is not None
                else f"m = {entry.config['model']['m']} (the entry's)")
             + ".<br>Metrics on the test set "
             "in original units of the target; MNLP and CRPS lower is better."
             + (f" The target {html.escape(data.target_name)} is log-transformed: every method "
                "is fitted on its logarithm and its predictions (log-normal given each draw) "
                "and metrics are back-transformed." if data.y_scaler.log else "") + "</p>",
             "<h2>Summary</h2><ul class='summary'>"
             + "".join(f"<li>{html.escape(line)}</li>" for line in summary_lines(records, ref_label))
             + "</ul>",
             "<h2>Predictive metrics (test set)</h2>", _table(rows, cols)]
    if stops:
        parts += ["<h2>How each fit stopped</h2>",
                  "<p>SVI and type-II fits: converged when the upper bound (estimate + 2 SE) of "
                  "the loss's improvement per 1,000 steps, a least-squares slope over the last "
                  "half of the trace, is below the tolerance (tol × n nats); otherwise the step "
                  "budget stopped them while the objective may still improve. NCVMP stops on the "
                  "relative increase of its bound.</p>",
                  _table(stops, ["method", "steps", "stop"])]
    precision = [{"method": row["method"], "precision": r["precision"]}
                 for row, r in zip(rows, records, strict=True) if "precision" in r]
    if precision:
        parts += ["<h2>Numerical precision</h2>",
                  "<p>Fits the working precision cannot resolve: the learned noise held up by "
                  "its resolution floor for the fit's signal and features (float64 puts it lower "
                  "at the same values), or jitter added to the "
                  "Cholesky factor of A = ΦᵀΦ + (mσ<sub>n</sub>²/σ<sub>s</sub>²)I at the fitted "
                  "values (<code>ssgp_ppl.model.linalg.resolution</code>). Their noise and intervals are "
                  "not float64's; refit with <code>--x64</code>.</p>",
                  _table(precision, ["method", "precision"])]
    cov = [{"method": row["method"], **{f"{lv:.0%}": e for lv, e in zip(
        r["coverage_curve"]["nominal"], r["coverage_curve"]["empirical"], strict=True)}}
        for row, r in zip(rows, records, strict=True)]
    parts += ["<h2>Coverage of central intervals (nominal vs empirical, test set)</h2>",
              _table(cov, list(cov[0]))]
    parts += _loo_section(rows, records)
    for r in records:
        if "paths" in r:
            parts += _paths_section(r)
    parts += _paths_contrast(records)
    refs = [r for r in records if "reference" in r]
    if refs and refs[0]["reference"].get("source") == "gold":
        d = refs[0]["reference"]
        parts += _gold_html(d)
    if refs and refs[0]["reference"].get("source") != "gold":
        d = refs[0]["reference"]
        status = "converged" if d["converged"] else (
            "NOT CONVERGED: " + "; ".join(d["reasons"]) + ". Every comparison with it below is "
            "against an unreliable reference")
        flat = {"divergences": d["divergences"], "modes": d["modes"],
                "log_density_spread": d["log_density_spread"], "bfmi_min": min(d["bfmi"])}
        if "log_evidence" in d:
            flat.update(particles=d["particles"], temperatures=str(d["temperatures"]),
                        log_evidence=", ".join(f"{v:.2f}" for v in d["log_evidence"]),
                        runs_rhat=d["runs_rhat"])
        health = _health_rows(d)
        modes = [{"mode": k, "chains": str([c for c, mk in enumerate(d["chain_mode"]) if mk == k]),
                  "weight (share of chains)": d["mode_weights"][k],
                  "mean log density": d["mode_log_density"][k]} for k in range(d["modes"])]
        parts += [f"<h2>Reference ({html.escape(refs[0]['method'])}): {html.escape(status)}</h2>",
                  f"<p>Converged means: rank R-hat &lt; {RHAT_BELOW:g} and bulk/tail ESS ≥ "
                  f"{ESS_MIN} on every symmetry-invariant quantity, no divergence, BFMI ≥ "
                  f"{BFMI_MIN:g}, the chains' mean log "
                  f"density within {LOG_DENSITY_SPREAD:g} nats, and for tempered SMC two runs "
                  f"whose log evidence agrees within {LOG_EVIDENCE_SPREAD:g} nat and whose "
                  f"invariants agree (R-hat ≤ {RUNS_RHAT:g} with each run as one chain). "
                  "Modes = groups of chains whose two-chain R-hat on the scalar invariants "
                  "and log density stays below 1.1; the polishing chains start at SMC particles, "
                  "so their shares estimate the modes' posterior mass.</p>",
                  _table([flat], list(flat))] + ([_table(health, list(health[0]))] if health else [])
        parts += ["<h3>Modes</h3>", _table(modes, list(modes[0]))]
    if refs:
        d = refs[0]["reference"]
        if entry.learned_sites:
            parts.append("<p>Empirical-Bayes reference: it conditions on the type-II "
                         f"hyperparameters estimated by {html.escape(entry.methods[0])}.</p>")
        vs = []
        for row, r in zip(rows, records, strict=True):
            for q, v in r.get("vs_reference", {}).items():
                if isinstance(v, dict):
                    vs.append({"method": row["method"], "quantity": q, **v})
        if vs:
            note = "" if d["converged"] else " (reference NOT CONVERGED)"
            parts += [f"<h2>VI vs reference on invariant quantities{note}</h2>",
                      "<p>W1: Wasserstein-1 per component, averaged (original units; scaled: in "
                      "reference sd); w1_scaled_floor: the same between two halves of the "
                      "reference's own chains (its replicate floor: a distance below ~2× the floor "
                      "is noise); KL(VI ‖ reference) by nearest neighbours; std ratio sd_VI / "
                      "sd_ref (median, min, max over components; below 1 VI understates "
                      "uncertainty); mean, mean_reference: the posterior means of noise, signal "
                      "and each input's frequency spread, VI's and the reference's.</p>",
                      _table(vs, list(dict.fromkeys(k for row in vs for k in row)))]
    elif not entry.latent_sites:
        parts.append("<p>No reference: this entry has no latent variables (all its "
                     "parameters are type-II point estimates).</p>")
    elif any(not res.sites for res in results):
        parts.append("<p>No reference for local fits: each test point has its own "
                     "posterior on its neighbourhood.</p>")
    else:
        parts.append(f"<p>No reference: n_train = {data.n_train} exceeds {REFERENCE_MAX_ROWS} "
                     "rows (use --subsample for a reference).</p>")
    for title, png, *caption in _plots(results, records, data, ref_label, readings):
        parts.append(f"<h2>{html.escape(title)}</h2>"
                     + "".join(f"<p>{html.escape(c)}</p>" for c in caption)
                     + f"<img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}img{max-width:100%}"
             "table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;"
             "padding:3px 8px;font-size:90%}td.unreliable{color:#999}tr.noloo td{color:#666}"
             "ul.summary{background:#f4f6fa;padding:8px 8px 8px 28px;border-left:4px solid "
             "#4a6fa5}ul.summary li{margin:3px 0}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(entry.name)}"
            f"</title><style>{style}</style></head><body>{''.join(parts)}</body></html>")


def compare_named(name: str, dataset: str, out_root: Path | str = "reports", *,
                  small_run: bool = False, reuse: bool = False, seed: int = 0,
                  progress: bool = False) -> dict:
    """:func:`compare` for catalog entry ``name`` on data set ``dataset`` (inputs scaled as the
    entry's ``[data] x_scaling`` says) into ``out_root/<name>-<dataset>``; returns the
    comparison.json content. ``small_run``: :func:`small`; ``reuse``: read an existing
    comparison.json instead of refitting (the notebooks share their full-size runs); without
    it a comparison already there is replaced."""
    import json

    from ssgp_ppl.data.datasets import load
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
    compare(entry, data, out, seed=seed, progress=progress, overwrite=True)  # refits it
    return json.loads((out / "comparison.json").read_text())


def summary_rows(result: dict) -> list[dict]:
    """One flat row per method of a comparison.json: metrics, 90% coverage, LOO k̂, and the
    VI-vs-reference std ratios and W1 (scaled) of f*, the kernel and the noise."""
    rows = []
    ref = next((m["reference"] for m in result["methods"] if "reference" in m), None)
    for m in result["methods"]:
        row = {"model": result["model"], "method": m["method"], "nmse": m["nmse"],
               "mnlp": m["mnlp"], "crps": m["crps"], "coverage_90": m["coverage_90"]}
        if "loo" in m:
            row["pareto_k_bad_frac"] = m["loo"]["pareto_k_bad_frac"]
        for q in ("f_test", "kernel", "noise", "frequency_spread"):
            v = m.get("vs_reference", {}).get(q)
            if isinstance(v, dict):
                row[f"std_ratio_{q}"] = v["std_ratio"]
                row[f"w1_scaled_{q}"] = v["w1_scaled"]
        if ref is not None:
            row["reference_converged"] = ref["converged"]
            row["reference_modes"] = ref["modes"]
        rows.append(row)
    return rows


# ------------------------------------------------------------------------ the result as an object


class _Posteriors(Mapping):
    """A comparison's posteriors by method label: those of the run held in memory, the others
    read from the comparison's ``posterior_<label>.nc`` on first use."""

    def __init__(self, labels: list[str], folder: Path | None, given: dict):
        self._labels, self._folder, self._loaded = list(labels), folder, dict(given)

    def __getitem__(self, label: str) -> Posterior:
        if label not in self._labels:
            raise KeyError(label)
        if label not in self._loaded:
            path = None if self._folder is None else self._folder / f"posterior_{label}.nc"
            if path is None or not path.is_file():
                raise SSGPError(f"the posterior of {label} is not saved ({path} not found): run "
                                "the comparison again to have it")
            self._loaded[label] = _load(path)
        return self._loaded[label]

    def __contains__(self, label) -> bool:
        return label in self._labels

    def __iter__(self):
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __repr__(self) -> str:
        held = sum(label in self._loaded for label in self._labels)
        return f"<{len(self)} posteriors ({held} loaded): {', '.join(self._labels)}>"


@dataclass(frozen=True, eq=False, repr=False)
class Comparison:
    """What `ssgp_ppl.compare` wrote: every method's record (``comparison.json``), its
    posterior, the summary table and the reference's verdict.

    Returned by `ssgp_ppl.compare` and `ssgp_ppl.load_comparison`, not made by hand.

    Parameters
    ----------
    model
        The catalog entry's name.
    dataset
        The data set's name (a file's stem for a data file).
    split
        The split index.
    seed
        The random seed of every fit.
    records
        One dict per method label (``svi-one-path``, ``svi``, ``smc``, …), as
        ``comparison.json`` holds them.
    posteriors
        Method label -> `Posterior`, read from the folder on first use where the comparison was
        loaded.
    folder
        Where the report is (None for a comparison not written).
    summary
        The report's opening lines: the reference's verdict and the best method by test MNLP.
    m
        The number of frequencies every method used (None in a comparison written without it).
    sizing
        How ``m = "auto"`` chose it (`ssgp_ppl.inference.fitinfo.Sizing`), None for a given m.
    """

    model: str
    dataset: str
    split: int
    seed: int
    records: tuple[dict, ...]
    posteriors: Mapping[str, Posterior]
    folder: Path | None = None
    summary: tuple[str, ...] = ()  # the report's opening lines (:func:`summary_lines`)
    m: int | None = None
    sizing: Sizing | None = None

    @property
    def methods(self) -> list[str]:
        """The method labels, in the report's order."""
        return [r["method"] for r in self.records]

    @property
    def table(self):
        """The summary table (a pandas DataFrame, one row per method): test NMSE, MNLP, CRPS,
        90% coverage, PSIS-LOO's share of bad k̂, and against the reference the std ratios and
        scaled W1 distances of the invariant quantities (`summary_rows`)."""
        import pandas as pd

        return pd.DataFrame(summary_rows(self.to_dict()))

    @property
    def reference(self) -> dict | None:
        """The reference's record (its verdict, reasons, modes, …), None without a reference."""
        return next((r["reference"] for r in self.records if "reference" in r), None)

    @property
    def reference_label(self) -> str:
        """What the tables call the reference: a gold reference's label, or the reference
        method with its verdict; empty without a reference."""
        return _reference_label(list(self.records))

    @property
    def converged(self) -> bool | None:
        """Whether the reference converged; None without a reference."""
        ref = self.reference
        return None if ref is None else bool(ref["converged"])

    @property
    def verdict(self) -> str | None:
        """``CONVERGED``, or ``NOT CONVERGED: <reasons>``; None without a reference."""
        ref = self.reference
        if ref is None:
            return None
        return "CONVERGED" if ref["converged"] else "NOT CONVERGED: " + "; ".join(ref["reasons"])

    @property
    def report(self) -> Path | None:
        """The HTML report (None for a comparison not written)."""
        return None if self.folder is None else self.folder / "report.html"

    @property
    def sbc(self):
        """The simulation-based calibration added to the comparison (``compare --sbc N``), a
        :class:`ssgp_ppl.diagnostics.sbc.Result` read from the folder's ``sbc/sbc.nc``; None without one."""
        from ssgp_ppl.diagnostics import sbc

        if self.folder is None or not (self.folder / sbc.COMPARISON_FOLDER / sbc.TREE).is_file():
            return None
        return sbc.load(self.folder / sbc.COMPARISON_FOLDER)

    def record(self, label: str) -> dict:
        """The record of one method.

        Parameters
        ----------
        label
            A method label of `methods`.

        Returns
        -------
        dict
            A copy of its record: test metrics, coverage curve, PSIS-LOO, the comparison with
            the reference, its paths or the reference's verdict.

        Raises
        ------
        SSGPError
            When the comparison has no method ``label`` (its methods named).
        """
        rec = next((r for r in self.records if r["method"] == label), None)
        if rec is None:
            raise SSGPError(f"no method {label!r} in this comparison; it has "
                            f"{', '.join(self.methods)}")
        return copy.deepcopy(rec)

    def modes_figure(self):
        """The modes panel: each path of a multi-path fit and each mode of the reference.

        Returns
        -------
        matplotlib.figure.Figure or None
            One panel per multi-path fit (each path's weight as a bar, its LOO log score as a
            dot) and one for the reference (each mode's share of the chains, its mean log
            density), at most two a row; None when there is neither.
        """
        return modes_figure(list(self.records), self.reference_label)

    def to_dict(self) -> dict:
        """What ``comparison.json`` holds.

        Returns
        -------
        dict
            ``format``, ``model``, ``dataset``, ``split``, ``seed``, ``m`` (and ``sizing``
            where m was sized to the data), ``summary`` and ``methods`` (a copy of `records`).
        """
        sized = {} if self.sizing is None else {"sizing": self.sizing.to_json()}
        return {"format": REPORT_FORMAT, "model": self.model, "dataset": self.dataset,
                "split": self.split, "seed": self.seed, "m": self.m, **sized,
                "summary": list(self.summary), "methods": copy.deepcopy(list(self.records))}

    def __repr__(self) -> str:
        label = self.reference_label
        ref = "no reference" if self.reference is None else f"reference: {label}" + (
            "" if "CONVERGED" in label else f", {self.verdict}")
        where = "" if self.folder is None else f"; report {self.report}"
        return (f"Comparison({self.model} on {self.dataset}, split {self.split}, seed "
                f"{self.seed}: {', '.join(self.methods)}; {ref}{where})")


def read_comparison(folder: str | Path, posteriors: dict | None = None) -> Comparison:
    """The :class:`Comparison` written into ``folder`` (its ``comparison.json``; the posteriors
    are read from its ``posterior_<method>.nc`` files when first used, except those given)."""
    folder = Path(folder)
    if folder.name == "comparison.json":
        folder = folder.parent
    path = folder / "comparison.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SSGPError(f"{path} not found: give the folder a comparison was written to") from None
    except (OSError, ValueError) as e:
        raise SSGPError(f"{path} is unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != REPORT_FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        raise SSGPError(f"{path} has layout {found!r}; this version reads layout {REPORT_FORMAT}: "
                        "run the comparison again")
    try:
        records = tuple(doc["methods"])
        labels = [r["method"] for r in records]
        sized = doc.get("sizing")
        return Comparison(doc["model"], doc["dataset"], int(doc["split"]), int(doc["seed"]),
                          records, _Posteriors(labels, folder, posteriors or {}), folder,
                          tuple(doc.get("summary", ())), doc.get("m"),
                          None if sized is None else Sizing.from_json(sized))
    except (KeyError, TypeError, ValueError, SSGPError) as e:
        raise SSGPError(f"{path} is corrupt ({type(e).__name__}: {e})") from None


__all__ = ["REFERENCE_MAX_ROWS", "REPORT_FORMAT", "SMALL_SETTINGS", "Comparison",
           "budget", "compare", "compare_named", "methods_to_run", "modes_figure", "paths_record",
           "read_comparison", "reference_fit", "replicate_floor", "run_comparison", "small",
           "summary_lines", "summary_rows", "finished_methods"]
