"""``compare`` on a quick run: the report's JSON carries every section the issue lists and the
HTML embeds every plot; an unconverged reference is labelled wherever it is used."""

import json
import os
import re
from html import escape

import numpy as np
import pytest
import xarray as xr

from ssgp_ppl.entry import load_entry
from ssgp_ppl.report import compare, small


def test_compare_report_sections(pendulum, tmp_path):
    entry, data = small(load_entry("vssgp"), pendulum)
    records = compare(entry, data, tmp_path, progress=False)
    # the entry's own method fits two paths (SMALL_SETTINGS): its first path alone, the stacked
    # mixture, and the reference
    assert [r["method"] for r in records] == ["svi-one-path", "svi", "smc", "smc-chains-stacked"]
    saved = json.loads((tmp_path / "comparison.json").read_text())
    one, svi, ref, chains = saved["methods"]
    assert len(chains["paths"]["weights"]) == 2 and "vs_reference" in chains
    np.testing.assert_allclose(svi["coverage_curve"]["nominal"], np.linspace(0.1, 0.9, 9))
    assert one["loo"]["corrected"] and not ref["loo"]["corrected"]
    assert "loo" not in svi  # a mixture of paths has no density ratio for PSIS
    assert svi["paths"]["weights"] and sum(svi["paths"]["weights"]) == pytest.approx(1.0)
    vs = svi["vs_reference"]
    assert {"frequency_spread", "kernel", "f_test"} <= set(vs)  # noise, signal: type-II, constant
    assert "noise" not in vs
    assert all(vs[q]["std_ratio"] > 0 for q in ("kernel", "f_test"))
    h = ref["reference"]
    assert {"rhat_max", "ess_bulk_min", "ess_tail_min", "bfmi", "divergences", "modes",
            "log_evidence", "runs_rhat", "reasons", "replicate_floor"} <= set(h)
    assert len(h["chain_mode"]) == 2 and vs["reference_converged"] == h["converged"]
    assert len(h["log_evidence"]) == 2 and all(isinstance(r, str) and r for r in h["reasons"])
    assert all("w1_scaled_floor" in vs[q] for q in ("kernel", "f_test"))
    html = (tmp_path / "report.html").read_text()
    assert len(re.findall(r"<img alt='[^']+' src='data:image/png;base64,[A-Za-z0-9+/=]{500,}'>",
                          html)) == 8  # with the modes panel and the fitted function
    assert ("NOT CONVERGED" in html) == (not h["converged"])
    # the stacked chains' rows carry what the VI paths' rows carry: a finite objective (minus the
    # chain's mean log density, labelled so), the chain's posterior mean noise sd and a LOO log
    # score on the VI paths' scale, which agrees with the reference's own PSIS-LOO (s drawn)
    c = chains["paths"]
    assert c["objective_kind"] == ["log_density"] * 2 and svi["paths"]["objective_kind"] == [
        "loss"] * 2
    with xr.open_datatree(tmp_path / "posterior_smc.nc", engine="h5netcdf") as dt:
        lp = dt["sample_stats"]["lp"].values
        noise = dt["invariants"]["noise"].values  # original units
    np.testing.assert_allclose(c["objective"], -lp.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(c["noise"], noise.mean(axis=1), rtol=1e-5)
    for score in c["loo"] + svi["paths"]["loo"]:
        assert abs(score - ref["loo"]["elpd_loo"]) < ref["loo"]["se"]
    # by another route: each chain's PSIS-LOO with s drawn (measured 0.7 and 0.0 nats apart)
    np.testing.assert_allclose(c["loo"], h["chain_loo"], atol=3.0)
    assert "−mean log density of the chain" in html and ">inf<" not in html
    # the summary leads the page: the reference's verdict and the best method by test MNLP,
    # each from the records the tables show, and the same lines in comparison.json
    best = min(saved["methods"], key=lambda r: r["mnlp"])
    label = "smc" if best is ref else best["method"]
    lines = saved["summary"]
    assert lines[0].startswith("Reference: smc computed here, " + (
        "CONVERGED" if h["converged"] else "NOT CONVERGED ("))
    assert lines[1].startswith(f"Best test predictions: {label}") and \
        f"MNLP {best['mnlp']:.4g} nats" in lines[1]
    assert html.index("<h2>Summary</h2>") < html.index("<table")
    for line in lines:
        assert escape(line) in html
    # the largest distance to the reference, in units of its replicate floor
    ratios = [v["w1_scaled"] / v["w1_scaled_floor"] for r in (one, svi)  # the VI fits
              for v in r.get("vs_reference", {}).values()
              if isinstance(v, dict) and (v.get("w1_scaled_floor") or 0) > 0
              and np.isfinite(v["w1_scaled"]) and np.isfinite(v["w1_scaled_floor"])]
    assert ratios
    worst = f"{max(ratios):.3g}× the reference's replicate floor"
    assert any(worst in line for line in lines), (worst, lines)
    # PSIS-LOO: one row per method, the stacked mixtures with the reason they have none
    table = html[html.index("<h2>PSIS-LOO"):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") + table.count("<tr class='noloo'>") == 1 + len(saved["methods"])
    assert table.count("no PSIS-LOO: a mixture of 2 paths") == 2
    assert svi["loo_missing"].startswith("a mixture of 2 paths")
    # each record's PIT reading is the reading of its saved test PIT values
    from ssgp_ppl.diagnostics.calibration import pit_reading

    for rec, method in zip(saved["methods"], ("svi-one-path", "svi", "smc", "smc-chains-stacked"),
                           strict=True):
        with xr.open_datatree(tmp_path / f"posterior_{method}.nc", engine="h5netcdf") as dt:
            assert rec["pit_reading"] == pit_reading(dt["predictions_constant_data"]["pit"]).verdict
        assert ("loo" in rec) == ("loo_pit_reading" in rec)


def test_pit_reading_names_calibration_and_its_failures():
    """Known predictives of N(0, 1) targets: right, too wide, too narrow, shifted up / down."""
    from scipy.stats import norm

    from ssgp_ppl.diagnostics.calibration import pit_reading

    y = np.random.default_rng(0).standard_normal(400)
    cases = {(1, 0): "calibrated", (2, 0): "over-dispersed", (0.5, 0): "under-dispersed",
             (1, 0.6): "predictions too high", (1, -0.6): "predictions too low"}
    for (sd, mu), words in cases.items():
        r = pit_reading(norm.cdf((y - mu) / sd))
        assert words in r.verdict, (sd, mu, r.verdict)
        assert r.lower.shape == r.delta.shape == r.points.shape
        assert np.all(r.lower <= 1e-12) and np.all(r.upper >= -1e-12)


def test_summary_flags_the_coverage_that_fit_warns_about():
    """The summary's coverage line names the methods whose 90% coverage is far from nominal
    (metrics.coverage_off): outside [0.8, 0.97] and beyond 3 binomial sds (0.09 on 100 rows)."""
    from ssgp_ppl.report import summary_lines

    records = [{"method": "svi", "n_test": 100, "mnlp": 1.0, "nmse": 0.1, "coverage_90": 0.62},
               {"method": "ml", "n_test": 100, "mnlp": 1.2, "nmse": 0.2, "coverage_90": 0.85}]
    assert summary_lines(records)[-1] == (
        "Test coverage of the 90% interval far from nominal (outside [0.8, 0.97] and more than 3 "
        "binomial sds from 0.9 for 100 rows): svi 0.62.")
    records[0]["coverage_90"] = 0.81  # 3 sds away, but inside the band
    assert not any("coverage of the 90%" in line for line in summary_lines(records))


def test_compare_budget_sets_every_method_it_runs():
    from ssgp_ppl.entry import load_entry
    from ssgp_ppl.report import budget

    e = budget(load_entry("tan_va_svi"), 315, steps=40, samples=30, chains=2)
    assert e.settings("svi")["steps"] == 40
    assert (e.settings("smc")["samples"], e.settings("smc")["chains"]) == (30, 2)
    e = budget(load_entry("tan_va"), 315, steps=7)
    assert e.settings("ncvmp")["max_iter"] == 7
    assert budget(load_entry("ssgp"), 315, samples=30).config == load_entry("ssgp").config


def test_compare_own_data_names_its_columns(tmp_path):
    """A DataFrame with named columns: every input's frequency spread is drawn and captioned by
    its column name, the fitted function's panels are labelled by them, and the summary names
    the best method by test MNLP."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    import ssgp_ppl
    from ssgp_ppl import report

    rng = np.random.default_rng(3)
    n = 150
    df = pd.DataFrame({"speed_kmh": rng.uniform(0, 100, n), "load_kg": rng.uniform(1, 5, n),
                       "slope_deg": rng.uniform(-5, 5, n)})
    df["stop_m"] = (np.sin(df.speed_kmh / 20) + 0.3 * df.load_kg + 0.05 * df.slope_deg
                    + rng.normal(0, 0.2, n))
    # the quick run cut further (what is checked is the names on the page and in the summary)
    comp = ssgp_ppl.compare("tan_va_svi", df, target="stop_m", out=tmp_path, small=True,
                            steps=100, samples=30, progress=False,
                            settings={"smc.particles": 32, "smc.mcmc_steps": 2, "smc.warmup": 30})
    page = (tmp_path / "report.html").read_text()
    assert "frequency spread of each of the 3 inputs (speed_kmh, load_kg, slope_deg)" in page
    assert "partial dependence on 3 of the 3 inputs (speed_kmh, load_kg, slope_deg)" in page
    records = comp.to_dict()["methods"]
    results = [comp.posteriors[r["method"]] for r in records]
    fig = report._marginals_figure(results, records, comp.reference_label,
                                   tuple(df.columns[:3]))
    titles = [ax.get_title() for ax in fig.axes]
    assert [t.split("\n")[0] for t in titles if t.startswith("frequency spread")] == [
        "frequency spread, speed_kmh", "frequency spread, load_kg", "frequency spread, slope_deg"]
    best = min(records, key=lambda r: r["mnlp"])
    assert comp.to_dict()["summary"][1].startswith(
        f"Best test predictions: {report._label(best, comp.reference_label)}, MNLP "
        f"{best['mnlp']:.4g}")


def test_modes_figure_is_legible_at_the_docs_width():
    """Three panels (two multi-path fits and a reference with a long gold label) at most two a
    row, each wide enough to read when the docs site scales the figure to its column; every
    text at 11 points or more; no title or axis label runs into another."""
    import matplotlib

    matplotlib.use("Agg")
    from ssgp_ppl.report import MODES_COLUMNS, modes_figure

    paths = {"weights": [0.4, 0, 0, 0, 0.2, 0, 0.3, 0.1], "loo": list(np.linspace(-260, -215, 8)),
             "combine": "stacking"}
    records = [{"method": "svi", "paths": paths},
               {"method": "smc-chains-stacked", "paths": {**paths, "weights": [0.5, 0, 0.5, 0],
                                                          "loo": [-110, -150, -105, -135]}},
               {"method": "smc", "reference": {"modes": 1, "mode_weights": [1.0],
                                               "mode_log_density": [-330.0]}}]
    label = ("gold reference (NOT CONVERGED, not attainable on this hardware; 4 runs, computed "
             "2026-11-26, 59 min)")
    fig = modes_figure(records, label)
    panels = [ax for ax in fig.axes if ax.patches]  # the bar panels (twins and blanks have none)
    assert len(panels) == 3 and MODES_COLUMNS == 2
    width = fig.get_size_inches()[0]
    assert width <= 12.5  # scaled by at most ~0.8 into a ~1000-pixel column at 100 dpi
    assert len({round(ax.get_position().x0, 3) for ax in panels}) == MODES_COLUMNS
    assert all(ax.get_position().width * width >= 4.0 for ax in panels)
    fig.canvas.draw()
    shown = [ax for ax in fig.axes if ax.axison]  # the panels and their twins, not the blank
    assert len(shown) == 6
    labels = [t for ax in shown for t in (ax.title, ax.xaxis.label, ax.yaxis.label)
              if t.get_text()]
    ticks = [t for ax in shown for t in (*ax.get_xticklabels(), *ax.get_yticklabels())
             if t.get_text()]
    assert min(t.get_fontsize() for t in labels) >= 12
    assert min(t.get_fontsize() for t in ticks) >= 11
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), "a title or axis label runs into another"
    titles = [ax.title.get_text() for ax in panels]
    assert titles[2].endswith(": 1 mode") and "\n" in titles[2]  # the long label wrapped


def _concise(when) -> set[str]:
    """What a concise date tick may read at ``when``: its year, month, day or time of day."""
    return {when.strftime(f) for f in ("%Y", "%b", "%d", "%H:%M", "%H:%M:%S")}


def test_a_date_column_is_plotted_over_time(tmp_path):
    """A CSV whose date column is read as days since 1970 (dates="numeric"): the table's encoding
    keeps that it is a date, the fitted function's panel for it comes first on a date axis whose
    tick labels name the dates at the ticks, the numeric input keeps a number axis, and the
    predictive bands are drawn over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import pandas as pd
    from matplotlib.ticker import ScalarFormatter

    from ssgp_ppl import report
    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.data.tables import TableOptions
    from ssgp_ppl.pipeline import fit

    rng = np.random.default_rng(0)
    n = 80
    week = pd.date_range("2021-01-04", periods=n, freq="7D")
    temp = rng.uniform(0, 30, n)
    sales = np.sin(np.arange(n) / 8) + 0.05 * temp + rng.normal(0, 0.1, n)
    csv = tmp_path / "sales.csv"  # the date column second: its panel is moved first
    pd.DataFrame({"temp": temp, "week": week.strftime("%Y-%m-%d"), "sales": sales}).to_csv(
        csv, index=False)
    data = load(csv, table=TableOptions(dates="numeric"))
    assert [(c, k) for c, k, _ in data.encoding.columns] == [("temp", "numeric"), ("week", "date")]
    post = fit(load_entry("ssgp").with_overrides(["ml.steps=100"]), data, progress=False)

    fig, caption = report._function_figure([post], [{"method": post.method}], data)
    ax_week, ax_temp = [ax for ax in fig.axes if ax.lines]
    assert (ax_week.get_xlabel(), ax_temp.get_xlabel()) == ("week (date)", "temp")
    assert "week is a date: its panel (the first) shows the fit over time" in caption
    assert isinstance(ax_week.xaxis.get_major_formatter(), mdates.ConciseDateFormatter)
    assert isinstance(ax_temp.xaxis.get_major_formatter(), ScalarFormatter)
    fig.canvas.draw()
    lo, hi = ax_week.get_xlim()
    ticks = [(loc, t.get_text()) for loc, t in zip(ax_week.get_xticks(), ax_week.get_xticklabels(),
                                                   strict=True) if lo <= loc <= hi]
    assert len(ticks) >= 3
    for loc, text in ticks:  # each label names the date at its tick
        assert text in _concise(mdates.num2date(loc)), (text, mdates.num2date(loc))
    assert any(t in {"2021", "2022"} for _, t in ticks)  # the years are read off the axis
    # the data drawn is the CSV's dates (not days since 1970 shown as numbers)
    dots = np.asarray(ax_week.lines[0].get_xdata())
    assert dots.dtype.kind == "M"
    assert set(dots.astype("datetime64[D]")) <= set(week.to_numpy().astype("datetime64[D]"))
    first, last = mdates.date2num(week[0]), mdates.date2num(week[-1])
    assert lo <= first < last <= hi and hi - lo < 1.2 * (last - first)

    if os.environ.get("SSGP_PPL_TEST_FIGURES"):  # to look at them
        fig.savefig(os.path.join(os.environ["SSGP_PPL_TEST_FIGURES"], "function.png"), dpi=90)
    title, fig = report._bands_figure([post], [{"method": post.method}], data, "")
    if os.environ.get("SSGP_PPL_TEST_FIGURES"):
        fig.savefig(os.path.join(os.environ["SSGP_PPL_TEST_FIGURES"], "bands.png"), dpi=90)
    assert "over time (against the date input week)" in title
    ax = fig.axes[0]
    assert isinstance(ax.xaxis.get_major_formatter(), mdates.ConciseDateFormatter)
    t = np.asarray(ax.lines[0].get_xdata())
    assert t.dtype.kind == "M" and (np.diff(t) >= np.timedelta64(0, "ns")).all()  # in time order


def test_function_figure_averages_over_few_rows_when_a_method_fits_at_every_point():
    """A method that fits at every point it predicts (the local fits) makes the partial dependence
    average over PD_ROWS_FITTING test rows, for every method alike, and the caption says why;
    without one it averages over PD_ROWS."""
    import matplotlib

    matplotlib.use("Agg")
    from types import SimpleNamespace

    from ssgp_ppl import report
    from ssgp_ppl.data.datasets import load
    from ssgp_ppl.pipeline import fit

    data = load("autompg")
    post = fit(load_entry("ssgp").with_overrides(["ml.steps=50"]), data, progress=False)
    assert not post.rule.fits_at_prediction

    class FitsWhenPredicting:  # the ml fit, said to fit at every point, counting what it predicts
        rule = SimpleNamespace(fits_at_prediction=True)
        rows: list[int] = []

        def predict_standardised(self, xs):
            self.rows.append(len(xs))
            return post.predict_standardised(xs)

    n, d = data.x_test.shape
    assert n > report.PD_ROWS > report.PD_ROWS_FITTING
    local = FitsWhenPredicting()
    _, caption = report._function_figure([post, local], [{"method": "ml"}, {"method": "local"}],
                                         data)
    panels = min(d, report.PD_INPUTS)
    assert local.rows == [report.PD_GRID * report.PD_ROWS_FITTING] * panels
    assert (f"averaged over {report.PD_ROWS_FITTING} test rows (evenly spaced; only "
            f"{report.PD_ROWS_FITTING}: local fits at every point it predicts)") in caption
    _, caption = report._function_figure([post], [{"method": "ml"}], data)
    assert f"averaged over {report.PD_ROWS} test rows with that input" in caption
    matplotlib.pyplot.close("all")
