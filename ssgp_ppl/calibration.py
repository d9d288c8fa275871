"""Calibration of a fit: PSIS-LOO on the training rows, LOO-PIT, and the test-set PIT.

* NUTS draws: ``arviz_stats.loo`` and ``loo_pit`` (PSIS-LOO, Vehtari et al. 2017, 2024);
* VI draws (SVI guides, NCVMP's q): ``arviz_stats.loo_approximate_posterior`` with the
  target log density log p(θ_s, y) and the proposal log q(θ_s) stored per draw in the DataTree's
  ``sample_stats`` (lp, log_q), the correction of Magnusson et al. (2019); LOO-PIT with the same
  importance ratios r_i(s) = p(θ_s, y) / (q(θ_s) p(y_i | θ_s)), Pareto-smoothed;
* the test-set PIT is exact for the mixture predictive (``fit`` stores it in
  ``predictions_constant_data.pit``).

Pareto k̂ above ``good_k`` = min(1 − 1/log10 S, 0.7) means the importance sampling (and the
LOO estimate for that row) is unreliable: for VI it says q is too far from the posterior.
"""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from ssgp_ppl.invariants import varies


def has_loo(dt: xr.DataTree) -> bool:
    """A pointwise log-likelihood exists (s sampled) over enough draws for PSIS (≥ 25: its Pareto
    tail needs 5)."""
    ll = dt["log_likelihood"] if "log_likelihood" in dt.children else None
    return ll is not None and ll.sizes.get("chain", 1) * ll.sizes.get("draw", 0) >= 25


def _is_vi(dt: xr.DataTree) -> bool:
    return "sample_stats" in dt.children and "log_q" in dt["sample_stats"].data_vars


def loo_summary(dt: xr.DataTree) -> tuple[dict, np.ndarray] | None:
    """PSIS-LOO of a fit: ({elpd_loo, se, p_loo, pareto_k_max, pareto_k_bad_frac, good_k,
    corrected}, LOO-PIT values per training row); None without a pointwise log-likelihood."""
    from arviz_stats import loo, loo_approximate_posterior, loo_pit

    if not has_loo(dt):
        return None
    with warnings.catch_warnings():  # k̂ warnings: we report k̂ ourselves
        warnings.simplefilter("ignore", UserWarning)
        if _is_vi(dt):
            lp, lq = dt["sample_stats"]["lp"], dt["sample_stats"]["log_q"]
            elpd = loo_approximate_posterior(dt, lp, lq, pointwise=True)
            ll = dt["log_likelihood"]["y"]
            log_ratio = (lp - lq) - ll
            log_w, k = log_ratio.azstats.psislw(dim=["chain", "draw"])
            pit = loo_pit(dt, var_names="y", log_weights=xr.Dataset({"y": log_w}),
                          pareto_k=xr.Dataset({"y": k}))
        else:
            elpd = loo(dt, pointwise=True)
            pit = loo_pit(dt, var_names="y")
    k = np.asarray(elpd.pareto_k)
    return ({"elpd_loo": float(elpd.elpd), "se": float(elpd.se), "p_loo": float(elpd.p),
             "pareto_k_max": float(np.max(k)),
             "pareto_k_bad_frac": float(np.mean(k > elpd.good_k)), "good_k": float(elpd.good_k),
             "corrected": _is_vi(dt)},
            np.asarray(pit["y"]))


def nuts_health(dt: xr.DataTree) -> dict:
    """Rank R-hat, bulk and tail ESS on the invariant quantities (worst component of each),
    divergences and per-chain BFMI (``arviz_stats``). ``converged`` follows Vehtari et al. (2021)
    and Betancourt (2016): every R-hat < 1.01, every bulk and tail ESS >= 400, no divergence, and
    every chain's BFMI >= 0.3."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a stuck chain: zero variance
        return _nuts_health(dt)


def _nuts_health(dt):
    from arviz_stats import bfmi, ess, rhat

    inv = dt["invariants"].to_dataset()
    varying = [v for v in inv.data_vars if varies(inv[v])]
    out: dict = {"divergences": int(dt["sample_stats"]["diverging"].sum())}
    r = rhat(inv[varying], method="rank")
    eb = ess(inv[varying], method="bulk")
    et = ess(inv[varying], method="tail")
    out["rhat_max"] = {v: float(r[v].max()) for v in varying}
    out["ess_bulk_min"] = {v: float(eb[v].min()) for v in varying}
    out["ess_tail_min"] = {v: float(et[v].min()) for v in varying}
    energy = dt["sample_stats"]["energy"]
    out["bfmi"] = [float(b) for b in np.atleast_1d(np.asarray(bfmi(energy)))]
    worst_r = max(out["rhat_max"].values(), default=1.0)
    worst_e = min(min(out["ess_bulk_min"].values(), default=np.inf),
                  min(out["ess_tail_min"].values(), default=np.inf))
    # NaN (a stuck chain) fails every comparison below: not converged
    out["converged"] = bool(worst_r < 1.01 and worst_e >= 400 and out["divergences"] == 0
                            and min(out["bfmi"]) >= 0.3)
    return out
