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
from typing import NamedTuple

import numpy as np
import xarray as xr

from ssgp_ppl.diagnostics.invariants import varies
from ssgp_ppl.inference.fitinfo import SMCInfo


def psislw(ll: xr.DataArray, *, r_eff: float = 1.0,
           dim=("chain", "draw")) -> tuple[xr.DataArray, xr.DataArray]:
    """(log weights, Pareto k̂) of ``ll.azstats.psislw`` (weights ∝ 1 / exp(ll) over ``dim``),
    where a row whose tail values are all equal (draws that do not vary in that row, e.g. a
    chain stuck at one point) gets its plain normalised weights and k̂ = 0: there is no tail to
    smooth."""
    import arviz_stats  # noqa: F401  (registers the .azstats accessor)

    try:
        return ll.azstats.psislw(r_eff=r_eff, dim=list(dim))
    except ValueError as e:
        if "tail values are the same" not in str(e):
            raise
    from arviz_stats.base import array_stats
    from scipy.special import logsumexp

    other = [d for d in ll.dims if d not in dim]
    arr = ll.transpose(*other, *dim)
    vals = np.asarray(arr, np.float64)
    flat = vals.reshape(-1, int(np.prod([ll.sizes[d] for d in dim])))
    out_w, out_k = np.empty_like(flat), np.empty(len(flat))
    for i, row in enumerate(flat):
        try:
            w, k = array_stats.psislw(row, r_eff=r_eff)
        except ValueError:
            w, k = -row - logsumexp(-row), 0.0
        out_w[i], out_k[i] = w, k
    log_w = xr.DataArray(out_w.reshape(vals.shape), dims=arr.dims, coords=arr.coords)
    k = xr.DataArray(out_k.reshape(vals.shape[:len(other)]), dims=other,
                     coords={d: arr.coords[d] for d in other if d in arr.coords})
    return log_w.transpose(*ll.dims), k

def has_loo(dt: xr.DataTree) -> bool:
    """A pointwise log-likelihood exists (s sampled) over enough draws for PSIS (≥ 25: its Pareto
    tail needs 5)."""
    ll = dt["log_likelihood"] if "log_likelihood" in dt.children else None
    return ll is not None and ll.sizes.get("chain", 1) * ll.sizes.get("draw", 0) >= 25


def is_vi(dt: xr.DataTree) -> bool:
    """Draws of a variational approximation q, with q's log density (``sample_stats.log_q``)."""
    return "sample_stats" in dt.children and "log_q" in dt["sample_stats"].data_vars


def _is_mcmc(dt: xr.DataTree) -> bool:
    """Draws of a Markov chain sampler (its sample stats record divergences)."""
    return "sample_stats" in dt.children and "diverging" in dt["sample_stats"].data_vars


def _relative_ess(dt: xr.DataTree) -> float:
    """r_eff for PSIS of MCMC draws: bulk ESS of the log density / draws (≤ 1). The posterior
    group's mean ESS would count type-II constants (ESS = S) and non-identified frequencies."""
    from arviz_stats import ess

    lp = np.asarray(dt["sample_stats"]["lp"]) if "sample_stats" in dt.children and \
        "lp" in dt["sample_stats"].data_vars else None
    if lp is None or lp.ndim != 2:
        return 1.0
    return float(min(1.0, float(ess(lp, method="bulk")) / lp.size))


def vi_loo_weights(dt: xr.DataTree) -> xr.Dataset:
    """The importance-corrected PSIS-LOO weights of VI draws (Yao et al. 2018): per draw s and
    left-out row i, log w_si ∝ log p(θ_s, y) − log q(θ_s) − log p(y_i | θ_s), Pareto-smoothed.
    ``arviz_stats.loo(dt, log_weights=w["y"], pareto_k=w["pareto_k"])`` with them gives the same
    elpd as ``loo_approximate_posterior``; plain ``loo(dt)`` would treat q's draws as the
    posterior's."""
    import arviz_stats  # noqa: F401  (registers the .azstats accessor)

    ll = dt["log_likelihood"]["y"]
    lp, lq = dt["sample_stats"]["lp"], dt["sample_stats"]["log_q"]
    with warnings.catch_warnings():  # k̂ warnings: the caller reports k̂
        warnings.simplefilter("ignore", UserWarning)
        log_w, k = psislw(ll - (lp - lq))
    return xr.Dataset({"y": log_w, "pareto_k": k})


def loo_summary(dt: xr.DataTree) -> tuple[dict, np.ndarray] | None:
    """PSIS-LOO of a fit: ({elpd_loo, se, p_loo, pareto_k_max, pareto_k_bad_frac, good_k,
    corrected}, LOO-PIT values per training row); None without a pointwise log-likelihood, or for
    VI draws without their log q (they are not posterior draws: plain PSIS would mislead).

    Importance ratios of row i: 1 / p(y_i | θ_s) for posterior draws, p(θ_s, y) / (q(θ_s)
    p(y_i | θ_s)) for VI draws; Pareto-smoothed (``psislw``, which takes the negated log ratio)
    and used for both the elpd and the LOO-PIT of ``arviz_stats.loo_pit``.
    """
    from arviz_stats import loo, loo_approximate_posterior, loo_pit

    if not has_loo(dt):
        return None
    vi = is_vi(dt)
    if not vi and not _is_mcmc(dt):  # neither posterior draws nor VI draws with their log q
        return None
    ll = dt["log_likelihood"]["y"]
    with warnings.catch_warnings():  # k̂ warnings: we report k̂ ourselves
        warnings.simplefilter("ignore", UserWarning)
        if vi:
            lp, lq = dt["sample_stats"]["lp"], dt["sample_stats"]["log_q"]
            elpd = loo_approximate_posterior(dt, lp, lq, pointwise=True)
            w = dt["loo_log_weights"].to_dataset() if "loo_log_weights" in dt.children \
                else vi_loo_weights(dt)
            log_w, k = w["y"], w["pareto_k"]
        else:
            reff = _relative_ess(dt)
            elpd = loo(dt, pointwise=True, reff=reff)
            log_w, k = psislw(ll, r_eff=reff)
        pit = loo_pit(dt, var_names="y", log_weights=xr.Dataset({"y": log_w}),
                      pareto_k=xr.Dataset({"y": k}))
    k = np.asarray(elpd.pareto_k)
    return ({"elpd_loo": float(elpd.elpd), "se": float(elpd.se), "p_loo": float(elpd.p),
             "pareto_k_max": float(np.max(k)),
             "pareto_k_bad_frac": float(np.mean(k > elpd.good_k)), "good_k": float(elpd.good_k),
             "corrected": vi},
            np.asarray(pit["y"]))


def chain_loo(dt: xr.DataTree) -> list[float] | None:
    """Each chain's own PSIS-LOO elpd (Σᵢ over the training rows; standardised units) from the
    pointwise log-likelihood with s drawn (``log_likelihood``): a check, by another route, of the
    score of each chain stacked as a path (:func:`ssgp_ppl.inference.paths.path_loo`, s integrated out).
    None without a pointwise log-likelihood or for VI draws."""
    if not has_loo(dt) or is_vi(dt) or not _is_mcmc(dt):
        return None
    import arviz_stats  # noqa: F401  (registers the .azstats accessor)
    from scipy.special import logsumexp

    ll = dt["log_likelihood"]["y"].transpose("chain", "draw", ...)
    out = []
    for c in range(ll.sizes["chain"]):
        one = ll.isel(chain=[c])
        with warnings.catch_warnings():  # k̂ warnings: the LOO table reports k̂
            warnings.simplefilter("ignore", UserWarning)
            log_w, _ = psislw(one)
        w = np.asarray(log_w.transpose(*one.dims)).reshape(one.sizes["draw"], -1)
        v = np.asarray(one).reshape(one.sizes["draw"], -1)
        w = w - logsumexp(w, axis=0)
        out.append(float(logsumexp(w + v, axis=0).sum()))
    return out


PIT_BAND = 0.99  # the simultaneous band of the PIT Δ-ECDF plots and their reading


class PITReading(NamedTuple):
    """A PIT sample against Uniform(0, 1): the ECDF minus the uniform CDF at ``points`` with its
    simultaneous band (``lower``, ``upper``, same offsets) and the one-line ``verdict``."""

    points: np.ndarray
    delta: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    verdict: str


def pit_reading(pit, prob: float = PIT_BAND, seed: int = 214) -> PITReading:
    """Read a PIT sample (test PIT or LOO-PIT values): ``calibrated`` when the ECDF stays inside
    the simultaneous ``prob`` band of n uniform values (arviz_stats' simulation method, Säilynoja
    et al. 2022); otherwise the shape says why: PIT values piled in the middle (ECDF below the
    diagonal under ½ and above it over ½) mean intervals that are too wide (over-dispersed),
    values piled at both ends mean too narrow (under-dispersed), an ECDF on one side of the
    diagonal means predictions biased up or down."""
    from arviz_stats.ecdf_utils import ecdf_pit

    pit = np.asarray(pit, float).ravel()
    pit = pit[np.isfinite(pit)]
    points, ecdf, lower, upper = ecdf_pit(pit, prob, 1000, rng=np.random.default_rng(seed))
    delta, lo, hi = ecdf - points, lower - points, upper - points
    outside = (delta < lo - 1e-12) | (delta > hi + 1e-12)
    if not outside.any():
        verdict = f"calibrated (inside the simultaneous {prob:.0%} band)"
    else:
        low, high = delta[points < 0.5].mean(), delta[points > 0.5].mean()
        if low < 0 < high:
            verdict = "over-dispersed: intervals too wide (PIT piled in the middle)"
        elif high < 0 < low:
            verdict = "under-dispersed: intervals too narrow (PIT piled at 0 and 1)"
        elif low > 0 and high > 0:
            verdict = "biased: predictions too high (PIT piled near 0)"
        else:
            verdict = "biased: predictions too low (PIT piled near 1)"
        verdict = f"NOT calibrated, {verdict}; outside the {prob:.0%} band at " \
                  f"{outside.mean():.0%} of points"
    return PITReading(points, delta, lo, hi, verdict)


def nuts_health(dt: xr.DataTree) -> dict:
    """Rank R-hat, bulk and tail ESS on the invariant quantities (worst component of each),
    divergences and per-chain BFMI (``arviz_stats``). ``converged`` follows Vehtari et al. (2021)
    and Betancourt (2016): every R-hat < :data:`RHAT_BELOW`, every bulk and tail ESS >=
    :data:`ESS_MIN`, no divergence, and every chain's BFMI >= :data:`BFMI_MIN`."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a stuck chain: zero variance
        return _nuts_health(dt)


def _nuts_health(dt):
    from arviz_stats import bfmi

    out: dict = {"divergences": int(dt["sample_stats"]["diverging"].sum())}
    energy = dt["sample_stats"]["energy"]
    out["bfmi"] = [float(b) for b in np.atleast_1d(np.asarray(bfmi(energy)))]
    out.update(invariant_diagnostics(dt["invariants"].to_dataset()))
    if not out["rhat_max"]:  # nothing sampled varies (cannot happen for a latent model)
        out["converged"] = False
        return out
    rh = np.array(list(out["rhat_max"].values()) or [1.0])
    es = np.array(list(out["ess_bulk_min"].values()) + list(out["ess_tail_min"].values()) or [np.inf])
    out["converged"] = bool(np.all(rh < RHAT_BELOW) and np.all(es >= ESS_MIN)
                            and out["divergences"] == 0
                            and np.all(np.asarray(out["bfmi"]) >= BFMI_MIN))  # NaN compares False
    return out


def invariant_diagnostics(inv: xr.Dataset) -> dict:
    """Worst rank R-hat and smallest bulk / tail ESS (``arviz_stats``) of each invariant quantity
    of ``inv`` (chain, draw, ...), over its components that vary (k(0) = σ² is constant under a
    type-II σ); NaN on a varying component (a stuck chain) propagates: it must not pass."""
    from arviz_stats import ess, rhat

    out: dict = {"rhat_max": {}, "ess_bulk_min": {}, "ess_tail_min": {}}
    varying = [v for v in inv.data_vars if varies(inv[v])]
    if not varying:
        return out
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a stuck chain: zero variance
        r = rhat(inv[varying], method="rank")
        eb = ess(inv[varying], method="bulk")
        et = ess(inv[varying], method="tail")

    def worst(stat, v, reduce):
        mask = np.array([varies(c) for c in np.moveaxis(
            np.asarray(inv[v]).reshape(inv[v].shape[:2] + (-1,)), -1, 0)])
        return float(reduce(np.asarray(stat[v]).reshape(-1)[mask]))

    out["rhat_max"] = {v: worst(r, v, np.max) for v in varying}
    out["ess_bulk_min"] = {v: worst(eb, v, np.min) for v in varying}
    out["ess_tail_min"] = {v: worst(et, v, np.min) for v in varying}
    return out


# --- the on-the-fly reference's verdict (Vehtari et al. 2021; Betancourt 2016) -------------------
RHAT_BELOW = 1.01  # every rank R-hat of the invariants strictly below this
ESS_MIN = 400  # every bulk and tail ESS at least this
BFMI_MIN = 0.3  # every chain's BFMI at least this
LOG_DENSITY_SPREAD = 3.0  # nats between the polishing chains' mean log densities
LOG_EVIDENCE_SPREAD = 1.0  # nats between independent SMC runs' log evidence
RUNS_RHAT = 1.05  # rank R-hat of the scalar invariants with each SMC run as one chain


def reference_health(dt: xr.DataTree, info) -> dict:
    """The reference's verdict: whether its draws can be trusted as the posterior.

    The checks: `nuts_health` of its (polishing) chains (rank R-hat below ``RHAT_BELOW``, bulk
    and tail ESS at least ``ESS_MIN``, no divergence, BFMI at least ``BFMI_MIN``; Vehtari et al.
    2021, Betancourt 2016), the spread of the chains' mean log density (at most
    ``LOG_DENSITY_SPREAD`` nats), the modes they sit in, and for a tempered-SMC reference the
    run-to-run agreement (log evidence within ``LOG_EVIDENCE_SPREAD`` nats, R-hat of the scalar
    invariants across runs at most ``RUNS_RHAT``).

    Parameters
    ----------
    dt
        The reference's DataTree, with its ``sample_stats`` (``lp``) and ``invariants``.
    info
        Its `FitInfo` (the SMC runs' log evidence and temperatures), or None.

    Returns
    -------
    dict
        The diagnostics (``rhat_max``, ``ess_bulk_min``, ``ess_tail_min``, ``divergences``,
        ``bfmi``, ``modes``, ``chain_mode``, ``mode_weights``, ``mode_log_density``, the SMC runs'
        ``log_evidence``, …), ``converged`` (True when every check passes) and ``reasons`` (each
        failed check in words).
    """
    from ssgp_ppl.diagnostics.invariants import count_modes

    out = nuts_health(dt)
    lp = np.asarray(dt["sample_stats"]["lp"])  # (chain, draw): s integrated out when collapsed
    chain_lp = lp.mean(axis=1)
    out["chain_log_density"] = [float(v) for v in chain_lp]
    out["log_density_spread"] = float(np.ptp(chain_lp))
    out.update(count_modes(dt["invariants"].to_dataset(), extra={"lp": lp}))
    counts = np.bincount(out["chain_mode"], minlength=out["modes"])
    out["mode_weights"] = [float(c) / len(out["chain_mode"]) for c in counts]
    out["mode_log_density"] = [float(chain_lp[np.asarray(out["chain_mode"]) == k].mean())
                               for k in range(out["modes"])]
    reasons = [] if out["rhat_max"] else ["no invariant quantity varies across the draws"]
    if out["rhat_max"]:
        q, r = max(out["rhat_max"].items(), key=lambda kv: np.nan_to_num(kv[1], nan=np.inf))
        if not r < RHAT_BELOW:
            reasons.append(f"R-hat up to {r:.3g} ({q}; ≥ {RHAT_BELOW:g})")
        ess = {f"{kind} {q}": e for kind in ("bulk", "tail")
               for q, e in out[f"ess_{kind}_min"].items()}
        q, e = min(ess.items(), key=lambda kv: np.nan_to_num(kv[1], nan=-np.inf))
        if not e >= ESS_MIN:
            reasons.append(f"ESS down to {e:.0f} ({q}; < {ESS_MIN})")
    if out["divergences"]:
        reasons.append(f"{out['divergences']} divergences")
    if not np.all(np.asarray(out["bfmi"]) >= BFMI_MIN):
        reasons.append(f"BFMI {min(out['bfmi']):.4f} (< {BFMI_MIN:g})")
    if not out["log_density_spread"] <= LOG_DENSITY_SPREAD:
        reasons.append(f"chains' mean log density {out['log_density_spread']:.1f} nats apart "
                       f"(> {LOG_DENSITY_SPREAD:g}): {out['modes']} modes")
    smc = info.method if info is not None and isinstance(info.method, SMCInfo) else None
    if smc is not None and smc.log_evidence is not None:
        lz = list(smc.log_evidence)
        out["log_evidence"] = lz
        out["log_evidence_spread"] = float(np.ptp(lz)) if len(lz) > 1 else None
        out["runs_rhat"] = smc.runs_rhat
        out["temperatures"] = list(smc.temperatures)
        out["particles"] = smc.particles
        if len(lz) < 2:
            reasons.append("one SMC run: no run-to-run check")
        else:
            if not out["log_evidence_spread"] <= LOG_EVIDENCE_SPREAD:
                reasons.append(f"SMC runs' log evidence {out['log_evidence_spread']:.1f} nats apart "
                               f"(> {LOG_EVIDENCE_SPREAD:g})")
            if not smc.runs_rhat <= RUNS_RHAT:
                reasons.append(f"SMC runs disagree on the invariants (R-hat {smc.runs_rhat:.3g} "
                               f"> {RUNS_RHAT:g})")
    out["reasons"] = reasons
    out["converged"] = not reasons
    return out


__all__ = ["BFMI_MIN", "ESS_MIN", "LOG_DENSITY_SPREAD", "LOG_EVIDENCE_SPREAD", "PIT_BAND",
           "RHAT_BELOW", "RUNS_RHAT", "PITReading", "chain_loo", "has_loo",
           "invariant_diagnostics", "is_vi", "loo_summary", "nuts_health", "pit_reading", "psislw",
           "reference_health", "vi_loo_weights"]
