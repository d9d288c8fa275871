"""The package's one error type: every bad input raises :class:`SSGPError` with one line naming it."""


SEED_MAX = 2**30  # seeds (and split indices) from 0 to this; offsets for paths and SMC stay in int32


def check_seed(seed, what: str = "seed") -> int:
    """``seed`` as an int in [0, SEED_MAX], else an SSGPError naming ``what``."""
    import numbers

    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= SEED_MAX:
        raise SSGPError(f"{what} must be an integer from 0 to {SEED_MAX}, got {seed!r}")
    return int(seed)


def one_line(e: BaseException) -> str:
    """An exception's message on one line (whitespace runs, newlines included, become a space)."""
    return " ".join(str(e).split())


class SSGPError(ValueError):
    """A bad input, a bad catalog entry, or a numerical failure the user can act on.

    The message is one line naming the problem (file and key for catalog errors, column for data).
    The CLI prints it and exits with status 2.
    """


class PrecisionWarning(UserWarning):
    """A fit the working precision cannot resolve (:func:`ssgp_ppl.model.linalg.resolution`): its
    noise at float32's resolution floor, or jitter added to its Cholesky factor; one line, ending
    with the advice to refit with ``--x64``."""


class ConvergenceWarning(UserWarning):
    """A fit that stopped before its stop rule declared convergence (the step or iteration
    budget, or a signal): one line with how it stopped and by how much the objective still moved."""


class CalibrationWarning(UserWarning):
    """A fit whose test coverage of the 90% predictive interval is far from nominal
    (:func:`ssgp_ppl.diagnostics.metrics.coverage_off`): one line with the coverage, the test rows and whether
    the intervals are too narrow or too wide."""


class DataWarning(UserWarning):
    """Something in the user's table that was handled without being asked (a row-index column
    left out of the inputs): one line naming the column and what to do to change it."""


class CatalogWarning(UserWarning):
    """A user catalog file that is not an entry (it does not validate, or its name is taken):
    ``ssgp_ppl.catalog()`` and ``ssgp-ppl models`` skip it with this warning; using it is an error."""


__all__ = ["SEED_MAX", "CalibrationWarning", "CatalogWarning", "PrecisionWarning", "SSGPError",
           "check_seed", "one_line"]
