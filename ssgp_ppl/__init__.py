"""ssgp-ppl: a catalog of sparse spectrum Gaussian process regression models in NumPyro.

OpenBLAS is limited to one thread unless ``OPENBLAS_NUM_THREADS`` is set: jaxlib's CPU LAPACK
kernels (QR, Cholesky, triangular solves, determinants of the 2m × 2m and guide matrices) call
scipy's OpenBLAS, whose worker threads cost more than they give at these sizes and spin against
any other busy process (measured on 2 cores: ssgp's type-II ML step 1.49 → 0.96 ms, the log-DLM
step 7.5 → 3.8 ms; with a second process busy, 17 ms and 440 ms with threads). OpenBLAS reads
the variable when it loads (numpy's with numpy; scipy's, which jaxlib calls, at the first JAX
linear-algebra call or ``scipy.linalg`` import), so it takes effect when this package is imported
before those (the CLI, the tests and the benchmarks do); otherwise set it yourself. It is inherited
by subprocesses (Dask workers) and also limits numpy's own BLAS.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ssgp_ppl import moved  # noqa: E402

moved.install()  # the flat layout's module paths, with a DeprecationWarning

from importlib import metadata as _metadata  # noqa: E402

try:
    __version__ = _metadata.version("ssgp-ppl")
except _metadata.PackageNotFoundError:  # a source tree without the package installed
    __version__ = "0+unknown"

# public name -> (module, attribute), imported on first use
_LAZY = {
    "fit": ("ssgp_ppl.api", "fit"),
    "compare": ("ssgp_ppl.api", "compare"),
    "load": ("ssgp_ppl.api", "load"),
    "load_comparison": ("ssgp_ppl.api", "load_comparison"),
    "select_beta": ("ssgp_ppl.api", "select_beta"),
    "catalog": ("ssgp_ppl.api", "catalog"),
    "add_catalog": ("ssgp_ppl.api", "add_catalog"),
    "register_method": ("ssgp_ppl.inference.methods", "register"),
    "SSGPRegressor": ("ssgp_ppl.estimator", "SSGPRegressor"),
    "Comparison": ("ssgp_ppl.report", "Comparison"),
    "Posterior": ("ssgp_ppl.posterior", "Posterior"),
    "register_density": ("ssgp_ppl.model.densities", "register"),
    "register_guide": ("ssgp_ppl.model.guides", "register"),
    "register_likelihood": ("ssgp_ppl.model.likelihoods", "register"),
}
_API = tuple(_LAZY)


def __getattr__(name: str):
    """The public API (``fit``, ``compare``, ``load``, ``load_comparison``, ``select_beta``,
    ``catalog``, ``add_catalog``, the ``register_*`` functions of :mod:`ssgp_ppl.plugins`'
    registries, the result types ``Posterior`` and ``Comparison``), imported on first use so
    that ``import ssgp_ppl`` stays light (no JAX, NumPyro or ArviZ until they are used)."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'ssgp_ppl' has no attribute {name!r}")


__all__ = ["__version__", *_API]
