"""``smc``: the reference posterior. Adaptive tempered SMC runs, then NUTS chains started from their
particles to polish and diagnose (Yao, Vehtari & Gelman 2022 on why a multimodal posterior needs
more than NUTS from dispersed starts).

Under the Gaussian likelihood s is integrated out (``collapse``): the SMC and NUTS target is
p(hyperparameters, θ | y) with the O(n m²) marginal likelihood (Hoang et al. 2017, App. E), and
every kept draw gets s from its exact Gaussian conditional afterwards, so the posterior has the
same sites as the uncollapsed model's. Frequencies are non-centred. On a model with type-II
hyperparameters the reference conditions on the entry's own estimates (empirical Bayes), as
``nuts`` does.

The posterior's draws are the polishing chains'; its :class:`~ssgp_ppl.inference.fitinfo.SMCInfo` carries the
SMC runs' log evidence and temperatures and the agreement of the runs on the invariant quantities,
which :func:`ssgp_ppl.diagnostics.calibration.reference_health` turns into the verdict.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from arviz_base import from_numpyro
from numpyro import handlers

from ssgp_ppl.diagnostics.datatree import DIMS
from ssgp_ppl.diagnostics.invariants import frequency_spread
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.fitinfo import FitInfo, SMCInfo
from ssgp_ppl.inference.methods import common
from ssgp_ppl.inference.methods.base import PosteriorSampler, Settings, setting
from ssgp_ppl.inference.runners import reparam_for_nuts, run_nuts, site_values
from ssgp_ppl.inference.smc import DENSE_MASS_MAX_DIM, MASS_CHOICES, tempered_smc_runs
from ssgp_ppl.posterior import Handoff, Posterior
from ssgp_ppl.runtime import status

SMC_SEED_OFFSET = 104_729  # the SMC runs' keys, apart from the polishing chains' (seed)


@dataclasses.dataclass(frozen=True)
class SMCSettings(Settings):
    particles: int = setting(int, 256, "particles of each tempered SMC run", low=2)
    mcmc_steps: int = setting(int, 20, "HMC moves of the particles at each temperature", low=1)
    integration_steps: int = setting(int, 8, "leapfrog steps of each HMC move", low=1)
    target_ess: float = setting((int, float), 0.5, "fraction of the particles' effective sample "
                                "size kept from one temperature to the next", low=0, high=0.99,
                                open_low=True)
    runs: int = setting(int, 2, "independent SMC runs; their agreement (log evidence, "
                        "invariants) is part of the verdict", low=1)
    chains: int = setting(int, 4, "NUTS chains started from SMC particles (polishing)", low=1)
    warmup: int = setting(int, 200, "warm-up iterations of each polishing chain", low=1)
    samples: int = setting(int, 500, "kept draws of each polishing chain", low=1)
    target_accept: float = setting((int, float), 0.9, "polishing NUTS target acceptance", low=0,
                                   high=1, open_low=True)
    max_tree_depth: int = setting(int, 10, "polishing NUTS maximum tree depth", low=1)
    mass: str = setting(str, "auto", "HMC inverse mass from the weighted particles: their "
                        "covariance (dense), their variances (diag), or auto: dense up to "
                        f"{DENSE_MASS_MAX_DIM} dimensions, diagonal above",
                        choices=MASS_CHOICES)
    pilot: bool = setting(bool, False, "one adaptive pilot run first, whose temperatures, step "
                          "sizes and masses the runs reuse (their log evidence unbiased)")
    collapse: bool = setting(bool, True, "integrate s out under the Gaussian likelihood and "
                             "draw it from its exact conditional afterwards")


def collapses(spec, collapse: bool) -> bool:
    """Whether the reference integrates s out: the entry does, or ``smc.collapse`` asks and the
    likelihood is Gaussian with other latent sites than s."""
    return spec.nuisance == "marginalized" or (
        collapse and spec.lik.conjugate and len(spec.latent_sites()) > 1)


def target_model(entry, spec, type2, collapse: bool):
    """(model, collapsed): the model SMC and NUTS sample, s integrated out where it can be,
    type-II sites fixed at their estimates, f hidden, Gaussian sites non-centred."""
    learned = spec.learned_sites()
    collapsed = collapses(spec, collapse)
    if collapsed:
        spec = dataclasses.replace(spec, nuisance="marginalized")
    model = entry.model(spec)
    if learned:
        if type2 is None:
            raise SSGPError(f"{entry.name}: the reference conditions on type-II estimates of "
                            f"{', '.join(learned)}; pass them (Handoff.type2) from the entry's own "
                            "fit")
        model = handlers.substitute(model, data={k: jnp.asarray(type2[k]) for k in learned})
    model = handlers.block(model, hide=["f"])
    reparam = ("nuisance",) + (("frequencies",) if spec.density.loc_scale else ())
    return reparam_for_nuts(model, [r for r in reparam if r in spec.latent_sites()]), collapsed


def _scalar_invariants(sites: dict) -> np.ndarray:
    """(S, k) noise, signal and each input's frequency spread of flat site draws."""
    cols = [np.asarray(sites[k]).reshape(-1, 1) for k in ("noise", "signal") if k in sites]
    cols.append(frequency_spread(np.asarray(sites["frequencies"])))
    return np.concatenate(cols, axis=1)


def runs_agreement(invariant_runs: list[np.ndarray], seed: int = 0) -> float:
    """Max rank R-hat over the scalar invariants with each SMC run's particles as one chain
    (1 when the runs found the same distribution; NaN for a single run). Each run's particles are
    permuted first (seeded): resampling returns them in ancestor order, which R-hat would read as
    a trend within the chain."""
    from arviz_stats import rhat

    if len(invariant_runs) < 2:
        return float("nan")
    n = min(len(a) for a in invariant_runs)
    rng = np.random.default_rng(seed)
    stacked = np.stack([np.asarray(a)[rng.permutation(len(a))[:n]] for a in invariant_runs])
    vals = [float(rhat(stacked[..., j], method="rank")) for j in range(stacked.shape[-1])
            if np.ptp(stacked[..., j]) > 0]
    return float(np.max(vals)) if vals else 1.0  # NaN (a stuck run) propagates


class SMCMethod(PosteriorSampler):
    name = "smc"
    budget = {"samples": "samples", "chains": "chains"}
    Settings = SMCSettings
    description = ("adaptive tempered SMC (blackjax, s integrated out), then NUTS chains from its "
                   "particles: the reference")
    reference = True
    accepts = ("spectral_points",)

    def objective_label(self, entry) -> str:
        return "posterior (tempered SMC + NUTS)"

    def run(self, entry, data, *, seed=0, steps=None, progress=True, inputs=None, checkpoint=None,
            client=None) -> Posterior:
        s = self.settings(entry)
        spec = common.spec_for(entry, data, inputs)
        type2 = None if inputs is None else inputs.type2
        model, collapsed = target_model(entry, spec, type2, s.collapse)
        x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
        t0 = time.perf_counter()
        what = (f"{entry.name}: tempered SMC, {s.runs} run{'s' if s.runs > 1 else ''} × "
                f"{s.particles} particles × {s.mcmc_steps} HMC moves a temperature, one compiled "
                f"run{' after a pilot run' if s.pilot else ''} (then NUTS chains from its "
                "particles)")
        with status.step(what, progress):
            runs = tempered_smc_runs(model, x, y, runs=s.runs, particles=s.particles,
                                     mcmc_steps=s.mcmc_steps, integration_steps=s.integration_steps,
                                     target_ess=s.target_ess, seed=seed + SMC_SEED_OFFSET,
                                     mass=s.mass, pilot=s.pilot,
                                     progress=progress and f"{entry.name}:smc")
        smc_seconds = time.perf_counter() - t0
        inv = [_scalar_invariants(site_values(model, {}, {k: jnp.asarray(v) for k, v in
                                                           r.samples.items()}, x[:1]))
               for r in runs]
        # polishing chains start at distinct particles drawn uniformly from all runs
        pooled = np.concatenate([r.positions for r in runs])
        pick = np.random.default_rng(seed).choice(len(pooled), s.chains, replace=False) \
            if s.chains <= len(pooled) else np.arange(s.chains) % len(pooled)
        starts = jax.vmap(runs[0].unravel)(jnp.asarray(pooled[pick]))
        if s.chains == 1:  # NumPyro takes one chain's start without the chain axis
            starts = jax.tree.map(lambda a: a[0], starts)
        mcmc = run_nuts(model, x, y, warmup=s.warmup, samples=s.samples if steps is None else steps,
                        chains=s.chains, seed=seed, target_accept=s.target_accept,
                        max_tree_depth=s.max_tree_depth, progress=progress, init_params=starts)
        sites = site_values(model, {}, mcmc.get_samples(), x[:1])
        if collapsed:  # s from its exact conditional given each draw
            sites = common.with_nuisance(sites, x, y, seed, spec)
        jax.block_until_ready(sites)
        fit_seconds = time.perf_counter() - t0
        partitions = common.partitions_for(entry, data, inputs, seed)
        info = FitInfo(fit_seconds=fit_seconds, partitions=None if partitions is None else
                       partitions.count,
                       method=SMCInfo(
                           divergences=int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum()),
                           log_evidence=tuple(r.log_evidence for r in runs),
                           temperatures=tuple(r.temperatures for r in runs),
                           smc_seconds=smc_seconds, particles=s.particles, collapsed=collapsed,
                           runs_rhat=runs_agreement(inv, seed)))
        stats = from_numpyro(mcmc, dims=DIMS, log_likelihood=False)["sample_stats"].to_dataset()
        learned = spec.learned_sites()
        kept = None if not learned else {k: np.asarray(type2[k]) for k in learned}
        return Posterior(entry=entry, method=self.name, dataset=data.name,
                         sites=common.by_chain(sites, s.chains),
                         rule=common.site_rule(entry, sites, data, partitions),
                         x_scaler=data.x_scaler, y_scaler=data.y_scaler, info=info,
                         handoff=Handoff(type2=kept, partitions=partitions), sample_stats=stats)


SMC = SMCMethod()


def runs_posterior(entry, data, runs, *, seed: int = 0, inputs=None, draws_per_run: int | None = None,
                   info: FitInfo | None = None) -> tuple[Posterior, np.ndarray]:
    """(posterior, log density): independent tempered-SMC ``runs`` of ``entry``'s reference target
    on ``data`` (:func:`~ssgp_ppl.inference.smc.tempered_smc_runs` of :func:`target_model`) as one posterior,
    each run one chain of ``draws_per_run`` particles (a seeded subset, default all), s drawn from
    its exact conditional where it was integrated out; the log density is log p(z, y) of each kept
    particle, (runs, draws)."""
    from ssgp_ppl.inference.smc import potentials

    spec = common.spec_for(entry, data, inputs)
    type2 = None if inputs is None else inputs.type2
    model, collapsed = target_model(entry, spec, type2, True)
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    rng = np.random.default_rng(seed)
    n = min(len(r.positions) for r in runs) if draws_per_run is None else draws_per_run
    keep = [rng.permutation(len(r.positions))[:n] for r in runs]  # shuffled: no ancestor order
    log_prior = potentials(model, x, y)[0]
    lp = np.stack([np.asarray(jax.vmap(log_prior)(jnp.asarray(r.positions[k]))) + r.log_likelihood[k]
                   for r, k in zip(runs, keep, strict=True)])
    draws = {name: jnp.asarray(np.concatenate([np.asarray(r.samples[name])[k]
                                               for r, k in zip(runs, keep, strict=True)]))
             for name in runs[0].samples}
    sites = site_values(model, {}, draws, x[:1])
    if collapsed:
        sites = common.with_nuisance(sites, x, y, seed, spec)
    sites = {k: np.asarray(v) for k, v in sites.items()}
    partitions = common.partitions_for(entry, data, inputs, seed)
    learned = spec.learned_sites()
    kept = None if not learned else {k: np.asarray(type2[k]) for k in learned}
    post = Posterior(entry=entry, method=SMC.name, dataset=data.name,
                     sites=common.by_chain(sites, len(runs)),
                     rule=common.site_rule(entry, sites, data, partitions), x_scaler=data.x_scaler,
                     y_scaler=data.y_scaler, info=info or FitInfo(), log_p=lp,
                     handoff=Handoff(type2=kept, partitions=partitions))
    return post, lp


__all__ = ["SMC", "SMCMethod", "SMCSettings", "runs_agreement", "runs_posterior", "target_model"]
