"""Checks of a data set's values: real numbers (:func:`real_array`), finite (:func:`check_finite`),
within float32's range once scaled (:func:`check_scaled_range`); each problem one SSGPError naming
the row and column."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ssgp_ppl.errors import SSGPError, one_line


def _column(j: int, columns) -> str:
    """Column ``j`` by name (quoted) if ``columns`` names it, else by number."""
    return f"'{columns[j]}'" if columns is not None and j < len(columns) else str(j)


def _position(index: tuple, shape: tuple, columns) -> str:
    """Where an entry is: "row i, column c" (2-D, the column by name if there are names)."""
    if len(shape) == 1:
        return f"entry {index[0]}"
    return f"row {index[0]}, column {_column(index[1], columns)}" if len(shape) == 2 else \
        f"index {index}"


def _first(mask: np.ndarray, columns) -> tuple[tuple, str]:
    """The index of ``mask``'s first true entry (row by row) and where it is in words."""
    first = np.unravel_index(int(np.argmax(mask)), mask.shape)
    return first, _position(first, mask.shape, columns)


def real_array(a, what: str, columns=None) -> np.ndarray:
    """``a`` (an array, a list, a DataFrame or Series of numbers; booleans count as 0/1) as a
    float64 array; anything else (text, complex numbers, dates, None) one SSGPError naming
    ``what`` and the row and column (``columns``: their names) of the first such value. Missing
    values (None, ``pd.NA``) become NaN, for the callers' finiteness checks."""
    if isinstance(a, pd.DataFrame):
        columns = [str(c) for c in a.columns]
    if a is None or isinstance(a, str | bytes | dict | set):
        raise SSGPError(f"{what} must be an array of numbers, got {type(a).__name__}")
    try:
        arr = a.to_numpy() if isinstance(a, pd.DataFrame | pd.Series) else np.asarray(a)
    except (ValueError, TypeError) as e:  # ragged nested lists
        raise SSGPError(f"{what} is not an array of numbers ({one_line(e)[:150]})") from None
    kind = arr.dtype.kind
    if kind in "biuf":
        return np.asarray(arr, np.float64)
    if kind == "c":
        raise SSGPError(f"{what} holds complex numbers; give real numbers (its .real part, if "
                        "the imaginary parts are noise)")
    if kind != "O":
        word = {"U": "text", "S": "bytes", "M": "dates", "m": "time spans"}.get(kind, arr.dtype)
        at = f" ({_position(np.unravel_index(0, arr.shape), arr.shape, columns)}: " \
             f"{arr.reshape(-1)[:1].tolist()[0]!r})" if arr.size else ""
        raise SSGPError(f"{what} holds {word}, not numbers{at}"[:300])
    out = np.empty(arr.shape, np.float64)
    for i, v in enumerate(arr.flat):
        if v is None or v is pd.NA or v is pd.NaT:
            out.flat[i] = np.nan
            continue
        if isinstance(v, numbers.Real):
            try:
                out.flat[i] = float(v)
                continue
            except (OverflowError, TypeError, ValueError):
                pass
        where = _position(np.unravel_index(i, arr.shape), arr.shape, columns)
        why = "a complex number" if isinstance(v, numbers.Complex) else type(v).__name__
        raise SSGPError(f"{what}: {where} holds {why} {v!r}, not a real number"[:300])
    return out


X_SCALED_MAX = 1e30  # scaled inputs beyond this leave float32's range (3.4e38) in the features


def check_scaled_range(x_scaled: np.ndarray, what: str, columns=None, raw=None) -> None:
    """One SSGPError naming the row and column of the first scaled input (standardised units:
    the training inputs' spread is about 1) beyond :data:`X_SCALED_MAX`, and its value in ``raw``
    (the inputs before scaling) where given; an input whose scaling overflowed counts as beyond."""
    far = np.abs(x_scaled) > X_SCALED_MAX
    if far.any():
        first, at = _first(far, columns)
        dist = abs(float(x_scaled[first]))
        times = f"{dist:.3g} times" if np.isfinite(dist) else \
            f"more than {np.finfo(np.float64).max:.3g} times"
        lies = "lies" if raw is None else f"is {float(raw[first]):.6g},"
        raise SSGPError(f"{what}: {at} {lies} {times} the training inputs' spread from their "
                        f"centre; the model computes up to {X_SCALED_MAX:g}")


def check_finite(x: np.ndarray, where: str, columns=None, y=None, target: str = "y",
                 rows: bool = False) -> None:
    """One SSGPError naming each column of ``x`` (n, d), and the target ``y`` (n,) if given, that
    holds NaN or inf, with the counts; ``rows``: also the row and column of the first."""
    if np.isfinite(x).all() and (y is None or np.isfinite(y).all()):
        return
    a = x if y is None else np.column_stack([x, y])
    names = None if columns is None else [*columns, target]
    nan, inf = np.isnan(a).sum(axis=0), np.isinf(a).sum(axis=0)
    parts = [f"column {_column(j, names)} has " + " and ".join(
        f"{k} {kind}" for k, kind in ((nan[j], "NaN"), (inf[j], "inf")) if k)
        for j in np.flatnonzero(nan + inf)]
    first = ""
    if rows:
        index, at = _first(~np.isfinite(a), names)
        first = f" (the first: {at} is {float(a[index])})"
    raise SSGPError(f"non-finite values in {where}: {'; '.join(parts)}{first}")


def check_rows(x, y, where: str, feats: Sequence[str], tname: str) -> None:
    """Data rows, and every value of inputs and target finite (:func:`check_finite`)."""
    if x.shape[0] == 0:
        raise SSGPError(f"data set {where} is empty (no rows)")
    check_finite(x, where, feats, y, tname)


__all__ = ["X_SCALED_MAX", "check_finite", "check_rows", "check_scaled_range", "real_array"]
