"""Shared fixtures: float32/float64 switching (restoring the previous setting) and the pendulum data."""

import os
import signal

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
# JAX's persistent compilation cache off, for each xdist worker and every subprocess it starts
# (CLI runs, notebook kernels, the README job), unless the environment turns it on: a fresh clone
# starts it empty, and it saved about 5 of the suite's 40 minutes on 2 cores. Set before JAX starts.
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
# one OpenBLAS thread (jaxlib's CPU LAPACK kernels): its spinning threads against the other worker
# made QR/Cholesky steps 20-100x slower (ssgp_ppl/__init__.py; set before numpy loads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# Each xdist worker (and the CLI / notebook subprocesses it starts, which inherit this) on a core of
# its own: XLA's CPU thread pool sizes itself to the machine, and two workers' pools on 2 cores
# made vmapped fits erratic: the β-selection CLI test took 23 s in one run, 346 s in another; 36 s pinned.
if _worker.startswith("gw") and hasattr(os, "sched_setaffinity"):
    _cpus = sorted(os.sched_getaffinity(0))
    if len(_cpus) >= 2:
        os.sched_setaffinity(0, {_cpus[int(_worker[2:]) % len(_cpus)]})

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ssgp_ppl.data import datasets  # noqa: E402
from ssgp_ppl.runtime import resources  # noqa: E402

LONGEST = ("test_docs.py::test_docs_site_builds", "test_smc.py::test_multimodal",
           "test_docs.py::test_python_examples", "test_readme.py::test_main_job",
           "test_packaging.py::", "test_methods.py::", "test_properties.py::", "test_tan.py::",
           "test_report.py::", "test_catalog_metrics.py::", "test_api.py::",
           "test_checkpoint.py::test_cli_sigint", "test_sharding.py::", "test_cluster.py::",
           "test_rundir.py::test_compare_sigterm", "test_gold.py::",
           "test_sbc.py::test_compare_with_sbc")


def pytest_collection_modifyitems(items):
    """The longest tests first (the notebooks, the property-based fits, …): xdist's
    ``--dist worksteal`` queues tests in this order and an idle worker takes the other's queued
    ones, so the run ends with short tests on both workers, not one long test on one."""
    rank = {id(item): next((i for i, key in enumerate(LONGEST) if key in item.nodeid), len(LONGEST))
            for item in items}
    items.sort(key=lambda item: rank[id(item)])  # stable: the order within each rank is kept


def _set_x64(enabled: bool):
    """Switch JAX's default float width; return a callable restoring the previous setting."""
    previous = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", enabled)
    return lambda: jax.config.update("jax_enable_x64", previous)


@pytest.fixture(autouse=True)
def _sigint_handler_restored(request):
    """No test leaves its SIGINT handler to the next one on the same worker: a handler left
    installed (an event loop's no-op one, SIG_IGN) made the Ctrl-C tests of test_checkpoint.py fail
    after it in one fresh-clone run. With SSGP_PPL_SIGINT_LOG=FILE the leaking tests are listed."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        if os.environ.get("SSGP_PPL_SIGINT_LOG"):
            with open(os.environ["SSGP_PPL_SIGINT_LOG"], "a") as f:
                f.write(f"{request.node.nodeid}: {before!r} -> {after!r}\n")


@pytest.fixture(autouse=True)
def _compiled_programs_released():
    """After each test, JAX's compiled programs are dropped once the worker holds half the
    kernel's memory maps (:func:`ssgp_ppl.runtime.resources.release_compiled`): an xdist worker
    that compiles for half an hour reaches vm.max_map_count (65,530) and its next compilation
    segfaults inside XLA (seen at 40,000 maps and growing, in a compare test's NUTS)."""
    yield
    resources.release_compiled()


@pytest.fixture
def x64():
    """Run the test in float64; the previous setting is restored afterwards."""
    restore = _set_x64(True)
    try:
        yield np.float64
    finally:
        restore()


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def precision(request):
    """Run the test once in float32 and once in float64; yields the numpy dtype in force."""
    restore = _set_x64(request.param is np.float64)
    try:
        yield request.param
    finally:
        restore()


@pytest.fixture(scope="session")
def pendulum():
    """The bundled pendulum data set (standardised on its training split), loaded once."""
    return datasets.load("pendulum")


@pytest.fixture(scope="session")
def pendulum_minmax():
    """Pendulum with inputs scaled to [−1, 1] (the Tan et al. 2016 entries' x_scaling)."""
    return datasets.load("pendulum", x_scaling="minmax")

