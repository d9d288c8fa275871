"""Gold-standard references: computed once with a large budget, validated by independent runs,
stored with the package and reused by ``compare`` (as posteriordb and inference-gym do).

A gold reference is K ≥ :data:`MIN_RUNS` independent tempered-SMC runs of an entry's reference
target (:func:`ssgp_ppl.inference.methods.smc.target_model`), each started from the prior with its own
seed, pooled with equal weights: each run is one chain of the stored posterior. It is made by
``benchmarks/gold_references.py`` (checkpointed run by run, resumable across sittings) and stored
under :data:`GOLD_DIR` as ``posterior.nc`` (a :class:`~ssgp_ppl.posterior.Posterior`) beside
``gold.json`` (provenance and :func:`verdict`).

A stored reference matches a comparison only when what the reference conditions on is the same:
:func:`target_key` hashes the entry's ``[model]`` and ``[data]`` tables, the data set's name,
split and training/test rows, and the type-II estimates handed over; the fixed spectral points
(the entry's own, or those NCVMP kept) are compared within float32 rounding
(:func:`target_points`). Anything else gets the on-the-fly reference.

The verdict's thresholds live here, once; the report and the docs quote them from here.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ssgp_ppl.errors import SSGPError

GOLD_FORMAT = 1  # layout of a stored gold reference (folder references/v<GOLD_FORMAT>)
GOLD_DIR = Path(__file__).parents[1] / "references" / f"v{GOLD_FORMAT}"

# --- the verdict: a gold reference is CONVERGED only when every one of these holds -------------
MIN_RUNS = 4  # independent runs, each from the prior with its own seed
RHAT_MAX = 1.01  # rank R-hat of every invariant with each run as one chain (shuffled draws)
ESS_MIN = 400  # pooled bulk and tail ESS of every invariant
NLPD_TOL = 0.02  # each run's test MNLP within this of the pooled posterior's (nats per point)
LOG_Z_SD_MAX = 0.5  # sd of the runs' log evidence (nats)
IS_MAX_DIM = 20  # at most this many latent dimensions: importance-sampling check of log Z
IS_KHAT_MAX = 0.5  # its Pareto k̂ (Vehtari et al. 2024): above, the IS estimate is not trusted
IS_MATCH = 0.5  # |log Z by IS (or bridge sampling) − the runs' mean log Ẑ| (nats)
# where IS's k̂ is above IS_KHAT_MAX, a bridge sampling estimate (Meng & Wong 1996) with at most
# this standard error checks log Z instead: it does not rest on the proposal's tails
BRIDGE_SE_MAX = 0.1
# a NOT CONVERGED reference whose runs would need more than this many hours of the machine that
# computed it (by the 1/N variance of log Ẑ) is labelled "not attainable on this hardware"
ATTAINABLE_HOURS = 8.0

BITS = 30  # mantissa bits of the arrays hashed by target_key (last-bit differences aside)


def _rounded_sha(*arrays) -> str:
    digest = hashlib.sha256()
    for a in arrays:
        mantissa, exponent = np.frexp(np.asarray(a, np.float64))
        digest.update(str(mantissa.shape).encode())
        digest.update(np.ascontiguousarray(np.round(np.ldexp(mantissa, BITS))).tobytes())
        digest.update(np.ascontiguousarray(exponent).tobytes())
    return digest.hexdigest()[:16]


def target_key(entry, data, handoff=None) -> dict:
    """What a reference posterior conditions on, as JSON-able values: the entry's model and data
    configuration, the data set's name, split and rows (hashed at :data:`BITS` mantissa bits),
    and the hashed arrays the entry's own method hands over."""
    given = {}
    if handoff is not None and handoff.type2:  # {} from a fit with no type-II sites
        given["type2"] = _rounded_sha(*[handoff.type2[k] for k in sorted(handoff.type2)])
    return {"model": entry.config["model"], "data_config": entry.config["data"],
            "dataset": data.name, "split": int(data.split),
            "rows": _rounded_sha(data.x_train, data.y_train, data.x_test, data.y_test),
            "given": given}


POINTS_RTOL = 1e-6  # spectral points match to float32 rounding (compared, not hashed)


def target_points(entry, data, handoff=None) -> np.ndarray | None:
    """The fixed spectral points of the target (the entry's own, drawn from its seed in the float
    width in force, or the ones handed over), None for free frequencies. Compared within
    :data:`POINTS_RTOL` rather than hashed: a float32 draw cast to float64 is the same target."""
    from ssgp_ppl.inference.methods import common

    pts = common.spec_for(entry, data, handoff).spectral_points
    return None if pts is None else np.asarray(pts, np.float64)


def comparison_handoff(entry, data, *, seed: int = 0, progress: bool = False):
    """What a default (float32) ``compare`` hands its reference, as a
    :class:`~ssgp_ppl.posterior.Handoff` for sampling in either float width: the entry's own
    method's hand-over fitted in float32 (NCVMP chooses among spectral sets drawn in float32),
    and the fixed spectral points as a float32 comparison has them. The float width in force is
    restored."""
    import dataclasses

    import jax

    from ssgp_ppl.inference import methods
    from ssgp_ppl.inference.methods import common
    from ssgp_ppl.pipeline import prerequisites

    previous = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", False)
    try:
        handoff = prerequisites(entry, data, methods.reference(), seed=seed, progress=progress)
        points = common.spec_for(entry, data, handoff).spectral_points
    finally:
        jax.config.update("jax_enable_x64", previous)
    if points is None:
        return handoff
    return dataclasses.replace(handoff, spectral_points=np.asarray(points, np.float64))


def _same_points(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=POINTS_RTOL, atol=POINTS_RTOL))


def target_hash(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class GoldReference:
    """A stored gold reference: its folder, provenance (``gold.json``) and verdict.

    Parameters
    ----------
    path : Path
        The reference's folder (``gold.json`` and ``posterior.nc``).
    provenance : dict
        ``gold.json`` as read: package version, target hash and key, data set and split, settings,
        seeds, machine, wall time and the verdict.
    """

    path: Path
    provenance: dict

    @property
    def verdict(self) -> dict:
        """The verdict (`verdict`): every diagnostic, the reasons and ``converged``."""
        return self.provenance["verdict"]

    @property
    def converged(self) -> bool:
        """True only when every criterion of the verdict holds (`criteria_text`)."""
        return bool(self.verdict["converged"])

    def label(self) -> str:
        """The reference's one-line label, as the comparison table shows it.

        Returns
        -------
        str
            For example ``gold reference (CONVERGED; 4 runs, computed 2026-11-25, 41 min)``.
        """
        p = self.provenance
        state = "CONVERGED" if self.converged else "NOT CONVERGED"
        if (why := limit(self.verdict)) is not None:
            state += f", {why}"
        return (f"gold reference ({state}; {p['runs']} runs, computed {p['computed'][:10]}, "
                f"{p['wall_seconds'] / 60:.0f} min)")

    def posterior(self):
        """The stored posterior.

        Returns
        -------
        Posterior
            Each run one chain, with the runs' log density as its sampler statistics (``lp``), as
            a sampler's posterior has them.
        """
        import xarray as xr

        from ssgp_ppl.entry import from_saved
        from ssgp_ppl.posterior import load

        post = load(self.path / "posterior.nc", from_saved)
        if post.log_p is None:
            return post
        return post.replace(sample_stats=xr.Dataset({"lp": (("chain", "draw"),
                                                            np.asarray(post.log_p))}))


def stored(root: Path | None = None) -> list[GoldReference]:
    """Every gold reference stored under a folder.

    Parameters
    ----------
    root : Path, optional
        The folder holding one sub-folder per reference (default `GOLD_DIR`, the references
        shipped with the package).

    Returns
    -------
    list of GoldReference
        Sorted by folder name.

    Raises
    ------
    SSGPError
        A ``gold.json`` that cannot be read, naming the file.
    """
    root = GOLD_DIR if root is None else Path(root)
    out = []
    for f in sorted(root.glob("*/gold.json")):
        try:
            out.append(GoldReference(f.parent, json.loads(f.read_text())))
        except (OSError, ValueError) as e:
            raise SSGPError(f"{f}: unreadable gold reference ({type(e).__name__}: {e})") from None
    return out


def find(entry, data, handoff=None, root: Path | None = None) -> GoldReference | None:
    """The stored gold reference whose target is this comparison's (:func:`target_key`), or None."""
    want = target_hash(target_key(entry, data, handoff))
    candidates = [g for g in stored(root) if g.provenance.get("target_hash") == want
                  and (g.path / "posterior.nc").is_file()]
    if not candidates:
        return None
    points = target_points(entry, data, handoff)
    return next((g for g in candidates if _same_points(g.provenance.get("spectral_points"), points)),
                None)


# ------------------------------------------------------------------------------------ verdict


def shuffled(a: np.ndarray, seed: int = 0) -> np.ndarray:
    """(runs, draws, ...) with each run's draws permuted: resampled particles come in ancestor
    order, which a chain diagnostic would read as autocorrelation."""
    rng = np.random.default_rng(seed)
    return np.stack([r[rng.permutation(r.shape[0])] for r in np.asarray(a)])


def verdict(inv, *, run_nlpd, pooled_nlpd: float, log_z, dim: int, is_check: dict | None,
            nuts_divergences: int | None = None) -> dict:
    """The gold verdict of K runs. ``inv``: the invariants (chain = run, draw), already
    :func:`shuffled`; ``run_nlpd``: each run's test MNLP, ``pooled_nlpd`` the pooled one's;
    ``log_z``: each run's log Ẑ; ``dim``: the target's latent dimension; ``is_check``: the
    importance-sampling estimate {log_z, se, khat} (None where not computed). ``converged`` only
    when every threshold of this module holds; ``reasons`` names each one that does not."""
    from ssgp_ppl.diagnostics.calibration import invariant_diagnostics

    out = invariant_diagnostics(inv)
    runs = int(inv.sizes["chain"])
    log_z = np.asarray(log_z, float)
    run_nlpd = np.asarray(run_nlpd, float)
    out.update(runs=runs, log_evidence=log_z.tolist(), log_evidence_mean=float(log_z.mean()),
               log_evidence_sd=float(log_z.std(ddof=1)) if runs > 1 else float("nan"),
               log_evidence_se=float(log_z.std(ddof=1) / np.sqrt(runs)) if runs > 1
               else float("nan"),
               run_nlpd=run_nlpd.tolist(), pooled_nlpd=float(pooled_nlpd),
               nlpd_max_gap=float(np.max(np.abs(run_nlpd - pooled_nlpd))), dim=int(dim),
               is_check=is_check, divergences=nuts_divergences)
    reasons = []
    if runs < MIN_RUNS:
        reasons.append(f"{runs} runs (< {MIN_RUNS})")
    if not out["rhat_max"]:
        reasons.append("no invariant quantity varies across the draws")
    else:
        q, r = max(out["rhat_max"].items(), key=lambda kv: np.nan_to_num(kv[1], nan=np.inf))
        if not r <= RHAT_MAX:
            reasons.append(f"runs disagree: R-hat up to {r:.3g} ({q}; > {RHAT_MAX:g})")
        ess = {f"{kind} {q}": e for kind in ("bulk", "tail")
               for q, e in out[f"ess_{kind}_min"].items()}
        q, e = min(ess.items(), key=lambda kv: np.nan_to_num(kv[1], nan=-np.inf))
        if not e >= ESS_MIN:
            reasons.append(f"pooled ESS down to {e:.0f} ({q}; < {ESS_MIN})")
    if not out["nlpd_max_gap"] <= NLPD_TOL:
        reasons.append(f"a run's test MNLP is {out['nlpd_max_gap']:.3f} from the pooled one "
                       f"(> {NLPD_TOL:g})")
    if not out["log_evidence_sd"] <= LOG_Z_SD_MAX:
        reasons.append(f"the runs' log evidence has sd {out['log_evidence_sd']:.2f} nats "
                       f"(> {LOG_Z_SD_MAX:g})")
    if dim <= IS_MAX_DIM:
        if is_check is None:
            reasons.append(f"no importance-sampling check of log Z (D = {dim} ≤ {IS_MAX_DIM})")
        else:
            gap = abs(is_check["log_z"] - out["log_evidence_mean"])
            out["is_gap"] = float(gap)
            bridge = is_check.get("bridge")
            if is_check["khat"] <= IS_KHAT_MAX:
                out["evidence_check"] = "importance sampling"
                if not gap <= IS_MATCH:
                    reasons.append(f"the runs' mean log Ẑ is {gap:.2f} nats from importance "
                                   f"sampling's {is_check['log_z']:.2f} (> {IS_MATCH:g})")
            elif bridge is not None and bridge["se"] <= BRIDGE_SE_MAX:
                out["evidence_check"] = "bridge sampling"
                out["bridge_gap"] = float(abs(bridge["log_z"] - out["log_evidence_mean"]))
                if not out["bridge_gap"] <= IS_MATCH:
                    reasons.append(f"the runs' mean log Ẑ is {out['bridge_gap']:.2f} nats from "
                                   f"bridge sampling's {bridge['log_z']:.2f} (> {IS_MATCH:g})")
            else:
                reasons.append(f"importance-sampling check unreliable: Pareto k̂ "
                               f"{is_check['khat']:.2f} (> {IS_KHAT_MAX:g})"
                               + ("" if bridge is None else
                                  f", and bridge sampling's se {bridge['se']:.2f} "
                                  f"(> {BRIDGE_SE_MAX:g})"))
    if nuts_divergences:
        reasons.append(f"{nuts_divergences} divergences")
    out["reasons"] = reasons
    out["converged"] = not reasons
    return out


def budget_needed(log_evidence_sd: float, particles: int, seconds: float) -> tuple[int, float]:
    """(particles a run, hours) that would bring the runs' log Ẑ sd down to :data:`LOG_Z_SD_MAX`,
    from runs of ``particles`` that took ``seconds`` in all: var(log Ẑ) ∝ 1/N (Del Moral, Doucet &
    Jasra 2006) and the cost grows as N."""
    needed = int(np.ceil(particles * (log_evidence_sd / LOG_Z_SD_MAX) ** 2))
    return needed, seconds / 3600 * needed / particles


def separate_modes(v: dict) -> bool:
    """Whether a NOT CONVERGED reference's runs disagree with every run in a mode of its own.

    Particles within one SMC run then sit in one mode, and more particles a run narrow the spread
    of log Ẑ without bringing the runs together: ``ssgp_svi`` on pendulum had R-hat 1.64 at 512
    particles a run and 1.59 at 4,096, one mode a run at both.

    Parameters
    ----------
    v : dict
        A reference's verdict (its ``modes`` and ``chain_mode``, from `count_modes` over the
        runs as chains, and its ``reasons``).

    Returns
    -------
    bool
        True where the runs disagree and there are as many modes as runs.
    """
    runs = len(v.get("chain_mode", ()))
    return (not v.get("converged", False) and runs > 1 and v.get("modes") == runs
            and any(r.startswith("runs disagree") for r in v.get("reasons", ())))


def limit(v: dict) -> str | None:
    """What keeps a NOT CONVERGED reference from converging by a larger budget.

    Parameters
    ----------
    v : dict
        A reference's verdict.

    Returns
    -------
    str or None
        In the words of its label: "not attainable on this hardware" (`attainable`), "runs in
        separate modes" (`separate_modes`), or None.
    """
    if not attainable(v):
        return "not attainable on this hardware"
    if separate_modes(v):
        return "runs in separate modes"
    return None


def budget_text(v: dict) -> str | None:
    """What a larger budget would do for a NOT CONVERGED reference, in one sentence for the
    report, the results page and the notebooks.

    Parameters
    ----------
    v : dict
        A reference's verdict.

    Returns
    -------
    str or None
        The particles a run and hours the 1/N variance of log Ẑ asks for (`budget_needed`),
        with why that would not suffice where `limit` names a reason; None for a CONVERGED
        reference or one with nothing to say.
    """
    if v.get("converged", False):
        return None
    parts = []
    if "particles_needed" in v:
        hours = v.get("hours_needed")
        parts.append(f"by the 1/N variance of log Ẑ, about {v['particles_needed']:,} particles a "
                     "run would be needed" + ("" if hours is None else
                                             f" (about {hours:.1f} hours of the machine that "
                                             "computed it)"))
    if not attainable(v):
        parts.append(f"not attainable on this hardware (more than {ATTAINABLE_HOURS:g} hours)")
    elif separate_modes(v):
        parts.append(f"its {v['modes']} runs sit in {v['modes']} separate modes, one each: more "
                     "particles a run narrow the spread of log Ẑ without bringing the runs "
                     "together")
    return "; ".join(parts) or None


def attainable(v: dict) -> bool:
    """Whether a NOT CONVERGED reference could converge on the machine that computed it.

    Parameters
    ----------
    v : dict
        A reference's verdict.

    Returns
    -------
    bool
        False where, by the 1/N variance of log Ẑ (`budget_needed`), its runs would need more
        than `ATTAINABLE_HOURS` hours of that machine: the reference is then labelled "not
        attainable on this hardware".
    """
    return not v.get("hours_needed", 0) > ATTAINABLE_HOURS


def criteria_text() -> str:
    """The verdict's rule in words, for the report and the docs."""
    return (f"CONVERGED means: at least {MIN_RUNS} independent runs from the prior; rank R-hat ≤ "
            f"{RHAT_MAX:g} on every symmetry-invariant quantity with each run as one chain "
            f"(draws shuffled); pooled bulk and tail ESS ≥ {ESS_MIN}; each run's test MNLP within "
            f"{NLPD_TOL:g} nats of the pooled posterior's; the runs' log evidence with sd ≤ "
            f"{LOG_Z_SD_MAX:g} nats; and for at most {IS_MAX_DIM} latent dimensions an "
            f"importance-sampling estimate of log Z (Pareto k̂ ≤ {IS_KHAT_MAX:g}; where k̂ is "
            f"larger, a bridge sampling estimate with standard error ≤ {BRIDGE_SE_MAX:g}) within "
            f"{IS_MATCH:g} nats of the runs' mean.")


# ------------------------------------------------------------------------------------ storing


def machine() -> dict:
    """Where a reference was computed (its provenance)."""
    import jax

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "jax_backend": jax.default_backend(),
            "devices": [d.device_kind for d in jax.devices()], "python": platform.python_version()}


def target_potentials(entry, data, handoff=None):
    """(log prior, log likelihood, flatten) of ``entry``'s reference target on ``data``
    (:func:`ssgp_ppl.inference.smc.potentials` of :func:`ssgp_ppl.inference.methods.smc.target_model`):
    densities of the flat unconstrained vector, and ``flatten(sites)`` mapping constrained draws (name ->
    (n, ...)) to those vectors (n, D)."""
    import jax.numpy as jnp

    from ssgp_ppl.inference.methods import common
    from ssgp_ppl.inference.methods.smc import target_model
    from ssgp_ppl.inference.smc import flatten, potentials

    spec = common.spec_for(entry, data, handoff)
    model, _ = target_model(entry, spec, None if handoff is None else handoff.type2, True)
    log_prior, log_lik, _, _, transforms = potentials(model, jnp.asarray(data.x_train),
                                                      jnp.asarray(data.y_train))
    return log_prior, log_lik, lambda sites: np.asarray(flatten(sites, transforms))


# latent sites whose joint sign flip leaves a sparse-spectrum GP with its weights integrated out
# unchanged: cos(−ωᵀx) = cos(ωᵀx) and sin(−ωᵀx) = −sin(ωᵀx), a sign the weights' zero-mean
# Gaussian prior absorbs, and each of these sites' priors is symmetric about 0
MIRRORED_SITES = ("inverse_lengthscales", "frequencies", "frequencies_decentered")
UNMOVED_SITES = ("noise", "signal", "lengthscales")


def target_symmetry(entry, data, handoff=None) -> np.ndarray | None:
    """The sign vector of the reference target's exact mirror symmetry, for the importance-sampling
    check of log Z (:func:`ssgp_ppl.diagnostics.evidence.importance_log_evidence`, which verifies
    it numerically before using it).

    Parameters
    ----------
    entry : CatalogEntry
        The entry whose reference target (:func:`target_potentials`) is meant.
    data : Dataset
        The data it conditions on.
    handoff : Handoff, optional
        What the entry's own method hands the reference (spectral points, type-II estimates).

    Returns
    -------
    numpy.ndarray or None
        s (D,) in the flat unconstrained layout of :func:`target_potentials`, with p(θ) = p(s∘θ):
        −1 on every frequency coordinate (the inverse lengthscales λ of the Tan et al. 2016
        parameterisation, whose frequencies are the fixed spectral points scaled by λ, or the
        free frequencies), +1 on noise, signal and lengthscales. None where the target has a
        latent site outside these (a sampled nuisance), or no frequency site.
    """
    import jax.numpy as jnp
    from numpyro import handlers

    from ssgp_ppl.inference.methods import common
    from ssgp_ppl.inference.methods.smc import target_model

    spec = common.spec_for(entry, data, handoff)
    model, _ = target_model(entry, spec, None if handoff is None else handoff.type2, True)
    trace = handlers.trace(handlers.seed(model, 0)).get_trace(jnp.asarray(data.x_train),
                                                              jnp.asarray(data.y_train))
    latent = {k: int(np.size(v["value"])) for k, v in trace.items()
              if v["type"] == "sample" and not v["is_observed"]}
    if not set(latent) & set(MIRRORED_SITES) or set(latent) - set(MIRRORED_SITES + UNMOVED_SITES):
        return None
    return np.concatenate([np.full(latent[k], -1.0 if k in MIRRORED_SITES else 1.0)
                           for k in sorted(latent)])  # ravel_pytree's order: sorted names


def store(entry, data, handoff, results, *, settings: dict, seed: int = 0, draws: int = 500,
          is_draws: int = 180_000, name: str | None = None, root: Path | None = None,
          pilot_seconds: float = 0.0) -> GoldReference:
    """Validate independent tempered-SMC ``results`` (:class:`~ssgp_ppl.inference.smc.SMCResult`, one a run)
    of ``entry``'s reference target on ``data`` and store them as a gold reference under ``root``
    (default :data:`GOLD_DIR`): the pooled posterior (each run one chain of ``draws`` shuffled
    particles), each run's test MNLP, the importance-sampling check of log Z where the target has
    at most :data:`IS_MAX_DIM` dimensions, the :func:`verdict` and the provenance.
    ``pilot_seconds``: a pilot run's time that the runs' own ``seconds`` do not include."""
    import ssgp_ppl
    from ssgp_ppl.diagnostics.evidence import bridge_log_evidence, importance_log_evidence
    from ssgp_ppl.diagnostics.invariants import count_modes
    from ssgp_ppl.inference.fitinfo import FitInfo, SMCInfo
    from ssgp_ppl.inference.methods.smc import runs_posterior
    from ssgp_ppl.pipeline import evaluate
    from ssgp_ppl.runtime.io import write_json

    t0 = time.perf_counter()
    key = target_key(entry, data, handoff)
    h = target_hash(key)
    smc_seconds = float(sum(r.seconds for r in results)) + pilot_seconds
    info = FitInfo(fit_seconds=smc_seconds, method=SMCInfo(
        log_evidence=tuple(r.log_evidence for r in results),
        temperatures=tuple(r.temperatures for r in results), smc_seconds=smc_seconds,
        particles=settings.get("particles"), collapsed=True))
    pooled, lp = runs_posterior(entry, data, results, seed=seed, inputs=handoff,
                                draws_per_run=draws, info=info)
    pooled = evaluate(pooled, data, seed=seed)
    run_nlpd = [float(evaluate(runs_posterior(entry, data, [r], seed=seed, inputs=handoff)[0], data,
                               seed=seed).metrics["mnlp"]) for r in results]
    dim = int(np.shape(results[0].positions)[1])
    is_check = None
    if dim <= IS_MAX_DIM:
        log_prior, log_lik, flatten = target_potentials(entry, data, handoff)
        # the proposal is symmetrised under the target's exact mirror symmetry (verified at the
        # particles before it is used)
        signs = target_symmetry(entry, data, handoff)
        # two proposals: fitted to every run's particles, and (another seed) to the stored pooled
        # draws, as a later check of the stored reference fits it; the worst k̂ counts
        sources = (np.concatenate([r.positions for r in results]),
                   np.asarray(flatten(pooled.flat_sites)))
        checks = []
        for k, source in enumerate(sources):
            is_log_z, is_se, khat = importance_log_evidence(log_prior, log_lik, source,
                                                            draws=is_draws, seed=seed + k,
                                                            symmetry=signs)
            checks.append({"log_z": float(is_log_z), "se": float(is_se), "khat": float(khat),
                           "draws": is_draws, "seed": seed + k})
        # bridge sampling on every run's particles (half fit the same proposal, half are the
        # bridge's posterior draws): the check where the IS weights are heavy-tailed
        b_log_z, b_se = bridge_log_evidence(log_prior, log_lik, sources[0], draws=is_draws // 3,
                                            seed=seed, symmetry=signs)
        is_check = max(checks, key=lambda c: c["khat"]) | {
            "khat_each": [c["khat"] for c in checks], "log_z_each": [c["log_z"] for c in checks],
            "symmetry": None if signs is None else [int(v) for v in signs],
            "bridge": {"log_z": float(b_log_z), "se": float(b_se), "draws": is_draws // 3,
                       "seed": seed}}
    inv = pooled.datatree["invariants"].to_dataset()
    v = verdict(inv, run_nlpd=run_nlpd, pooled_nlpd=pooled.metrics["mnlp"],
                log_z=[r.log_evidence for r in results], dim=dim, is_check=is_check)
    v.update(count_modes(inv, extra={"lp": lp}))
    particles = settings.get("particles")
    if particles and not v["log_evidence_sd"] <= LOG_Z_SD_MAX:
        v["particles_needed"], v["hours_needed"] = budget_needed(v["log_evidence_sd"], particles,
                                                                 smc_seconds)
    v["unique_fraction"] = [float(len(np.unique(r.positions, axis=0)) / len(r.positions))
                            for r in results]
    v["temperatures"] = [int(r.temperatures) for r in results]
    v["acceptance"] = [float(r.acceptance) for r in results]
    v["run_log_density"] = [float(a) for a in lp.mean(axis=1)]
    modes = np.asarray(v["chain_mode"])  # runs grouped as the reference's chains are
    v["mode_weights"] = [float(np.mean(modes == k)) for k in range(v["modes"])]
    v["mode_log_density"] = [float(np.mean(np.asarray(v["run_log_density"])[modes == k]))
                             for k in range(v["modes"])]
    wall = smc_seconds + time.perf_counter() - t0
    out = (GOLD_DIR if root is None else Path(root)) / f"{name or entry.name + '-' + data.name}-{h[:8]}"
    out.mkdir(parents=True, exist_ok=True)
    pooled.replace(datatree=None, test=None, metrics=None).save(out / "posterior.nc")
    provenance = {
        "format": GOLD_FORMAT, "target_hash": h, "target": key, "entry": entry.name,
        "spectral_points": None if (pts := target_points(entry, data, handoff)) is None
        else pts.tolist(),
        "dataset": data.name, "split": int(data.split),
        "method": f"tempered SMC (blackjax), {len(results)} independent runs from the prior, "
                  "pooled with equal weights",
        "package_version": ssgp_ppl.__version__,
        "computed": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "wall_seconds": wall, "smc_seconds": smc_seconds, "runs": len(results),
        "machine": machine(), "x64": bool(np.asarray(results[0].positions).dtype == np.float64),
        "settings": settings, "metrics": {k: pooled.metrics[k] for k in
                                          ("nmse", "mnlp", "crps", "coverage_90")},
        "verdict": v}
    write_json(out / "gold.json", provenance)
    return GoldReference(out, provenance)


__all__ = ["ATTAINABLE_HOURS", "BRIDGE_SE_MAX", "ESS_MIN", "GOLD_DIR", "GOLD_FORMAT", "IS_KHAT_MAX",
           "IS_MATCH", "IS_MAX_DIM", "LOG_Z_SD_MAX", "MIN_RUNS", "NLPD_TOL", "RHAT_MAX",
           "GoldReference", "attainable", "budget_needed", "budget_text", "comparison_handoff",
           "criteria_text", "find", "limit", "separate_modes", "store", "stored", "target_hash",
           "target_key", "target_points", "target_symmetry", "verdict"]
