"""Runners: SVI with many steps inside one jit, NUTS with several chains, and site extraction.

SVI is a pure kernel (:func:`svi_kernel`: ``init``, ``step``, and ``chunk``: many steps in one
jitted ``lax.scan``, since a Python loop around a jitted step costs ~4 ms of dispatch per step on a
small CPU) and one driver (:func:`drive_svi`) holding what happens between chunks: the NaN check, the
stop rule (:class:`_Convergence`), a tqdm bar on stderr, checkpoints and Ctrl-C. :func:`run_svi`
drives one run; :func:`run_svi_paths` drives K runs as ``jax.vmap`` of the same kernel
(:func:`vmapped_chunk`), as does simulation-based calibration (:mod:`ssgp_ppl.diagnostics.sbc`), each run
with its own simulated y.
Minibatches are drawn *with* replacement by ``random.randint`` (O(batch) per step, unbiased).
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro import handlers
from numpyro.infer import MCMC, NUTS, SVI, Predictive, Trace_ELBO
from numpyro.infer.reparam import LocScaleReparam
from tqdm.auto import tqdm

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.runtime import checkpoint as ckpt_io
from ssgp_ppl.runtime import sharding, signals


class SVIResult(NamedTuple):
    """Outcome of :func:`run_svi`: constrained params, the loss of every step, timing, and the stop
    rule's last reading (:class:`_Convergence`): the loss's improvement per 1,000 steps, its
    standard error and the tolerance it was held to (nats; None before 3 chunks)."""

    params: dict
    losses: np.ndarray  # (steps_run,)
    steps: int
    converged: bool
    seconds: float
    first_chunk: tuple[int, float] = (0, 0.0)  # (steps, seconds) of the first chunk, JIT included
    interrupted: bool = False  # stopped by Ctrl-C (SIGINT) after a whole chunk
    stop_signal: str | None = None  # the signal that stopped it (SIGINT, SIGTERM, SIGHUP)
    improvement: float | None = None  # nats per 1,000 steps at the end
    improvement_se: float | None = None
    tolerance: float | None = None  # tol · n: what converged means, nats per 1,000 steps
    failed: bool = False  # its loss turned NaN/inf and drive_svi(on_nan="stop") stopped it there


def batch_sampler(n: int, batch_size: int | None = None, partitions=None, per_step: int = 1,
                  mesh=None, distinct: bool = False, seed: int = 0):
    """``(draw, aux)``: a pure ``draw(key, x, y, aux) -> (x_b, y_b, model_kwargs)`` for one SVI
    step and the arrays ``aux`` it reads (passed to the jitted loop as arguments).

    * neither: the full data every step;
    * ``batch_size``: rows drawn uniformly with replacement, likelihood scaled by n / batch; with
      ``distinct``, ``batch_size`` different rows: a window at a uniform offset into a random
      order of the rows drawn from ``seed`` (each row in a batch with probability batch / n; O(b)
      a step where a fresh permutation would be O(n log n)), as a likelihood that
      does not factorise over rows needs (:class:`~ssgp_ppl.model.ssgp.SSGPMarginal`: a row twice
      would count as two noisy copies);
    * ``partitions`` (:class:`~ssgp_ppl.inference.partitions.Partitions`): ``per_step`` = a of the p
      padded blocks drawn uniformly, masked, likelihood scaled by p / a (Hoang et al. 2017, §4.1
      eq. 7; extended version, App. G). O(a · block size) per step, independent of n.

    ``mesh`` (:func:`ssgp_ppl.runtime.sharding.row_mesh`): the step's rows are split over its devices
    (block columns padded with masked rows to a multiple of the device count; a uniform batch is
    split when the count divides it).
    """
    if partitions is not None:
        blocks = np.asarray(partitions.blocks)
        mask = np.asarray(partitions.mask)
        p = partitions.count
        if not 1 <= per_step <= p:
            raise SSGPError(f"partitions per step must be in [1, {p}], got {per_step}")
        pad = sharding.padded_size(blocks.shape[1], mesh) - blocks.shape[1]
        if pad:  # masked rows (index 0) so that a · size splits evenly over the devices
            blocks = np.pad(blocks, ((0, 0), (0, pad)))
            mask = np.pad(mask, ((0, 0), (0, pad)))

        def draw(key, x, y, aux):
            blocks, mask = aux
            k = jax.random.randint(key, (per_step,), 0, p)
            idx = sharding.split_rows(blocks[k].reshape(-1), mesh)
            xb, yb = sharding.split_rows(x[idx], mesh), sharding.split_rows(y[idx], mesh)
            obs_mask = sharding.split_rows(mask[k].reshape(-1), mesh)
            return xb, yb, {"obs_mask": obs_mask, "obs_scale": p / per_step}

        return draw, (jnp.asarray(blocks), jnp.asarray(mask))
    if batch_size is not None and batch_size < n:
        if mesh is not None and batch_size % mesh.size:
            mesh = None  # rows cannot split evenly: every device computes the whole batch

        if distinct:
            order = np.random.default_rng(seed).permutation(n)

            def draw(key, x, y, aux):
                start = jax.random.randint(key, (), 0, n)
                idx = sharding.split_rows(aux[0][(start + jnp.arange(batch_size)) % n], mesh)
                return (sharding.split_rows(x[idx], mesh), sharding.split_rows(y[idx], mesh),
                        {"n_total": n})

            return draw, (jnp.asarray(order),)

        def draw(key, x, y, aux):
            idx = sharding.split_rows(jax.random.randint(key, (batch_size,), 0, n), mesh)
            return sharding.split_rows(x[idx], mesh), sharding.split_rows(y[idx], mesh), {"n_total": n}

        return draw, ()
    return (lambda key, x, y, aux: (x, y, {})), ()


PER_STEPS = 1000  # the stop rule's rate unit: improvement of the loss per this many steps
TOL_PER_POINT = 1e-3  # default tol: nats per training row per PER_STEPS steps


class Schedule(NamedTuple):
    """How SVI / type-II training steps: at most ``steps`` Adam steps of size ``lr`` (halved every
    ``lr_halflife`` steps when > 0), ``chunk`` steps per jitted scan, and the convergence stop
    (``tol`` nats per training row per 1,000 steps, a window of at least 2 · ``patience`` chunks,
    never before ``min_steps``; :class:`_Convergence`)."""

    steps: int
    lr: float = 0.01
    lr_halflife: float = 0.0
    chunk: int = 250
    tol: float = TOL_PER_POINT
    patience: int = 4
    min_steps: int = 0


class Batching(NamedTuple):
    """Which rows a step sees (:func:`batch_sampler`): all, ``batch_size`` uniform rows (different
    rows with ``distinct``), or ``per_step`` of the ``partitions``."""

    batch_size: int | None = None
    partitions: object | None = None  # ssgp_ppl.inference.partitions.Partitions
    per_step: int = 1
    distinct: bool = False  # a batch of different rows (a likelihood that does not factorise)


def optimizer(lr: float, lr_halflife: float = 0.0) -> numpyro.optim.ClippedAdam:
    """The one optimiser of every SVI / type-II fit and of the β selection: Adam with gradient
    norm clipped at 100, step ``lr`` halved every ``lr_halflife`` steps when that is > 0 (decaying
    steps as stochastic approximation needs, Hoang et al. 2017, §4.1 last paragraph)."""
    step_size = lr if not lr_halflife else (lambda t: lr * 0.5 ** (t / lr_halflife))
    return numpyro.optim.ClippedAdam(step_size=step_size, clip_norm=100.0)


class Trend(NamedTuple):
    """The loss's improvement per :data:`PER_STEPS` steps (minus the least-squares slope of the
    chunk means over the rule's window) and its standard error (nats)."""

    improvement: float
    se: float

    @property
    def bound(self) -> float:
        """|estimate| + 2 standard errors: what the stop rule holds to its tolerance."""
        return abs(self.improvement) + 2.0 * self.se


def loss_trend(mids, means, window: int) -> Trend | None:
    """The :class:`Trend` of the chunk means ``means`` (k,) at the chunks' middle steps ``mids``
    (k,) over the last max(``window``, ⌈k/2⌉) chunks (None with fewer than 3). The standard
    error comes from the residuals of the chunk means about the line, so autocorrelation within a
    chunk (Adam's iterates wander) costs nothing, and a deterministic loss on a line has SE 0."""
    k = len(means)
    w = min(k, max(window, k - k // 2))
    if w < 3:
        return None
    t = np.asarray(mids[-w:], np.float64)
    m = np.asarray(means[-w:], np.float64)
    tc = t - t.mean()
    sxx = float(tc @ tc)
    slope = float(tc @ (m - m.mean())) / sxx
    resid = m - m.mean() - slope * tc
    se = float(np.sqrt(max(float(resid @ resid), 0.0) / (w - 2) / sxx))
    return Trend(-slope * PER_STEPS, se * PER_STEPS)


class _Convergence:
    """The stop rule: converged when, after ``min_steps`` and at least 2 · ``patience`` chunks, the
    loss's improvement per 1,000 steps (:func:`loss_trend`: a least-squares slope over the last
    half of the trace, at least 2 · ``patience`` chunks) lies within ± ``tol`` · ``n`` nats with
    its 2-SE band: |estimate| + 2 SE ≤ ``tol`` · ``n`` (``n``: the rows the loss is scaled to).
    The upper bound keeps a slow drift from passing as noise; the lower one keeps a short, noisy
    window (whose SE, from few residuals, is itself noisy) from passing by chance. The window
    grows with the run, so the SE of a noisy loss shrinks until a real drift shows."""

    def __init__(self, schedule: Schedule, n: int, means=(), mids=()):
        self.s, self.n = schedule, n
        self.means, self.mids = list(means), list(mids)

    @property
    def trend(self) -> Trend | None:
        return loss_trend(self.mids, self.means, 2 * self.s.patience)

    @property
    def tolerance(self) -> float:
        """Nats per 1,000 steps below which the loss counts as settled."""
        return self.s.tol * self.n

    def add(self, losses: np.ndarray, done: int) -> bool:
        self.means.append(float(np.mean(losses, dtype=np.float64)))
        self.mids.append(float(done) - 0.5 * len(losses))  # the chunk's middle step
        if len(self.means) < 2 * self.s.patience or done < self.s.min_steps:
            return False
        return bool(self.trend.bound <= self.tolerance)


# a checkpointed run stops gracefully (finish the chunk, save, return what there is) on
# signals.STOP_SIGNALS: Ctrl-C, a scheduler's / container's / `timeout`'s SIGTERM, a closed
# terminal's SIGHUP
HANDLE_IGNORED_SIGINT = "SSGP_PPL_HANDLE_SIGINT"  # =1: handle SIGINT even when inherited ignored


@contextmanager
def _graceful_sigint(enabled: bool):
    """Yields a dict whose "requested" turns True on SIGINT, SIGTERM or SIGHUP when ``enabled``
    (main thread), and whose "signal" names it; a second signal acts at once (the previous
    handler; Python's KeyboardInterrupt for an inherited-ignored SIGINT). A signal the process
    inherited as ignored stays ignored (``nohup``; a job started with ``&`` ignores SIGINT) unless
    ``SSGP_PPL_HANDLE_SIGINT=1`` asks for SIGINT. The previous handlers are restored."""
    stop = {"requested": False, "signal": None}

    def on_signal(num, frame):  # finish the chunk, save, return what there is
        stop["requested"] = True
        stop["signal"] = signal.Signals(num).name
        for k, v in previous.items():  # a second signal acts at once
            signal.signal(k, signal.default_int_handler if v is signal.SIG_IGN else v)

    def keep_ignored(name):
        return not (name == "SIGINT" and os.environ.get(HANDLE_IGNORED_SIGINT) == "1")

    with signals.handled(signals.STOP_SIGNALS if enabled else (), on_signal,
                         keep_ignored) as previous:
        yield stop


class SVIState(NamedTuple):
    """The SVI kernel's state (:func:`svi_kernel`): NumPyro's SVI state (optimiser state and its
    key) and the key of the batch stream."""

    svi: object  # numpyro.infer.svi.SVIState
    key: jax.Array


class SVIKernel(NamedTuple):
    """A pure SVI kernel in blackjax's shape: ``init(rng_key, x, y, aux, init_params=None)`` →
    :class:`SVIState`; ``step(state, x, y, aux)`` → (state, loss): one Adam step on the rows
    ``draw`` takes from the batch key; ``chunk(state, x, y, aux, length, active=None)`` → (state,
    losses (length,)): ``length`` steps in one ``lax.scan`` (with ``active`` False the state stays
    as it is, a frozen path of a vmapped run); ``params(state)``: the constrained parameters."""

    init: Callable
    step: Callable
    chunk: Callable
    params: Callable


def svi_kernel(model: Callable, guide: Callable, schedule: Schedule, *, draw: Callable, loss=None,
               init_draw: Callable | None = None) -> SVIKernel:
    """The :class:`SVIKernel` minimising ``loss`` (default NumPyro's Trace_ELBO) of ``model``
    under ``guide`` with :func:`optimizer` on the rows ``draw`` takes (:func:`batch_sampler`);
    ``init`` draws its batch with ``init_draw`` (default ``draw``)."""
    svi = SVI(model, guide, optimizer(schedule.lr, schedule.lr_halflife),
              Trace_ELBO() if loss is None else loss)
    init_draw = draw if init_draw is None else init_draw

    def init(rng_key, x, y, aux, init_params: dict | None = None) -> SVIState:
        key_init, key_batch = jax.random.split(rng_key)
        xb, yb, kw = init_draw(key_batch, x, y, aux)
        return SVIState(svi.init(key_init, xb, yb, init_params=init_params, **kw), key_batch)

    def step(state: SVIState, x, y, aux):
        key, sub = jax.random.split(state.key)
        xb, yb, kw = draw(sub, x, y, aux)
        new, value = svi.update(state.svi, xb, yb, **kw)
        return SVIState(new, key), value

    def chunk(state: SVIState, x, y, aux, length: int, active=None):
        def body(st, _):
            new, value = step(st, x, y, aux)
            if active is not None:  # a frozen path keeps its SVI state
                new = new._replace(svi=jax.tree.map(lambda a, b: jnp.where(active, a, b),
                                                    new.svi, st.svi))
            return new, value

        return jax.lax.scan(body, state, None, length=length)

    return SVIKernel(init, step, chunk, lambda state: svi.get_params(state.svi))


def run_svi(model: Callable, guide: Callable, x, y, schedule: Schedule, *, loss=None,
            batching: Batching | None = None, seed: int = 0, progress: bool = True,
            desc: str = "svi", callback: Callable[[int, dict], None] | None = None,
            init_params: dict | None = None, checkpoint: ckpt_io.Checkpoint | None = None,
            devices: int | None = None) -> SVIResult:
    """Minimise ``loss`` (default NumPyro's Trace_ELBO; an objective of :mod:`ssgp_ppl.inference.objectives`)
    of ``model`` under ``guide`` with :func:`optimizer`, ``schedule.steps`` being an upper bound:
    :func:`svi_kernel`'s chunks driven by :func:`drive_svi`.

    Each step uses the rows of ``batching`` (:func:`batch_sampler`: full data, random rows, or
    partitions, Hoang et al. 2017, §4.1). A NaN loss stops the run with an error naming the step
    and the last finite loss. ``init_params`` (constrained values) warm-starts the guide;
    ``callback(steps_done, params)`` runs on the host after each chunk.

    ``checkpoint`` (:class:`ssgp_ppl.runtime.checkpoint.Checkpoint`): the state is saved atomically at the
    first chunk boundary past every ``checkpoint.every`` steps and at the end; with ``resume`` the
    run continues from the saved state (same chunks, same key stream: the final parameters equal
    an uninterrupted run's). With a checkpoint, Ctrl-C stops after the current chunk, saves, and
    returns the result so far with ``interrupted=True``.

    ``devices``: how many JAX devices share each step's rows (:mod:`ssgp_ppl.runtime.sharding`). Default:
    all of ``jax.devices()`` under :mod:`jax.distributed` (process 0 writes the checkpoint) and on
    accelerators when steps draw partitions or a minibatch; 1 on a single CPU process, whose host
    "devices" share the same cores (``benchmarks/performance.py devices``).
    """
    if schedule.steps < 1:
        raise SSGPError(f"steps must be >= 1, got {schedule.steps}")
    bs, partitions, per_step, distinct = batching or Batching()
    rows_drawn = partitions is not None or (bs is not None and bs < np.shape(x)[0])
    if devices is None:
        several = jax.process_count() > 1 or (rows_drawn and jax.default_backend() != "cpu")
        devices = len(jax.devices()) if several else 1
    mesh = sharding.row_mesh(devices)
    x, y = jnp.asarray(x), jnp.asarray(y)
    draw, aux = batch_sampler(x.shape[0], bs, partitions, per_step, mesh, distinct, seed)
    # init on this process's arrays (no mesh: under jax.distributed the mesh spans processes)
    draw0, aux0 = (draw, aux) if mesh is None else batch_sampler(x.shape[0], bs, partitions, per_step,
                                                                   distinct=distinct, seed=seed)
    kernel = svi_kernel(model, guide, schedule, draw=draw, loss=loss, init_draw=draw0)
    state = kernel.init(jax.random.PRNGKey(seed), x, y, aux0, init_params=init_params)
    saved = None
    if checkpoint is not None and checkpoint.resume:
        saved = ckpt_io.load(checkpoint)
        leaves, treedef = jax.tree.flatten(state.svi)
        leaves = ckpt_io.restore_leaves(leaves, saved, checkpoint.path)
        state = SVIState(jax.tree.unflatten(treedef, [jnp.asarray(v) for v in leaves]),
                         jnp.asarray(saved.key))
    # data, state and key on every device of the mesh (global arrays across processes)
    state, x, y, aux = sharding.replicate((state, x, y, aux), mesh)
    # state, key and losses stay replicated on every device (each process reads its own copy)
    chunk = jax.jit(kernel.chunk, static_argnums=4,
                    out_shardings=None if mesh is None else sharding.replicated(mesh))
    return drive_svi(lambda st, active, length: chunk(st, x, y, aux, length), state, schedule,
                  int(x.shape[0]), paths=0, params=lambda st, i: kernel.params(st),
                  progress=progress, desc=desc, callback=callback, checkpoint=checkpoint,
                  saved=saved)[0]


def run_svi_paths(pairs: list[tuple[Callable, Callable]], x, y, schedule: Schedule, *, loss=None,
                  batching: Batching | None = None, seeds: list[int], progress: bool = True,
                  desc: str = "svi") -> list[SVIResult]:
    """K runs of :func:`run_svi` as one: ``jax.vmap`` of one :func:`svi_kernel`'s chunk over the
    paths inside one jit (:func:`vmapped_chunk`), driven by :func:`drive_svi` (one progress bar,
    "``desc`` ×K paths"). Path k is ``pairs[k]`` = (model, guide), initialised by its own guide
    (its start) with the key stream of ``seeds[k]``; every path then takes the same update, so the
    models and guides must differ only in their starting values. A path that meets the stop rule
    is frozen (its later steps are masked out), so each path's result is the one of its own run.
    Single process, no checkpoint (use :func:`run_svi` path by path for those)."""
    if schedule.steps < 1:
        raise SSGPError(f"steps must be >= 1, got {schedule.steps}")
    bs, partitions, per_step, distinct = batching or Batching()
    x, y = jnp.asarray(x), jnp.asarray(y)
    draw, aux = batch_sampler(x.shape[0], bs, partitions, per_step, distinct=distinct,
                              seed=seeds[0])  # the paths share aux: one row order
    kernels = [svi_kernel(model, guide, schedule, draw=draw, loss=loss) for model, guide in pairs]
    states = [k.init(jax.random.PRNGKey(seed), x, y, aux)
              for k, seed in zip(kernels, seeds, strict=True)]
    kernel = kernels[0]  # its update (set up by its init) serves every path
    state = jax.tree.map(lambda *a: jnp.stack(a), *states)
    chunk = vmapped_chunk(kernel)
    return drive_svi(lambda st, active, length: chunk(st, jnp.asarray(active), x, y, aux, length),
                  state, schedule, int(x.shape[0]), paths=len(pairs),
                  params=lambda st, i: kernel.params(jax.tree.map(lambda a: a[i], st)),
                  progress=progress, desc=desc)


def vmapped_chunk(kernel: SVIKernel, *, y_per_run: bool = False) -> Callable:
    """``kernel``'s chunk under ``jax.vmap`` over R runs inside one jit, the program
    :func:`drive_svi` advances vmapped runs with.

    Parameters
    ----------
    kernel
        An :func:`svi_kernel` (its ``init`` called once: its update serves every run).
    y_per_run
        False: every run fits the same y (n,) (the paths of :func:`run_svi_paths`); True: run r
        fits its own ``y[r]`` (R, n) (the simulations of :mod:`ssgp_ppl.diagnostics.sbc`).

    Returns
    -------
    Callable
        ``chunk(state, active, x, y, aux, length)`` → (state, losses (R, length)), ``state`` the
        runs' :class:`SVIState` stacked, ``active`` (R,) False for a frozen run (its state kept),
        ``length`` static. One compilation per ``length`` and shapes, reused by every call.
    """
    y_axis = 0 if y_per_run else None

    @functools.partial(jax.jit, static_argnums=5)
    def chunk(st, active, x, y, aux, length):
        return jax.vmap(lambda s, a, yy: kernel.chunk(s, x, yy, aux, length, a),
                        in_axes=(0, 0, y_axis))(st, active, y)

    return chunk


NAN_CHOICES = ("raise", "stop")


def drive_svi(advance: Callable, state, schedule: Schedule, rows: int, *, paths: int,
              params: Callable, progress: bool, desc: str, callback: Callable | None = None,
              checkpoint: ckpt_io.Checkpoint | None = None, saved: ckpt_io.Saved | None = None,
              on_nan: str = "raise") -> list[SVIResult]:
    """The one loop around an SVI kernel's jitted chunks (:func:`run_svi`,
    :func:`run_svi_paths`, :mod:`ssgp_ppl.diagnostics.sbc`).

    After each chunk: the NaN check, each run's stop rule (:class:`_Convergence`: converged when
    the loss's improvement per 1,000 steps, with its 2-SE band, is within ``schedule.tol`` ·
    ``rows`` nats), one progress bar, ``callback``, Ctrl-C / SIGTERM / SIGHUP (with a
    ``checkpoint``: stop after the chunk and save) and the checkpoint's saves. A run that
    converges is frozen (its later steps masked out by ``advance``).

    Parameters
    ----------
    advance
        ``advance(state, active, length)`` → (state, losses): ``length`` steps of one run
        (``paths`` = 0; losses (length,)) or of ``paths`` vmapped runs (losses (paths, length);
        ``active`` (paths,) False for a frozen run), e.g. :func:`vmapped_chunk`'s program.
    state
        The runs' initial state.
    schedule, rows
        The steps, chunk length and stop rule; the rows the loss is scaled to.
    paths
        0 for one run, else the number of vmapped runs.
    params
        ``params(state, k)``: run k's constrained parameters.
    progress, desc
        One tqdm bar on stderr and its label ("``desc`` ×K paths" for K runs).
    callback
        ``callback(steps_done, params)`` of run 0 after each chunk, on the host.
    checkpoint, saved
        Save run 0's state as :func:`run_svi` says; ``saved`` (its loaded checkpoint) resumes
        the bookkeeping.
    on_nan
        A loss turned NaN/inf: "raise" an SSGPError naming the step and the last finite loss;
        "stop" that run alone (frozen from then on, its result ``failed``; a batch of
        simulations, where one bad draw must not end the others).

    Returns
    -------
    list[SVIResult]
        One per run.
    """
    if on_nan not in NAN_CHOICES:
        raise SSGPError(f"on_nan must be one of {', '.join(NAN_CHOICES)}, got {on_nan!r}")
    steps, size, count = schedule.steps, schedule.chunk, max(paths, 1)
    losses: list[list[np.ndarray]] = [[] for _ in range(count)]
    convs = [_Convergence(schedule, rows) for _ in range(count)]
    done, converged = np.zeros(count, int), np.zeros(count, bool)
    failed = np.zeros(count, bool)
    first_chunk, seconds_before = (0, 0.0), 0.0
    if saved is not None:
        done[0], converged[0], first_chunk = saved.done, saved.converged, saved.first_chunk
        losses[0] = [saved.losses] if saved.losses.size else []
        convs[0] = _Convergence(schedule, rows, saved.means, saved.mids)
        seconds_before = saved.seconds
    if jax.process_count() > 1 and len(set(resumed := sharding.gather_scalar(int(done[0])))) > 1:
        raise SSGPError(f"the processes resumed from different steps {resumed}: "
                        "resuming across processes needs the run directory on a shared file system")
    last_saved = int(done[0])
    start = time.perf_counter()

    def save():
        if jax.process_index() == 0:
            ckpt_io.save(checkpoint, sharding.host(jax.tree.leaves(state.svi)),
                         sharding.host(state.key), int(done[0]),
                         np.concatenate(losses[0]) if losses[0] else np.zeros(0), convs[0].means,
                         convs[0].mids, bool(converged[0]),
                         seconds_before + time.perf_counter() - start, first_chunk)

    # Ctrl-C is caught only where it can be resumed from (a checkpoint); elsewhere (compare, the
    # type-II fit before NUTS, notebooks) KeyboardInterrupt stops the caller as usual
    halt = False  # decided after each chunk, by all processes together
    label = f"{desc} ×{paths} paths" if paths else desc
    with (_graceful_sigint(checkpoint is not None) as stop,
          tqdm(total=steps, initial=min(int(done.max()), steps), desc=label, disable=not progress,
               leave=False, mininterval=0.5) as bar):
        while not halt and (active := ~converged & ~failed & (done < steps)).any():
            length = int(min(size, steps - done[active].min()))
            t_chunk = time.perf_counter()
            state, chunk_losses = advance(state, active, length)
            chunk_losses = np.atleast_2d(sharding.host(chunk_losses))  # (runs, length)
            if done[active].min() == 0:
                first_chunk = (length, time.perf_counter() - t_chunk)
            for i in np.flatnonzero(active):
                if on_nan == "stop" and not np.all(np.isfinite(chunk_losses[i])):
                    bad = int(np.argmin(np.isfinite(chunk_losses[i])))
                    losses[i].append(chunk_losses[i][:bad])  # its finite steps
                    done[i] += bad
                    failed[i] = True
                    continue
                _check_finite(chunk_losses[i], losses[i], int(done[i]),
                              f"path {i}: " if paths else "")
                losses[i].append(chunk_losses[i])
                done[i] += length
                converged[i] = convs[i].add(chunk_losses[i], int(done[i]))
            bar.update(int(done.max()) - bar.n)
            if means := [c.means[-1] for c in convs if c.means]:
                bar.set_postfix(loss=f"{min(means):.4g}", refresh=False,
                                **({"converged": f"{converged.sum()}/{paths}"} if paths else {}))
            if callback is not None:
                callback(int(done[0]), sharding.host(params(state, 0)))
            halt = stop["requested"]
            if jax.process_count() > 1:  # one process's Ctrl-C stops them all, at this chunk
                halt = bool(max(sharding.gather_scalar(int(halt))))
            if checkpoint is not None and done[0] - last_saved >= checkpoint.every:
                save()
                last_saved = int(done[0])
    if checkpoint is not None:
        save()
    seconds = seconds_before + time.perf_counter() - start
    out = []
    for i in range(count):
        interrupted = bool(halt and done[i] < steps and not converged[i])
        out.append(SVIResult(jax.tree.map(jnp.asarray, sharding.host(params(state, i))),
                             np.concatenate(losses[i]) if losses[i] else np.zeros(0),
                             int(done[i]), bool(converged[i]), seconds, first_chunk, interrupted,
                             (stop["signal"] or "SIGINT") if interrupted else None,
                             *_reading(convs[i]), bool(failed[i])))
    return out


def _check_finite(chunk_losses: np.ndarray, before: list[np.ndarray], done: int, where: str):
    """An SSGPError naming the step and the last finite loss if a loss of the chunk is NaN/inf."""
    if np.all(np.isfinite(chunk_losses)):
        return
    bad = int(np.argmin(np.isfinite(chunk_losses)))
    finite = np.concatenate(before + [chunk_losses[:bad]])
    last = f"{finite[-1]:.6g}" if finite.size else "none"
    raise SSGPError(f"{where}loss became NaN/inf at step {done + bad + 1}; last finite loss "
                    f"{last} (try a smaller learning rate or --x64)")


def _reading(conv: _Convergence) -> tuple:
    """(improvement, its SE, tolerance) of the rule's last reading, nats per 1,000 steps."""
    trend = conv.trend
    if trend is None:
        return None, None, conv.tolerance
    return trend.improvement, trend.se, conv.tolerance


def guide_draws(guide: Callable, params: dict, x, y, *, num_samples: int, seed: int = 1, **kw):
    """``num_samples`` draws of the guide's latent sites, dict of (S, ...) arrays."""
    pred = Predictive(guide, params=params, num_samples=num_samples)
    return pred(jax.random.PRNGKey(seed), x, y, **kw)


def guide_draws_with_density(model: Callable, guide: Callable, params: dict, x, y, *,
                              num_samples: int, seed: int = 1, densities: bool = True):
    """Draws of the guide's latent sites with log q (the guide's density of the constrained site
    values, auxiliary variables and Delta Jacobians included, from the sampler's intermediates where
    it keeps them, as Trace_ELBO uses it) and log p (the
    model's joint log density on the full data ``x, y``) per draw, for PSIS-corrected LOO
    (``arviz_stats.loo_approximate_posterior``). Returns (draws, log_p, log_q); the densities are
    None when ``densities`` is False. Draws are made one at a time (``lax.map``): memory O(n m).
    """
    from numpyro.infer.util import log_density

    def one(key):
        tr = handlers.trace(handlers.seed(handlers.substitute(guide, data=params), key)).get_trace(
            x, y)
        sites = {k: v for k, v in tr.items() if v["type"] == "sample"}
        draw = {k: v["value"] for k, v in sites.items() if not v["infer"].get("is_auxiliary")}
        if not densities:
            return draw, jnp.zeros(()), jnp.zeros(())
        log_q = sum(jnp.sum(v["fn"].log_prob(v["value"], v["intermediates"]) if v["intermediates"]
                            else v["fn"].log_prob(v["value"])) for v in sites.values())
        log_p, _ = log_density(model, (x, y), {}, {**params, **draw})
        return draw, log_p, log_q

    keys = jax.random.split(jax.random.PRNGKey(seed), num_samples)
    draws, log_p, log_q = jax.jit(lambda k: jax.lax.map(one, k))(keys)
    return (draws, log_p, log_q) if densities else (draws, None, None)


def site_values(model: Callable, params: dict, draws: dict, x, *, exclude=("f", "y")) -> dict:
    """Every site's value (sample, param, deterministic) for each draw: dict of (S, ...) arrays.

    Params are the same for all draws; deterministic sites are recomputed by replaying the model.
    """

    def one(draw):
        data = {**params, **draw}
        tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=data)).get_trace(x)
        return {
            k: v["value"]
            for k, v in tr.items()
            if v["type"] in ("sample", "param", "deterministic") and k not in exclude
            and not k.endswith("_decentered") and not v.get("is_observed", False)
        }

    if draws:
        return jax.vmap(one)(draws)
    return jax.tree.map(lambda a: a[None], one({}))


def reparam_for_nuts(model: Callable, sites=("nuisance", "frequencies")) -> Callable:
    """Non-centred parameterisation of Gaussian sites for NUTS (avoids funnels in σ_s and ℓ)."""
    return handlers.reparam(model, config={s: LocScaleReparam(centered=0) for s in sites})


def run_nuts(
    model: Callable,
    x,
    y,
    *,
    warmup: int = 500,
    samples: int = 500,
    chains: int = 4,
    seed: int = 0,
    target_accept: float = 0.9,
    max_tree_depth: int = 10,
    progress: bool = True,
    init_strategy=None,
    init_params: dict | None = None,
) -> MCMC:
    """NUTS with ``chains`` chains: parallel when there are that many JAX devices, else vectorized.

    ``init_params``: unconstrained starting values per chain (site -> (chains, ...)), e.g. the
    particles of a tempered SMC run (:mod:`ssgp_ppl.inference.smc`)."""
    if chains < 1:
        raise SSGPError(f"chains must be >= 1, got {chains}")
    method = "parallel" if jax.local_device_count() >= chains else "vectorized"
    kw = {} if init_strategy is None else {"init_strategy": init_strategy}
    kernel = NUTS(model, target_accept_prob=target_accept, max_tree_depth=max_tree_depth, **kw)
    mcmc = MCMC(
        kernel,
        num_warmup=warmup,
        num_samples=samples,
        num_chains=chains,
        chain_method=method,
        progress_bar=progress,
    )
    mcmc.run(jax.random.PRNGKey(seed), x, y, init_params=init_params,
             extra_fields=("diverging", "energy", "potential_energy", "num_steps"))
    return mcmc


__all__ = ["NAN_CHOICES", "Batching", "SVIKernel", "SVIResult", "SVIState", "Schedule", "Trend",
           "batch_sampler", "drive_svi", "guide_draws", "guide_draws_with_density", "loss_trend",
           "optimizer", "reparam_for_nuts", "run_nuts", "run_svi", "run_svi_paths", "site_values",
           "svi_kernel", "vmapped_chunk"]
