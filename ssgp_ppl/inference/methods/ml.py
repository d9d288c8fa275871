"""``ml``: type-II maximum likelihood (MAP where the entry has priors), Adam inside one jit."""

from __future__ import annotations

import dataclasses
import time

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.fitinfo import MLInfo
from ssgp_ppl.inference.methods import common
from ssgp_ppl.inference.methods.base import Method, Settings, setting
from ssgp_ppl.inference.runners import TOL_PER_POINT, Schedule, run_svi
from ssgp_ppl.model.guides import EmptyGuide, MAPGuide
from ssgp_ppl.posterior import Posterior


@dataclasses.dataclass(frozen=True)
class MLSettings(Settings):
    steps: int = setting(int, 3000, "Adam steps on the marginal likelihood (upper bound)", low=1)
    lr: float = setting((int, float), 0.02, "Adam step size", low=0, open_low=True)
    chunk: int = setting(int, 250, "steps per jitted scan", low=1)
    tol: float = setting((int, float), TOL_PER_POINT, "stop when the loss improves by "
                         "less than this many nats per training row per 1,000 steps", low=0)
    min_steps: int = setting(int, 0, "no convergence stop before this many steps", low=0)

    def schedule(self, steps: int | None = None) -> Schedule:
        n = self.steps if steps is None else steps
        return Schedule(n, self.lr, 0.0, self.chunk, self.tol, 4, min(self.min_steps, n))


class MLMethod(Method):
    name = "ml"
    budget = {"steps": "steps"}
    Settings = MLSettings
    description = "type-II maximum likelihood (MAP where the entry has priors)"
    checkpoints = True
    distributed = True
    accepts = ("spectral_points",)

    def check(self, entry, src: str) -> None:
        if not entry.lik.conjugate:
            raise SSGPError(f"{src}: inference.methods: ml is Gaussian-only (the {entry.lik.name} "
                            "likelihood has no closed-form marginal likelihood)")

    def objective_label(self, entry) -> str:
        return "marginal likelihood"

    def draws(self, entry, n: int) -> int:
        return 1  # the point estimate

    def run(self, entry, data, *, seed=0, steps=None, progress=True, inputs=None, checkpoint=None,
            client=None) -> Posterior:
        s = self.settings(entry)
        spec = common.spec_for(entry, data, inputs)
        model = entry.model(spec)
        partitions = common.partitions_for(entry, data, inputs, seed)
        guide = MAPGuide(spec, model) if spec.latent_sites() else EmptyGuide(spec)
        t0 = time.perf_counter()
        res = run_svi(model, guide, data.x_train, data.y_train, s.schedule(steps), seed=seed,
                      progress=progress, desc=f"{entry.name}:ml", checkpoint=checkpoint)
        return common.finish(entry, data, self.name, model, guide, res.params, res, spec=spec,
                      partitions=partitions, seed=seed, num=self.draws(entry, data.n_train),
                      densities=False, t0=t0, method_info=MLInfo())


ML = MLMethod()


__all__ = ["ML", "MLMethod", "MLSettings"]
