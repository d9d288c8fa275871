"""``ncvmp``: Tan et al. 2016's Algorithm 2 (or 1) with the closed-form predictive of §5."""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.util import log_density

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import ncvmp
from ssgp_ppl.inference.fitinfo import FitInfo, NCVMPInfo
from ssgp_ppl.inference.methods import common
from ssgp_ppl.inference.methods.base import Method, Settings, setting
from ssgp_ppl.inference.runners import site_values
from ssgp_ppl.inference.stacking import COMBINE
from ssgp_ppl.model.predictive import NCVMPRule
from ssgp_ppl.posterior import Handoff, Posterior
from ssgp_ppl.runtime import status


@dataclasses.dataclass(frozen=True)
class NCVMPMethodSettings(Settings):
    algorithm: int = setting(int, 2, "Tan et al. 2016, Algorithm 1 (plain NCVMP) or 2 (adaptive "
                             "steps)", choices=(1, 2))
    rho: float = setting((int, float), 1.5, "Algorithm 2: step-size growth factor ρ", low=1,
                         open_low=True)
    max_iter: int = setting(int, 500, "maximum iterations (§4); a float32 fit, finished in "
                           "float64, has this budget in each precision", low=1)
    tol: float = setting((int, float), 1e-6, "relative increase of the bound to stop (§4)", low=0)
    restarts: int = setting(int, 10, "spectral sets tried at the start (§7: ten)", low=1)
    restart_iters: int = setting(int, 2, "iterations per tried set before keeping the best (§7)",
                                 low=1)
    paths: int = setting(int, 1, "fits on this many of the candidate spectral sets, each run to "
                         "convergence and combined (multi-path VI) instead of keeping the best", low=1)
    combine: str = setting(str, "stacking", "how the paths combine: stacking (of their LOO "
                           "predictives) | posterior (by bound) | best", choices=COMBINE)

    def algorithm_settings(self, steps: int | None = None) -> ncvmp.NCVMPSettings:
        """The solver's settings (``steps`` overrides max_iter)."""
        return ncvmp.NCVMPSettings(algorithm=self.algorithm, rho=self.rho,
                                   max_iter=self.max_iter if steps is None else steps, tol=self.tol,
                                   restarts=self.restarts, restart_iters=self.restart_iters)


def algorithm_settings(entry, steps: int | None = None) -> ncvmp.NCVMPSettings:
    """The entry's ``[inference.ncvmp]`` as the solver's settings (``steps`` overrides max_iter)."""
    return NCVMPMethodSettings.of(entry, "ncvmp").algorithm_settings(steps)


def check_tan(entry, src: str, name: str) -> None:
    """Tan et al. 2016's methods need its model and the Gaussian likelihood."""
    if not entry.lik.conjugate:
        raise SSGPError(f"{src}: inference.methods: {name} is Gaussian-only (the {entry.lik.name} "
                        "likelihood has no NCVMP updates)")
    try:
        ncvmp.tan_prior(entry.structure)
    except SSGPError as e:
        raise SSGPError(f"{src}: {e}") from None


def spectral_candidates(entry, spec, restarts: int):
    """§7's candidate spectral sets (R, m, d): the entry's own points first, then fresh draws."""
    key = jax.random.PRNGKey(entry.config["model"]["spectral_seed"])
    extra = ncvmp.spectral_sets(jax.random.fold_in(key, 1), restarts - 1, spec.m, spec.d,
                                spec.spectral_points.dtype)
    return jnp.concatenate([spec.spectral_points[None], extra])


class NCVMPMethod(Method):
    name = "ncvmp"
    budget = {"steps": "max_iter"}
    Settings = NCVMPMethodSettings
    description = "Tan et al. 2016's NCVMP (Algorithm 2) with the §5 closed-form predictive"
    provides = ("spectral_points",)
    accepts = ("spectral_points",)

    def check(self, entry, src: str) -> None:
        check_tan(entry, src, self.name)

    def objective_label(self, entry) -> str:
        return "elbo (NCVMP)"

    def paths(self, entry) -> tuple[int, str]:
        s = self.settings(entry)
        return s.paths, s.combine

    def draws(self, entry, n: int) -> int:
        return common.loo_draws(entry, n) or super().draws(entry, n)

    def path_starts(self, entry, data, count, *, seed=0, inputs):
        """Path k fits the k-th of §7's candidate spectral sets (the entry's own first)."""
        spec = common.spec_for(entry, data, None)
        sets = spectral_candidates(entry, spec, max(count, 1))
        return [(entry, dataclasses.replace(inputs, spectral_points=np.asarray(p)))
                for p in sets[:count]]

    def run(self, entry, data, *, seed=0, steps=None, progress=True, inputs=None, checkpoint=None,
            client=None) -> Posterior:
        s = self.settings(entry)
        spec = common.spec_for(entry, data, inputs)
        prior = ncvmp.tan_prior(spec)
        settings = s.algorithm_settings(steps)
        x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
        ncvmp.check_data(x, y, spec.m)
        n = data.n_train
        t0 = time.perf_counter()
        given = inputs is not None and inputs.spectral_points is not None
        sets = spec.spectral_points[None] if given else spectral_candidates(entry, spec, s.restarts)
        ybar = jnp.mean(y)
        finish = x.dtype != jnp.float64  # float32 stops short of the tolerance (continue_x64)
        what = (f"{entry.name}: NCVMP ({settings.algorithm}) on {len(sets)} spectral set"
                f"{'s' if len(sets) > 1 else ''}, at most {settings.max_iter} iterations"
                + (f" in float32, then at most {settings.max_iter} in float64" if finish else ""))
        with status.step(what, progress):
            res = ncvmp.fit_ncvmp(x, y - ybar, sets, prior, settings)
            if finish:
                res = ncvmp.continue_x64(x, y - ybar, res, prior, settings)
            jax.block_until_ready(res)
        fit_seconds = time.perf_counter() - t0
        t_loo = time.perf_counter()  # draws of q and their densities: LOO bookkeeping
        num = self.draws(entry, n)
        small = common.loo_draws(entry, n) is not None  # densities for PSIS-LOO
        draws = ncvmp.sample_q(jax.random.PRNGKey(seed + 1), res.state, n, spec.m, prior, num)
        model = entry.model(dataclasses.replace(spec, spectral_points=res.points))
        sites = site_values(model, {}, draws, x[:1])  # adds the deterministic frequencies
        yc = y - ybar
        log_p = jax.jit(lambda v: jax.lax.map(lambda d: log_density(model, (x, yc), {}, d)[0], v))(
            {k: sites[k] for k in draws}) if small else None
        log_q = ncvmp.log_q(draws, res.state, n, spec.m, prior)
        jax.block_until_ready(log_q)
        bounds = np.asarray(res.bounds)
        info = FitInfo(fit_seconds=fit_seconds, loo_seconds=time.perf_counter() - t_loo,
                       steps=int(res.iterations), converged=bool(res.converged),
                       method=NCVMPInfo(algorithm=settings.algorithm, bound=float(res.bound),
                                        budget_reached=bool(res.budget_reached)))
        rule = NCVMPRule(res.state, np.asarray(res.points), n, prior, float(ybar))
        return Posterior(entry=entry, method=self.name, dataset=data.name,
                         sites=common.by_chain(sites, 1), rule=rule, x_scaler=data.x_scaler,
                         y_scaler=data.y_scaler, info=info,
                         log_p=None if log_p is None else np.asarray(log_p)[None],
                         log_q=np.asarray(log_q)[None], losses=-bounds[np.isfinite(bounds)],
                         y_centre=float(ybar),
                         handoff=Handoff(spectral_points=np.asarray(res.points)))


NCVMP = NCVMPMethod()


__all__ = ["NCVMP", "NCVMPMethod", "NCVMPMethodSettings", "algorithm_settings", "check_tan",
           "spectral_candidates"]
