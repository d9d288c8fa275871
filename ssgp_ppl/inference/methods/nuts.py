"""``nuts``: the same model with priors, non-centred, several chains (the MCMC reference)."""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from arviz_base import from_numpyro
from numpyro import handlers

from ssgp_ppl.diagnostics.datatree import DIMS
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.fitinfo import FitInfo, NUTSInfo
from ssgp_ppl.inference.methods import common
from ssgp_ppl.inference.methods.base import PosteriorSampler, Settings, setting
from ssgp_ppl.inference.runners import reparam_for_nuts, run_nuts, site_values
from ssgp_ppl.model.guides import nuts_init
from ssgp_ppl.posterior import Handoff, Posterior


@dataclasses.dataclass(frozen=True)
class NUTSSettings(Settings):
    warmup: int = setting(int, 500, "warm-up iterations per chain", low=1)
    samples: int = setting(int, 500, "kept draws per chain", low=1)
    chains: int = setting(int, 4, "number of chains", low=1)
    target_accept: float = setting((int, float), 0.9, "target acceptance", low=0, high=1,
                                   open_low=True)
    max_tree_depth: int = setting(int, 10, "NUTS maximum tree depth", low=1)


class NUTSMethod(PosteriorSampler):
    name = "nuts"
    budget = {"samples": "samples", "chains": "chains"}
    Settings = NUTSSettings
    description = "NUTS chains on the model with priors (empirical Bayes on type-II sites)"
    accepts = ("spectral_points",)

    def objective_label(self, entry) -> str:
        return "posterior (NUTS)"

    def run(self, entry, data, *, seed=0, steps=None, progress=True, inputs=None, checkpoint=None,
            client=None) -> Posterior:
        s = self.settings(entry)
        spec = common.spec_for(entry, data, inputs)
        model = entry.model(spec)
        learned = spec.learned_sites()
        type2 = None if inputs is None else inputs.type2
        if learned and not spec.latent_sites():
            raise SSGPError(f"{entry.name}: NUTS needs priors on {', '.join(learned)}")
        if learned:  # empirical Bayes: condition on the type-II estimates
            if type2 is None:
                raise SSGPError(f"{entry.name}: NUTS conditions on type-II estimates of "
                                f"{', '.join(learned)}; pass them (Handoff.type2) from the entry's "
                                "own fit")
            model = handlers.substitute(model, data={k: jnp.asarray(type2[k]) for k in learned})
        reparam = ("nuisance",) + (("frequencies",) if spec.density.loc_scale else ())
        # f (n values per draw) is not collected: NUTS would keep chains × draws × n of them
        model = handlers.block(model, hide=["f"])
        model = reparam_for_nuts(model, [r for r in reparam if r in spec.latent_sites()])
        x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
        t0 = time.perf_counter()
        mcmc = run_nuts(model, x, y, warmup=s.warmup, samples=s.samples if steps is None else steps,
                        chains=s.chains, seed=seed, target_accept=s.target_accept,
                        max_tree_depth=s.max_tree_depth, progress=progress,
                        init_strategy=nuts_init)
        sites = site_values(model, {}, mcmc.get_samples(), x[:1])
        jax.block_until_ready(sites)
        fit_seconds = time.perf_counter() - t0
        partitions = common.partitions_for(entry, data, inputs, seed)
        info = FitInfo(fit_seconds=fit_seconds, partitions=None if partitions is None else
                       partitions.count,
                       method=NUTSInfo(divergences=int(np.asarray(
                           mcmc.get_extra_fields()["diverging"]).sum())))
        stats = from_numpyro(mcmc, dims=DIMS, log_likelihood=False)["sample_stats"].to_dataset()
        kept = None if not learned else {k: np.asarray(type2[k]) for k in learned}
        return Posterior(entry=entry, method=self.name, dataset=data.name,
                         sites=common.by_chain(sites, s.chains),
                         rule=common.site_rule(entry, sites, data, partitions),
                         x_scaler=data.x_scaler, y_scaler=data.y_scaler, info=info,
                         handoff=Handoff(type2=kept, partitions=partitions), sample_stats=stats)


NUTS = NUTSMethod()


__all__ = ["NUTS", "NUTSMethod", "NUTSSettings"]
