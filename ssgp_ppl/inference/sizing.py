"""The number of frequencies m sized to the data and a time budget (``m = "auto"`` in an entry).

An entry whose ``[model] m = "auto"`` is resolved against the training rows before it is fitted
(:func:`resolve`; :func:`ssgp_ppl.fit`, ``ssgp-ppl fit`` and ``compare`` call it). The rule:

1. **Affordable**: the candidates of :data:`LADDER` whose fit fits ``budget`` seconds by
   :func:`fit_seconds` (every step of the step budget, each costing
   :data:`STEP_OVERHEAD` + rows per step × (2m)² / :data:`RATE`, the constants measured on the
   peers benchmark's 14 sets) and whose memory estimate fits the machine
   (:func:`ssgp_ppl.runtime.resources.estimate`).
2. **Pilot**: on at most :data:`PILOT_ROWS` training rows, a type-II fit of the fixed-frequency
   SSGP (Lázaro-Gredilla et al. 2010, "SSGP fixed"; frequencies s_i ⊙ λ / 2π from the entry's
   spectral density, Tan et al. 2016, eq. 4) at each affordable m, scored by its closed-form
   leave-one-out log predictive density per row (Rasmussen & Williams 2006, eq. 5.12).
3. **Choice**: the smallest m whose score is within :data:`TOLERANCE` nats per row of the best.

More features approximate the kernel better but give the hyperparameters more room to fit the
training rows: the held-out score rises with m and then falls or flattens, at an m that depends
on the data (on the peers sets: pendulum keeps improving to m = 200, yacht and Auto-MPG peak at
m = 100), which no rule from n and d alone reproduces.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.example_libraries.optimizers import adam

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference.fitinfo import Sizing

LADDER = (10, 25, 50, 100, 200, 400)  # the m a pilot scores
DEFAULT_BUDGET = 600.0  # seconds for the fit when none is given (its every step counted)
PILOT_ROWS = 1000  # training rows the pilot fits and scores (a random subset above)
PILOT_STEPS = 500  # Adam steps of each pilot fit
PILOT_LR = 0.05
TOLERANCE = 0.01  # nats per row: a smaller m this close to the best score is chosen
# Seconds per step ≈ STEP_OVERHEAD + rows × (2m)² / RATE, fitted to the peers benchmark's steps
# on one thread: 0.8-1.4 ms at m = 50 on about 300 rows, 16 ms on kin8nm's 7,373 and 86-88 ms on
# kin40k's and protein's 36,000-41,000 rows (the collapsed entries: 4e9 terms a second). Not an
# upper bound: the full-rank guide's steps, whose cost grows with (m d)², took up to 1.6× it
# (the results page compares every auto-sized fit's steps with it).
RATE = 3e9
STEP_OVERHEAD = 1e-3
AUTO_METHODS = ("svi", "ml")  # the methods whose cost the rule knows (steps × the step above)


class SizingError(SSGPError):
    """No m of the ladder fits the budget and the memory: the message names the file and key;
    ``reason`` is the same without them, ``excluded`` each m with why it was left out."""

    def __init__(self, src: str, reason: str, excluded: dict[int, str]):
        super().__init__(f"{src}: 'auto': {reason}")
        self.reason, self.excluded = reason, dict(excluded)


def rows_per_step(entry, n: int, method: str | None = None) -> int:
    """The training rows one step of ``method`` (default: the entry's own) touches: a minibatch,
    the sampled partitions (about n/p rows each), or all n (always for a method without
    ``row_batches``: a type-II fit steps over every row)."""
    from ssgp_ppl.inference import methods

    cfg = entry.config
    pc = cfg["partitions"]
    rows = n
    if not methods.get(method or entry.methods[0]).row_batches:
        return n
    if pc["per_step"] > 0:
        from ssgp_ppl.inference.partitions import auto_count

        p = pc["count"] or auto_count(n)
        rows = min(pc["per_step"], p) * math.ceil(n / p)
    batch = cfg["inference"][method or entry.methods[0]].get("batch_size", 0)
    return min(rows, batch) if batch else rows


def fit_seconds(entry, n: int, m: int, *, steps: int | None = None,
                method: str | None = None) -> float:
    """An estimate of the fit's seconds at m by ``method`` (default: the entry's own):
    every step of its budget (``steps``, default the entry's; × paths), each
    :data:`STEP_OVERHEAD` + rows per step × (2m)² / :data:`RATE`."""
    st = entry.config["inference"][method or entry.methods[0]]
    total = (st["steps"] if steps is None else steps) * st.get("paths", 1)
    return total * (STEP_OVERHEAD + rows_per_step(entry, n, method) * (2 * m) ** 2 / RATE)


def _unpack(params, d: int):
    """(λ, σ_s, σ_n) of the pilot's parameters (log λ (d,), log σ_s, log σ_n)."""
    return jnp.exp(params[:d]), jnp.exp(params[d]), jnp.exp(params[d + 1])


def _features(params, x, points):
    from ssgp_ppl.model import spectral

    lam = _unpack(params, x.shape[1])[0]
    return spectral.features(x, spectral.frequencies_from_spectral_points(points, lam))


def _dual_factor(params, x, points):
    """The Cholesky factor of K = σ_s²/m ΦΦᵀ + σ_n² I (n × n), with the jitter escalation of
    :func:`ssgp_ppl.model.linalg.cholesky` (as the 2m × 2m form's)."""
    from ssgp_ppl.model.linalg import cholesky

    n, m = x.shape[0], points.shape[0]
    _, signal, noise = _unpack(params, x.shape[1])
    phi = _features(params, x, points)
    k = (signal**2 / m) * phi @ phi.T + noise**2 * jnp.eye(n, dtype=phi.dtype)
    return cholesky(k), True


def pilot_objective(params, x, y, points, dual: bool = False):
    """−log p(y | λ, σ_s, σ_n) / n of the fixed-frequency SSGP with s integrated out (Lázaro-
    Gredilla et al. 2010, eq. 8): the 2m × 2m form, or the n × n form with ``dual`` (cheaper
    where n < 2m). ``params``: log λ (d,), log σ_s, log σ_n; ``points``: (m, d) standard points."""
    from ssgp_ppl.model.ssgp import marginal_log_likelihood

    n = x.shape[0]
    if dual:
        chol = _dual_factor(params, x, points)
        alpha = jax.scipy.linalg.cho_solve(chol, y)
        return (0.5 * y @ alpha + jnp.sum(jnp.log(jnp.diagonal(chol[0])))) / n + \
            0.5 * jnp.log(2 * jnp.pi)
    _, signal, noise = _unpack(params, x.shape[1])
    return -marginal_log_likelihood(_features(params, x, points), y, signal, noise) / n


def pilot_loo(params, x, y, points, dual: bool = False):
    """The leave-one-out log density log p(yᵢ | y₋ᵢ) of every row (n,) under the same model
    (Rasmussen & Williams 2006, eq. 5.12; the 2m × 2m form is
    :func:`ssgp_ppl.model.predictive.loo_predictive`)."""
    from ssgp_ppl.model.predictive import loo_predictive

    if dual:
        chol = _dual_factor(params, x, points)
        kinv = jax.scipy.linalg.cho_solve(chol, jnp.eye(x.shape[0], dtype=y.dtype))
        alpha, diag = kinv @ y, jnp.diagonal(kinv)
        return -0.5 * (jnp.log(2 * jnp.pi / diag) + alpha**2 / diag)
    lam, signal, noise = _unpack(params, x.shape[1])
    from ssgp_ppl.model import spectral

    freq = spectral.frequencies_from_spectral_points(points, lam)
    return loo_predictive(x, y, freq, signal, noise)[2]


@jax.jit
def _pilot_fit(x, y, points, start):
    """:data:`PILOT_STEPS` Adam steps on :func:`pilot_objective` from ``start``; returns the end
    point and its mean :func:`pilot_loo` (the n × n forms where n < 2m); −inf where the fit
    diverged."""
    dual = x.shape[0] < 2 * points.shape[0]
    init, update, get_params = adam(PILOT_LR)

    def step(state, i):
        grad = jax.grad(pilot_objective)(get_params(state), x, y, points, dual)
        return update(i, grad, state), None

    state, _ = jax.lax.scan(step, init(start), jnp.arange(PILOT_STEPS))
    params = get_params(state)
    score = jnp.mean(pilot_loo(params, x, y, points, dual))
    return params, jnp.where(jnp.all(jnp.isfinite(params)) & jnp.isfinite(score), score, -jnp.inf)




def pilot_scores(entry, x, y, ms, *, seed: int = 0) -> tuple[dict[int, float], int]:
    """The leave-one-out log density per row of the fixed-frequency type-II SSGP at each m of
    ``ms`` on at most :data:`PILOT_ROWS` rows of (x, y) (the model's scaled inputs and targets; y
    is centred here), each fit from the same
    start (one started where a smaller m's ended stays in its high-noise optimum). Returns
    ({m: score}, rows used)."""
    from ssgp_ppl.model import densities

    x, y = np.asarray(x), np.asarray(y, float)
    if len(x) > PILOT_ROWS:
        idx = np.sort(np.random.default_rng(seed).choice(len(x), PILOT_ROWS, replace=False))
        x, y = x[idx], y[idx]
    n, d = x.shape
    dtype = jnp.result_type(float)
    xj, yj = jnp.asarray(x, dtype), jnp.asarray(y - y.mean(), dtype)
    mc = entry.config["model"]
    density = densities.get(mc["spectral_density"])
    key = jax.random.PRNGKey(mc["spectral_seed"])
    start = jnp.concatenate([jnp.zeros(d), jnp.log(jnp.asarray([1.0, 0.3]))]).astype(dtype)
    scores = {}
    for m in ms:
        points = density.standard_points(key, m, d, dtype)
        score = _pilot_fit(xj, yj, points, start)[1]
        scores[m] = float(score) if np.isfinite(score) else -math.inf
    return scores, n


def resolve(entry, data, *, budget: float | None = None, seed: int = 0, steps: int | None = None,
            method: str | None = None, progress: bool = False):
    """``entry`` with ``m = "auto"`` replaced by the m the rule above picks for ``data``'s training
    rows within ``budget`` seconds (default :data:`DEFAULT_BUDGET`) of a fit by ``method`` of
    ``steps`` steps (default: the method's; a method other than svi or ml, or none: the entry's
    own method at its own steps), its :class:`Sizing` in
    ``entry.sizing``; an entry with a number for m is returned as it is. The budget is what m is
    sized to, not a limit: the fit itself runs to its stop rule or step budget.

    Raises
    ------
    SSGPError
        When the budget is not a positive number, the entry's likelihood or method is one the rule
        cannot size, or no candidate fits the budget or the machine's memory.
    """
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float)
                               or not math.isfinite(budget) or budget <= 0):
        raise SSGPError(f"budget must be a positive number of seconds, got {budget!r}")
    if not entry.m_auto:
        return entry
    src = f"{entry.path}: model.m"
    if not entry.lik.conjugate:
        raise SSGPError(f"{src}: 'auto' is scored by the Gaussian likelihood's closed-form "
                        f"leave-one-out predictive; give m a number for the {entry.lik.name} "
                        "likelihood")
    if method is None:
        method = entry.methods[0]
    elif method not in AUTO_METHODS:  # a sampler, NCVMP: sized as the entry's own fit would be
        method, steps = entry.methods[0], None
    if method not in AUTO_METHODS:
        raise SSGPError(f"{src}: 'auto' sizes entries fitted by {' or '.join(AUTO_METHODS)}; give "
                        f"m a number for {method}")
    from ssgp_ppl.runtime import resources

    budget = float(DEFAULT_BUDGET if budget is None else budget)
    n, d = data.n_train, data.n_features
    estimated, excluded, affordable = {}, {}, []
    for m in LADDER:
        seconds = fit_seconds(entry, n, m, steps=steps, method=method)
        estimated[m] = round(seconds, 1)
        if seconds > budget:
            excluded[m] = f"estimated {seconds:.3g} s > budget {budget:g} s"
            continue
        need = resources.estimate(entry.with_settings([("m", m)]), n, d, data.n_test,
                                  method).bytes
        if need > 0.8 * resources.memory_bytes():
            excluded[m] = f"needs {need / 2**30:.3g} GiB of memory"
        else:
            affordable.append(m)
    if not affordable:
        raise SizingError(src, f"no m of {', '.join(map(str, LADDER))} fits the budget of "
                          f"{budget:g} s ({excluded[LADDER[0]]}); give a larger budget or m a "
                          "number", excluded)
    t = time.perf_counter()
    scores, rows = pilot_scores(entry, data.x_train, data.y_train, affordable, seed=seed)
    best = max(scores.values())
    if not math.isfinite(best):
        raise SSGPError(f"{src}: 'auto': the pilot fits failed at every m (non-finite scores); "
                        "give m a number")
    chosen = min(m for m, s in scores.items() if s >= best - TOLERANCE)
    sizing = Sizing(m=chosen, budget=budget, scores={m: round(s, 4) for m, s in scores.items()},
                    estimated_seconds=estimated, excluded=excluded, pilot_rows=rows,
                    pilot_seconds=round(time.perf_counter() - t, 2))
    if progress:
        print(f"ssgp-ppl: {entry.name}: {sizing.text()}", file=sys.stderr)
    return apply(entry, sizing)


def apply(entry, sizing: Sizing):
    """``entry`` with m = ``sizing.m`` and ``sizing`` as the record of how it was chosen (a run
    resumed with the m it began with, not sized again)."""
    return dataclasses.replace(entry.with_settings([("m", sizing.m)]), sizing=sizing)


__all__ = ["DEFAULT_BUDGET", "LADDER", "Sizing", "SizingError", "apply", "fit_seconds",
           "pilot_loo", "pilot_objective", "pilot_scores", "resolve"]
