"""β selection on a validation split over the grid [n, n/2, n/4, …, 0.01] (Wei et al. 2021, §6.1).

:func:`select_beta` splits the training rows into an inner training part and a validation part
(8/75 of them: Wei et al. 2021's 67/8/25 protocol, with our test split as its 25), fits the entry once for
every β of the grid — all β at once, ``vmap`` over the SVI states inside one jitted scan — scores
each fit on the validation rows (mean NLL; MSE for ``dlm_square``, the loss it minimises), and
returns the grid, the scores and the chosen β. The CLI's ``fit --select-beta`` then refits on the
whole training split with that β.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import SVI

from ssgp_ppl.data.datasets import Dataset
from ssgp_ppl.diagnostics.metrics import likelihood_metrics
from ssgp_ppl.entry import CatalogEntry
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import methods
from ssgp_ppl.inference.methods.svi import SVIMethod, guide_of
from ssgp_ppl.inference.objectives import make_objective
from ssgp_ppl.inference.runners import batch_sampler, guide_draws, optimizer, site_values
from ssgp_ppl.model.predictive import predict_draws

VALIDATION_FRACTION = 8 / 75


def beta_grid(n: int, low: float = 0.01) -> list[float]:
    """[n, n/2, n/4, …] down to the first value ≤ ``low``, which is replaced by ``low``."""
    if n < 1:
        raise SSGPError(f"the β grid needs n >= 1, got {n}")
    grid = [float(n)]
    while grid[-1] / 2 > low:
        grid.append(grid[-1] / 2)
    return grid + [low]


def validation_split(data: Dataset, fraction: float = VALIDATION_FRACTION, seed: int = 0
                     ) -> Dataset:
    """The training split cut in two: a Dataset whose training rows are the inner part and whose
    test rows are the validation part (scalers stay those of the whole training split)."""
    n = data.n_train
    n_val = max(1, round(fraction * n))
    if n - n_val < 2:
        raise SSGPError(f"{data.name}: {n} training rows are too few for a validation split")
    perm = np.random.default_rng(seed + 101).permutation(n)
    val, tr = perm[:n_val], perm[n_val:]
    inner = data._replace(x_train=data.x_train[tr], y_train=data.y_train[tr],
                          x_test=data.x_train[val], y_test=data.y_train[val])
    return inner


class BetaSelection(NamedTuple):
    """What `ssgp_ppl.select_beta` chose, and from which scores (Wei et al. 2021, §6.1).

    Attributes
    ----------
    grid
        The β values tried.
    scores
        One validation score per β: the mean negative log predictive density, or the mean
        squared error for the square-loss DLM (``dlm_square``).
    criterion
        ``"nll"`` or ``"mse"``: which score.
    beta
        The β with the lowest score.
    n_inner
        The inner training rows each β was fitted on.
    n_validation
        The validation rows it was scored on.
    seconds
        The time all the fits took.
    """

    grid: list[float]
    scores: list[float]  # validation mean NLL (or MSE for dlm_square), one per β
    criterion: str  # "nll" | "mse"
    beta: float  # the β with the lowest score
    n_inner: int
    n_validation: int
    seconds: float


def select_beta(entry: CatalogEntry, data: Dataset, grid: list[float] | None = None, *,
                seed: int = 0, steps: int | None = None, fraction: float = VALIDATION_FRACTION,
                budget: float | None = None) -> BetaSelection:
    """Fit ``entry`` for every β of ``grid`` (default :func:`beta_grid` of the inner n) on the inner
    training rows, score on the validation rows, pick the best (Wei et al. 2021, §6.1). An entry
    with ``m = "auto"`` is sized to ``data`` and ``budget`` seconds first
    (:func:`ssgp_ppl.inference.sizing.resolve`)."""
    from ssgp_ppl.inference import sizing

    entry = sizing.resolve(entry, data, budget=budget, seed=seed, steps=steps)
    own = methods.get(entry.methods[0])
    if not isinstance(own, SVIMethod):
        raise SSGPError(f"{entry.name}: β selection needs an entry fitted by SVI (its own method is "
                        f"{own.name})")
    cfg = own.settings(entry)
    kind = cfg.objective
    if kind not in ("beta_elbo", "dlm_log", "dlm_square"):
        raise SSGPError(f"{entry.name}: β selection needs objective = beta_elbo, dlm_log or "
                        f"dlm_square (inference.svi.objective is '{kind}')")
    t0 = time.perf_counter()
    inner = validation_split(data, fraction, seed)
    grid = beta_grid(inner.n_train) if grid is None else [float(b) for b in grid]
    if not grid or min(grid) < 0:
        raise SSGPError("the β grid must hold values >= 0")
    spec = entry.spec(data.n_features)
    model = entry.model(spec)
    guide = guide_of(entry, spec, model, cfg)
    loss = make_objective(kind, beta=None, particles=cfg.num_particles,  # β with each update
                          gradient=cfg.gradient, samples=cfg.mc_samples, guide=guide)
    n_steps = cfg.steps if steps is None else steps
    svi = SVI(model, guide, optimizer(cfg.lr, cfg.lr_halflife), loss)
    x, y = jnp.asarray(inner.x_train), jnp.asarray(inner.y_train)
    batch = cfg.batch_size or None
    draw, aux = batch_sampler(inner.n_train, batch)
    key_init, key_run = jax.random.split(jax.random.PRNGKey(seed))
    xb, yb, kw = draw(key_run, x, y, aux)
    state = svi.init(key_init, xb, yb, **kw)
    betas = jnp.asarray(grid, x.dtype)

    @jax.jit
    def run(state, betas, key):
        def one(beta):
            def body(carry, _):
                st, k = carry
                k, sub = jax.random.split(k)
                xb, yb, kw = draw(sub, x, y, aux)
                st, value = svi.update(st, xb, yb, beta=beta, **kw)
                return (st, k), value

            (st, _), values = jax.lax.scan(body, (state, key), None, length=n_steps)
            return svi.get_params(st), values

        return jax.vmap(one)(betas)

    params, values = run(state, betas, key_run)
    if not bool(jnp.all(jnp.isfinite(values[:, -1]))):
        bad = [b for b, v in zip(grid, np.asarray(values[:, -1]), strict=True) if not np.isfinite(v)]
        raise SSGPError(f"{entry.name}: the objective became NaN/inf for β = {bad}")
    pred = entry.config["predictive"]
    lik = spec.lik
    latent = spec.latent_sites()

    @jax.jit
    def moments(p):  # per-draw f moments at the validation inputs, compiled once for all β
        draws = guide_draws(guide, p, x, y, num_samples=pred["samples"], seed=seed + 1)
        draws = {k: v for k, v in draws.items() if k in latent}
        sites = site_values(model, p, draws, x[:1])
        mean_f, var_f = _moments(guide, p, draws, sites, inner, pred)
        return mean_f, var_f, sites.get("noise")

    scores = []
    y_val = np.asarray(inner.y_test)
    for i in range(len(grid)):
        mean_f, var_f, noise = moments(jax.tree.map(lambda a, i=i: a[i], params))
        if kind == "dlm_square":
            yhat = np.asarray(lik.mean(mean_f, var_f)).mean(0)
            scores.append(float(np.mean((yhat - y_val) ** 2)))
        else:
            scores.append(likelihood_metrics(lik, y_val, None, np.asarray(mean_f),
                                             np.asarray(var_f), noise)["nll"])
    best = int(np.nanargmin(scores))
    return BetaSelection(grid, scores, "mse" if kind == "dlm_square" else "nll", grid[best],
                         inner.n_train, inner.n_test, time.perf_counter() - t0)


def _moments(guide, params, draws, sites, data, pred):
    """Per-draw (mean_f, var_f) at the validation inputs under the degenerate rule (exact in s
    where the entry integrates the nuisance)."""
    if pred["rule"] != "degenerate":
        raise SSGPError("β selection scores the degenerate (γ = 1) predictive the objectives train; "
                        f"this entry's predictive.rule is '{pred['rule']}'")
    use = dict(sites)
    if pred["integrate_nuisance"] and guide.gaussian_nuisance:
        loc, tril = jax.vmap(lambda d: guide.nuisance_conditional(params, d))(draws)
        use.update(nuisance=loc, nuisance_tril=tril)
    x_val = jnp.asarray(data.x_test)
    return predict_draws("degenerate", use, None, None, x_val)


def record(sel: BetaSelection) -> dict:
    """The ``beta_selection.json`` record."""
    return {"grid": sel.grid, "scores": [None if math.isnan(s) else s for s in sel.scores],
            "criterion": sel.criterion, "beta": sel.beta, "n_inner": sel.n_inner,
            "n_validation": sel.n_validation, "seconds": sel.seconds}


__all__ = ["VALIDATION_FRACTION", "BetaSelection", "beta_grid", "record", "select_beta",
           "validation_split"]
