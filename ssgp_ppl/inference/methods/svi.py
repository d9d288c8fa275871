"""``svi``: the entry's guide fitted by its objective with Adam, many steps inside one jit."""

from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

import jax
import numpy as np
from numpyro.infer import Trace_ELBO

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.fitinfo import SVIInfo
from ssgp_ppl.inference.methods import common
from ssgp_ppl.inference.methods.base import Method, Settings, setting
from ssgp_ppl.inference.objectives import GRADIENTS, OBJECTIVES, make_objective
from ssgp_ppl.inference.paths import path_seed
from ssgp_ppl.inference.runners import (
    TOL_PER_POINT,
    Batching,
    Schedule,
    reparam_for_nuts,
    run_svi,
    run_svi_paths,
)
from ssgp_ppl.inference.stacking import COMBINE
from ssgp_ppl.model import densities
from ssgp_ppl.model.guides import GUIDES
from ssgp_ppl.posterior import Posterior


@dataclasses.dataclass(frozen=True)
class SVISettings(Settings):
    guide: str = setting(str, "auto_mvn", "a registered guide (ssgp_ppl.model.guides.GUIDES); its "
                         "settings go in [inference.svi.<guide>]")
    objective: str = setting(str, "elbo", "elbo | beta_elbo | dlm_log | dlm_square (Wei et al. "
                             "2021)", choices=OBJECTIVES)
    beta: float = setting((int, float), 1.0, "β of the KL term (beta_elbo, dlm_*)", low=0)
    gradient: str = setting(str, "exact", "log E_q p(y|f) in dlm_log: exact (closed form) | "
                            "quadrature | bmc | ups (Wei et al. 2021, §3-4)", choices=GRADIENTS)
    mc_samples: int = setting(int, 10, "draws L of bmc/ups, quadrature nodes, or the mixture's "
                              "score-function draws per component", low=1)
    steps: int = setting(int, 5000, "SVI steps (upper bound)", low=1)
    lr: float = setting((int, float), 0.01, "Adam step size", low=0, open_low=True)
    lr_halflife: float = setting((int, float), 0.0, "halve the step size every this many steps "
                                 "(0: constant)", low=0)
    batch_size: int = setting(int, 0, "minibatch rows per step (different rows, the batch's "
                              "marginal likelihood × n/b, where s is integrated out); 0 = all",
                              low=0)
    num_particles: int = setting(int, 1, "ELBO Monte Carlo particles per step", low=1)
    chunk: int = setting(int, 250, "steps per jitted scan", low=1)
    tol: float = setting((int, float), TOL_PER_POINT, "stop when the loss improves by "
                         "less than this many nats per training row per 1,000 steps", low=0)
    min_steps: int = setting(int, 0, "no convergence stop before this many steps", low=0)
    noncentred: bool = setting(bool, False, "fit the non-centred frequencies θ·2πℓ (standard "
                               "normal a priori under the SE density) instead of θ; a guide that "
                               "standardises itself (joint_affine, mean_field) also s·√m/σ_s")
    paths: int = setting(int, 1, "independent fits from dispersed starts (multi-path VI)", low=1)
    combine: str = setting(str, "stacking", "how the paths combine: stacking (of their LOO "
                           "predictives) | posterior (by ELBO) | best", choices=COMBINE)

    def schedule(self, steps: int | None = None) -> Schedule:
        n = self.steps if steps is None else steps
        return Schedule(n, self.lr, self.lr_halflife, self.chunk, self.tol, 4, min(self.min_steps, n))


class SVISetup(NamedTuple):
    """What one SVI fit of an entry runs (:meth:`SVIMethod.setup`): its ``settings``, the
    model ``spec`` for the data, the ``model`` (non-centred frequencies where the settings ask the
    model for them), the ``guide`` (:mod:`ssgp_ppl.model.guides`), the objective ``loss``, the
    ``batching`` of its steps and the ``partitions`` of the data (:mod:`ssgp_ppl.inference.partitions`)."""

    settings: SVISettings
    spec: object
    model: object
    guide: object
    loss: object
    batching: Batching
    partitions: object


def guide_of(entry, spec, model, s: SVISettings):
    """The entry's guide object (:mod:`ssgp_ppl.model.guides`) with its ``[inference.svi.<guide>]``
    settings."""
    cls = GUIDES.get(s.guide)
    table = entry.config["inference"]["svi"].get(s.guide, {})
    return cls.make(model, spec, cls.Settings(**table), noncentred=s.noncentred)


def _their_settings(schema: dict) -> str:
    return f"its settings: {', '.join(schema)}" if schema else "it has no settings"


class SVIMethod(Method):
    name = "svi"
    budget = {"steps": "steps"}
    Settings = SVISettings
    description = "the entry's guide by SVI (its objective, Adam inside one jit)"
    checkpoints = True
    distributed = True
    row_batches = True
    accepts = ("spectral_points",)

    def table_schema(self, table=None, src=""):
        """The SVI settings and the chosen guide's table ``[inference.svi.<guide>]``; a key
        written for another guide, or flat in ``[inference.svi]``, is one error saying where it
        goes."""
        own = self.Settings.schema()
        clash = [g for g in GUIDES if g in own]
        if clash:
            raise SSGPError(f"the guide {clash[0]!r} has the name of an [inference.svi] setting; "
                            "rename it")
        if table is None:
            return {**own, **{g: cls.Settings.schema() for g, cls in GUIDES.items()}}
        name = table.get("guide", own["guide"].default)
        if not isinstance(name, str):
            return own  # the type error is validate's
        if name not in GUIDES:
            raise SSGPError(f"{src}: inference.svi.guide: unknown guide {name!r}; known: "
                            f"{', '.join(GUIDES)}")
        theirs = GUIDES[name].Settings.schema()
        for key in table:
            if key in own or key == name:
                continue
            if key in GUIDES:
                raise SSGPError(f"{src}: inference.svi.{key}: settings of the '{key}' guide, but "
                                f"this entry's guide is '{name}'")
            if key in theirs:
                raise SSGPError(f"{src}: inference.svi.{key}: a setting of the '{name}' guide: "
                                f"write it in [inference.svi.{name}]")
            owners = [g for g, cls in GUIDES.items() if key in cls.Settings.schema()]
            if owners:
                raise SSGPError(f"{src}: inference.svi.{key}: the '{name}' guide has no setting "
                                f"'{key}' ({_their_settings(theirs)}; '{key}' is a setting "
                                f"of {', '.join(owners)})")
        sub = table.get(name)
        for key in sub if isinstance(sub, dict) else ():  # not a table: validate says so
            if key not in theirs:
                raise SSGPError(f"{src}: inference.svi.{name}.{key}: the '{name}' guide has no "
                                f"setting '{key}' ({_their_settings(theirs)})")
        return {**own, name: theirs}

    def check(self, entry, src: str) -> None:
        s = self.settings(entry)
        mc = entry.config["model"]
        density = densities.get(mc["spectral_density"])
        guide = GUIDES.get(s.guide)
        if not entry.latent_sites:
            raise SSGPError(f"{src}: inference.methods: 'svi' needs latent sites; this model has "
                            "none (use 'ml')")
        if s.paths > 1 and not entry.lik.conjugate:
            raise SSGPError(f"{src}: inference.svi.paths: multi-path fits are weighted by the "
                            "closed-form Gaussian LOO predictive; the "
                            f"{mc['likelihood']} likelihood needs paths = 1")
        if s.noncentred and (mc["parameterization"] != "free" or not (
                guide.noncentring == "guide"
                or guide.noncentring == "model" and density.loc_scale)):
            own, by_model = ([g for g, cls in GUIDES.items() if cls.noncentring == how]
                             for how in ("guide", "model"))
            loc_scale = densities.names_where(lambda d: d.loc_scale)
            raise SSGPError(f"{src}: inference.svi.noncentred: needs parameterization = 'free' and "
                            f"a guide of {', '.join(own)}, or of {', '.join(by_model)} with a "
                            f"location-scale spectral_density ({loc_scale})")
        if guide.needs_gaussian_density and not density.gaussian:
            gaussian = densities.names_where(lambda d: d.gaussian)
            raise SSGPError(f"{src}: inference.svi.guide: '{s.guide}' needs a Gaussian "
                            f"spectral_density ({gaussian}), not {density.name!r}")
        if entry.config["partitions"]["per_step"] and s.batch_size:
            raise SSGPError(f"{src}: inference.svi.batch_size: set either batch_size or "
                            "partitions.per_step, not both")
        if s.objective != "elbo" and mc["nuisance"] != "sampled":
            raise SSGPError(f"{src}: inference.svi.objective: '{s.objective}' needs "
                            "model.nuisance = 'sampled'")
        if s.objective == "dlm_log" and s.gradient == "exact" and \
                not entry.lik.exact_log_expected:
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

    def setup(self, entry, data, inputs=None, seed: int = 0) -> SVISetup:
        """The :class:`SVISetup` of one fit of ``entry`` to ``data``: what :meth:`run` and
        :meth:`run_paths` drive, and what simulation-based calibration (:mod:`ssgp_ppl.diagnostics.sbc`)
        runs vmapped over simulated data sets.

        Parameters
        ----------
        entry, data
            The catalog entry and the data set (its shapes, partitions and type-II inputs).
        inputs
            The hand-over from an earlier fit (:class:`~ssgp_ppl.posterior.Handoff`), or None.
        seed
            The seed of the partitions.

        Returns
        -------
        SVISetup
        """
        s = self.settings(entry)
        spec = common.spec_for(entry, data, inputs)
        if not spec.latent_sites():
            raise SSGPError(f"{entry.name}: SVI needs latent sites; this model has none")
        model = entry.model(spec)
        if s.noncentred and "frequencies" in spec.latent_sites() and \
                GUIDES.get(s.guide).noncentring == "model":
            model = reparam_for_nuts(model, ["frequencies"])
        partitions = common.partitions_for(entry, data, inputs, seed)
        guide = guide_of(entry, spec, model, s)
        objective = make_objective(s.objective, beta=s.beta, particles=s.num_particles,
                                   gradient=s.gradient, samples=s.mc_samples, guide=guide)
        per = entry.config["partitions"]["per_step"]
        per_step = min(per, partitions.count) if per else 0
        batching = Batching(s.batch_size or None, partitions if per_step else None, max(per_step, 1),
                            distinct=spec.nuisance == "marginalized")
        loss = objective or Trace_ELBO(num_particles=s.num_particles)
        return SVISetup(s, spec, model, guide, loss, batching, partitions)

    def run_paths(self, starts, data, *, seed=0, steps=None, progress=True, checkpoint=None,
                  client=None) -> list[Posterior]:
        """The paths vectorised in one jit (:func:`~ssgp_ppl.inference.runners.run_svi_paths`) where they
        differ only in their starts (free frequencies, or the same spectral points) and no
        checkpoint is asked for; path by path otherwise."""
        setups = [self.setup(e, data, h, seed) for e, h in starts]
        specs = [st[1] for st in setups]
        # one update serves every path only where a path's start lives in its initial parameter
        # values alone: NumPyro's autoguides (the papers' guides scale their parameters by the
        # start), and models that differ in nothing else (free frequencies, or the same points)
        same = all(st[3].start_in_params for st in setups) and (
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
        setup = self.setup(entry, data, inputs, seed)
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


__all__ = ["SVI", "SVIMethod", "SVISettings", "SVISetup", "guide_of"]
