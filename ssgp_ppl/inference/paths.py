"""Multi-path inference: K runs of one method from dispersed starts, combined into one Posterior.

A multimodal posterior traps each run (a VI fit, a NUTS chain) in one mode. K paths start apart —
path 0 at the entry's own start, the others at the best of SCREEN_DRAWS prior draws by the log
joint with s integrated out (:func:`screened_starts`); NCVMP's paths fit Tan et al. 2016, §7's
candidate spectral sets, each to convergence — and are combined (Yao, Vehtari & Gelman 2022):

* ``stacking``: weights on the simplex maximising the leave-one-out log score of the mixture
  (:func:`ssgp_ppl.inference.stacking.stacking_weights`); each path's LOO predictive p(yᵢ | y₋ᵢ, path) is
  PSIS over the path's draws of the closed-form Gaussian p(yᵢ | y₋ᵢ, θ) with s integrated out
  (:func:`ssgp_ppl.model.predictive.loo_predictive`, O(n m²) per draw), θ left out by the ratios
  1 / p(yᵢ | y₋ᵢ, θ) (:func:`path_loo`): the same estimator for a VI run and a sampler's chain;
* ``posterior``: weights ∝ exp(−final loss) of each path (its ELBO: the paths' evidence bounds);
* ``best``: all weight on the path with the best LOO log score.

The combined Posterior is the weighted mixture of the paths' draws: path k contributes a number
of draws proportional to its weight (its draws cycled where it needs more than it has), so every
downstream quantity (predict, scores, DataTree, invariants) is the mixture's. Its
``info.paths`` (:class:`~ssgp_ppl.inference.fitinfo.PathsInfo`) carries the weights, each path's LOO score,
its rows with an unreliable k̂, its final objective (a chain: minus its mean log density) and
mean noise sd; the DataTree's posterior has a ``path`` coordinate along ``draw``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.util import log_density
from scipy.special import logsumexp

from ssgp_ppl.diagnostics.calibration import psislw
from ssgp_ppl.diagnostics.datatree import by_chain
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.fitinfo import PathsInfo
from ssgp_ppl.inference.stacking import COMBINE, stacking_weights
from ssgp_ppl.model.predictive import SiteRule, StackedRule, loo_predictive
from ssgp_ppl.posterior import Handoff, Posterior

MIXTURE_DRAWS = 1000  # draws of the combined posterior: weights resolved to 1/1000
SCREEN_DRAWS = 4096  # prior draws screened for the starts of a Gaussian entry's paths
PATH_SEED_STRIDE = 7919  # path k runs with seed + 7919 k


def path_seed(seed: int, k: int) -> int:
    """Path k's seed: far from ``seed + small offsets`` that a fit uses for its own draws, so that
    no two paths share a key."""
    return seed + PATH_SEED_STRIDE * k


def screened_starts(entry, data, count: int, *, seed: int = 0, draws: int = SCREEN_DRAWS,
                    type2: dict | None = None) -> list[dict]:
    """The ``count`` best of ``draws`` prior draws of the hyperparameters and frequencies, ranked
    by the log joint density with s integrated out (Gaussian likelihood): starts in regions of
    high posterior mass, far more dispersed than gradient steps from one start reach. Type-II
    sites stay at ``type2`` (else their initial values). Returns constrained site values."""
    spec = dataclasses.replace(entry.spec(data.n_features), nuisance="marginalized")
    model = entry.model(spec)
    if spec.learned_sites() and type2 is not None:
        model = handlers.substitute(model, data={k: jnp.asarray(type2[k])
                                                 for k in spec.learned_sites()})
    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    prior = screen_draws(model, x, list(spec.latent_sites()), draws, seed, y=y)
    lj = np.asarray(jax.jit(lambda sites: screen_log_joint(model, x, y, sites))(prior))
    lj = np.where(np.isfinite(lj), lj, -np.inf)
    best = np.argsort(-lj)[:count]
    return [{k: np.asarray(v[i]) for k, v in prior.items()} for i in best]


def screen_draws(model, x, names: list[str], draws: int, seed: int = 0, y=None) -> dict:
    """``draws`` prior draws of the latent sites ``names`` of ``model`` at the inputs ``x``
    (the observations ``y``, where given, only condition the hidden observed site), from the key
    the screening uses (``seed`` + 4099)."""
    hidden = handlers.block(model, hide_fn=lambda site: site.get("is_observed", False))
    return Predictive(hidden, num_samples=draws, return_sites=names)(
        jax.random.PRNGKey(seed + 4099), x, *(() if y is None else (y,)))


def screen_log_joint(model, x, y, sites: dict, batch: int = 64):
    """(draws,) log p(y, θ) of each draw of ``sites`` under ``model`` (s integrated out): the
    score the screening ranks starts by; pure, so that a caller jits or vmaps it over y."""
    return jax.lax.map(lambda d: log_density(model, (x, y), {}, d)[0], sites, batch_size=batch)


def dispersed_starts(entry, data, count: int, *, seed: int = 0,
                     inputs: Handoff) -> list[tuple]:
    """(entry, Handoff) of each of ``count`` paths: path 0 is the entry's own start (with the
    points handed over); the others start at :func:`screened_starts`."""
    out = [(entry, inputs)]
    if count < 2:
        return out
    if not entry.lik.conjugate:
        raise SSGPError(f"{entry.name}: multi-path fits need the Gaussian likelihood (their "
                        "starts and weights use its closed-form marginal and LOO predictive)")
    starts = screened_starts(entry, data, count - 1, seed=seed, type2=inputs.type2)
    return out + [(entry, dataclasses.replace(inputs, spectral_points=None, start=s))
                  for s in starts]


def loo_pointwise(post: Posterior, data) -> np.ndarray:
    """(S, n) log p(yᵢ | y₋ᵢ, θ_s): the closed-form LOO predictive of every training row given each
    of the path's draws of θ, σ_s, σ_n, with s integrated out (standardised units)."""
    sites = post.flat_sites
    if "frequencies" not in sites or "signal" not in sites or "noise" not in sites:
        raise SSGPError(f"{post.model}: stacking needs draws of the frequencies, signal and noise")
    x = jnp.asarray(data.x_train)
    y = jnp.asarray(data.y_train) - post.y_centre

    @jax.jit
    def run(freq, signal, noise):
        return jax.lax.map(lambda a: loo_predictive(x, y, *a)[2], (freq, signal, noise),
                           batch_size=8)

    return np.asarray(run(jnp.asarray(sites["frequencies"]), jnp.asarray(sites["signal"]),
                          jnp.asarray(sites["noise"])), np.float64)


class PathLOO(NamedTuple):
    """A path's PSIS-LOO: log p(yᵢ | y₋ᵢ) per training row (n,), standardised units, and the
    Pareto k̂ of each row's importance ratios (n,)."""

    elpd: np.ndarray
    pareto_k: np.ndarray


def path_loo(post: Posterior, data) -> PathLOO:
    """The leave-one-out log predictive density log p(yᵢ | y₋ᵢ) of each training row under the
    path's own draws, θ left out as well as s: PSIS (Vehtari et al. 2017) over the draws of the
    closed-form p(yᵢ | y₋ᵢ, θ_s) (:func:`loo_pointwise`) with the ratios of a non-factorised
    Gaussian model, p(θ | y₋ᵢ) / p(θ | y) ∝ 1 / p(yᵢ | y₋ᵢ, θ) (Bürkner, Gabry & Vehtari 2021).

    Every path is scored alike, a sampler's chain and a VI fit: its draws are the predictive that
    the mixture uses, so they are taken as they are (no p/q correction: the PSIS-LOO table of a
    single VI fit corrects q towards the posterior instead). The plain average of
    p(yᵢ | y₋ᵢ, θ_s) over the draws would leave yᵢ in θ's posterior: optimistic, and the more so
    the more the draws spread (a chain far more than a narrow q)."""
    import arviz_stats  # noqa: F401  (registers the .azstats accessor)
    import xarray as xr

    lp = loo_pointwise(post, data)  # (S, n)
    lp = np.where(np.isnan(lp), -np.inf, lp)
    ll = xr.DataArray(lp[None], dims=("chain", "draw", "row"))
    with warnings.catch_warnings():  # k̂ warnings: k̂ is returned to the caller
        warnings.simplefilter("ignore", UserWarning)
        log_w, k = psislw(ll)  # smooths the ratios 1 / p(yᵢ | ·)
    log_w = np.asarray(log_w.transpose("chain", "draw", "row"))[0]
    log_w = log_w - logsumexp(log_w, axis=0)
    return PathLOO(logsumexp(log_w + lp, axis=0), np.asarray(k))


def good_k(draws: int) -> float:
    """PSIS's reliability threshold for ``draws`` draws, min(1 − 1/log10 S, 0.7) (Vehtari et al.
    2024): rows whose k̂ exceeds it have an unreliable (typically optimistic) LOO estimate."""
    return float(min(1.0 - 1.0 / np.log10(draws), 0.7))


def loo_log_density(post: Posterior, data) -> np.ndarray:
    """(n,) log p(yᵢ | y₋ᵢ, path) (standardised units): :func:`path_loo`'s estimate."""
    return path_loo(post, data).elpd


def tail_loss(losses) -> float:
    """The final objective of a loss trace: the mean of its last 10% (finite ones; +inf for an
    empty trace or one without a finite value there)."""
    if losses is None or len(losses) == 0:
        return float("inf")
    tail = np.asarray(losses)[-max(1, len(losses) // 10):]
    return float(np.mean(tail[np.isfinite(tail)])) if np.isfinite(tail).any() else float("inf")


def final_loss(post: Posterior) -> float:
    """The path's final objective (:func:`tail_loss` of its losses; +inf without a trace)."""
    return tail_loss(post.losses)


OBJECTIVE_KINDS = {"loss": "final loss (mean of the last 10%: −ELBO for SVI, −bound for NCVMP)",
                   "log_density": "−mean log density of the chain's draws (the sampler's lp)"}


def final_objective(post: Posterior) -> tuple[float, str]:
    """(value, kind) of what plays the part of the path's final objective, lower is better: a fit
    with a loss trace its :func:`final_loss` (kind ``loss``); a sampler's chain, which has none,
    minus the mean log density of its draws (kind ``log_density``; the same lp as the reference's
    modes table). Kinds are not comparable with each other: the ELBO has q's entropy, lp not."""
    if post.losses is not None and len(post.losses):
        return final_loss(post), "loss"
    stats = post.sample_stats
    if stats is not None and "lp" in stats.data_vars:
        return -float(np.mean(np.asarray(stats["lp"]))), "log_density"
    if post.log_p is not None:
        return -float(np.mean(post.log_p)), "log_density"
    return float("inf"), "loss"


def weights_of(how: str, loo: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """Path weights (K,) from the (n, K) LOO log densities and the (K,) final losses."""
    if how == "stacking":
        return stacking_weights(loo).weights
    if how == "best":
        w = np.zeros(loo.shape[1])
        w[int(np.argmax(loo.sum(axis=0)))] = 1.0
        return w
    if how == "posterior":
        if not np.isfinite(losses).any():
            raise SSGPError("combine = 'posterior' needs each path's final objective (a loss "
                            "trace); this method has none")
        lw = -np.where(np.isfinite(losses), losses, np.inf)
        return np.exp(lw - logsumexp(lw))
    raise SSGPError(f"unknown combine {how!r}; known: {', '.join(COMBINE)}")


def allocate(weights: np.ndarray, total: int = MIXTURE_DRAWS) -> np.ndarray:
    """Integer draw counts (K,) summing to ``total`` proportional to ``weights`` (largest
    remainders)."""
    w = np.clip(np.nan_to_num(np.asarray(weights, np.float64)), 0.0, None)
    raw = w / w.sum() * total
    counts = np.floor(raw).astype(int)
    counts[np.argsort(-(raw - counts))[: total - counts.sum()]] += 1
    return counts


def combine(paths: list[Posterior], data, how: str, *, seconds: float | None = None) -> Posterior:
    """The K paths' mixture (see the module docstring) as one Posterior."""
    if not paths:
        raise SSGPError("combine needs at least one path")
    first = paths[0]
    scored = [path_loo(p, data) for p in paths]
    loo = np.stack([sc.elpd for sc in scored], axis=1)  # (n, K)
    losses = np.array([final_loss(p) for p in paths])
    objectives = [final_objective(p) for p in paths]
    draws = [len(next(iter(p.flat_sites.values()))) for p in paths]
    w = weights_of(how, loo, losses)
    counts = allocate(w)
    flats = [p.flat_sites for p in paths]
    # path k's draws cycled to its count, evenly spaced where it needs fewer than it has (a
    # chain's draws: not its first, autocorrelated ones)
    idx = [np.resize(np.arange(s), c) if c >= s else np.linspace(0, s - 1, c).round().astype(int)
           for s, c in ((len(next(iter(f.values()))), c) for f, c in zip(flats, counts,
                                                                          strict=True))]
    sites = {k: np.concatenate([f[k][i] for f, i in zip(flats, idx, strict=True)])
             for k in flats[0]}
    path_of_draw = np.concatenate([np.full(c, k) for k, c in enumerate(counts)])
    score = float(logsumexp(loo + np.log(np.maximum(w, 1e-300)), axis=1).sum())
    conv = [p.info.converged for p in paths if p.info.converged is not None]
    # the stop rule's reading of the path furthest from converged (largest upper bound)
    read = [p.info.reading for p in paths
            if p.info.reading is not None and p.info.reading.improvement is not None]
    worst = max(read, key=lambda r: r.improvement + 2 * (r.improvement_se or 0.0),
                default=first.info.reading)
    # how an unconverged fit stopped is told by its first unconverged path (NCVMP: budget or not)
    stopped = next((p.info for p in paths if p.info.converged is False), first.info)
    info = dataclasses.replace(
        first.info, converged=all(conv) if conv else None, reading=worst, method=stopped.method,
        fit_seconds=sum(p.info.fit_seconds for p in paths) if seconds is None else seconds,
        loo_seconds=sum(p.info.loo_seconds for p in paths),
        paths=PathsInfo(
            count=len(paths), combine=how, weights=tuple(float(v) for v in w),
            loo=tuple(float(v) for v in loo.sum(axis=0)),
            objective=tuple(float(v) for v, _ in objectives),
            objective_kind=tuple(kind for _, kind in objectives),
            pareto_k_bad=tuple(int(np.sum(sc.pareto_k > good_k(s))) for sc, s in
                               zip(scored, draws, strict=True)),
            noise=tuple(float(np.mean(p.flat_sites["noise"])) if "noise" in p.flat_sites
                        else None for p in paths),
            stacked_loo=score))
    if all(isinstance(p.rule, SiteRule) for p in paths):  # one rule over the mixture's draws
        rule_sites = {k: np.concatenate([np.asarray(p.rule.sites[k])[i] for p, i in
                                         zip(paths, idx, strict=True)]) for k in first.rule.sites}
        rule = dataclasses.replace(first.rule, sites={k: jnp.asarray(v) for k, v in
                                                      rule_sites.items()})
    else:  # closed-form predictives (NCVMP): their mixture
        rule = StackedRule(tuple(p.rule for p in paths), tuple(int(c) for c in counts))
    return Posterior(entry=first.entry, method=first.method, dataset=first.dataset,
                     sites=by_chain(sites, 1), rule=rule, x_scaler=first.x_scaler,
                     y_scaler=first.y_scaler, info=info, losses=first.losses,
                     y_centre=first.y_centre, handoff=first.handoff, path_of_draw=path_of_draw,
                     params=None)


def split_chains(post: Posterior) -> list[Posterior]:
    """Each chain of a sampler's posterior as a path of its own (to stack chains that sit in
    different modes, Yao, Vehtari & Gelman 2022); the posterior itself when it has one chain or
    a closed-form rule."""
    if not isinstance(post.rule, SiteRule) or post.chains < 2:
        return [post]
    chains = post.chains
    out = []
    for c in range(chains):
        rule_sites = {k: jnp.reshape(v, (chains, -1) + tuple(v.shape[1:]))[c]
                      for k, v in post.rule.sites.items()}
        stats = None if post.sample_stats is None else post.sample_stats.isel(chain=[c])
        out.append(post.replace(sites={k: v[c:c + 1] for k, v in post.sites.items()},
                                rule=dataclasses.replace(post.rule, sites=rule_sites),
                                sample_stats=stats, log_p=None, log_q=None, test=None,
                                metrics=None, datatree=None))
    return out


def path_checkpoint(checkpoint, k: int):
    """Path k's own checkpoint file next to ``checkpoint`` (its fingerprint names the path)."""
    if checkpoint is None:
        return None
    p = checkpoint.path
    path = p.with_name(f"{p.stem}-path{k}{p.suffix}")
    fp = None if checkpoint.fingerprint is None else {**checkpoint.fingerprint, "path": k}
    return checkpoint._replace(path=path, fingerprint=fp,
                               resume=checkpoint.resume and path.exists())


def run(method, entry, data, *, paths: int, how: str, seed: int = 0, steps=None,
        progress: bool = True, inputs: Handoff | None = None, checkpoint=None,
        client=None) -> Posterior:
    """``paths`` runs of ``method`` from the starts of its ``path_starts`` (default
    :func:`dispersed_starts`), combined by ``how``. With a checkpoint each path saves its own
    (``<stem>-path<k>``); a path interrupted by Ctrl-C ends the run with the paths so far,
    marked interrupted."""
    t0 = time.perf_counter()
    starts = method.path_starts(entry, data, paths, seed=seed, inputs=inputs or Handoff())
    runs = method.run_paths(starts, data, seed=seed, steps=steps, progress=progress,
                            checkpoint=checkpoint, client=client)
    post = combine(runs, data, how, seconds=time.perf_counter() - t0)
    if runs[-1].info.interrupted:
        post = post.replace(info=dataclasses.replace(post.info, interrupted=True,
                                                     stop_signal=runs[-1].info.stop_signal,
                                                     steps=runs[-1].info.steps))
    return post.replace(path_posteriors=tuple(runs))


__all__ = ["MIXTURE_DRAWS", "OBJECTIVE_KINDS", "SCREEN_DRAWS", "PathLOO", "combine",
           "dispersed_starts", "path_checkpoint", "path_loo", "path_seed", "run",
           "screened_starts", "split_chains", "tail_loss", "weights_of"]
