"""The embarrassingly parallel work on a Dask distributed cluster (the optional ``dask`` extra).

Three kinds of work split into independent tasks: the adaptive-neighbourhood fits of Tan et al. 2016, §6
(one local fit per test point, chunks of test rows per task), the batch prediction of a large test
set (row chunks of x*) and the repetitions of a benchmark (one seed per task). :func:`client` opens
a ``LocalCluster`` of worker processes, or connects to a running scheduler given its address to
scale out over machines; every function here also takes ``client=None`` and then opens a local
cluster for the call.

The local fits equal the single-process ones bit for bit: each test row draws its spectral sets
from its index in the whole set (``offset`` of :func:`~ssgp_ppl.inference.neighbourhoods.local_predict`)
and chunks start at multiples of the fit batch (every vmapped batch holds the rows, and padding,
it holds in one process). Batch prediction (:func:`map_rows`) equals the rule on the same row
chunks in one process bit for bit; against one ``predict`` call on all rows it differs by
rounding alone, because XLA's CPU code for n* rows is not that for n*' rows (measured at most 3
eps of the float width times the output's largest magnitude). Every task runs in the client's
float width: ``jax_enable_x64`` is carried to the worker (a process with its own JAX
configuration) and the task's arguments are unpickled under it, JAX arrays with their dtype and
weak type, so jitted code traces to the program it traces to on the client.

Workers are separate processes and tasks travel by cloudpickle: the function a task runs must be
importable on the workers (a module-level function of an installed package; a script's own
functions are sent by value) and must not be a jitted closure over client state. A script that
starts a ``LocalCluster`` needs the ``if __name__ == "__main__":`` guard (worker processes are
spawned and import the main module). dask is imported only when a cluster is used: the package
imports without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import jax
import numpy as np

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.inference import ncvmp
from ssgp_ppl.inference.neighbourhoods import LocalResult, local_predict

if TYPE_CHECKING:  # pragma: no cover
    import distributed

EXTRA = "pip install 'ssgp-ppl[dask]'"


def _distributed():
    """The ``distributed`` module, or one SSGPError line naming the extra that provides it."""
    try:
        import distributed
    except ImportError as err:
        raise SSGPError(f"running on a Dask cluster needs the optional extra: {EXTRA} "
                        f"({err})") from None
    return distributed


LOOPBACK = "127.0.0.1"


@contextmanager
def client(address: str | None = None, *, workers: int = 2, threads_per_worker: int = 1,
           dashboard_address: str | None = None, **cluster_kw) -> Iterator[distributed.Client]:
    """A ``distributed.Client``: on a new ``LocalCluster`` of ``workers`` processes (``address``
    None) or on the scheduler at ``address`` (``"tcp://host:8786"``; the cluster's own workers, the
    other arguments unused). Closes what it opened. ``dashboard_address`` None: no dashboard
    (``"127.0.0.1:8787"`` serves it); ``cluster_kw`` go to ``LocalCluster`` (``memory_limit``, …).
    A local cluster listens on 127.0.0.1 only. A scheduler at ``address`` runs whatever it is sent
    as the fit's user: connect only to a cluster you control (TLS: ``distributed``'s ``Security``)."""
    dist = _distributed()
    if address is not None:
        with dist.Client(address) as c:
            yield c
        return
    if workers < 1 or threads_per_worker < 1:
        raise SSGPError(f"a local cluster needs workers >= 1 and threads_per_worker >= 1, got "
                        f"{workers} and {threads_per_worker}")
    if dashboard_address is None:  # the scheduler's HTTP server (health, metrics) on a free port,
        # not on :8787: a second cluster on the machine would warn "Port 8787 is already in use"
        cluster_kw["scheduler_kwargs"] = {"dashboard": False, **cluster_kw.get("scheduler_kwargs", {})}
    # the scheduler, the workers and the HTTP server listen on the loopback interface only: the
    # scheduler port is unauthenticated and tasks are unpickled (see the docs' "Scale" section)
    cluster_kw.setdefault("host", LOOPBACK)
    with (dist.LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker,
                            processes=True,
                            dashboard_address=dashboard_address or f"{LOOPBACK}:0",
                            **cluster_kw) as cluster,
          dist.Client(cluster) as c):
        yield c


@contextmanager
def _session(c: distributed.Client | None) -> Iterator[distributed.Client]:
    """``c`` itself, or a local cluster for the duration of one call."""
    if c is not None:
        yield c
        return
    with client() as opened:
        yield opened


def _threads(c: distributed.Client) -> int:
    return max(1, sum(c.nthreads().values()))


def _call(fn: Callable, x64: bool, item: bytes, shared: bytes):
    """On the worker: ``fn(item, **shared)`` in the client's float width. The arguments travel
    pickled and are unpickled here, inside ``jax.enable_x64(x64)`` (thread-local, restored
    afterwards): JAX arrays come back with their dtype and weak type, so a jitted function traces
    to the program it traced to on the client."""
    import cloudpickle

    with jax.enable_x64(x64):
        return fn(cloudpickle.loads(item), **cloudpickle.loads(shared))


def map_chunks(fn: Callable, chunks: Iterable, client: distributed.Client | None = None, *,
               shared: dict | None = None) -> list:
    """``[fn(c, **shared) for c in chunks]`` on the cluster, in the order of ``chunks``.

    ``shared`` (large arrays, settings) is sent once to every worker, not once per chunk. A task's
    exception is raised here as itself (its type and message; the remaining tasks are cancelled).
    Each task computes in the caller's float width (``jax_enable_x64``).
    """
    chunks = list(chunks)
    if not chunks:
        return []
    x64 = bool(jax.config.read("jax_enable_x64"))
    with _session(client) as c:
        import cloudpickle  # with distributed

        [sent] = c.scatter([cloudpickle.dumps(dict(shared or {}))], broadcast=True, hash=False)
        futures = [c.submit(_call, fn, x64, cloudpickle.dumps(item), sent, pure=False)
                   for item in chunks]
        try:
            return c.gather(futures)
        except BaseException:
            c.cancel(futures)
            raise


def repeat(fn: Callable[[int], dict], seeds: Iterable[int],
           client: distributed.Client | None = None) -> list[dict]:
    """Benchmark repetitions: ``[fn(seed) for seed in seeds]`` on the cluster, in seed order."""
    return map_chunks(fn, [int(s) for s in seeds], client)


def _starts(n: int, size: int) -> list[int]:
    return list(range(0, n, size))


# ---------------------------------------------------------------- adaptive neighbourhoods (§6)


def _local_chunk(item, **kw) -> LocalResult:
    """On the worker: :func:`local_predict` on test rows ``offset:offset + len(x_test)``, one
    thread (the cluster's workers are the parallelism)."""
    offset, x_test = item
    return local_predict(x_test=x_test, offset=offset, progress=False, threads=1, **kw)


def local_predict_distributed(x_train, y_train, x_test, prior: ncvmp.TanPrior, *, m: int, k: int,
                              settings: ncvmp.NCVMPSettings, key, adapt: bool = True,
                              batch: int = 32, client: distributed.Client | None = None,
                              chunk: int | None = None) -> LocalResult:
    """Tan et al. 2016, §6's local fits of :func:`~ssgp_ppl.inference.neighbourhoods.local_predict`, test rows
    split in chunks over the cluster; the same :class:`LocalResult` as one process computes.

    x_train (n, d), y_train (n,), x_test (n*, d) numpy arrays. ``chunk``: test rows per task
    (default about n* / (4 × worker threads)), rounded up to a multiple of ``batch`` so that each
    vmapped batch of fits holds the rows (and padding) it holds in :func:`local_predict`.
    """
    x_test = np.asarray(x_test)
    n_star = len(x_test)
    if n_star == 0:
        raise SSGPError("local_predict_distributed: no test rows")
    if batch < 1 or (chunk is not None and chunk < 1):
        raise SSGPError(f"batch and chunk must be >= 1, got {batch} and {chunk}")
    shared = dict(x_train=np.asarray(x_train), y_train=np.asarray(y_train), prior=prior, m=m, k=k,
                  settings=settings, key=key, adapt=adapt, batch=batch)
    with _session(client) as c:
        size = chunk or math.ceil(n_star / (4 * _threads(c)))
        size = math.ceil(size / batch) * batch
        items = [(r, x_test[r:r + size]) for r in _starts(n_star, size)]
        parts = map_chunks(_local_chunk, items, c, shared=shared)
    return LocalResult(*(np.concatenate(field) for field in zip(*parts, strict=True)))


# ---------------------------------------------------------------- batch prediction


def _rows_chunk(x, *, fn) -> tuple[np.ndarray, ...]:
    """On the worker: ``fn`` at the rows ``x`` (n_c, d)."""
    return tuple(np.asarray(a) for a in fn(x))


def map_rows(fn: Callable, x, client: distributed.Client | None = None, *,
             chunk: int | None = None) -> tuple[np.ndarray, ...]:
    """``fn(x)`` — a tuple of (S, n*) arrays, e.g. a predictive rule's moments
    (:mod:`ssgp_ppl.model.predictive`) — with the rows of ``x`` split in chunks over the cluster and
    the outputs joined along their last axis. Equal to ``fn`` on each chunk, to ``fn`` on all rows
    up to rounding (module docstring). ``fn`` (and what it holds: draws, training rows) is sent
    once per worker, the rows once. ``chunk``: rows per task (default ⌈n* / worker threads⌉: one
    task, and at most two compiled shapes, per thread)."""
    x = np.asarray(x)
    if chunk is not None and chunk < 1:
        raise SSGPError(f"chunk must be >= 1, got {chunk}")
    if len(x) == 0:  # nothing to split
        return tuple(np.asarray(a) for a in fn(x))
    with _session(client) as c:
        size = chunk or max(1, math.ceil(len(x) / _threads(c)))
        parts = map_chunks(_rows_chunk, [x[r:r + size] for r in _starts(len(x), size)], c,
                           shared={"fn": fn})
    return tuple(np.concatenate(field, axis=-1) for field in zip(*parts, strict=True))


__all__ = ["client", "local_predict_distributed", "map_chunks", "map_rows"]
