"""What a fit will need, estimated before it starts: memory from the sizes that dominate (the
n × 2m feature matrix and its gradient, the 2m × 2m Gram matrix and its Cholesky factor, the
guide's parameters with their Adam moments, the test predictions), so that an impossible fit is
one clear refusal instead of an out-of-memory crash minutes later (``--force`` runs it anyway)."""

from __future__ import annotations

import os
from typing import NamedTuple

from ssgp_ppl.errors import SSGPError

FULL_RANK = ("joint_affine", "auto_mvn")  # guides with a D × D triangular scale matrix
GUIDE_PARAMS_LOUD = 10_000_000  # above this a fit says how large its guide is


class Needs(NamedTuple):
    bytes: float
    guide_params: int
    guide: str | None
    what: str  # the sizes behind the estimate, for the message


def estimate(entry, n: int, d: int, n_test: int, method: str) -> Needs:
    """An upper estimate in bytes (float32 model arrays, float64 host copies) of a fit of ``entry``
    by ``method`` on n training rows with d inputs."""
    m = entry.config["model"]["m"]
    latent = m * d + 2 * m + 3  # frequencies, nuisance, hyperparameters: the guide's dimension D
    from ssgp_ppl import methods

    guide = methods.get(method).guide_label(entry)  # None: the method fits no guide
    params = (latent * (latent + 1) // 2 + latent if guide in FULL_RANK  # scale_tril and loc
              else 2 * latent if guide is not None else 0)
    features = 3 * n * 2 * m * 4  # Φ, its gradient and one temporary
    gram = 4 * (2 * m) ** 2 * 8  # ΦᵀΦ, its Cholesky factor and two temporaries
    guide_bytes = 4 * params * 4  # parameters, gradient, two Adam moments
    draws = entry.config["predictive"]["samples"]
    test = 3 * draws * n_test * 8
    total = float(features + gram + guide_bytes + test)
    what = f"m = {m}, d = {d}, n = {n}" + (f", D = {latent}" if params else "")
    return Needs(total, params, guide, what)


def memory_bytes() -> float:
    """This machine's physical memory (inf where the system does not say)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


def check(entry, n: int, d: int, n_test: int, method: str, *, force: bool = False) -> Needs:
    """Refuse a fit whose estimate exceeds 80% of the machine's memory, unless ``force``."""
    needs = estimate(entry, n, d, n_test, method)
    have = memory_bytes()
    if needs.bytes > 0.8 * have and not force:
        raise SSGPError(f"{entry.name}: this fit needs about {needs.bytes / 2**30:.3g} GiB "
                        f"({needs.what}), more than this machine's {have / 2**30:.3g} GiB allows; "
                        "lower m, subsample the rows, pick a smaller guide, or give --force "
                        "(force=True) to try anyway")
    return needs
