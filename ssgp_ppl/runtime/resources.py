"""What a fit will need, estimated before it starts: memory from the sizes that dominate (the
n × 2m feature matrix and its gradient, the 2m × 2m Gram matrix and its Cholesky factor, the
guide's parameters with their Adam moments, the test predictions: S draws × n* rows per array),
so that an impossible fit is one clear refusal instead of an out-of-memory crash minutes later
(``--force`` runs it anyway)."""

from __future__ import annotations

import os
from typing import NamedTuple

from ssgp_ppl.errors import SSGPError

GUIDE_PARAMS_LOUD = 10_000_000  # above this a fit says how large its guide is
# (S, n*) float64 arrays a fit holds at once for its test rows: the prediction's per-draw arrays
# and the scores' temporaries (measured: 8.7 of them in float32, 10.7 in float64), besides the
# prediction's working set (ssgp_ppl.model.predictive.PREDICT_BUDGET)
TEST_ARRAYS = 11


class Needs(NamedTuple):
    bytes: float
    guide_params: int
    guide: str | None
    what: str  # the sizes behind the estimate, for the message
    draws: int = 0  # S of the test predictions
    test_bytes: float = 0.0  # the test predictions' part of ``bytes``


def draws(entry, method: str, n: int) -> int:
    """The posterior draws S a fit predicts with (its test arrays are S × n*): a multi-path
    mixture's :data:`~ssgp_ppl.inference.paths.MIXTURE_DRAWS`, else the method's own count
    (:meth:`~ssgp_ppl.inference.methods.base.Method.draws`) for n training rows."""
    from ssgp_ppl.inference import methods
    from ssgp_ppl.inference.paths import MIXTURE_DRAWS

    m = methods.get(method)
    return MIXTURE_DRAWS if m.paths(entry)[0] > 1 else m.draws(entry, n)


def estimate(entry, n: int, d: int, n_test: int, method: str) -> Needs:
    """An upper estimate in bytes (float32 model arrays, float64 host copies) of a fit of ``entry``
    by ``method`` on n training rows with d inputs and n_test test rows (:func:`draws` × n_test
    per-draw arrays, :data:`TEST_ARRAYS` of them, and the prediction's working set)."""
    m = entry.config["model"]["m"]
    latent = m * d + 2 * m + 3  # frequencies, nuisance, hyperparameters: the guide's dimension D
    from ssgp_ppl.inference import methods
    from ssgp_ppl.model.guides import GUIDES

    guide = methods.get(method).guide_label(entry)  # None: the method fits no guide
    params = 0 if guide is None else GUIDES.get(guide).param_count(latent)
    features = 3 * n * 2 * m * 4  # Φ, its gradient and one temporary
    gram = 4 * (2 * m) ** 2 * 8  # ΦᵀΦ, its Cholesky factor and two temporaries
    guide_bytes = 4 * params * 4  # parameters, gradient, two Adam moments
    from ssgp_ppl.model.predictive import PREDICT_BUDGET

    count = draws(entry, method, n)
    test = float(TEST_ARRAYS * count * n_test * 8 + (PREDICT_BUDGET if n_test else 0))
    total = float(features + gram + guide_bytes + test)
    what = f"m = {m}, d = {d}, n = {n}" + (f", D = {latent}" if params else "")
    return Needs(total, params, guide, what, count, test)


def memory_bytes() -> float:
    """This machine's physical memory (inf where the system does not say)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


MAPS_SHARE = 0.5  # release_compiled: the share of the kernel's memory-map limit that triggers it


def memory_maps() -> tuple[int, int] | None:
    """(memory maps this process holds, the kernel's limit ``vm.max_map_count``), or None where
    the system does not say (not Linux)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            held = f.read().count(b"\n")
        with open("/proc/sys/vm/max_map_count") as f:
            return held, int(f.read())
    except (OSError, ValueError):
        return None


def release_compiled(share: float = MAPS_SHARE) -> bool:
    """Drop JAX's compiled programs (``jax.clear_caches()``) once this process holds more than
    ``share`` of the memory maps the kernel allows; True if it did.

    Every compiled XLA:CPU program keeps memory maps of its own until its caches let it go. A
    long process that compiles thousands of fits (a benchmark over many entries, a test worker)
    reaches ``vm.max_map_count`` (65,530 by default), and the next compilation then dies with a
    segmentation fault inside XLA instead of an error. Programs dropped here are compiled again
    when next called."""
    import gc

    import jax

    maps = memory_maps()
    if maps is None or maps[0] <= share * maps[1]:
        return False
    jax.clear_caches()
    gc.collect()
    return True


def check(entry, n: int, d: int, n_test: int, method: str, *, force: bool = False) -> Needs:
    """Refuse a fit whose estimate exceeds 80% of the machine's memory, unless ``force``."""
    needs = estimate(entry, n, d, n_test, method)
    have = memory_bytes()
    if needs.bytes > 0.8 * have and not force:
        test = "" if needs.test_bytes < 0.1 * needs.bytes else \
            (f"; {needs.test_bytes / 2**30:.3g} GiB of it for the test predictions, "
             f"{needs.draws} draws × {n_test} rows")
        raise SSGPError(f"{entry.name}: this fit needs about {needs.bytes / 2**30:.3g} GiB "
                        f"({needs.what}{test}), more than this machine's {have / 2**30:.3g} GiB "
                        "allows; lower m, subsample the rows, pick a smaller guide, predict fewer "
                        "test rows, or give --force (force=True) to try anyway")
    return needs


__all__ = ["MAPS_SHARE", "Needs", "check", "draws", "estimate", "memory_bytes", "memory_maps",
           "release_compiled"]
