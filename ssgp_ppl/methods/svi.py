"""``svi``: the entry's guide fitted by its objective with Adam, many steps inside one jit."""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np
from numpyro.infer import Trace_ELBO

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.fitinfo import SVIInfo
from ssgp_ppl.guides import PSI, NumPyroAutoGuide, guide_standardises_itself, known_guides, make_guide
from ssgp_ppl.inference import TOL_PER_POINT, Batching, Schedule, reparam_for_nuts, run_svi, run_svi_paths
from ssgp_ppl.methods import common
from ssgp_ppl.methods.base import Method, Settings, setting
from ssgp_ppl.objectives import GRADIENTS, OBJECTIVES, make_objective
from ssgp_ppl.paths import path_seed
from ssgp_ppl.posterior import Posterior
from ssgp_ppl.stacking import COMBINE


@dataclasses.dataclass(frozen=True)
class SVISettings(Settings):
    guide: str = setting(str, "auto_mvn", "guide name (ssgp_ppl.guides)")
    psi: str = setting(str, "normal", "joint_affine: distribution ψ of z", choices=PSI)
    df: float = setting((int, float), 5.0, "joint_affine with ψ = student_t: degrees of freedom ν",
                        low=0, open_low=True)
    init_scale: float = setting((int, float), 0.1, "papers' guides: initial scale × prior std",
                                low=0, open_low=True)
    components: int = setting(int, 3, "mixture: number K of diagonal Gaussian components", low=1)
    spread: float = setting((int, float), 1.0, "mixture: spread of the components' starting means, "
                            "in prior standard deviations", low=0)
    objective: str = setting(str, "elbo", "elbo | beta_elbo | dlm_log | dlm_square (Wei et al. "
                             "2021)", choices=OBJECTIVES)
    beta: float = setting((int, float), 1.0, "β of the KL term (beta_elbo, dlm_*)", low=0)
    gradient: str = setting(str, "exact", "log E_q p(y|f) in dlm_log: exact (Gaussian, probit) | "
                            "quadrature | bmc | ups (Wei et al. 2021, §3-4)", choices=GRADIENTS)
    mc_samples: int = setting(int, 10, "draws L of bmc/ups, quadrature nodes, or the mixture's "
                              "score-function draws per component", low=1)
    steps: int = setting(int, 5000, "SVI steps (upper bound)", low=1)
    lr: float = setting((int, float), 0.01, "Adam step size", low=0, open_low=True)
    lr_halflife: float = setting((int, float), 0.0, "halve the step size every this many steps "
                                 "(0: constant)", low=0)
    batch_size: int = setting(int, 0, "minibatch rows per step; 0 = all", low=0)
    num_particles: int = setting(int, 1, "ELBO Monte Carlo particles per step", low=1)
    chunk: int = setting(int, 250, "steps per jitted scan", low=1)
    tol: float = setting((int, float), TOL_PER_POINT, "stop when the loss improves by "
                         "less than this many nats per training row per 1,000 steps", low=0)
    min_steps: int = setting(int, 0, "no convergence stop before this many steps", low=0)
    noncentred: bool = setting(bool, False, "fit the non-centred frequencies θ·2πℓ (standard "
                               "normal a priori under the SE density) instead of θ; the joint_affine "
                               "and mean_field guides also s·√m/σ_s")
    paths: int = setting(int, 1, "independent fits from dispersed starts (multi-path VI)", low=1)
    combine: str = setting(str, "stacking", "how the paths combine: stacking (of their LOO "
                           "predictives) | posterior (by ELBO) | best", choices=COMBINE)

    def schedule(self, steps: int | None = None) -> Schedule:
        n = self.steps if steps is None else steps
        return Schedule(n, self.lr, self.lr_halflife, self.chunk, self.tol, 4, min(self.min_steps, n))


def guide_of(entry, spec, model, s: SVISettings):
    """The entry's guide object (:mod:`ssgp_ppl.guides`)."""
    return make_guide(s.guide, model, spec, psi=s.psi, df=s.df, init_scale=s.init_scale,
                      components=s.components, spread=s.spread, noncentred=s.noncentred)


class SVIMethod(Method):
    name = "svi"
    budget = {"steps": "steps"}
    Settings = SVISettings
    description = "the entry's guide by SVI (its objective, Adam inside one jit)"
    checkpoints = True
    distributed = True
    accepts = ("spectral_points",)

    def check(self, entry, src: str) -> None:
        s = self.settings(entry)
        mc = entry.config["model"]
        if s.guide not in known_guides():
            raise SSGPError(f"{src}: inference.svi.guide: unknown guide {s.guide!r}; known: "
                            f"{', '.join(known_guides())}")
        if not entry.latent_sites:
            raise SSGPError(f"{src}: inference.methods: 'svi' needs latent sites; this model has "
                            "none (use 'ml')")
        if s.paths > 1 and mc["likelihood"] != "gaussian":
            raise SSGPError(f"{src}: inference.svi.paths: multi-path fits are weighted by the "
                            "closed-form Gaussian LOO predictive; the "
                            f"{mc['likelihood']} likelihood needs paths = 1")
        if s.noncentred and (mc["parameterization"] != "free" or not (
                guide_standardises_itself(s.guide)
                or s.guide.startswith("auto_") and mc["spectral_density"] == "se")):
            own = ", ".join(g for g in known_guides() if guide_standardises_itself(g))
            raise SSGPError(f"{src}: inference.svi.noncentred: needs parameterization = 'free' and "
                            f"a guide of {own} or an auto_* guide with spectral_density = 'se'")
        if s.guide == "mixture" and mc["spectral_density"] != "se":
            raise SSGPError(f"{src}: inference.svi.guide: 'mixture' needs spectral_density = 'se'")
        if entry.config["partitions"]["per_step"] and s.batch_size:
            raise SSGPError(f"{src}: inference.svi.batch_size: set either batch_size or "
                            "partitions.per_step, not both")
        if s.objective != "elbo" and mc["nuisance"] != "sampled":
            raise SSGPError(f"{src}: inference.svi.objective: '{s.objective}' needs "
                            "model.nuisance = 'sampled'")
        if s.objective == "dlm_log" and s.gradient == "exact" and \
                mc["likelihood"] not in ("gaussian", "probit"):
            raise SSGPError(f"{src}: inference.svi.gradient: 'exact' has no closed form under the "
                            f"{mc['likelihood']} likelihood; use quadrature, bmc or ups")

    def objective_label(self, entry) -> str:
        s = self.settings(entry)
        return s.objective if s.objective == "elbo" else f"{s.objective} (β = {s.beta:g})"

    def paths(self, entry) -> tuple[int, str]:
        s = self.settings(entry)
        return s.paths, s.combine

    def guide_label(self, entry) -> str:
        return self.settings(entry).guide

    def draws(self, entry, n: int) -> int:
        return common.loo_draws(entry, n) or super().draws(entry, n)

    def _setup(self, entry, data, inputs, seed):
        """(settings, spec, model, guide, loss, batching, partitions) of one fit."""
        s = self.settings(entry)
        spec = common.spec_for(entry, data, inputs)
        if not spec.latent_sites():
            raise SSGPError(f"{entry.name}: SVI needs latent sites; this model has none")
        model = entry.model(spec)
        if s.noncentred and "frequencies" in spec.latent_sites() and \
                not guide_standardises_itself(s.guide):
            model = reparam_for_nuts(model, ["frequencies"])
        partitions = common.partitions_for(entry, data, inputs, seed)
        guide = guide_of(entry, spec, model, s)
        objective = make_objective(s.objective, beta=s.beta, particles=s.num_particles,
                                   gradient=s.gradient, samples=s.mc_samples, guide=guide)
        per = entry.config["partitions"]["per_step"]
        per_step = min(per, partitions.count) if per else 0
        batching = Batching(s.batch_size or None, partitions if per_step else None, max(per_step, 1))
        loss = objective or Trace_ELBO(num_particles=s.num_particles)
        return s, spec, model, guide, loss, batching, partitions

    def run_paths(self, starts, data, *, seed=0, steps=None, progress=True, checkpoint=None,
                  client=None) -> list[Posterior]:
        """The paths vectorised in one jit (:func:`~ssgp_ppl.inference.run_svi_paths`) where they
        differ only in their starts (free frequencies, or the same spectral points) and no
        checkpoint is asked for; path by path otherwise."""
        setups = [self._setup(e, data, h, seed) for e, h in starts]
        specs = [st[1] for st in setups]
        # one update serves every path only where a path's start lives in its initial parameter
        # values alone: NumPyro's autoguides (the papers' guides scale their parameters by the
        # start), and models that differ in nothing else (free frequencies, or the same points)
        same = all(isinstance(st[3], NumPyroAutoGuide) for st in setups) and (
            all(sp.parameterization == "free" and sp.frequencies == "prior" for sp in specs)
            or all(np.array_equal(sp.spectral_points, specs[0].spectral_points) for sp in specs))
        if checkpoint is not None or not same or len(starts) < 2 or jax.process_count() > 1:
            return super().run_paths(starts, data, seed=seed, steps=steps, progress=progress,
                                     checkpoint=checkpoint, client=client)
        s, _, _, _, loss, batching, partitions = setups[0]
        t0 = time.perf_counter()
        results = run_svi_paths([(st[2], st[3]) for st in setups], data.x_train, data.y_train,
                                s.schedule(steps), loss=loss, batching=batching,
                                seeds=[path_seed(seed, k) for k in range(len(starts))],
                                progress=progress,
                                desc=f"{starts[0][0].name}:svi")
        per_path = (time.perf_counter() - t0) / len(starts)
        return [self._finish(e, data, st, res, path_seed(seed, k), time.perf_counter() - per_path)
                for k, ((e, _), st, res) in enumerate(zip(starts, setups, results, strict=True))]

    def run(self, entry, data, *, seed=0, steps=None, progress=True, inputs=None, checkpoint=None,
            client=None) -> Posterior:
        setup = self._setup(entry, data, inputs, seed)
        s, spec, model, guide, loss, batching, partitions = setup
        t0 = time.perf_counter()
        res = run_svi(model, guide, data.x_train, data.y_train, s.schedule(steps),
                      loss=loss, batching=batching, seed=seed, progress=progress,
                      desc=f"{entry.name}:svi", checkpoint=checkpoint)
        return self._finish(entry, data, setup, res, seed, t0)

    def _finish(self, entry, data, setup, res, seed, t0) -> Posterior:
        s, spec, model, guide, _, _, partitions = setup
        dens = common.loo_draws(entry, data.n_train) is not None  # densities for PSIS-LOO
        return common.finish(entry, data, self.name, model, guide, res.params, res, spec=spec,
                      partitions=partitions, seed=seed, num=self.draws(entry, data.n_train),
                      densities=dens, t0=t0,
                      method_info=SVIInfo(objective=s.objective, beta=s.beta))


SVI = SVIMethod()
