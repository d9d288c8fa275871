"""Adaptive tempered SMC on a NumPyro model's potential (blackjax), the whole run inside one jit.

The target is tempered from the prior to the posterior, p_β(z) ∝ p(z) p(y | z)^β with β going from
0 to 1; each next β is the one that keeps the effective sample size of the reweighted particles at
``target_ess`` × N (Jasra et al. 2011), the particles are resampled (systematic) and moved by
``mcmc_steps`` HMC steps that leave p_β invariant. The HMC step size and the mass matrix are
tuned between temperatures from the particles themselves (their weighted covariance, dense or
diagonal; the acceptance of the last moves, Buchholz, Chopin & Jacob 2021). The sum of the log
incremental weights estimates the log evidence log p(y) (Del Moral, Doucet & Jasra 2006).

Kernels tuned on the particles they then move bias that estimate (Beskos, Jasra, Kantas & Thiery
2016); with a dense mass the bias is upward and measurable (a few tenths of a nat in 11
dimensions). By default one adaptive pilot run chooses the temperatures, step sizes and masses,
and the runs reuse them: their kernels are then fixed in advance and Ẑ is unbiased.

Tempering moves particles between modes where a single MCMC chain cannot: at small β the modes
are joined, and the particles follow them as β grows, keeping their posterior mass.

The model's potential comes from :func:`numpyro.infer.util.initialize_model`, so any NumPyro
model (with its reparameterisations) is a target; the prior part is the same model with its
observed sites hidden, plus the log Jacobian of each constrained site's transform.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.infer import Predictive
from numpyro.infer.util import initialize_model, log_density

from ssgp_ppl.errors import SSGPError

TARGET_ACCEPT = 0.8  # HMC acceptance the step size is tuned towards
MASS_JITTER = 1e-6  # added to the inverse mass's diagonal, relative to its own diagonal
DENSE_MASS_MAX_DIM = 50  # "auto": a dense inverse mass up to this dimension, diagonal above
MASS_CHOICES = ("auto", "dense", "diag")
PILOT_SEED_OFFSET = 7_919  # the pilot run's key, apart from the runs'


class SMCResult(NamedTuple):
    """One tempered SMC run.

    ``positions``: the final particles (N, D) in the model's unconstrained space (``unravel`` one
    row to get the site dict); ``samples``: the constrained latent sites, each (N, ...);
    ``log_evidence``: the estimate of log p(y); ``temperatures``: number of tempering steps;
    ``acceptance``: mean HMC acceptance of the last moves; ``log_likelihood``: (N,) log p(y | z)
    of each final particle; ``seconds``: wall time including compilation; ``schedule`` and
    ``step_sizes``, ``inverse_masses``: what the run used, to hand to an independent run (``pilot``).
    """

    positions: np.ndarray
    samples: dict
    log_evidence: float
    temperatures: int
    acceptance: float
    log_likelihood: np.ndarray
    seconds: float
    unravel: Callable
    schedule: np.ndarray | None = None  # (T + 1,) the temperatures β₀ = 0, …, β_T = 1
    step_sizes: np.ndarray | None = None  # (T,) the HMC step size used at each temperature
    inverse_masses: np.ndarray | None = None  # (T, D) or (T, D, D): each temperature's


def _observed_hidden(model):
    """``model`` with its observed sites hidden from the log density: the prior."""
    return handlers.block(model, hide_fn=lambda site: site.get("is_observed", False))


def data_potentials(model, x, y, seed: int = 0):
    """(log prior, log likelihood, unravel, latent names, transforms) of ``model`` on the flat
    unconstrained vector, each density a function ``(flat, data)`` of the data ``data = (x, y)``
    too: the form :func:`tempered_smc_program` takes, one function for every data set of the
    same shapes. ``(x, y)`` here fixes the shapes (and the latent sites); see :func:`potentials`
    for the densities themselves."""
    key = jax.random.PRNGKey(seed)
    # the initial point gives the sites' structure alone (the runs start at prior draws): its
    # gradient is not checked, which would evaluate it eagerly op by op
    full = initialize_model(key, model, model_args=(x, y), dynamic_args=True,
                            validate_grad=False)
    z0 = full.param_info.z
    if not z0:
        raise SSGPError("tempered SMC needs latent sample sites; this model has none")
    _, unravel = ravel_pytree(z0)
    trace = full.model_trace
    transforms = {k: biject_to(trace[k]["fn"].support) for k in z0}
    prior_model = _observed_hidden(model)

    def log_prior(flat, data):
        z = unravel(flat)
        value = {k: transforms[k](u) for k, u in z.items()}
        log_jacobian = sum(jnp.sum(transforms[k].log_abs_det_jacobian(u, value[k]))
                           for k, u in z.items())
        return log_density(prior_model, data, {}, value)[0] + log_jacobian

    def log_lik(flat, data):  # a failed likelihood (non-finite) weighs nothing
        value = -full.potential_fn(*data)(unravel(flat)) - log_prior(flat, data)
        return jnp.where(jnp.isfinite(value), value, -jnp.inf)

    return log_prior, log_lik, unravel, tuple(z0), transforms


def data_log_joint(model, x, y, seed: int = 0) -> Callable:
    """log p(z, y) of ``model`` on :func:`data_potentials`' flat unconstrained vector (the same
    ``unravel``), the Jacobian of the transforms included, as one function ``(flat, data)`` (−∞
    where it is not finite): NumPyro's potential, negated. It equals ``log_prior + log_lik``
    and costs one pass of the model where their sum costs the prior twice (a NUTS target)."""
    full = initialize_model(jax.random.PRNGKey(seed), model, model_args=(x, y), dynamic_args=True,
                            validate_grad=False)
    _, unravel = ravel_pytree(full.param_info.z)

    def log_joint(flat, data):
        value = -full.potential_fn(*data)(unravel(flat))
        return jnp.where(jnp.isfinite(value), value, -jnp.inf)

    return log_joint


def potentials(model, x, y, seed: int = 0):
    """(log prior, log likelihood, unravel, latent names, transforms) of ``model`` at (x, y) on
    the flat unconstrained vector, the log prior including the log Jacobian of the transforms (a
    normalised density in the unconstrained space, the one the prior draws follow); a non-finite
    log likelihood (a failed factorisation at an extreme draw) counts as −∞.

    The prior is the model's log density with its observed sites hidden, evaluated at the
    constrained values, plus the Jacobian computed here: NumPyro adds the Jacobian of a
    constrained site as an observed factor site, which hiding the observed sites would drop (and
    the likelihood would then carry it, so the tempered path p(z) p(y | z)^β would be wrong).
    :func:`data_potentials`' densities at ``data = (x, y)``."""
    log_prior, log_lik, unravel, names, transforms = data_potentials(model, x, y, seed)
    data = (x, y)
    return (lambda flat: log_prior(flat, data)), (lambda flat: log_lik(flat, data)), unravel, \
        names, transforms


def prior_positions(model, x, y, names, transforms, n: int, key) -> jax.Array:
    """n draws of the prior, flattened in the unconstrained space, (n, D)."""
    draws = Predictive(_observed_hidden(model), num_samples=n, return_sites=list(names))(key, x, y)
    return flatten(draws, transforms)


def flatten(sites: dict, transforms: dict) -> jax.Array:
    """(n, D) flat unconstrained vectors of n draws of the constrained ``sites`` (name -> (n, ...)),
    in the order :func:`potentials`' ``unravel`` reads them (ravel_pytree: sorted names)."""
    return jnp.concatenate([jnp.reshape(transforms[k].inv(jnp.asarray(sites[k])),
                                        (len(sites[k]), -1)) for k in sorted(transforms)], axis=1)


def mass_kind(mass: str, dim: int) -> str:
    """``mass`` ("auto" | "dense" | "diag") resolved for a D = ``dim`` target: "auto" is dense up
    to ``DENSE_MASS_MAX_DIM`` (a D × D factorisation per temperature), diagonal above."""
    if mass not in MASS_CHOICES:
        raise SSGPError(f"SMC mass must be one of {', '.join(MASS_CHOICES)}, got {mass!r}")
    if mass == "auto":
        return "dense" if dim <= DENSE_MASS_MAX_DIM else "diag"
    return mass


def inverse_mass(particles, weights, kind: str):
    """The weighted particles' covariance (``kind`` "dense") or variances ("diag"), plus
    ``MASS_JITTER`` times its diagonal: the inverse mass matrix of the HMC moves."""
    w = weights / jnp.sum(weights)
    centred = particles - w @ particles
    if kind == "diag":
        var = w @ centred**2
        return var * (1 + MASS_JITTER) + jnp.finfo(particles.dtype).tiny
    cov = (centred * w[:, None]).T @ centred
    cov = 0.5 * (cov + cov.T)
    return cov + jnp.diag(MASS_JITTER * jnp.diag(cov) + jnp.finfo(particles.dtype).tiny)


def tempered_smc(model, x, y, *, particles: int = 256, mcmc_steps: int = 10,
                 integration_steps: int = 8, target_ess: float = 0.5, seed: int = 0,
                 max_temperatures: int = 1000, mass: str = "auto",
                 pilot: bool | SMCResult = True, log_densities=None) -> SMCResult:
    """Adaptive tempered SMC of ``model`` given (x, y) (see the module docstring)."""
    return tempered_smc_runs(model, x, y, runs=1, particles=particles, mcmc_steps=mcmc_steps,
                             integration_steps=integration_steps, target_ess=target_ess,
                             seed=seed, max_temperatures=max_temperatures, mass=mass,
                             pilot=pilot, log_densities=log_densities)[0]


def _label(progress) -> str:
    return progress if isinstance(progress, str) else "tempered SMC"


class TemperatureBar:
    """A tqdm bar of the tempering: β × 1000 of the slowest of ``runs`` runs, with the number of
    temperatures so far; fed by ``jax.debug.callback`` from inside the compiled loop."""

    def __init__(self, runs: int, label: str):
        from tqdm.auto import tqdm

        self.beta = np.zeros(runs)
        self.label = label
        self.bar = tqdm(total=1000, desc=f"{label}: β 0.000, temperature 0", leave=True,
                        bar_format="{desc} |{bar}| {elapsed}")

    def update(self, run, temperature, beta) -> None:
        self.beta[int(run)] = max(self.beta[int(run)], float(beta))
        low = float(self.beta.min())
        self.bar.n = int(1000 * low)
        self.bar.set_description_str(f"{self.label}: β {low:.3f}, temperature {int(temperature)}",
                                     refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


class SMCRun(NamedTuple):
    """What one run of :func:`tempered_smc_program` returns, as arrays (each with a leading batch
    axis under ``jax.vmap``): ``positions`` (N, D) equally weighted draws of the posterior (the
    final particles resampled), ``beta`` the temperature reached (1 unless ``max_temperatures``
    ran out), ``log_evidence``, ``acceptance`` of the last moves, ``temperatures`` T,
    ``log_likelihood`` (N,) of each position, and what the run used, padded to
    ``max_temperatures``: ``schedule`` (β₀ = 0, …, β_T; then zeros), ``step_sizes`` and
    ``inverse_masses`` (the first T)."""

    positions: jax.Array
    beta: jax.Array
    log_evidence: jax.Array
    acceptance: jax.Array
    temperatures: jax.Array
    log_likelihood: jax.Array
    schedule: jax.Array
    step_sizes: jax.Array
    inverse_masses: jax.Array


def tempered_smc_program(log_prior: Callable, log_lik: Callable, *, dim: int, dtype,
                         particles: int = 256, mcmc_steps: int = 10, integration_steps: int = 8,
                         target_ess: float = 0.5, max_temperatures: int = 1000,
                         mass: str | Callable = "auto", pilot: SMCResult | None = None,
                         on_temperature: Callable | None = None) -> Callable:
    """The adaptive tempered SMC run (see the module docstring) as a pure function of its
    particles, key and data: ``run(z0, key, data, index=0)`` → :class:`SMCRun`, traceable, so
    that a caller jits it and vmaps it over independent runs of one data set
    (:func:`tempered_smc_runs`) or over data sets (:mod:`ssgp_ppl.diagnostics.sbc`).

    Parameters
    ----------
    log_prior, log_lik
        ``(flat (D,), data) -> scalar``: the log prior (normalised in the unconstrained space) and
        the log likelihood (−∞ where it fails) of :func:`data_potentials`.
    dim, dtype
        D and the float type of the particles.
    particles, mcmc_steps, integration_steps, target_ess, max_temperatures
        N; HMC moves per temperature and leapfrog steps per move; the share of the ESS each
        next temperature keeps (Jasra et al. 2011); the bound on T.
    mass
        "auto", "dense", "diag" (:func:`mass_kind`: from the weighted particles at each
        temperature) or a callable β ↦ (D, D) inverse mass.
    pilot
        A run whose temperatures, step sizes and inverse masses are reused (kernels fixed in
        advance); None: each run adapts them on its own particles.
    on_temperature
        ``on_temperature(index, t, β)`` on the host at each temperature (``jax.debug.callback``).

    Returns
    -------
    Callable
        ``run(z0 (N, D) prior draws, key, data, index=0)``: the run's key stream is
        ``fold_in(key, 1)`` for the moves and ``fold_in(key, 2)`` for the final resampling;
        ``index`` is what ``on_temperature`` is told.
    """
    import blackjax
    import blackjax.smc.tempered
    from blackjax.smc import resampling
    from blackjax.smc.ess import ess_solver
    from blackjax.smc.solver import dichotomy

    oracle = callable(mass)
    kind = "dense" if oracle else mass_kind(mass, dim)
    shape = (dim, dim) if kind == "dense" else (dim,)
    hmc_kernel = blackjax.hmc.build_kernel()
    fixed = pilot is not None
    if not fixed:
        schedule = jnp.zeros(max_temperatures + 1, dtype)
        steps = jnp.zeros(max_temperatures, dtype)
        masses = jnp.zeros((max_temperatures,) + shape, dtype)
    else:
        t = len(pilot.schedule) - 1
        if t > max_temperatures:
            raise SSGPError(f"the pilot's {t} temperatures exceed max_temperatures")
        schedule = jnp.ones(max_temperatures + 1, dtype).at[:t + 1].set(
            jnp.asarray(pilot.schedule, dtype))
        steps = jnp.zeros(max_temperatures, dtype).at[:t].set(jnp.asarray(pilot.step_sizes, dtype))
        if pilot.inverse_masses[0].shape != shape:
            raise SSGPError(f"the pilot's inverse masses are {pilot.inverse_masses[0].shape}, "
                            f"this run's {shape}")
        masses = jnp.zeros((max_temperatures,) + shape, dtype).at[:t].set(
            jnp.asarray(pilot.inverse_masses, dtype))

    def mcmc_step(key, state, logdensity, step_size, inverse_mass_matrix):
        return hmc_kernel(key, state, logdensity, step_size, inverse_mass_matrix,
                          integration_steps)

    def run(z0, key, data, index=0) -> SMCRun:
        def prior(flat):
            return log_prior(flat, data)

        def lik(flat):
            return log_lik(flat, data)

        kernel = blackjax.smc.tempered.build_kernel(prior, lik, mcmc_step, blackjax.hmc.init,
                                                    resampling.systematic)
        batched_lik = jax.vmap(lik)

        def next_temperature(state, i):
            if fixed:
                return schedule[i + 1]
            delta = ess_solver(batched_lik, state.particles, target_ess,
                               1.0 - state.tempering_param, dichotomy)
            return state.tempering_param + jnp.clip(delta, 0.0, 1.0 - state.tempering_param)

        def cond(carry):
            state, i = carry[0], carry[5]
            return (state.tempering_param < 1.0) & (i < max_temperatures)

        def body(carry):
            state, key, step, log_z, acc, i, sched, used, used_mass, run = carry
            key, sub = jax.random.split(key)
            beta = next_temperature(state, i)
            if on_temperature is not None:
                jax.debug.callback(on_temperature, run, i + 1, beta)
            step = steps[i] if fixed else step
            # the moves target the current temperature, whose weighted particles give the mass
            if oracle:
                inv_mass = jnp.asarray(mass(state.tempering_param), dtype)
            elif fixed:
                inv_mass = masses[i]
            else:
                inv_mass = inverse_mass(state.particles, state.weights, kind)
            params = {"step_size": jnp.full((1,), step), "inverse_mass_matrix": inv_mass[None]}
            state, info = kernel(sub, state, mcmc_steps, beta, params)
            acc = jnp.mean(info.update_info.acceptance_rate)
            used, used_mass = used.at[i].set(step), used_mass.at[i].set(inv_mass)
            # gently towards TARGET_ACCEPT; a collapse of the acceptance (a too long step at a
            # sharper temperature) cuts the step at once
            step = step * jnp.where(acc < 0.2, 0.3,
                                    jnp.exp(jnp.clip(acc - TARGET_ACCEPT, -0.5, 0.2)))
            return (state, key, step, log_z + info.log_likelihood_increment, acc, i + 1,
                    sched.at[i + 1].set(state.tempering_param), used, used_mass, run)

        zero = jnp.zeros((), dtype)
        step0 = jnp.asarray(2.0 / (math.sqrt(dim) * integration_steps), dtype)
        state = blackjax.smc.tempered.init(z0)
        state = state._replace(tempering_param=zero)
        carry = (state, jax.random.fold_in(key, 1), step0, zero, zero, jnp.asarray(0),
                 jnp.zeros(max_temperatures + 1, dtype), jnp.zeros(max_temperatures, dtype),
                 jnp.zeros((max_temperatures,) + shape, dtype), index)
        state, _, _, log_z, acc, temps, sched, used, used_mass, _ = jax.lax.while_loop(
            cond, body, carry)
        idx = resampling.systematic(jax.random.fold_in(key, 2), state.weights, particles)
        pos = state.particles[idx]  # equally weighted draws of the posterior
        return SMCRun(pos, state.tempering_param, log_z, acc, temps, batched_lik(pos), sched, used,
                      used_mass)

    return run


def tempered_smc_runs(model, x, y, *, runs: int = 2, particles: int = 256, mcmc_steps: int = 10,
                      integration_steps: int = 8, target_ess: float = 0.5, seed: int = 0,
                      max_temperatures: int = 1000, mass: str = "auto",
                      pilot: bool | SMCResult = True, log_densities=None,
                      progress: bool | str = False) -> list[SMCResult]:
    """``runs`` independent tempered SMC runs of ``model`` given (x, y), vectorised in one jit
    (one compilation; each run's ``seconds`` is the wall time of all of them): the program of
    :func:`tempered_smc_program` under ``jax.vmap`` over the runs' prior draws and keys.

    ``mass``: the HMC inverse mass, the weighted particles' covariance ("dense") or variances
    ("diag"), "auto" (:func:`mass_kind`), or a callable β ↦ (D, D) inverse mass (a kernel fixed in
    advance, for a target whose tempered covariances are known). ``pilot``: an earlier run whose
    temperatures, step sizes and inverse masses these runs reuse instead of choosing them from
    their own particles, so that their kernels are fixed in advance and Ẑ is unbiased (Del Moral,
    Doucet & Jasra 2006); True: one adaptive pilot run first (its own estimate is discarded);
    False: each run adapts on its own particles. A dense mass estimated from the particles it
    then moves biases log Ẑ upwards (+0.16 nats at N = 256 on the correlated 11-d Gaussian of
    :func:`ssgp_ppl.diagnostics.evidence.correlated_gaussian`, growing with the number of temperatures;
    reports/smc_evidence), the pilot's kernels do not (Beskos, Jasra, Kantas & Thiery 2016 on the
    bias of adaptive SMC). ``log_densities``: (log prior,
    log likelihood, prior draw(key, n)) on flat vectors, instead of ``model``'s. ``progress``:
    a bar of the temperature β from 0 to 1 (the slowest run's), updated from inside the compiled
    loop at every temperature; a text is its label."""
    if particles < 2:
        raise SSGPError(f"SMC needs at least 2 particles, got {particles}")
    if runs < 1:
        raise SSGPError(f"SMC needs at least one run, got {runs}")
    t0 = time.perf_counter()
    if pilot is True:
        pilot = tempered_smc_runs(model, x, y, runs=1, particles=particles,
                                  mcmc_steps=mcmc_steps, integration_steps=integration_steps,
                                  target_ess=target_ess, seed=seed + PILOT_SEED_OFFSET,
                                  max_temperatures=max_temperatures, mass=mass, pilot=False,
                                  log_densities=log_densities,
                                  progress=progress and f"{_label(progress)}, pilot run")[0]
    keys = jax.random.split(jax.random.PRNGKey(seed), runs)
    if log_densities is None:
        x, y = (None if a is None else jnp.asarray(a) for a in (x, y))
        log_prior, log_lik, unravel, names, transforms = data_potentials(model, x, y, seed)
        data = (x, y)
        z0 = jnp.stack([prior_positions(model, x, y, names, transforms, particles,
                                        jax.random.fold_in(k, 0)) for k in keys])
    else:
        flat_prior, flat_lik, draw = log_densities
        log_prior, log_lik = (lambda f, _: flat_prior(f)), (lambda f, _: flat_lik(f))
        data = None
        z0 = jnp.stack([draw(jax.random.fold_in(k, 0), particles) for k in keys])
        unravel, transforms = (lambda f: {"z": f}), {"z": lambda v: v}
    bar = TemperatureBar(runs, _label(progress) + (f", {runs} runs" if runs > 1 else "")) \
        if progress else None
    one = tempered_smc_program(log_prior, log_lik, dim=z0.shape[-1], dtype=z0.dtype,
                               particles=particles, mcmc_steps=mcmc_steps,
                               integration_steps=integration_steps, target_ess=target_ess,
                               max_temperatures=max_temperatures, mass=mass,
                               pilot=pilot or None,
                               on_temperature=None if bar is None else bar.update)
    try:  # the data closed over: one data set, the runs vmapped
        res = jax.jit(jax.vmap(lambda z, k, r: one(z, k, data, r)))(z0, keys, jnp.arange(runs))
        jax.block_until_ready(res.log_evidence)
    finally:
        if bar is not None:
            bar.close()
    pos, beta, log_z = res.positions, res.beta, res.log_evidence
    if float(jnp.min(beta)) < 1.0:
        raise SSGPError(f"tempered SMC did not reach the posterior in {max_temperatures} "
                        f"temperatures (β = {float(jnp.min(beta)):.3g}); lower target_ess")
    if not np.all(np.isfinite(np.asarray(log_z))):
        raise SSGPError("tempered SMC: the log evidence is not finite (every particle's "
                        "likelihood failed at some temperature); try --x64")
    samples = jax.vmap(jax.vmap(lambda f: {k: transforms[k](v) for k, v in unravel(f).items()}))(
        pos)
    jax.block_until_ready((res.log_likelihood, samples))
    seconds = time.perf_counter() - t0
    temps = np.asarray(res.temperatures)
    return [SMCResult(np.asarray(pos[r]), {k: np.asarray(v[r]) for k, v in samples.items()},
                      float(log_z[r]), int(temps[r]), float(res.acceptance[r]),
                      np.asarray(res.log_likelihood[r]), seconds, unravel,
                      np.asarray(res.schedule[r, :temps[r] + 1]),
                      np.asarray(res.step_sizes[r, :temps[r]]),
                      np.asarray(res.inverse_masses[r, :temps[r]]))
            for r in range(runs)]


__all__ = ["SMCResult", "SMCRun", "data_log_joint", "data_potentials", "flatten", "inverse_mass", "mass_kind",
           "potentials", "prior_positions", "tempered_smc", "tempered_smc_program",
           "tempered_smc_runs"]
