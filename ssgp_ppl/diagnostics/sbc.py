"""Simulation-based calibration (SBC) of a catalog entry's inference methods.

SBC (Talts et al. 2018, Algorithm 1): draw θ̃ from the prior, simulate ỹ | θ̃, fit the method to
ỹ and rank each test quantity of θ̃ among L posterior draws. Where the posterior is exact, every
rank is uniform on {0, …, L}; a method whose posterior is too wide piles the ranks in the middle,
one that is over-confident piles them at both ends, a biased one at one end (Talts et al. 2018,
§4, Figs. 3-5). Besides the parameters, the log-likelihood of the simulated data log p(ỹ | θ) is
ranked: a data-dependent test quantity, which is sensitive to what the parameters alone miss
(Modrák et al. 2023, §2.3).

* Simulations run on the design points of a real data set (its training inputs, evenly spaced
  rows, ``rows`` of them) under the entry's priors: the one NumPyro model (``ssgp_model``) run by
  ``numpyro.infer.Predictive``, with s sampled (integrating it out, as an entry with
  ``nuisance = "marginalized"`` does, leaves the distribution of ỹ unchanged). Type-II
  hyperparameters have no prior: they are simulated at the entry's initial values and the
  method estimates them as it does on real data (an empirical-Bayes fit; the reference
  conditions on the simulated values, which makes it exact).
* The test quantities are the symmetry-invariant ones of :mod:`ssgp_ppl.diagnostics.invariants` (in the
  model's standardised units): noise and signal where they have priors, each input's frequency
  spread, the kernel at lags :data:`LAGS` along each input, f at :data:`F_ROWS` design points,
  and the log-likelihood log p(ỹ | f, σ_n).
* Methods (:data:`METHODS`): ``vi`` (the entry's guide by SVI, one path), ``vi_stacked`` (its K
  paths from dispersed starts, stacked; Yao, Vehtari & Gelman 2022), ``ncvmp`` (Tan et al. 2016,
  Algorithm 2) and ``reference`` (adaptive tempered SMC, s integrated out, then NUTS chains
  from its particles). The simulations of a batch run inside one jit (same program, different
  ỹ): the fits as one ``jax.vmap``, the reference's one after the other (``lax.map``, see
  :meth:`Reference.program`); every batch reuses the compiled programs.
* Uniformity (:func:`reading`): the ECDF of the ranks against the simultaneous band of
  Säilynoja, Bürkner & Vehtari 2022 (``arviz_stats.ecdf_utils``, the band of the PIT panels
  of :mod:`ssgp_ppl.diagnostics.calibration`) and a χ² test of binned ranks.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ssgp_ppl.diagnostics import gold, invariants
from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import methods
from ssgp_ppl.model import spectral
from ssgp_ppl.runtime import resources

ROWS = 40  # design points of a simulation (evenly spaced training rows of the data set)
# so that one simulation takes seconds: m = 6, and the reference's budget sized for that, 10 HMC
# moves a temperature and a NUTS warm-up of 100 steps a chain (an entry's [inference.smc] budget
# is for its full-size data: vssgp asks 500 warm-up steps a chain there)
SMALL_SETTINGS = ("m=6", "smc.mcmc_steps=10", "smc.warmup=100")
# and at most 2 SVI paths stacked: at 40 rows an entry's SVI runs its whole step budget (the
# stop rule seldom holds there), a path of ssgp_svi's costs 1 s a simulation in each of 2
# workers, and its SBC at N = 200 took 19.5 minutes with 4 paths (13.5 with 2); an explicit
# svi.paths in the settings is kept
SMALL_PATHS = 2
DRAWS = 99  # L posterior draws per simulation: ranks in {0, …, 99}
BATCH = 20  # simulations per compiled batch
LAGS = (0.5, 1.0)  # kernel lags ranked along each input (model units)
F_ROWS = 3  # design points whose f is ranked (first, middle, last)
BAND = 0.99  # the simultaneous band of the ECDF reading (as calibration.PIT_BAND)
CHI2_BINS = 10  # at most; fewer where there are under 5 simulations a bin
ALPHA = 0.01  # the χ² test's level in the reading
RHAT_MAX = gold.RHAT_MAX  # the reference's chains: rank R-hat of the log density
CHECKPOINT = "sbc_checkpoint.npz"
TREE = "sbc.nc"
SUMMARY = "sbc.json"
FIGURE = "sbc.png"
SEED_OFFSET = 1_000_003  # simulation keys apart from the fits' keys


# ----------------------------------------------------------------------------- ranks and reading


def ranks(draws, truth, rng: np.random.Generator | None = None) -> np.ndarray:
    """Rank of each ``truth`` (..., Q) among its ``draws`` (..., L, Q): the number of draws below
    it, ties (draws equal to it) split uniformly at random (Talts et al. 2018, Algorithm 2, with
    random tie-breaking); NaN where the truth or any draw is not finite."""
    draws, truth = np.asarray(draws, np.float64), np.asarray(truth, np.float64)
    rng = rng or np.random.default_rng(0)
    below = np.sum(draws < truth[..., None, :], axis=-2)
    equal = np.sum(draws == truth[..., None, :], axis=-2)
    r = below + np.floor(rng.uniform(size=below.shape) * (equal + 1))
    ok = np.isfinite(truth) & np.all(np.isfinite(draws), axis=-2)
    return np.where(ok, r, np.nan)


def fractional(r, draws: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """Ranks in {0, …, L} → u = (r + v) / (L + 1), v ~ U(0, 1): exactly uniform on (0, 1) when
    the ranks are (a randomised PIT of the discrete ranks), finite ones only."""
    r = np.asarray(r, np.float64)
    r = r[np.isfinite(r)]
    rng = rng or np.random.default_rng(0)
    return (r + rng.uniform(size=r.shape)) / (draws + 1)


class Reading(NamedTuple):
    """The ranks of one quantity against uniformity: the ECDF minus the uniform CDF at
    ``points`` (of the fractional ranks), its simultaneous band (``lower``, ``upper``), the χ²
    p-value of binned ranks, the share of points outside the band, the one-line ``verdict`` and
    its ``shape`` in a word or two (one of :data:`SHAPES`)."""

    points: np.ndarray
    delta: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    chi2_p: float
    outside: float
    sims: int
    verdict: str
    shape: str


# a reading's shape: uniform ranks, ranks piled in the middle, at both ends, near 0, near L
SHAPES = ("calibrated", "over-dispersed", "under-dispersed", "biased high", "biased low",
          "no simulations")


def chi2_p(r, draws: int, bins: int | None = None) -> float:
    """χ² goodness-of-fit p-value of ranks in {0, …, L} against the discrete uniform, in ``bins``
    bins of equal probability (default :data:`CHI2_BINS`, fewer to keep ≥ 5 expected counts)."""
    from scipy.stats import chisquare

    r = np.asarray(r, np.float64)
    r = r[np.isfinite(r)]
    if r.size < 10:
        return float("nan")
    k = bins or int(max(2, min(CHI2_BINS, r.size // 5, draws + 1)))
    # the L + 1 rank values into k bins, each bin's probability its share of the values
    edges = np.linspace(0, draws + 1, k + 1)
    counts = np.histogram(r + 0.5, bins=edges)[0]
    values = np.arange(draws + 1) + 0.5
    probs = np.histogram(values, bins=edges)[0] / (draws + 1)
    return float(chisquare(counts, probs * r.size).pvalue)


def reading(r, draws: int, *, prob: float = BAND, alpha: float = ALPHA, seed: int = 214) -> Reading:
    """Read the ranks ``r`` (in {0, …, L}, NaN skipped) of one quantity: ``calibrated`` when the
    ECDF of the fractional ranks stays inside the simultaneous ``prob`` band (arviz_stats'
    simulation method, Säilynoja et al. 2022) and the χ² test does not reject at ``alpha``;
    otherwise the shape says why, as for the PIT (:func:`ssgp_ppl.diagnostics.calibration.pit_reading`):
    ranks piled in the middle (ECDF below the diagonal under ½, above it over ½) mean a posterior
    too wide (over-dispersed), ranks at both ends one too narrow (under-dispersed:
    over-confident), ranks at one end a biased one (Talts et al. 2018, §4)."""
    from arviz_stats.ecdf_utils import ecdf_pit

    rng = np.random.default_rng(seed)
    u = fractional(r, draws, rng)
    if u.size < 2:
        nan = np.full(1, np.nan)
        return Reading(nan, nan, nan, nan, float("nan"), float("nan"), int(u.size),
                       "no simulations", "no simulations")
    points, ecdf, lower, upper = ecdf_pit(u, prob, 1000, rng=rng)
    delta, lo, hi = ecdf - points, lower - points, upper - points
    out = (delta < lo - 1e-12) | (delta > hi + 1e-12)
    p = chi2_p(r, draws)
    if not out.any() and not p < alpha:
        shape = "calibrated"
        verdict = f"calibrated (inside the simultaneous {prob:.0%} band, χ² p = {p:.2g})"
    else:
        low, high = delta[points < 0.5].mean(), delta[points > 0.5].mean()
        if low < 0 < high:
            shape, why = "over-dispersed", "posterior too wide (ranks piled in the middle)"
        elif high < 0 < low:
            shape, why = "under-dispersed", "posterior over-confident (ranks piled at both ends)"
        elif low > 0 and high > 0:
            shape, why = "biased high", "posterior above the truth (ranks piled near 0)"
        else:
            shape, why = "biased low", "posterior below the truth (ranks piled near L)"
        verdict = (f"NOT calibrated, {shape}: {why}; outside the {prob:.0%} band at "
                   f"{out.mean():.0%} of points, χ² p = {p:.2g}")
    return Reading(points, delta, lo, hi, p, float(out.mean()), int(u.size), verdict, shape)


# ----------------------------------------------------------------------------- test quantities


def _names(spec, n_rows: int) -> list[str]:
    d = spec.d
    out = [h for h in spec.hyper_names() if getattr(spec, h).role == "prior"]
    out += [f"frequency_spread[{j}]" for j in range(d)]
    out += [f"kernel[{j}, {tau:g}]" for j in range(d) for tau in LAGS]
    out += [f"f[{i}]" for i in f_rows(n_rows)]
    return out + ["log_likelihood"]


def f_rows(n: int) -> list[int]:
    """The design points whose f is ranked: first, middle and last (evenly spaced)."""
    return sorted({int(i) for i in np.linspace(0, n - 1, min(F_ROWS, n)).round()})


def quantities(spec, x, sites: dict, y, y_centre=0.0) -> tuple[list[str], np.ndarray]:
    """(names, values (..., Q)) of the test quantities of site draws (..., S, ·) on the design
    points ``x`` (n, d) with simulated data ``y`` (..., n): the invariants of
    :mod:`ssgp_ppl.diagnostics.invariants` (model units), f at :func:`f_rows` and log p(y | f, σ_n).
    ``y_centre`` (...,) is added to f (a method that fits centred targets, NCVMP)."""
    freq = np.asarray(sites["frequencies"], np.float64)
    lead = freq.shape[:-2]
    n = np.shape(x)[0]

    def value(name):
        if name in sites:
            return np.asarray(sites[name], np.float64)
        return np.full(lead, float(getattr(spec, name).value))

    signal = value("signal")
    cols = [np.asarray(sites[h], np.float64)[..., None] for h in spec.hyper_names()
            if getattr(spec, h).role == "prior"]
    cols.append(invariants.frequency_spread(freq))
    cols.append(invariants.kernel_at_lags(freq, signal, np.asarray(LAGS)).reshape(lead + (-1,)))
    phi = np.asarray(jax.vmap(spectral.features, in_axes=(None, 0))(
        jnp.asarray(x), jnp.asarray(freq.reshape((-1,) + freq.shape[-2:]))), np.float64)
    phi = phi.reshape(lead + phi.shape[-2:])
    f = np.einsum("...nk,...k->...n", phi, np.asarray(sites["nuisance"], np.float64))
    f = f + np.asarray(y_centre, np.float64)[..., None, None] if np.ndim(y_centre) else f + y_centre
    cols.append(f[..., f_rows(n)])
    yb = np.broadcast_to(np.asarray(y, np.float64)[..., None, :], f.shape) if \
        np.ndim(y) == f.ndim - 1 else np.asarray(y, np.float64)
    noise = value("noise") if spec.lik.has_scale else None
    ll = spec.lik.distribution(jnp.asarray(f), None if noise is None else
                               jnp.asarray(noise)[..., None]).log_prob(jnp.asarray(yb))
    cols.append(np.asarray(ll, np.float64).sum(-1)[..., None])
    return _names(spec, n), np.concatenate(cols, axis=-1)


# ----------------------------------------------------------------------------- simulations


class Design(NamedTuple):
    """The simulations' design: the entry (small settings applied), its spec, the design points
    x (n, d) of data set ``data`` (model units: the entry's input scaling of the training
    split) and the training rows they are."""

    entry: object
    spec: object
    x: np.ndarray
    data: str
    rows: np.ndarray
    dataset: object  # ssgp_ppl.data.datasets.Dataset cut to the design rows (its y the real one)


def check_entry(entry) -> None:
    """SBC simulates from the prior on a small design at a given m: ``m = "auto"`` (sized to
    real targets) is refused with what to give instead."""
    if entry.m_auto:
        raise SSGPError(f"{entry.path}: model.m: SBC fits its simulations at a given m (its "
                        f"default {SMALL_SETTINGS[0]}), not 'auto'; give m a number")


def small_paths(entry):
    """The entry with at most :data:`SMALL_PATHS` SVI paths (settings applied after it may ask
    for more)."""
    paths = entry.config["inference"].get("svi", {}).get("paths", 1)
    return entry if paths <= SMALL_PATHS else entry.with_overrides([f"svi.paths={SMALL_PATHS}"])


def small(entry, settings=SMALL_SETTINGS):
    """The entry as SBC runs it: its SVI paths capped (:func:`small_paths`), then ``settings``
    (``key=value`` texts, default :data:`SMALL_SETTINGS`) on top, so that settings naming the
    paths, in any spelling, win."""
    return small_paths(entry).with_overrides(list(settings))


def design(entry, data="pendulum", *, rows: int = ROWS, settings=SMALL_SETTINGS) -> Design:
    """The entry with ``settings`` (default :data:`SMALL_SETTINGS`; with non-empty ones, at most
    :data:`SMALL_PATHS` SVI paths unless they name the paths) on ``rows`` evenly spaced
    training inputs of the data set ``data``: a known data set's name, or a loaded
    :class:`~ssgp_ppl.data.datasets.Dataset` (a comparison's, its inputs scaled as the entry's
    ``[data] x_scaling`` says)."""
    from ssgp_ppl.data import datasets
    from ssgp_ppl.entry import load_entry

    entry = entry if not isinstance(entry, str | Path) else load_entry(entry)
    if settings:
        entry = small(entry, settings)
    check_entry(entry)
    if not entry.latent_sites:
        raise SSGPError(f"{entry.name}: SBC needs a model with latent sites (priors); this one "
                        "has none")
    # the inputs alone matter (the targets are simulated): the data set's own target kind
    ds = data if isinstance(data, datasets.Dataset) else datasets.load(
        data, x_scaling=entry.config["data"]["x_scaling"])
    if rows < 5:
        raise SSGPError(f"SBC needs at least 5 design rows, got {rows}")
    idx = np.unique(np.linspace(0, ds.n_train - 1, min(rows, ds.n_train)).round().astype(int))
    ds = ds._replace(x_train=ds.x_train[idx], y_train=ds.y_train[idx])
    return Design(entry, entry.spec(ds.n_features), np.asarray(ds.x_train), ds.name, idx, ds)


def simulate(des: Design, sims: int, seed: int = 0) -> dict:
    """``sims`` draws of the prior and the data on the design points: the entry's model run by
    ``numpyro.infer.Predictive`` with s sampled, one key per simulation (simulation i's draw
    depends on (seed, i) alone). Returns site arrays (sims, ...) with ``y`` (sims, n)."""
    from numpyro.infer import Predictive

    spec = dataclasses.replace(des.spec, nuisance="sampled")
    model = des.entry.model(spec)
    keys = sim_keys(seed, np.arange(sims))
    x = jnp.asarray(des.x)
    pred = Predictive(model, num_samples=1)
    out = jax.jit(jax.vmap(lambda k: pred(k, x)))(keys)
    return {k: np.asarray(v[:, 0]) for k, v in out.items()}


def sim_keys(seed: int, index) -> jax.Array:
    """Simulation i's key: (seed, i) alone."""
    base = jax.random.PRNGKey(seed + SEED_OFFSET)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(index))


# ----------------------------------------------------------------------------- the methods


class Batch(NamedTuple):
    """A method's posterior draws for a batch of simulations: sites (B, L, ...), the centre added
    to f (B,), each simulation's fit converged / failed, and the stacking weights (B, K) of a
    multi-path fit (None otherwise)."""

    sites: dict
    y_centre: np.ndarray
    converged: np.ndarray
    failed: np.ndarray
    weights: np.ndarray | None = None


class SBCMethod:
    """One method of SBC: ``applies(entry)``, and ``program(design, draws)`` → a callable
    ``(y (B, n), keys (B,)) → Batch`` whose compiled parts are built once and reused by every
    batch (``compiled()``: their cache sizes, to verify)."""

    name = ""
    description = ""
    version = 1  # raised when the program changes: a checkpoint of another version is refused

    def applies(self, entry) -> bool:
        raise NotImplementedError

    def program(self, des: Design, draws: int, *, progress: bool = False) -> Callable:
        raise NotImplementedError

    def identity(self, des: Design, draws: int) -> dict | None:
        """What this method's batch depends on besides ỹ and the keys, where that is the model
        alone and not the entry's guide or inference settings: two entries whose identities
        agree get the same batch from the same ỹ and keys, and a store of batches
        (:func:`run`'s ``store``) shares it between them. None (the default): the batch is the
        entry's own."""
        return None


def _canonical(obj):
    """A JSON-able description of ``obj`` that tells apart any two values a program could read
    differently: dataclasses and NamedTuples field by field, arrays by shape, dtype and a digest
    of their bytes, anything else by its repr."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"type": type(obj).__name__, **{f.name: _canonical(getattr(obj, f.name))
                                              for f in dataclasses.fields(obj)}}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return {"type": type(obj).__name__, **{k: _canonical(v) for k, v in obj._asdict().items()}}
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.ndarray | jax.Array):
        a = np.ascontiguousarray(np.asarray(obj))
        return {"shape": list(a.shape), "dtype": str(a.dtype),
                "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
    if isinstance(obj, bool | int | float | str) or obj is None:
        return obj
    return repr(obj)


def _owner(entry, cls) -> bool:
    return any(isinstance(methods.get(m), cls) for m in entry.methods)


def _fill(sites: dict, spec, shape) -> dict:
    """Sites with signal and noise present (a fixed value broadcast to ``shape``)."""
    out = dict(sites)
    for h in ("signal", "noise"):
        if h not in out and (h == "signal" or spec.lik.has_scale):
            out[h] = jnp.full(shape, getattr(spec, h).value)
    return out


def _draw_sites(sites: dict, spec, x, y, key, draws: int, marginal: bool) -> dict:
    """The ranked sites of ``draws`` posterior draws (:func:`_fill`ed): where the method integrates
    the nuisance s out, a draw of s from its Gaussian conditional given each draw's frequencies,
    signal and noise (:func:`ssgp_ppl.model.ssgp.draw_nuisance`)."""
    from ssgp_ppl.model.ssgp import draw_nuisance

    sites = _fill(sites, spec, (draws,))
    if marginal:
        sites["nuisance"] = jax.vmap(
            lambda kk, fr, sg, ns: draw_nuisance(kk, spectral.features(x, fr), y, sg, ns))(
            jax.random.split(key, draws), sites["frequencies"], sites["signal"], sites["noise"])
    return {k: sites[k] for k in ("frequencies", "signal", "noise", "nuisance") if k in sites}


class _SVIProgram:
    """The entry's SVI as one vmapped program over R runs (a batch's simulations × paths): the
    SVI method's own fit (:meth:`~ssgp_ppl.inference.methods.svi.SVIMethod.setup`'s model, guide, loss and
    batching) with its kernel's chunk vmapped over (state, y)
    (:func:`~ssgp_ppl.inference.runners.vmapped_chunk`, compiled once for every batch) and driven by
    :func:`~ssgp_ppl.inference.runners.drive_svi`, the driver of ``svi`` itself: each run's stop rule
    freezes it, and a run whose loss turns NaN stops there and is marked failed. Then L guide
    draws per run through ``Predictive`` and the model's deterministic sites, s from its exact
    conditional where the model integrates it out."""

    def __init__(self, des: Design, draws: int, paths: int, progress: bool):
        from numpyro.infer import Predictive

        from ssgp_ppl.inference.methods.svi import SVI
        from ssgp_ppl.inference.runners import batch_sampler, site_values, svi_kernel, vmapped_chunk

        self.des, self.draws, self.progress = des, draws, progress
        setup = SVI.setup(des.entry, des.dataset)
        self.spec, self.model, self.guide = setup.spec, setup.model, setup.guide
        model, guide, spec = setup.model, setup.guide, setup.spec
        self.schedule = setup.settings.schedule()
        n = des.x.shape[0]
        self.x = x = jnp.asarray(des.x)
        batching = setup.batching
        draw, self.aux = batch_sampler(n, batching.batch_size, batching.partitions,
                                       batching.per_step, distinct=batching.distinct)
        self.kernel = kernel = svi_kernel(model, guide, self.schedule, draw=draw,
                                          loss=setup.loss)
        # one compiled init (NumPyro's eager init dispatches op by op: ten seconds on two cores)
        self.init = jax.jit(kernel.init)
        self.init_state = self.init(jax.random.PRNGKey(0), x, jnp.zeros(n, x.dtype), self.aux)
        self.paths = paths
        self.chunk = vmapped_chunk(kernel, y_per_run=True)
        marginal = spec.nuisance == "marginalized"

        @jax.jit
        def posterior(params, keys, y):
            def one(p, key, yy):
                k1, k2 = jax.random.split(key)
                g = Predictive(guide, params=p, num_samples=draws)(k1, x, yy)
                g = {k: v for k, v in g.items() if k not in ("y", "f")}
                return _draw_sites(site_values(model, p, g, x[:1]), spec, x, yy, k2, draws,
                                   marginal)

            return jax.vmap(one)(params, keys, y)

        self.posterior = posterior

    def compiled(self) -> dict:
        return {"chunk": self.chunk._cache_size(), "posterior": self.posterior._cache_size()}

    def states(self, keys, starts=None):
        """Initial states of R runs: the entry's start (``init_params`` from ``starts`` (R,)
        dicts where given), each run with its own key."""
        st = []
        for r, key in enumerate(keys):
            k1, k2 = jax.random.split(key)
            if starts is not None and starts[r] is not None:
                base = self.init(jax.random.PRNGKey(0), self.x,
                                 jnp.zeros(self.x.shape[0], self.x.dtype), self.aux,
                                 init_params=starts[r])
            else:
                base = self.init_state
            st.append(base._replace(svi=base.svi._replace(rng_key=k1), key=k2))
        return jax.tree.map(lambda *a: jnp.stack(a), *st)

    def fit(self, y, keys, starts=None, desc: str = "svi"):
        """Fit R runs to ``y`` (R, n): (params (R, ...), converged (R,), failed (R,), final
        losses (R,): :func:`ssgp_ppl.inference.paths.tail_loss` of each run's trace, as the SVI paths'
        stacking reads them)."""
        from ssgp_ppl.inference.paths import tail_loss
        from ssgp_ppl.inference.runners import drive_svi

        y = jnp.asarray(y)
        x, aux, chunk = self.x, self.aux, self.chunk
        results = drive_svi(
            lambda st, active, length: chunk(st, jnp.asarray(active), x, y, aux, length),
            self.states(keys, starts), self.schedule, int(y.shape[1]), paths=int(y.shape[0]),
            params=lambda st, i: self.kernel.params(jax.tree.map(lambda a: a[i], st)),
            progress=self.progress, desc=desc, on_nan="stop")
        params = jax.tree.map(lambda *a: jnp.stack(a), *[r.params for r in results])
        converged = np.array([r.converged for r in results])
        failed = np.array([r.failed for r in results])
        final = np.array([tail_loss(r.losses) for r in results])
        return params, converged, failed, final

    def draws_of(self, params, keys, y) -> dict:
        return {k: np.asarray(v) for k, v in self.posterior(params, keys, jnp.asarray(y)).items()}


def _fit_keys(keys):
    return jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)


def _draw_keys(keys):
    return jax.vmap(lambda k: jax.random.fold_in(k, 2))(keys)


class VI(SBCMethod):
    name = "vi"
    description = "the entry's guide by SVI, one path"

    def applies(self, entry) -> bool:
        from ssgp_ppl.inference.methods.svi import SVIMethod

        return _owner(entry, SVIMethod)

    def program(self, des, draws, *, progress=False):
        des = des._replace(entry=des.entry.with_overrides(["svi.paths=1"]))
        prog = _SVIProgram(des, draws, 1, progress)

        def run(y, keys):
            params, conv, failed, _ = prog.fit(y, _fit_keys(keys), desc=f"{des.entry.name}:vi")
            sites = prog.draws_of(params, _draw_keys(keys), y)
            return Batch(sites, np.zeros(len(y)), conv, failed)

        run.compiled = prog.compiled
        return run


def _stacked(draws_per_path: list[dict], loo: np.ndarray, losses: np.ndarray, how: str,
             total: int, rng) -> tuple[dict, np.ndarray]:
    """The K paths' mixture of ``total`` draws (:func:`ssgp_ppl.inference.paths.weights_of` on the (n, K)
    LOO log densities, :func:`ssgp_ppl.inference.paths.allocate`): (sites (total, ...), weights (K,))."""
    from ssgp_ppl.inference.paths import allocate, weights_of

    w = weights_of(how, loo, losses)
    counts = allocate(w, total)
    sites = {k: np.concatenate([d[k][rng.permutation(len(d[k]))[:c]]
                                for d, c in zip(draws_per_path, counts, strict=True)])
             for k in draws_per_path[0]}
    return sites, w


def _path_loo(x, y, sites: dict, y_centre: float = 0.0) -> np.ndarray:
    """(n,) PSIS-LOO log p(yᵢ | y₋ᵢ) of one path's draws (:func:`ssgp_ppl.inference.paths.path_loo` on
    arrays): the closed-form p(yᵢ | y₋ᵢ, θ_s) with s integrated out, θ left out by PSIS."""
    import xarray as xr
    from scipy.special import logsumexp

    from ssgp_ppl.diagnostics.calibration import psislw

    lp = np.asarray(_loo_pointwise(jnp.asarray(x), jnp.asarray(y) - y_centre,
                                   jnp.asarray(sites["frequencies"]), jnp.asarray(sites["signal"]),
                                   jnp.asarray(sites["noise"])), np.float64)
    lp = np.where(np.isnan(lp), -np.inf, lp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        log_w, _ = psislw(xr.DataArray(lp[None], dims=("chain", "draw", "row")))
    log_w = np.asarray(log_w.transpose("chain", "draw", "row"))[0]
    log_w = log_w - logsumexp(log_w, axis=0)
    return logsumexp(log_w + lp, axis=0)


@jax.jit
def _loo_pointwise(x, y, freq, signal, noise):
    from ssgp_ppl.model.predictive import loo_predictive

    return jax.vmap(lambda f, s, n: loo_predictive(x, y, f, s, n)[2])(freq, signal, noise)


class StackedVI(SBCMethod):
    name = "vi_stacked"
    description = "the entry's K SVI paths from dispersed starts, stacked (Yao et al. 2022)"

    def applies(self, entry) -> bool:
        from ssgp_ppl.inference.methods.svi import SVI
        from ssgp_ppl.model.guides import GUIDES

        if not VI().applies(entry) or not entry.lik.conjugate:
            return False
        s = SVI.settings(entry)
        return s.paths > 1 and GUIDES.get(s.guide).start_in_params

    def program(self, des, draws, *, progress=False):
        from ssgp_ppl.inference.methods.svi import SVI
        from ssgp_ppl.inference.paths import SCREEN_DRAWS

        paths, how = SVI.paths(des.entry)
        prog = _SVIProgram(des, draws, paths, progress)
        screen = _Screen(des, prog, SCREEN_DRAWS)

        def run(y, keys):
            b = len(y)
            starts = screen.starts(y, keys, paths - 1)  # (B, K - 1) guide params
            flat_y = np.repeat(np.asarray(y), paths, axis=0)
            run_keys = jax.vmap(lambda k: jax.random.split(k, paths))(_fit_keys(keys))
            run_keys = run_keys.reshape((b * paths,) + run_keys.shape[2:])
            flat_starts = [None if k == 0 else starts[i][k - 1] for i in range(b)
                           for k in range(paths)]
            params, conv, failed, final = prog.fit(flat_y, run_keys, flat_starts,
                                                   desc=f"{des.entry.name}:vi, {paths} paths each")
            dkeys = jax.vmap(lambda k: jax.random.split(k, paths))(_draw_keys(keys))
            sites = prog.draws_of(params, dkeys.reshape((b * paths,) + dkeys.shape[2:]), flat_y)
            out, weights = [], []
            for i in range(b):
                per = [{k: v[i * paths + k2] for k, v in sites.items()} for k2 in range(paths)]
                loo = np.stack([_path_loo(des.x, y[i], p) for p in per], axis=1)
                mix, w = _stacked(per, loo, final[i * paths:(i + 1) * paths], how, draws,
                                  np.random.default_rng(i))
                out.append(mix)
                weights.append(w)
            stacked = {k: np.stack([o[k] for o in out]) for k in out[0]}
            conv = conv.reshape(b, paths).all(axis=1)
            failed = failed.reshape(b, paths).any(axis=1)
            return Batch(stacked, np.zeros(b), conv, failed, np.stack(weights))

        run.compiled = lambda: prog.compiled() | screen.compiled()
        return run


class _Screen:
    """Dispersed starts of a batch (:func:`ssgp_ppl.inference.paths.screened_starts` for each simulation,
    one compiled program): the best of ``count`` prior draws by the log joint with s integrated
    out, given each simulation's ỹ; returned as the guide's initial parameters (the guide's
    latent vector at the start), so one update serves every path."""

    def __init__(self, des: Design, prog: _SVIProgram, count: int):
        from numpyro.distributions import biject_to

        from ssgp_ppl.inference.paths import screen_draws, screen_log_joint

        spec = dataclasses.replace(prog.spec, nuisance="marginalized")
        marginal = des.entry.model(spec)
        x = jnp.asarray(des.x)
        guide = prog.guide.auto  # a NumPyro autoguide (StackedVI.applies)
        proto = guide.prototype_trace
        latent = sorted(k for k, v in proto.items() if v["type"] == "sample"
                        and not v["is_observed"] and not v["infer"].get("is_auxiliary"))
        names = list(spec.latent_sites())
        # the prior draws of the guide's latent sites, by the paths' screening key (the names of
        # the model with s integrated out are among them)
        prior = screen_draws(prog.model, x, sorted(set(latent) | set(names)), count)
        supports = {k: biject_to(proto[k]["fn"].support) for k in latent}
        self.unconstrained = jax.vmap(lambda d: ravel_pytree(
            {k: supports[k].inv(d[k]) for k in latent})[0])({k: prior[k] for k in latent})
        values = {k: prior[k] for k in names}
        self.prefix = guide.prefix

        @jax.jit
        def joint(y):
            return jax.vmap(lambda yy: screen_log_joint(marginal, x, yy, values, batch=256))(y)

        self.joint = joint

    def compiled(self) -> dict:
        return {"screen": self.joint._cache_size()}

    def starts(self, y, keys, k: int) -> list[list[dict]]:
        lj = np.asarray(self.joint(jnp.asarray(y)))
        lj = np.where(np.isfinite(lj), lj, -np.inf)
        best = np.argsort(-lj, axis=1)[:, :k]
        return [[{f"{self.prefix}_loc": self.unconstrained[j]} for j in row] for row in best]


class NCVMPFit(SBCMethod):
    name = "ncvmp"
    version = 2  # float32 fits finished in float64 (the 1e-6 stop rule)
    description = ("Tan et al. 2016's NCVMP (Algorithm 2), §7's restarts; float32 fits finished "
                   "in float64")

    def applies(self, entry) -> bool:
        from ssgp_ppl.inference.methods.ncvmp import NCVMPMethod

        return _owner(entry, NCVMPMethod)

    def program(self, des, draws, *, progress=False):
        from ssgp_ppl.inference import ncvmp
        from ssgp_ppl.inference.methods.ncvmp import NCVMPMethodSettings, spectral_candidates

        spec = des.spec
        s = NCVMPMethodSettings.of(des.entry, "ncvmp")
        settings = s.algorithm_settings()
        prior = ncvmp.tan_prior(spec)
        x = jnp.asarray(des.x)
        n, m = x.shape[0], spec.m
        ncvmp.check_data(x, x[:, 0], m)
        paths = s.paths
        sets = spectral_candidates(des.entry, spec, max(s.restarts, paths))
        how = s.combine

        finish = x.dtype == jnp.float32  # Algorithm 2's 1e-6 rule needs float64 (continue_x64)

        @jax.jit
        def fit(y):
            def one(yy):
                ybar = jnp.mean(yy)
                if paths > 1:  # each of the first K sets fitted to convergence
                    res = jax.vmap(lambda p: ncvmp.fit_ncvmp(x, yy - ybar, p[None], prior,
                                                             settings))(sets[:paths])
                else:
                    res = ncvmp.fit_ncvmp(x, yy - ybar, sets[:s.restarts], prior, settings)
                return res.state, res.points, ybar, res.converged, res.bound

            return jax.vmap(one)(y)

        @jax.jit
        def fit64(x64, y, ybar, state, points, prior64):
            """The float32 fits continued in float64 from their states with their spectral sets
            (as :func:`ssgp_ppl.inference.ncvmp.continue_x64`, vmapped)."""
            def one(yy, yb, st, pts):
                r = ncvmp.fit_ncvmp(x64, yy - yb, pts[None], prior64, settings, init=st)
                return r.state, r.converged, r.bound

            if paths > 1:
                one = jax.vmap(one, in_axes=(None, None, 0, 0))
            return jax.vmap(one)(y, ybar, state, points)

        @jax.jit
        def sample(state, points, keys):
            def one(st, pts, key):
                if paths > 1:
                    q = jax.vmap(lambda st1, kk: ncvmp.sample_q(kk, st1, n, m, prior, draws))(
                        st, jax.random.split(key, paths))
                    freq = jax.vmap(lambda p, lam: spectral.frequencies_from_spectral_points(
                        p, lam[:, None, :]))(pts, q["inverse_lengthscales"])
                else:
                    q = ncvmp.sample_q(key, st, n, m, prior, draws)
                    freq = spectral.frequencies_from_spectral_points(
                        pts, q["inverse_lengthscales"][:, None, :])
                return {"frequencies": freq, "signal": q["signal"], "noise": q["noise"],
                        "nuisance": q["nuisance"]}

            return jax.vmap(one)(state, points, keys)

        def run(y, keys):
            state, points, ybar, conv, bound = fit(jnp.asarray(y))
            if finish:
                with jax.enable_x64(True):
                    c = lambda a: jnp.asarray(np.asarray(a), jnp.float64)  # noqa: E731
                    st64, conv, bound = fit64(c(x), c(y), c(ybar), jax.tree.map(c, state),
                                              c(points), jax.tree.map(c, prior))
                    st64, conv, bound = jax.tree.map(np.asarray, (st64, conv, bound))
                state = jax.tree.map(lambda a: jnp.asarray(a, x.dtype) if np.issubdtype(
                    a.dtype, np.floating) else jnp.asarray(a), st64)
            sites = sample(state, points, _draw_keys(keys))
            sites = {k: np.asarray(v) for k, v in sites.items()}
            ybar, conv, bound = np.asarray(ybar), np.asarray(conv), np.asarray(bound)
            failed = ~np.isfinite(bound).reshape(len(y), -1).all(axis=1)
            if paths == 1:
                return Batch(sites, ybar, conv, failed)
            out, weights = [], []
            for i in range(len(y)):
                per = [{k: v[i, k2] for k, v in sites.items()} for k2 in range(paths)]
                loo = np.stack([_path_loo(des.x, y[i], p, ybar[i]) for p in per], axis=1)
                mix, w = _stacked(per, loo, -bound[i], how, draws, np.random.default_rng(i))
                out.append(mix)
                weights.append(w)
            return Batch({k: np.stack([o[k] for o in out]) for k in out[0]}, ybar,
                         conv.all(axis=1), failed, np.stack(weights))

        run.compiled = lambda: {"ncvmp": fit._cache_size(), "float64": fit64._cache_size(),
                                "draws": sample._cache_size()}
        return run


@functools.cache  # the source does not change under a running process: read it once
def _reference_source() -> str:
    """A digest of the source the reference's batch comes from: :class:`Reference` and the
    helpers of this module it calls, and the modules of the model, the SMC program and the
    runners (a change to any of them changes the digest; one elsewhere in this module does
    not)."""
    import inspect

    root = Path(__file__).resolve().parents[1]
    files = [root / "inference" / "smc.py", root / "inference" / "methods" / "smc.py",
             root / "inference" / "runners.py", *sorted((root / "model").rglob("*.py"))]
    h = hashlib.sha256()
    for obj in (Reference, _draw_sites, _fill, _fit_keys, _draw_keys, sim_keys):
        h.update(inspect.getsource(obj).encode())
    for f in files:
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


class Reference(SBCMethod):
    name = "reference"
    version = 3  # NUTS chains after the SMC, thinned, R-hat across chains
    description = ("adaptive tempered SMC (s integrated out, type-II sites at their simulated "
                   "values), then NUTS chains from its particles: the reference, at small size")

    def applies(self, entry) -> bool:
        return True

    @staticmethod
    def _target_spec(des):
        """The entry's spec as the reference samples it (s integrated out where it can be) and
        its ``[inference.smc]`` settings."""
        from ssgp_ppl.inference.methods.smc import SMCSettings, collapses

        s = SMCSettings.of(des.entry, "smc")
        spec = des.spec
        if collapses(spec, s.collapse):
            spec = dataclasses.replace(spec, nuisance="marginalized")
        return spec, s

    @staticmethod
    def _per_chain(s, draws: int) -> int:
        """Draws a chain keeps: 2L / chains (every other draw kept), at most ``smc.samples``."""
        return min(s.samples, -(-2 * int(draws) // s.chains))

    @staticmethod
    def _budget(s, draws: int) -> dict:
        """The ``[inference.smc]`` settings the program reads, ``samples`` as the draws it
        keeps a chain (``smc.pilot`` and ``smc.runs`` are the method's; two entries whose settings
        differ there alone, or in a ``samples`` above what L asks for, run the same program)."""
        return {"particles": s.particles, "mcmc_steps": s.mcmc_steps,
                "integration_steps": s.integration_steps, "target_ess": float(s.target_ess),
                "mass": s.mass, "chains": s.chains, "warmup": s.warmup,
                "per_chain": Reference._per_chain(s, draws),
                "target_accept": float(s.target_accept), "max_tree_depth": s.max_tree_depth}

    def identity(self, des, draws):
        """The model (the spec as sampled: priors, likelihood, m, the type-II sites' simulated
        values), the design points, L, the ``[inference.smc]`` settings it reads and the program's
        version: entries that differ in their guide or objective alone (``svbssgp``,
        ``svbssgp_collapsed``, ``svbssgp_dlm_log``, …) share their reference. Also the
        convergence mark :data:`RHAT_MAX`, the versions of the libraries it runs on and a digest
        of the source it runs (:func:`_reference_source`): a store outlives the code that
        filled it, and a batch of other code is not this one's."""
        import arviz_stats
        import blackjax
        import numpyro

        spec, s = self._target_spec(des)
        return {"method": self.name, "version": self.version, "draws": int(draws),
                "spec": _canonical(spec), "smc": self._budget(s, draws),
                "inputs": _inputs_digest(des),
                "x64": bool(jax.config.jax_enable_x64), "rhat_max": float(RHAT_MAX),
                "versions": {"jax": jax.__version__, "numpyro": numpyro.__version__,
                             "blackjax": blackjax.__version__,
                             "arviz_stats": arviz_stats.__version__},
                "source": _reference_source()}

    def program(self, des, draws, *, progress=False):
        """:func:`ssgp_ppl.inference.smc.tempered_smc_program`, the program of the ``smc``
        method's runs, then ``smc.chains`` NUTS chains (blackjax) started from distinct
        particles, like the ``smc`` method's polishing: ``smc.warmup`` steps of window
        adaptation (the mass matrix dense or diagonal as ``smc.mass`` says), then 2L / chains
        draws each (at most ``smc.samples``), thinned evenly to L (``smc.pilot`` and
        ``smc.runs`` are the method's, not SBC's). The simulations of a batch run one after the
        other inside one jit (``lax.map``), each with its particles and chains vmapped: NUTS
        and the adaptive tempering are loops whose length a simulation sets, and under ``vmap``
        every lane runs the longest (each NUTS step the deepest tree of all the batch's chains)
        while a gradient's cost grows linearly beyond 4 lanes, so vmapping the simulations buys
        nothing and pays for the hardest one. s is drawn
        from its exact conditional where it is integrated out. A simulation's fit converged
        when the SMC reached β = 1, no NUTS transition diverged and the rank R-hat of the log
        density across the chains is at most :data:`RHAT_MAX`.

        The chains are needed: where a simulation's signal is large against its noise, the
        posterior concentrates in a narrow region of the frequencies that the tempered
        particles do not reach, and SMC alone reads the noise biased high and the
        log-likelihood low (``tan_va``, 20 simulations: the true log-likelihood above every
        particle's in 6; in 5 with 8× the particles, in 6 with 5× the HMC moves; the NUTS chains
        from the same particles reach it)."""
        import blackjax
        from blackjax.adaptation.base import get_filter_adapt_info_fn

        from ssgp_ppl.inference.methods.smc import target_model
        from ssgp_ppl.inference.runners import site_values
        from ssgp_ppl.inference.smc import (
            data_log_joint,
            data_potentials,
            mass_kind,
            prior_positions,
            tempered_smc_program,
        )

        spec, s = self._target_spec(des)  # what identity() describes, and nothing else
        x = jnp.asarray(des.x)
        # type-II sites at the values the simulations used (their initial values, full shape)
        type2 = {}
        if spec.learned_sites():
            start = site_values(des.entry.model(spec), {}, {}, x[:1])
            type2 = {k: start[k][0] for k in spec.learned_sites()}
        model, collapsed = target_model(des.entry, spec, type2, s.collapse)
        particles = s.particles
        # 2L/chains draws a chain (at most smc.samples), thinned evenly to L: every other draw
        per_chain = self._per_chain(s, draws)
        if draws > s.chains * per_chain:
            raise SSGPError(f"the reference keeps {draws} draws of {s.chains * per_chain} "
                            f"({s.chains} chains × {per_chain}); raise smc.samples or lower "
                            "--draws")
        if s.chains > particles:
            raise SSGPError(f"smc.chains ({s.chains}) exceeds smc.particles ({particles})")
        y0 = jnp.zeros(x.shape[0], x.dtype)  # the shapes; each simulation's ỹ is an argument
        log_prior, log_lik, unravel, names, transforms = data_potentials(model, x, y0)
        log_joint = data_log_joint(model, x, y0)  # the chains' target: log_prior + log_lik
        probe = jax.eval_shape(lambda k: prior_positions(model, x, y0, names, transforms, 2, k),
                               jax.random.PRNGKey(0))  # D and the dtype, nothing computed
        smc = tempered_smc_program(log_prior, log_lik, dim=probe.shape[-1], dtype=probe.dtype,
                                   particles=particles, mcmc_steps=s.mcmc_steps,
                                   integration_steps=s.integration_steps,
                                   target_ess=s.target_ess, mass=s.mass)
        diagonal = mass_kind(s.mass, probe.shape[-1]) == "diag"
        keep = jnp.asarray(np.linspace(0, s.chains * per_chain - 1, draws).round().astype(int))

        def polish(pos, key, yy):
            """``smc.chains`` NUTS chains from distinct particles (resampling repeats them):
            draws (chains, per_chain, D), their log densities (chains, per_chain) and the number
            of divergent transitions."""
            def logdensity(z):
                return log_joint(z, (x, yy))

            k0, k1 = jax.random.split(key)
            new = jnp.concatenate([jnp.ones(1, bool), jnp.any(pos[1:] != pos[:-1], axis=-1)])
            weight = jnp.where(jnp.sum(new) >= s.chains, new, True).astype(pos.dtype)
            starts = pos[jax.random.choice(k0, particles, (s.chains,), replace=False,
                                           p=weight / weight.sum())]

            def chain(z0, k):
                ka, kb = jax.random.split(k)
                adapt = blackjax.window_adaptation(
                    blackjax.nuts, logdensity, is_mass_matrix_diagonal=diagonal,
                    target_acceptance_rate=s.target_accept, max_num_doublings=s.max_tree_depth,
                    adaptation_info_fn=get_filter_adapt_info_fn())
                (state, params), _ = adapt.run(ka, z0, num_steps=s.warmup)
                step = blackjax.nuts(logdensity, **params).step  # params: step, mass, depth

                def one(st, kk):
                    st, info = step(kk, st)
                    return st, (st.position, st.logdensity, info.is_divergent)

                _, (zs, lp, div) = jax.lax.scan(one, state, jax.random.split(kb, per_chain))
                return zs, lp, div.sum()

            zs, lp, div = jax.vmap(chain)(starts, jax.random.split(k1, s.chains))
            return zs, lp, div.sum()

        @jax.jit
        def fit(y, keys):
            def one(args):  # prior draws and the key stream as tempered_smc_runs' run
                yy, key = args
                z0 = prior_positions(model, x, yy, names, transforms, particles,
                                     jax.random.fold_in(key, 0))
                res = smc(z0, key, (x, yy))
                zs, lp, div = polish(res.positions, jax.random.fold_in(key, 3), yy)
                return zs.reshape((-1,) + zs.shape[2:])[keep], res.beta, div, lp

            # one simulation after the other (see the docstring: not vmapped)
            return jax.lax.map(one, (y, keys))

        def constrain(flat):
            return {k: transforms[k](u) for k, u in unravel(flat).items()}

        @jax.jit
        def posterior(positions, keys, y):
            def one(pos, key, yy):
                return _draw_sites(site_values(model, {}, jax.vmap(constrain)(pos), x[:1]),
                                   spec, x, yy, jax.random.fold_in(key, 1), draws, collapsed)

            return jax.vmap(one)(positions, keys, y)

        def run(y, keys):
            from arviz_stats import rhat

            pos, beta, div, lp = fit(jnp.asarray(y), _fit_keys(keys))
            sites = posterior(pos, _draw_keys(keys), jnp.asarray(y))
            failed = np.asarray(beta) < 1.0
            r = np.asarray(rhat(np.asarray(lp, np.float64), method="rank", chain_axis=-2,
                                draw_axis=-1))
            converged = ~failed & (np.asarray(div) == 0) & (r <= RHAT_MAX)
            return Batch({k: np.asarray(v) for k, v in sites.items()}, np.zeros(len(y)),
                         converged, failed)

        run.compiled = lambda: {"smc": fit._cache_size(), "posterior": posterior._cache_size()}
        return run


METHODS: dict[str, SBCMethod] = {m.name: m for m in (VI(), StackedVI(), NCVMPFit(), Reference())}
_PROGRAMS: dict = {}  # the compiled programs of this process, by method, entry, design and L
_PROGRAMS_KEPT = 8


def program(name: str, des: Design, draws: int, *, progress: bool = False) -> Callable:
    """Method ``name``'s batch program for this design and L, built once per process (a later
    run with the same entry, design and L, a resumed one say, reuses its compiled parts)."""
    key = (name, json.dumps(des.entry.config, sort_keys=True, default=str), des.data,
           tuple(int(r) for r in des.rows), _inputs_digest(des), int(draws), bool(progress))
    if key not in _PROGRAMS:
        while len(_PROGRAMS) >= _PROGRAMS_KEPT:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        _PROGRAMS[key] = METHODS[name].program(des, draws, progress=progress)
    return _PROGRAMS[key]


def _inputs_digest(des: Design) -> str:
    """The design points' fingerprint (a data set given as a Dataset has no name to tell)."""
    return hashlib.sha256(np.ascontiguousarray(des.x, np.float64).tobytes()).hexdigest()[:16]


def methods_for(entry) -> list[str]:
    """The SBC methods that apply to ``entry`` (:data:`METHODS` order)."""
    return [name for name, m in METHODS.items() if m.applies(entry)]


def check_methods(entry, names) -> list[str]:
    """``names`` (None: all that apply) checked against the entry: one SSGPError otherwise."""
    usable = methods_for(entry)
    if names is None:
        return usable
    for name in names:
        if name not in METHODS:
            raise SSGPError(f"unknown SBC method {name!r}; known: {', '.join(METHODS)}")
        if name not in usable:
            raise SSGPError(f"SBC method {name!r} does not apply to {entry.name} (its SBC "
                            f"methods: {', '.join(usable)})")
    return list(dict.fromkeys(names))


# ----------------------------------------------------------------------------- the run


class Result(NamedTuple):
    """An SBC run: ``tree`` (the ArviZ DataTree: ranks, truths, per-simulation status), the
    summary rows (one per method × quantity) and the readings."""

    tree: object
    summary: list[dict]
    readings: dict
    done: int
    sims: int
    stopped: str | None


def _fingerprint(des: Design, sims, seed, draws, batch, names) -> dict:
    from ssgp_ppl.runtime.checkpoint import fingerprint

    return fingerprint(entry=des.entry.name, config=des.entry.config, data=des.data,
                       rows=[int(r) for r in des.rows], inputs=_inputs_digest(des), sims=sims,
                       seed=seed, draws=draws,
                       batch=batch, methods=list(names), jax=jax.__version__,
                       **({"versions": v} if (v := {n: METHODS[n].version for n in names
                                                    if METHODS[n].version != 1}) else {}),
                       x64=bool(jax.config.jax_enable_x64))


def _save(path: Path, fp: dict, state: dict) -> None:
    from ssgp_ppl.runtime.io import write_bytes_atomic

    buf = io.BytesIO()
    np.savez(buf, meta=np.asarray(json.dumps(fp, sort_keys=True)), **state)
    write_bytes_atomic(path, buf.getvalue())


def _load(path: Path, fp: dict) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            state = {k: np.asarray(z[k]) for k in z.files if k != "meta"}
    except Exception as e:  # noqa: BLE001  (any unreadable file: one line)
        raise SSGPError(f"{path}: not a readable SBC checkpoint ({type(e).__name__}: {e})") from None
    for k in sorted(set(meta) | set(fp)):
        if meta.get(k) != fp.get(k):
            what = ("an earlier version of a method's program: delete it to run again"
                    if k == "versions" else "use another --out or drop --resume")
            raise SSGPError(f"{path} was written by another SBC run ({k} differs): {what}")
    return state


ORIGIN_CHARS = 128  # an entry's name as a store's batch and the checkpoint record it


def _origin(name: str) -> str:
    """An entry's name as an origin (cut to :data:`ORIGIN_CHARS`, as the arrays keep it)."""
    return name[:ORIGIN_CHARS]


def _stored_path(store, name: str, identity: dict, y: np.ndarray, keys) -> Path:
    """Where ``store`` keeps method ``name``'s batch of (``identity``, ỹ, keys): by digest."""
    h = hashlib.sha256(json.dumps(identity, sort_keys=True).encode())
    h.update(np.ascontiguousarray(y).tobytes())
    h.update(np.ascontiguousarray(jax.random.key_data(keys) if jnp.issubdtype(
        keys.dtype, jax.dtypes.prng_key) else keys).tobytes())
    return Path(store) / f"{name}-{h.hexdigest()[:32]}.npz"


def _write_stored(path: Path, res: Batch, origin: str, seconds: float) -> None:
    from ssgp_ppl.runtime.io import write_bytes_atomic

    arrays = {f"site_{k}": np.asarray(v) for k, v in res.sites.items()}
    if res.weights is not None:
        arrays["weights"] = np.asarray(res.weights)
    buf = io.BytesIO()
    np.savez(buf, y_centre=np.asarray(res.y_centre), converged=np.asarray(res.converged),
             failed=np.asarray(res.failed), origin=np.asarray(_origin(origin)),
             seconds=np.asarray(float(seconds)), **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, buf.getvalue())


def _read_stored(path: Path) -> tuple[Batch, str, float] | None:
    """(the batch, the entry that computed it, its seconds); None where the file is missing or
    unreadable (the batch is computed again and the file replaced)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            sites = {k[len("site_"):]: np.asarray(z[k]) for k in z.files if k.startswith("site_")}
            res = Batch(sites, np.asarray(z["y_centre"]), np.asarray(z["converged"]),
                        np.asarray(z["failed"]),
                        np.asarray(z["weights"]) if "weights" in z.files else None)
            return res, str(z["origin"]), float(z["seconds"])
    except Exception:  # noqa: BLE001  (missing, partial or foreign: compute it)
        return None


class _Job(NamedTuple):
    """What a batch of an SBC run needs, picklable for a worker process: the simulated ỹ
    (N, n) and the test quantities' true values (N, Q) of the run; ``key``, the run's
    fingerprint, by which a worker knows its job; ``store``, the folder of shared batches
    (None: none)."""
    des: Design
    names: list
    sims: int
    seed: int
    draws: int
    batch: int
    y: np.ndarray
    truth: np.ndarray
    key: str
    store: str | None = None

    def method_batch(self, name: str, programs: dict, y, keys, progress: bool = False
                     ) -> tuple[Batch, float, str]:
        """Method ``name``'s batch of (ỹ, keys), its seconds and the entry whose run computed
        it: from the store where a run of the same identity left it (no program built), else
        computed here (and left in the store where the method has an identity)."""
        ident = METHODS[name].identity(self.des, self.draws) if self.store else None
        path = None if ident is None else _stored_path(self.store, name, ident, y, keys)
        if path is not None and (hit := _read_stored(path)) is not None:
            return hit[0], hit[2], hit[1]
        if name not in programs:
            programs[name] = program(name, self.des, self.draws, progress=progress)
        t0 = time.perf_counter()
        res = programs[name](y, keys)
        seconds = time.perf_counter() - t0
        if path is not None:
            try:
                _write_stored(path, res, self.des.entry.name, seconds)
            except (OSError, SSGPError) as e:  # the batch is this run's still: go on without
                warnings.warn(f"SBC store: {name}'s batch not kept ({e})", stacklevel=2)
        return res, seconds, _origin(self.des.entry.name)

    def stored(self, name: str, b: int) -> bool:
        """Whether the store holds method ``name``'s batch ``b`` (computed by another run)."""
        ident = METHODS[name].identity(self.des, self.draws) if self.store else None
        if ident is None:
            return False
        _, y, keys = self.batch_inputs(b)
        return _stored_path(self.store, name, ident, y, keys).is_file()

    def batch_inputs(self, b: int) -> tuple[np.ndarray, np.ndarray, jax.Array]:
        """Batch ``b``'s simulation indices, and its ỹ and keys padded to the compiled size (a
        short last batch repeats its simulations: the same compiled program)."""
        idx = np.arange(b * self.batch, min((b + 1) * self.batch, self.sims))
        full = np.resize(idx, self.batch)
        return idx, self.y[full], sim_keys(self.seed, full)

    def run_batch(self, b: int, programs: dict, progress: bool = False) -> dict:
        """Batch ``b``: per method, the ranks (method, simulation, quantity) of its
        simulations, converged and failed fits, its seconds (those of the run that computed it)
        and the entry whose run that was. ``programs``: this process's compiled method
        programs, filled on first use."""
        des, names, tq = self.des, self.names, self.truth
        idx, y, keys = self.batch_inputs(b)
        out = {"ranks": np.full((len(names), len(idx), tq.shape[-1]), np.nan),
               "converged": np.zeros((len(names), len(idx)), bool),
               "failed": np.zeros((len(names), len(idx)), bool),
               "seconds": np.zeros(len(names)),
               "origin": np.full(len(names), "", f"<U{ORIGIN_CHARS}")}
        for mi, name in enumerate(names):
            res, out["seconds"][mi], out["origin"][mi] = self.method_batch(name, programs, y,
                                                                           keys, progress)
            _, pq = quantities(des.spec, des.x, res.sites, y, res.y_centre)
            for j, i in enumerate(idx):
                rng = np.random.default_rng([self.seed, int(i), mi])
                out["ranks"][mi, j] = np.nan if res.failed[j] else ranks(pq[j], tq[i], rng)
                out["converged"][mi, j] = res.converged[j]
                out["failed"][mi, j] = res.failed[j]
        return out


_WORKER: dict = {}  # a worker process's job: its key, simulations and compiled programs


PARENT_POLL_SECONDS = 1.0  # how often a worker checks that the run that started it is alive


def _exit_with(parent: int) -> None:
    """End this process once ``parent`` is gone (killed by a signal that runs no cleanup
    there: SIGKILL, or SIGTERM to a process that does not handle it), so that no worker
    computes on for a run that no longer exists."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


def _worker_start(shares, x64: bool, parent: int) -> None:
    """A worker process on its share of the cores (the next of ``shares``, a queue of core
    sets; None: not pinned), in the parent's float width, before JAX starts its CPU backend.
    SIGINT is the parent's to handle: it stops the workers; a worker whose parent (process
    ``parent``) dies ends."""
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    share = shares.get()
    if share is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, share)
    jax.config.update("jax_enable_x64", x64)


def _worker_batch(job: _Job, b: int) -> tuple[dict, dict]:
    """Batch ``b`` of ``job`` in a worker process, and its compiled programs' cache sizes."""
    if _WORKER.get("key") != job.key:
        _WORKER.clear()
        _WORKER.update(key=job.key, programs={})
    out = job.run_batch(b, _WORKER["programs"])
    return out, {name: p.compiled() for name, p in _WORKER["programs"].items()}


def _run_parallel(job: _Job, todo: list, workers: int, cores: list, keep: Callable,
                  past_bound: Callable, max_minutes) -> tuple[str | None, dict]:
    """Batches ``todo`` over ``workers`` spawned processes, each pinned to an equal share of
    ``cores``; each finished batch is kept (checkpointed) as it comes, also when another fails
    or the run is interrupted. A new batch is not started past the time bound. Returns (why it
    stopped early or None, the workers' compiled programs' cache sizes, the largest of each);
    the processes end with the run."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = multiprocessing.get_context("spawn")
    shares = ctx.Queue()
    for i in range(workers):  # an equal share of the cores each; more workers than cores share
        if cores[0] is None:
            shares.put(None)
        elif workers <= len(cores):
            shares.put({int(c) for c in np.array_split(np.asarray(cores), workers)[i]})
        else:
            shares.put({int(cores[i % len(cores)])})
    env = {"OPENBLAS_NUM_THREADS": "1"}
    old = {k: os.environ.get(k) for k in env}
    stopped, compiled, pool, running = None, {}, None, {}

    def collect(futures) -> None:
        """Keep every batch of ``futures`` that finished well, then raise the first error."""
        error = None
        for fut in futures:
            b = running.pop(fut)
            if fut.cancelled():
                continue
            if fut.exception() is not None:
                error = error or fut.exception()
                continue
            out, progs = fut.result()
            for name, sizes in progs.items():
                compiled[name] = {k: max(v, compiled.get(name, {}).get(k, 0))
                                  for k, v in sizes.items()}
            keep(b, out)
        if error is not None:
            raise error

    try:
        os.environ.update(env)  # the spawned workers inherit it before numpy loads
        pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_start,
                                   initargs=(shares, bool(jax.config.read("jax_enable_x64")),
                                             os.getpid()))
        queue = list(todo)
        while queue or running:
            while queue and len(running) < workers:
                if past_bound(queue[0]):
                    stopped = f"--max-minutes {max_minutes:g} reached"
                    queue = []
                    break
                b = queue.pop(0)
                running[pool.submit(_worker_batch, job, b)] = b
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            collect(done)
    except BaseException:
        if running:  # an error or an interruption: keep what finished, stop the rest
            try:
                collect([f for f in list(running)
                         if f.done() and not f.cancelled() and f.exception() is None])
            except BaseException:  # noqa: S110  (a callback's second interruption: stop anyway)
                pass
        if pool is not None:
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
            pool = None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return stopped, compiled


def run(entry, data: str = "pendulum", *, sims: int = 100, methods_: list[str] | None = None,
        out: str | Path | None = None, seed: int = 0, draws: int = DRAWS, rows: int = ROWS,
        settings=SMALL_SETTINGS, batch: int = BATCH, max_minutes: float | None = None,
        resume: bool = False, progress: bool = True, callback: Callable | None = None,
        workers: int = 1, store: str | Path | None = None) -> Result:
    """SBC of ``entry``'s methods on the design points of ``data`` (see the module docstring).

    Parameters
    ----------
    entry
        A catalog name, TOML path or loaded entry (``settings`` are applied on top; with
        non-empty ones its SVI paths are first capped at :data:`SMALL_PATHS`: name
        ``svi.paths`` in them to keep more).
    data
        The data set whose training inputs are the design points.
    sims
        Simulations N.
    methods_
        SBC methods (:data:`METHODS`; default: all that apply to the entry).
    out
        A folder for the checkpoint (``sbc_checkpoint.npz``, after every batch), the DataTree
        (``sbc.nc``), the summary (``sbc.json``) and the figure (``sbc.png``); None: nothing
        written, nothing resumable.
    seed, draws, rows, settings, batch
        The seed; L posterior draws per simulation; design rows; catalog overrides (default
        :data:`SMALL_SETTINGS`); simulations per compiled batch.
    max_minutes
        Stop before a batch that would end past this bound; the result has the simulations done.
    resume
        Continue from ``out``'s checkpoint (the same settings; an error otherwise).
    callback
        ``callback(batch_index)`` after each batch is checkpointed.
    workers
        Processes that run batches side by side, each pinned to one of the CPU cores this
        process may use, in turn (more workers than cores share them); 1: batches run here, one
        after the other. A batch's result
        depends on its simulations' indices alone, so the ranks are those of one process. Each
        worker compiles the methods' programs once.
    store
        A folder of batches shared between runs: a method whose batch depends on the model alone
        (:meth:`SBCMethod.identity`: the reference) leaves each batch there under a digest of
        its identity, ỹ and keys, and takes it from there where a run of another entry with the
        same model, design, simulations and settings left it (``svbssgp`` and
        ``svbssgp_collapsed`` differ in their guide only: one reference serves both). Its
        seconds stay those of the run that computed it; the DataTree's ``timing`` says which
        entry's run that was. None: nothing shared.

    Returns
    -------
    Result
    """
    t_start = time.perf_counter()
    if not isinstance(sims, int) or isinstance(sims, bool) or sims < 1:
        raise SSGPError(f"sims must be a positive integer, got {sims!r}")
    if not isinstance(draws, int) or draws < 9:
        raise SSGPError(f"draws must be an integer >= 9, got {draws!r}")
    if not isinstance(batch, int) or batch < 1:
        raise SSGPError(f"batch must be a positive integer, got {batch!r}")
    if max_minutes is not None and not max_minutes > 0:
        raise SSGPError(f"max_minutes must be positive, got {max_minutes!r}")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise SSGPError(f"workers must be a positive integer, got {workers!r}")
    resources.release_compiled()  # a benchmark runs many entries in one process
    des = design(entry, data, rows=rows, settings=settings)
    names = check_methods(des.entry, methods_)
    if not names:
        raise SSGPError(f"{des.entry.name}: no SBC method applies")
    truth = simulate(des, sims, seed)
    qnames, tq = quantities(des.spec, des.x, {k: v[:, None] for k, v in truth.items()},
                            truth["y"])
    tq = tq[:, 0]
    q = len(qnames)
    batch = min(batch, sims)
    n_batches = -(-sims // batch)
    fp = _fingerprint(des, sims, seed, draws, batch, names)
    ckpt = None if out is None else Path(out) / CHECKPOINT
    state = {"ranks": np.full((len(names), sims, q), np.nan),
             "converged": np.zeros((len(names), sims), bool),
             "failed": np.zeros((len(names), sims), bool),
             "done": np.zeros(n_batches, bool), "seconds": np.zeros((len(names), n_batches)),
             "origin": np.full((len(names), n_batches), "", f"<U{ORIGIN_CHARS}")}
    if resume:
        if ckpt is None or not ckpt.exists():
            raise SSGPError(f"nothing to resume: {ckpt or 'no --out'} has no SBC checkpoint")
        state = _load(ckpt, fp)
        if "origin" not in state:  # a checkpoint from before stores: its batches its own
            state["origin"] = np.where(state["done"][None], _origin(des.entry.name), "").astype(
                f"<U{ORIGIN_CHARS}").repeat(len(names), 0)
    elif ckpt is not None and ckpt.exists():
        raise SSGPError(f"{ckpt} exists: continue it with --resume or choose another --out")
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
    programs = {}
    stopped = None
    from tqdm.auto import tqdm

    bar = tqdm(total=sims, initial=int(state["done"].sum()) * batch if n_batches else 0,
               desc=f"sbc {des.entry.name}", disable=not progress, leave=False)
    todo = [b for b in range(n_batches) if not state["done"][b]]
    job = _Job(des, names, sims, seed, draws, batch, np.asarray(truth["y"]), tq,
               json.dumps(fp, sort_keys=True), None if store is None else str(store))

    def keep(b: int, out: dict) -> None:
        idx = np.arange(b * batch, min((b + 1) * batch, sims))
        state["ranks"][:, idx] = out["ranks"]
        state["converged"][:, idx] = out["converged"]
        state["failed"][:, idx] = out["failed"]
        state["seconds"][:, b] = out["seconds"]
        state["origin"][:, b] = out["origin"]
        state["done"][b] = True
        if ckpt is not None:
            _save(ckpt, fp, state)
        bar.update(len(idx))
        if callback is not None:
            callback(b)

    def past_bound(b: int) -> bool:
        """Whether batch ``b`` would end past the bound: each method's longest batch so far,
        except the methods whose batch ``b`` the store holds already."""
        if max_minutes is None:
            return False
        elapsed = (time.perf_counter() - t_start) / 60
        longest = state["seconds"].max(axis=1, initial=0.0)
        return elapsed + sum(t for name, t in zip(names, longest, strict=True)
                             if not job.stored(name, b)) / 60 > max_minutes

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [None]
    workers = min(workers, max(1, len(todo)))
    worker_programs: dict = {}
    try:
        if workers == 1:
            for b in todo:
                if past_bound(b):
                    stopped = f"--max-minutes {max_minutes:g} reached"
                    break
                keep(b, job.run_batch(b, programs, progress))
        else:
            stopped, worker_programs = _run_parallel(job, todo, workers, cores, keep, past_bound,
                                                     max_minutes)
    finally:
        bar.close()
    done_mask = np.zeros(sims, bool)
    for b in np.flatnonzero(state["done"]):
        done_mask[b * batch:min((b + 1) * batch, sims)] = True
    compiled = {**worker_programs, **{name: p.compiled() for name, p in programs.items()}}
    tree = to_datatree(des, names, qnames, state, done_mask, tq, truth, draws=draws, seed=seed,
                       batch=batch, stopped=stopped, compiled=compiled)
    summ, reads = summarize(tree)
    result = Result(tree, summ, reads, int(done_mask.sum()), sims, stopped)
    if out is not None:
        write(result, Path(out))
    return result


def to_datatree(des: Design, names, qnames, state, done_mask, tq, truth, *, draws, seed, batch,
                stopped, compiled):
    """The ArviZ DataTree of an SBC run: ``ranks`` (method, simulation, quantity), ``truth``
    (simulation, quantity; and the simulated ``y``), ``status`` (method, simulation: converged,
    failed) and ``timing`` (method: seconds per simulation); root attributes say what was run."""
    import xarray as xr

    sims_done = np.flatnonzero(done_mask)
    coords = {"method": list(names), "simulation": sims_done, "quantity": list(qnames)}
    ranks_ = xr.Dataset({"rank": (("method", "simulation", "quantity"),
                                  state["ranks"][:, sims_done])}, coords=coords)
    truth_ = xr.Dataset({"value": (("simulation", "quantity"), tq[sims_done]),
                         "y": (("simulation", "obs"), truth["y"][sims_done])},
                        coords={"simulation": sims_done, "quantity": list(qnames)})
    status = xr.Dataset({"converged": (("method", "simulation"), state["converged"][:, sims_done]),
                         "failed": (("method", "simulation"), state["failed"][:, sims_done])},
                        coords={"method": list(names), "simulation": sims_done})
    per_sim = state["seconds"].sum(axis=1) / max(1, int(state["done"].sum()) * batch)
    # the batches another entry's run computed (a store's), and which entries those were
    own = _origin(des.entry.name)
    origin = np.asarray(state.get("origin", np.full(state["seconds"].shape, own)))
    done_b = np.asarray(state["done"], bool)
    shared = (origin != own) & (origin != "") & done_b[None]
    sizes = np.asarray([min((b + 1) * batch, len(done_mask)) - b * batch
                        for b in range(len(done_b))])
    timing = xr.Dataset({"seconds_per_simulation": (("method",), per_sim),
                         "shared_simulations": (("method",), (shared * sizes).sum(axis=1)),
                         "computed_by": (("method",), [
                             ", ".join(sorted(set(origin[i][done_b]) - {""})) or own
                             for i in range(len(names))])},
                        coords={"method": list(names)})
    attrs = {"entry": des.entry.name, "data": des.data, "rows": int(len(des.rows)),
             "m": int(des.spec.m), "inputs": int(des.spec.d), "draws": int(draws), "seed": int(seed),
             "sims": int(len(done_mask)), "sims_done": int(done_mask.sum()), "batch": int(batch),
             "stopped": stopped or "", "units": "model (standardised) units",
             "compiled_programs": json.dumps(compiled),
             "description": "simulation-based calibration (Talts et al. 2018; Modrák et al. "
                            "2023): rank of each simulated quantity among L posterior draws"}
    return xr.DataTree.from_dict({"/": xr.Dataset(attrs=attrs), "ranks": ranks_, "truth": truth_,
                                  "status": status, "timing": timing})


def summarize(tree) -> tuple[list[dict], dict]:
    """(rows, readings): one row per method × quantity (χ² p-value, share outside the band, the
    verdict) and the :class:`Reading` of each (method, quantity)."""
    ds = tree["ranks"].to_dataset()
    draws = int(tree.attrs["draws"])
    rows, reads = [], {}
    for meth in ds["method"].values:
        for qn in ds["quantity"].values:
            r = np.asarray(ds["rank"].sel({"method": meth, "quantity": qn}))
            rd = reading(r, draws)
            reads[(str(meth), str(qn))] = rd
            rows.append({"method": str(meth), "quantity": str(qn), "sims": rd.sims,
                         "chi2_p": rd.chi2_p, "outside_band": rd.outside,
                         "calibrated": rd.shape == "calibrated", "shape": rd.shape,
                         "verdict": rd.verdict})
    return rows, reads


def summary_lines(result: Result) -> list[str]:
    """One line per method × quantity, and a line per method with its tally."""
    lines = []
    for meth in dict.fromkeys(r["method"] for r in result.summary):
        rows = [r for r in result.summary if r["method"] == meth]
        ok = sum(r["calibrated"] for r in rows)
        lines.append(f"{meth}: {ok}/{len(rows)} quantities calibrated")
        lines += [f"  {r['quantity']}: {r['verdict']}" for r in rows]
    return lines


def to_json(result: Result) -> dict:
    """What ``sbc.json`` holds: the run's attributes, seconds per simulation and the summary."""
    t = result.tree
    return {"attrs": dict(t.attrs), "seconds_per_simulation": {
        str(m): float(v) for m, v in zip(t["timing"]["method"].values,
                                         t["timing"]["seconds_per_simulation"].values,
                                         strict=True)},
            "failed": {str(m): int(np.asarray(t["status"]["failed"].sel({"method": m})).sum())
                       for m in t["status"]["method"].values},
            "converged": {str(m): int(np.asarray(t["status"]["converged"].sel({"method": m})).sum())
                          for m in t["status"]["method"].values},
            **_shared(t), "summary": result.summary}


def _shared(tree) -> dict:
    """``{"shared": {method: {"simulations": k, "computed_by": entries}}}`` for the methods
    whose batches (k simulations) a store gave from other entries' runs; {} where none did."""
    tm = tree["timing"]
    if "shared_simulations" not in tm:
        return {}
    own = _origin(str(tree.attrs["entry"]))
    out = {str(m): {"simulations": int(k),
                    "computed_by": ", ".join(e for e in str(c).split(", ") if e != own)}
           for m, k, c in zip(tm["method"].values, tm["shared_simulations"].values,
                              tm["computed_by"].values, strict=True) if int(k) > 0}
    return {"shared": out} if out else {}


def write(result: Result, out: Path) -> None:
    """``sbc.nc``, ``sbc.json`` and ``sbc.png`` into ``out`` (each written atomically)."""
    import matplotlib.pyplot as plt

    from ssgp_ppl.runtime.io import write_bytes_atomic, write_datatree, write_json

    write_datatree(out / TREE, result.tree)
    write_json(out / SUMMARY, to_json(result))
    fig = figure(result)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    write_bytes_atomic(out / FIGURE, buf.getvalue())


def load(folder: str | Path) -> Result:
    """The :class:`Result` an SBC run wrote into ``folder`` (its ``sbc.nc``; the summary and
    readings recomputed from the ranks, as the run computed them)."""
    import xarray as xr

    path = Path(folder) / TREE
    if not path.is_file():
        raise SSGPError(f"{path} not found: give the folder an SBC run wrote (--out)")
    with xr.open_datatree(path) as opened:
        tree = opened.load()
    summ, reads = summarize(tree)
    return Result(tree, summ, reads, int(tree.attrs["sims_done"]), int(tree.attrs["sims"]),
                  tree.attrs.get("stopped") or None)


COMPARISON_FOLDER = "sbc"  # a comparison's SBC run, inside its output folder


def add_to_comparison(entry, data, out: str | Path, *, sims: int, seed: int = 0,
                      progress: bool = True) -> Result:
    """SBC of a comparison's entry on its data set's inputs (``ssgp-ppl compare --sbc N``,
    ``ssgp_ppl.compare(sbc=N)``): :func:`run` at its defaults, written into ``out/sbc``
    (continued from its checkpoint where an earlier run was interrupted), and its section added
    to ``out/report.html``.

    Parameters
    ----------
    entry
        The loaded entry as SBC runs it (:func:`small`), then the comparison's own overrides
        (not its budget) applied.
    data
        The comparison's data: a known name or its loaded
        :class:`~ssgp_ppl.data.datasets.Dataset`.
    out
        The comparison's output folder (holding ``report.html``).
    sims, seed
        Simulations N and the seed.
    progress
        Progress bars on stderr.

    Returns
    -------
    Result
    """
    out = Path(out)
    folder = out / COMPARISON_FOLDER
    res = run(entry, data, sims=sims, out=folder, seed=seed, settings=(), progress=progress,
              resume=(folder / CHECKPOINT).exists())
    add_to_report(out / "report.html", res)
    return res


def figure(result: Result, quantities_: list[str] | None = None, cols: int = 4):
    """Rank histograms and ECDF-difference plots with the simultaneous band: one pair of panels
    per quantity (histogram above, ECDF − uniform below), methods side by side (bars) and
    overlaid (lines)."""
    import matplotlib.pyplot as plt

    ds = result.tree["ranks"].to_dataset()
    draws = int(result.tree.attrs["draws"])
    meths = [str(m) for m in ds["method"].values]
    qs = quantities_ or [str(q) for q in ds["quantity"].values]
    cols = min(cols, len(qs))
    rows = -(-len(qs) // cols)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(3.2 * cols, 4.4 * rows), squeeze=False)
    bins = int(max(2, min(20, ds.sizes["simulation"] // 5)))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, qn in enumerate(qs):
        ah, ae = axes[2 * (k // cols), k % cols], axes[2 * (k // cols) + 1, k % cols]
        data = [np.asarray(ds["rank"].sel({"method": m, "quantity": qn})) for m in meths]
        data = [d[np.isfinite(d)] for d in data]
        ah.hist(data, bins=bins, range=(0, draws + 1), color=colors[:len(meths)], label=meths)
        total = max((len(d) for d in data), default=0)
        if total:
            ah.axhline(total / bins, color="k", lw=0.8, ls="--")
        ah.set_title(qn, fontsize=9)
        ah.set_yticks([])
        band = None
        for c, m in enumerate(meths):
            rd = result.readings[(m, qn)]
            if band is None and np.isfinite(rd.lower).all():
                band = rd
                ae.fill_between(rd.points, rd.lower, rd.upper, color="0.85", step="mid")
            ae.plot(rd.points, rd.delta, color=colors[c % len(colors)], lw=1.2,
                    label=f"{m}{'' if rd.verdict.startswith('calibrated') else ' ✗'}")
        ae.axhline(0, color="k", lw=0.6)
        ae.set_xlabel("fractional rank", fontsize=8)
        ae.tick_params(labelsize=7)
        if k == 0:
            ah.legend(fontsize=7)
            ae.set_ylabel("ECDF − uniform", fontsize=8)
        ae.legend(fontsize=6, loc="lower right")
    for k in range(len(qs), rows * cols):
        axes[2 * (k // cols), k % cols].axis("off")
        axes[2 * (k // cols) + 1, k % cols].axis("off")
    fig.suptitle(f"SBC of {result.tree.attrs['entry']} on {result.tree.attrs['data']} design "
                 f"points: {result.done} simulations, L = {draws}, "
                 f"{BAND:.0%} simultaneous band", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))  # the title's own strip
    return fig


FEW_SIMULATIONS = 50  # below this, a report says the readings show gross failures only


def html_section(result: Result) -> str:
    """The SBC section of a comparison report: per method its tally (quantities calibrated,
    fits converged and failed, seconds per simulation), one row per quantity with each method's
    reading (its shape and χ² p; the full verdict as the cell's tooltip), and the figure."""
    import base64
    import html

    import matplotlib.pyplot as plt

    fig = figure(result, cols=6)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    img = base64.b64encode(buf.getvalue()).decode()
    t = result.tree
    doc = to_json(result)
    meths = list(doc["seconds_per_simulation"])
    rows = {(r["method"], r["quantity"]): r for r in result.summary}
    qs = list(dict.fromkeys(r["quantity"] for r in result.summary))
    tally = []
    for m in meths:
        ok = sum(rows[(m, q)]["calibrated"] for q in qs)
        tally.append(f"<li><b>{html.escape(m)}</b>: {ok} of {len(qs)} quantities calibrated; "
                     f"{doc['converged'][m]} of {result.done} fits converged, "
                     f"{doc['failed'][m]} failed; {doc['seconds_per_simulation'][m]:.2f} s per "
                     "simulation</li>")

    def cell(r):
        p = "" if not np.isfinite(r["chi2_p"]) else f" (χ² p {r['chi2_p']:.2g})"
        style = "" if r["calibrated"] else ' style="color:#b00000"'
        return f'<td title="{html.escape(r["verdict"])}"{style}>{html.escape(r["shape"])}{p}</td>'

    body = "".join(f"<tr><td>{html.escape(q)}</td>{''.join(cell(rows[(m, q)]) for m in meths)}"
                   "</tr>" for q in qs)
    head = "".join(f"<th>{html.escape(m)}</th>" for m in meths)
    few = (f" With {result.done} simulations a reading catches gross miscalibration only, and "
           f"one failure among {len(qs)} quantities can be chance; a shape shared by related "
           "quantities (all the frequency spreads, say) is what carries information."
           if result.done < FEW_SIMULATIONS else "")
    stopped = f" Stopped early: {html.escape(result.stopped)}." if result.stopped else ""
    return (f"<h2>Simulation-based calibration</h2>\n<p>{result.done} of {result.sims} "
            f"simulations on {t.attrs['rows']} design points of {html.escape(t.attrs['data'])} "
            f"(the entry at m = {t.attrs['m']} with this comparison's overrides): parameters drawn "
            "from the prior, data simulated, each method fitted; the rank of each quantity of "
            f"the simulated parameters among L = {t.attrs['draws']} posterior draws is uniform "
            "for an exact posterior (Talts et al. 2018). A reading is <i>calibrated</i> when the "
            f"ECDF of the ranks stays inside the {BAND:.0%} simultaneous band and a χ² test does "
            f"not reject at {ALPHA:g}; otherwise its shape: <i>under-dispersed</i> (ranks at both "
            "ends: over-confident), <i>over-dispersed</i> (ranks in the middle: too wide), "
            "<i>biased high</i> or <i>low</i> (posterior above or below the truth). Quantities "
            f"are in the model's standardised units.{few}{stopped}</p>\n"
            f"<ul>{''.join(tally)}</ul>\n"
            f"<table><tr><th>quantity</th>{head}</tr>{body}</table>\n"
            f'<img src="data:image/png;base64,{img}" alt="SBC rank histograms and ECDF '
            'differences">\n')


def add_to_report(report: Path, result: Result) -> None:
    """Insert :func:`html_section` into a comparison's ``report.html`` (before ``</body>``),
    atomically."""
    from ssgp_ppl.runtime.io import write_text_atomic

    text = report.read_text()
    section = html_section(result)
    text = text.replace("</body>", section + "</body>") if "</body>" in text else text + section
    write_text_atomic(report, text)


__all__ = ["BAND", "COMPARISON_FOLDER", "DRAWS", "FEW_SIMULATIONS", "LAGS", "METHODS", "ROWS",
           "SHAPES", "SMALL_PATHS", "SMALL_SETTINGS",
           "Batch", "Design", "Reading", "Result", "add_to_comparison",
           "add_to_report", "check_entry", "check_methods", "chi2_p", "design", "figure",
           "fractional", "html_section", "load", "methods_for", "program", "quantities", "ranks",
           "reading", "run", "simulate", "small", "small_paths", "summarize", "summary_lines", "to_datatree",
           "to_json", "write"]
