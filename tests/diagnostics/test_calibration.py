"""PSIS-LOO (plain and importance-corrected for VI draws) against the analytic LOO predictive of a
conjugate Gaussian model; NUTS health on synthetic chains."""

import numpy as np
import pytest
from arviz_base import from_dict
from scipy import stats

from ssgp_ppl.diagnostics import calibration, invariants


def _normal_mean_problem(n=30, seed=0):
    """y_i ~ N(μ, 1), μ ~ N(0, 10²): posterior N(m, v); exact elpd_loo in closed form."""
    rng = np.random.default_rng(seed)
    y = rng.normal(1.0, 1.0, n)
    prec = 1 / 100 + n
    m, v = y.sum() / prec, 1 / prec
    p_i = 1 / 100 + n - 1
    loo_mean, loo_sd = (y.sum() - y) / p_i, np.sqrt(1 / p_i + 1)  # p(y_i | y_-i)
    loo = stats.norm.logpdf(y, loo_mean, loo_sd).sum()
    return y, m, v, loo, stats.norm.cdf(y, loo_mean, loo_sd)


def _tree(y, mu, log_q=None):
    """A DataTree of draws ``mu``: VI draws with their log q when ``log_q`` is given, else draws
    presented as a Markov chain sampler's posterior draws (sample stats with no divergence)."""
    groups = {"posterior": {"mu": mu[None]},
              "log_likelihood": {"y": stats.norm.logpdf(y, mu[:, None], 1.0)[None]},
              "posterior_predictive": {"y": (mu[:, None] + np.random.default_rng(1).normal(
                  size=(mu.size, y.size)))[None]},
              "observed_data": {"y": y}}
    if log_q is not None:
        lp = stats.norm.logpdf(mu, 0, 10) + stats.norm.logpdf(y, mu[:, None], 1.0).sum(1)
        groups["sample_stats"] = {"lp": lp[None], "log_q": log_q[None]}
    else:
        groups["sample_stats"] = {"diverging": np.zeros((1, mu.size), bool)}
    return from_dict(groups)


@pytest.mark.parametrize("inflate", [1.0, 1.5], ids=["exact_q", "wide_q"])
def test_vi_loo_is_importance_corrected(inflate):
    """Draws from q = N(m, (inflate² v)): the corrected LOO matches the analytic elpd_loo; the
    uncorrected one (treating q's draws as posterior draws) is off when q is too wide."""
    y, m, v, exact, exact_pit = _normal_mean_problem()
    sd = inflate * np.sqrt(v)
    mu = np.random.default_rng(2).normal(m, sd, 4000)
    summary, pit = calibration.loo_summary(_tree(y, mu, stats.norm.logpdf(mu, m, sd)))
    assert summary["corrected"]
    assert summary["elpd_loo"] == pytest.approx(exact, abs=0.1)
    assert summary["pareto_k_max"] < 0.5
    # LOO-PIT = P(y_rep_i ≤ y_i | y_-i): the analytic value within the Monte Carlo error of
    # 4000 weighted replicates (sd ≤ 0.5 / √ESS)
    assert pit.shape == y.shape
    np.testing.assert_allclose(pit, exact_pit, atol=0.05)
    assert np.mean(np.abs(pit - exact_pit)) < 0.02
    naive, _ = calibration.loo_summary(_tree(y, mu))
    assert not naive["corrected"]
    if inflate > 1:
        assert naive["elpd_loo"] < exact - 0.3  # a too-wide q understates the fit
    else:
        assert naive["elpd_loo"] == pytest.approx(exact, abs=0.1)


def _nuts_tree(shift=0.0, seed=0):
    rng = np.random.default_rng(seed)
    noise = rng.normal(1.0, 0.1, (4, 500))
    noise[3] += shift
    # a kernel whose lag-0 value σ² is constant (type-II σ) while the other lags vary
    kernel = np.stack([np.full((4, 500), 2.0), noise + rng.normal(0, 0.1, (4, 500))], -1)
    inv = invariants.as_dataset({"noise": noise.reshape(-1)}, 4)
    return from_dict({"invariants": {"noise": inv["noise"].values, "kernel": kernel},
                      "sample_stats": {"energy": rng.normal(size=(4, 500)),
                                       "diverging": np.zeros((4, 500), bool)}})


def test_nuts_health():
    good = calibration.nuts_health(_nuts_tree())
    # the constant component (NaN R-hat) is left out, not counted as a failure
    assert good["converged"] and good["divergences"] == 0
    assert good["rhat_max"]["kernel"] < 1.01
    assert good["rhat_max"]["noise"] < 1.01
    # i.i.d. energies: BFMI = E[(E_t − E_{t−1})²] / Var E = 2
    np.testing.assert_allclose(good["bfmi"], 2.0, atol=0.3)
    bad = calibration.nuts_health(_nuts_tree(shift=0.5))
    assert not bad["converged"] and bad["rhat_max"]["noise"] > 1.1


def test_psislw_of_a_row_whose_draws_do_not_vary():
    """A row with one value in every draw (a stuck chain) has no tail: plain uniform weights and
    k̂ = 0; the other rows get arviz_stats' smoothed weights and k̂ unchanged."""
    import arviz_stats  # noqa: F401  (registers the .azstats accessor)
    import xarray as xr

    rng = np.random.default_rng(0)
    ll = xr.DataArray(rng.normal(size=(1, 300, 3)), dims=("chain", "draw", "row"))
    want_w, want_k = ll.isel(row=[0, 2]).azstats.psislw(dim=["chain", "draw"])
    ll[..., 1] = -2.5
    log_w, k = calibration.psislw(ll)
    assert log_w.dims == ll.dims and k.dims == ("row",)
    np.testing.assert_allclose(np.exp(log_w.isel(row=1)), 1 / 300, rtol=1e-12)
    assert float(k.isel(row=1)) == 0.0
    np.testing.assert_allclose(log_w.isel(row=[0, 2]), want_w.transpose(*log_w.dims), rtol=1e-10)
    np.testing.assert_allclose(k.isel(row=[0, 2]), want_k, rtol=1e-10)


def test_the_docs_and_the_report_quote_the_reference_thresholds_the_code_applies():
    """The verdict's thresholds are named constants; the prose that explains them quotes the
    same numbers and the same comparisons (R-hat strictly below, ESS and BFMI at least)."""
    from pathlib import Path

    from ssgp_ppl.diagnostics import calibration as c

    doc = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "multimodal.md").read_text()
    doc = " ".join(doc.split())
    assert (f"rank R-hat < {c.RHAT_BELOW:g} and bulk/tail ESS ≥ {c.ESS_MIN} on every invariant"
            in doc)
    assert f"every BFMI ≥ {c.BFMI_MIN:g}" in doc


@pytest.mark.parametrize("name", ["RHAT_BELOW", "ESS_MIN", "BFMI_MIN"])
def test_the_verdict_reads_its_named_thresholds(name, monkeypatch):
    """Moving one named threshold just past the health of a converged tree flips the verdict."""
    good = calibration.nuts_health(_nuts_tree())
    assert good["converged"]
    worst = {"RHAT_BELOW": max(good["rhat_max"].values()),
             "ESS_MIN": min(min(good["ess_bulk_min"].values()), min(good["ess_tail_min"].values())) + 1,
             "BFMI_MIN": min(good["bfmi"]) + 1e-6}[name]
    monkeypatch.setattr(calibration, name, worst)
    assert not calibration.nuts_health(_nuts_tree())["converged"]
