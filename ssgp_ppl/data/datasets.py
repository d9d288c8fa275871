"""Regression data sets with the papers' train/test protocols, standardised on the training split.

:func:`load` returns a :class:`Dataset`: inputs and target of both splits, scaled with affine
:class:`Scaler` objects fitted on the training split only (so predictions can be mapped back to
raw units with :meth:`Scaler.inverse` / :meth:`Scaler.inverse_std`). With ``log_target`` a
positive target is modelled on its logarithm: the y scaler standardises log y and its
:meth:`~Scaler.inverse` maps back with exp, so every method fits log y without knowing it.

The named sets are in :mod:`ssgp_ppl.data.registry` (each with its reader, split protocol and
aliases): two small ones are bundled with the package (``pendulum``, ``autompg``), the others are
read from a read-only data directory (see :func:`~ssgp_ppl.data.registry.default_data_dir`); any
CSV / TSV / TXT / Parquet file with a header can be loaded by path
(:mod:`ssgp_ppl.data.readers`). ``split`` ``K`` seeds ``np.random.default_rng(K)`` for the
permutation (or picks mask column ``K`` where the data ship test masks), so every split is
reproducible.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from ssgp_ppl.data.checks import check_rows, real_array
from ssgp_ppl.data.readers import file_stem, looks_like_path, read_table, xnames
from ssgp_ppl.data.registry import ALIASES, KNOWN, load_named
from ssgp_ppl.data.tables import TableEncoding, TableOptions, prepare
from ssgp_ppl.errors import SSGPError, check_seed
from ssgp_ppl.runtime.io import file_kind

__all__ = [
    "Dataset",
    "Scaler",
    "frames",
    "from_arrays",
    "load",
]


# --------------------------------------------------------------------------------------------
# Public types
# --------------------------------------------------------------------------------------------


class Scaler(NamedTuple):
    """Affine standardisation ``(a - mean) / scale`` fitted on the training split; with ``log``
    (a positive target modelled on its logarithm) ``(log a - mean) / scale``.

    ``mean`` and ``scale`` have shape ``(d,)`` for inputs and ``()`` for the target; with ``log``
    they are the mean and standard deviation of log a.
    """

    mean: np.ndarray
    scale: np.ndarray
    log: bool = False

    def transform(self, a):
        """Raw units -> standardised units; a value beyond float64's range there becomes ±inf
        (no warning), which :func:`check_scaled_range` refuses."""
        with np.errstate(over="ignore"):
            return ((np.log(a) if self.log else a) - self.mean) / self.scale

    def inverse_affine(self, a):
        """Standardised units -> the units the model's target has: raw units, or log of them
        where ``log``."""
        return a * self.scale + self.mean

    def inverse(self, a):
        """Standardised units -> raw units (exp of :meth:`inverse_affine` where ``log``)."""
        b = self.inverse_affine(a)
        return np.exp(b) if self.log else b

    def inverse_std(self, s):
        """Standard deviations (or other scale quantities) in standardised units -> the units of
        :meth:`inverse_affine` (log units where ``log``)."""
        return s * self.scale


class Dataset(NamedTuple):
    """A train/test split, both standardised with the scalers fitted on the training split.

    Returned by `load` (and `from_arrays`).

    Attributes
    ----------
    name
        The data set's name (a file's stem).
    x_train, y_train
        (n, d) inputs and (n,) targets of the training rows, standardised.
    x_test, y_test
        (n*, d) and (n*,) of the test rows, scaled with the training rows' scalers.
    x_scaler, y_scaler
        The scalers (``inverse`` maps back to original units; ``y_scaler.log``: the target is
        log y).
    feature_names
        The input columns' names.
    target_name
        The target column's name.
    split
        The split index.
    encoding
        How a table's columns became the inputs (`TableEncoding`: which are dates, which
        one-hot), None for a named data set or arrays.
    preparation
        What was done to the table: its options, the rows dropped, the encoded columns.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_scaler: Scaler
    y_scaler: Scaler
    feature_names: tuple[str, ...]
    target_name: str
    split: int
    encoding: TableEncoding | None = None  # how a table's columns became the inputs
    preparation: dict | None = None  # what was done to the table (options, rows dropped, …)

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])


# --------------------------------------------------------------------------------------------
# Main entry point
# --------------------------------------------------------------------------------------------


def load(
    name_or_path: str,
    split: int = 0,
    *,
    data_dir: str | Path | None = None,
    target: str | None = None,
    subsample: int | None = None,
    test_fraction: float | None = None,
    x_scaling: str = "standard",
    extra_noise_inputs: int = 0,
    target_kind: str = "continuous",
    threshold: float | None = None,
    table: TableOptions | None = None,
    test: str | Path | pd.DataFrame | None = None,
    log_target: bool = False,
) -> Dataset:
    """Load a named data set (see `ssgp_ppl.data.registry.KNOWN`) or a data file, split and
    standardise it.

    Parameters
    ----------
    name_or_path
        A name from `ssgp_ppl.data.registry.known_datasets`, or a path to a
        ``.csv``, ``.csv.gz``, ``.tsv``, ``.txt`` or ``.parquet`` file with a header row.
    split
        Split index ``K``; seeds ``np.random.default_rng(K)`` or picks test-mask column K.
    data_dir
        Directory holding the shared data (default
        `ssgp_ppl.data.registry.default_data_dir`).
    target
        Target column of a data file (default: the last column).
    subsample
        Keep this many rows (seeded choice without replacement) before splitting;
        not for ``pendulum`` / ``autompg``, whose train/test counts are fixed.
    test_fraction
        Test share for the permutation-split sets (airline, blog, the 90/10 UCI
        sets, files); not for the fixed-count or mask sets.
    x_scaling
        ``"standard"`` (zero mean, unit std) or ``"minmax"`` (to [-1, 1]), fitted on
        the training inputs. The target is always standardised.
    extra_noise_inputs
        Append this many Uniform[0, 1] noise columns (seeded by ``split``)
        before scaling, named ``noise_0``, ``noise_1``, ...
    target_kind
        ``"continuous"`` (standardised), ``"binary"`` (1 where the raw target
        exceeds ``threshold``, default the training split's median; for a binary
        likelihood) or ``"count"`` (raw non-negative integers, for a count likelihood);
        binary and count targets are not scaled.
    threshold
        The raw target value above which a binary target is 1 (default: the training split's
        median); binary targets only.
    table
        For a data file or DataFrame, which columns and rows are used and how text and
        date columns become inputs (`TableOptions`).
    test
        A data file or DataFrame with the same columns: every row of the data is then a
        training row and these are the test rows (encoded as the training table was).
    log_target
        Model the logarithm of a positive continuous target: the y scaler standardises log y
        (`Scaler` with ``log``); a target value <= 0 is an error naming its row.

    Returns
    -------
    Dataset
        The training and test rows, standardised with the scalers fitted on the training rows.

    Raises
    ------
    SSGPError
        When the name is unknown (the known names listed), the file is missing or unreadable, a
        column or option does not fit the table, or a value is not usable (named by its row and
        column).
    """
    if target_kind not in ("continuous", "binary", "count"):
        raise SSGPError(f"target_kind must be continuous, binary or count, got {target_kind!r}")
    if threshold is not None and target_kind != "binary":
        raise SSGPError("a threshold applies only to binary targets (binary likelihoods)")
    log_target = _check_log_target(log_target, target_kind)
    split = check_seed(split, "split")
    if x_scaling not in ("standard", "minmax"):
        raise SSGPError(f"x_scaling must be 'standard' or 'minmax', got {x_scaling!r}")
    if isinstance(extra_noise_inputs, bool) or not isinstance(extra_noise_inputs, int | np.integer):
        raise SSGPError(f"extra_noise_inputs must be an integer >= 0, got {extra_noise_inputs!r}")
    if extra_noise_inputs < 0:
        raise SSGPError(f"extra_noise_inputs must be >= 0, got {extra_noise_inputs}")
    if subsample is not None and (
        isinstance(subsample, bool) or not isinstance(subsample, int | np.integer) or subsample < 1
    ):
        raise SSGPError(f"subsample must be a positive integer, got {subsample!r}")
    if test_fraction is not None and not (0.0 < float(test_fraction) < 1.0):
        raise SSGPError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction!r}")

    table = TableOptions() if table is None else table
    if isinstance(name_or_path, pd.DataFrame):
        return _load_table(name_or_path, "the DataFrame", "dataframe", target, table, test,
                           test_fraction, split, subsample, extra_noise_inputs, x_scaling,
                           target_kind, threshold, log_target)
    if not isinstance(name_or_path, str | os.PathLike):
        raise SSGPError(f"data set must be a name, a file path or a pandas DataFrame, got "
                        f"{type(name_or_path).__name__}")
    raw_name = os.fspath(name_or_path)
    if data_dir is not None and not Path(data_dir).expanduser().is_dir():  # even for bundled sets
        raise SSGPError(f"data directory '{Path(data_dir).expanduser()}' does not exist (check "
                        "--data-dir or $SSGP_PPL_DATA)")
    key = raw_name.strip().lower()
    key = ALIASES.get(key, key)

    if key in KNOWN:
        if not table.is_default or test is not None:
            what = "--test" if table.is_default else "--inputs/--drop/--dropna/--encode/--dates"
            raise SSGPError(f"{what} applies to data files and DataFrames, not to the data set "
                            f"'{key}'")
        name = key
        x, y, feats, tname, split_spec = load_named(name, split, data_dir, test_fraction)
        if target is not None and target != tname:
            raise SSGPError(
                f"target {target!r} cannot be chosen for data set '{name}' (its target is "
                f"{tname!r}); --target applies to data files"
            )
        if log_target:
            _check_positive_target(y, f"data set '{name}'", tname)
    else:
        path = Path(raw_name).expanduser()
        what = file_kind(path)
        if what is not None:
            raise SSGPError(f"data '{raw_name}' is {what}, not a data file (give a CSV, TSV, TXT "
                            "or Parquet file)")
        if path.is_symlink() and not path.exists():
            raise SSGPError(f"data '{raw_name}' is a symbolic link to nothing (broken, or a loop)")
        if not path.is_file():
            known = ", ".join(KNOWN)
            if looks_like_path(raw_name):
                raise SSGPError(f"unknown data set '{raw_name}': no such file; known: {known}")
            raise SSGPError(f"unknown data set '{raw_name}'; known: {known}")
        return _load_table(read_table(path), f"'{path}'", file_stem(path), target, table, test,
                           test_fraction, split, subsample, extra_noise_inputs, x_scaling,
                           target_kind, threshold, log_target)
    return _split_and_scale(x, y, feats, tname, name, split_spec, split, subsample,
                            extra_noise_inputs, x_scaling, target_kind, threshold, log_target)


def frames(name: str, split: int = 0, *, data_dir: str | Path | None = None,
           subsample: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The training and test rows of a named data set in original units.

    Parameters
    ----------
    name
        A named data set (`ssgp_ppl.data.registry.KNOWN` or an alias); a data file is read with
        pandas instead.
    split
        The split index.
    data_dir
        Directory holding the shared data (default
        `ssgp_ppl.data.registry.default_data_dir`).
    subsample
        Keep this many rows before splitting, as `load` does.

    Returns
    -------
    tuple of pandas.DataFrame
        (train, test): the input columns and the target (last), the rows `load` and
        ``ssgp_ppl.fit(..., data=name)`` use for the same ``split`` and ``subsample``.

    Raises
    ------
    SSGPError
        When ``name`` is not a named data set.
    """
    if not isinstance(name, str) or ALIASES.get(name.strip().lower(), name.strip().lower()) \
            not in KNOWN:
        raise SSGPError(f"frames takes a known data set name ({', '.join(KNOWN)}), got {name!r}; "
                        "a data file is read with pandas")
    d = load(name, split, data_dir=data_dir, subsample=subsample)
    cols = [*d.feature_names, d.target_name]

    def table(x, y):
        return pd.DataFrame(np.column_stack([d.x_scaler.inverse(x), d.y_scaler.inverse(y)]),
                            columns=cols)

    return table(d.x_train, d.y_train), table(d.x_test, d.y_test)


def _load_table(df, where, name, target, table, test, test_fraction, split, subsample,
                extra_noise_inputs, x_scaling, target_kind, threshold, log_target) -> Dataset:
    """A user's table (file or DataFrame) as a Dataset: :func:`~ssgp_ppl.data.tables.prepare` fits the
    encoding; with ``test`` (a file or DataFrame) its rows are the test rows, else a seeded
    permutation keeps ``test_fraction`` (default 0.1) of the rows for testing."""
    x, y, encoding, record = prepare(df, target, table, where)
    check_rows(x, y, where, encoding.feature_names, encoding.target)
    if log_target:
        _check_positive_target(y, where, encoding.target, _table_rows(df, encoding, len(y)))
    if test is None:
        spec = ("perm", 0.1 if test_fraction is None else float(test_fraction))
    else:
        if test_fraction is not None:
            raise SSGPError("give test_fraction or a test file, not both")
        if isinstance(test, pd.DataFrame):
            test_df, test_where = test, "the test DataFrame"
        else:
            tpath = Path(test).expanduser()
            if not tpath.is_file():
                raise SSGPError(f"test file '{test}' not found")
            test_df, test_where = read_table(tpath), f"'{tpath}'"
        xt, yt, dropped = encoding.transform(test_df, test_where, dropna=table.dropna)
        if not len(xt):
            raise SSGPError(f"{test_where} has no rows")
        check_rows(xt, yt, test_where, encoding.feature_names, encoding.target)
        if log_target:
            _check_positive_target(yt, test_where, encoding.target,
                                  _table_rows(test_df, encoding, len(yt)))
        record |= {"test": str(test) if not isinstance(test, pd.DataFrame) else "DataFrame",
                   "test_rows_dropped": dropped}
        spec = ("mask", np.r_[np.zeros(len(x), bool), np.ones(len(xt), bool)])
        x, y = np.concatenate([x, xt]), np.concatenate([y, yt])
    data = _split_and_scale(x, y, encoding.feature_names, encoding.target, name, spec, split,
                            subsample, extra_noise_inputs, x_scaling, target_kind, threshold,
                            log_target)
    return data._replace(encoding=encoding, preparation=record)


def _table_rows(df: pd.DataFrame, encoding: TableEncoding, n: int) -> np.ndarray | None:
    """The table's row of each of the ``n`` rows its encoding kept (None: every row was kept)."""
    if len(df) == n:
        return None
    used = [c for c, _, _ in encoding.columns] + [encoding.target]
    return np.flatnonzero(df.rename(columns=str)[used].notna().all(axis=1).to_numpy())


def _check_log_target(log_target, target_kind: str) -> bool:
    """``log_target`` as a bool; only a continuous target can be modelled on its logarithm."""
    if not isinstance(log_target, bool | np.bool_):
        raise SSGPError(f"log_target must be True or False, got {log_target!r}")
    if log_target and target_kind != "continuous":
        raise SSGPError(f"a log-transformed target must be continuous, not {target_kind} (the "
                        f"entry's likelihood takes a {target_kind} target)")
    return bool(log_target)


def _check_positive_target(y: np.ndarray, where: str, tname: str, rows=None) -> None:
    """One SSGPError naming the column ``tname`` of ``where`` and the first row (``rows``: the
    table's row of each entry of ``y``) where a target to be log-transformed is not positive."""
    bad = ~(np.asarray(y) > 0)
    if bad.any():
        i = int(np.argmax(bad))
        row = i if rows is None else int(rows[i])
        count = int(bad.sum())
        raise SSGPError(f"{where}: a log-transformed target must be positive, but column "
                        f"'{tname}' has {count} value{'s' * (count > 1)} <= 0 (the first: row "
                        f"{row} is {float(y[i]):g})")


def _split_and_scale(x, y, feats, tname, name, split_spec, split, subsample, extra_noise_inputs,
                     x_scaling, target_kind, threshold, log_target=False) -> Dataset:
    rng = np.random.default_rng(split)
    if subsample is not None:
        if split_spec[0] == "fixed":
            raise SSGPError(
                f"subsample cannot be used with '{name}': its train/test counts are fixed"
            )
        n_all = x.shape[0]
        if subsample > n_all:
            raise SSGPError(f"subsample={subsample} exceeds the {n_all} rows of '{name}'")
        keep = rng.choice(n_all, size=subsample, replace=False)
        x, y = x[keep], y[keep]
        if split_spec[0] == "mask":
            split_spec = ("mask", split_spec[1][keep])

    if extra_noise_inputs:
        noise_rng = np.random.default_rng([split, 0x6E6F6973])  # independent of the split's rng
        noise = noise_rng.uniform(0.0, 1.0, size=(x.shape[0], extra_noise_inputs))
        x = np.concatenate([x, noise], axis=1)
        feats = tuple(feats) + tuple(f"noise_{i}" for i in range(extra_noise_inputs))

    train_idx, test_idx = _split_indices(name, x.shape[0], split_spec, rng)
    if train_idx.size < 2:
        raise SSGPError(f"data set '{name}' leaves {train_idx.size} training rows; need at least 2")
    if test_idx.size < 1:
        raise SSGPError(
            f"data set '{name}' leaves no test rows; lower subsample or raise test_fraction"
        )

    x_tr_raw, x_te_raw = x[train_idx], x[test_idx]
    y_tr_raw, y_te_raw = y[train_idx], y[test_idx]
    x_scaler = _fit_x_scaler(x_tr_raw, x_scaling)
    y_scaler = _fit_target(y_tr_raw, log_target)
    _check_target(y_tr_raw, y_scaler, name, tname, target_kind)
    if target_kind == "binary":
        cut = float(np.median(y_tr_raw)) if threshold is None else float(threshold)
        y_tr_raw, y_te_raw = (y_tr_raw > cut).astype(np.float64), (y_te_raw > cut).astype(np.float64)
        if y_tr_raw.min() == y_tr_raw.max():
            raise SSGPError(f"threshold {cut:g} leaves a single class in the training split of '{name}'")
        tname = f"{tname} > {cut:g}"
    if target_kind == "count":
        if np.any(y < 0) or np.any(y != np.round(y)):
            raise SSGPError(f"'{name}': target {tname!r} is not a non-negative integer count")
    if target_kind != "continuous":
        y_scaler = Scaler(np.zeros(()), np.ones(()))

    return Dataset(
        name=name,
        x_train=_scaled(x_tr_raw, x_scaler),
        y_train=_scaled(y_tr_raw, y_scaler),
        x_test=_scaled(x_te_raw, x_scaler),
        y_test=_scaled(y_te_raw, y_scaler),
        x_scaler=x_scaler,
        y_scaler=y_scaler,
        feature_names=tuple(feats),
        target_name=tname,
        split=split,
    )


def from_arrays(x, y, x_test=None, y_test=None, *, x_scaling: str = "standard",
                target_kind: str = "continuous", name: str = "arrays",
                table: TableOptions | None = None, log_target: bool = False) -> Dataset:
    """A Dataset of in-memory arrays: every row of ``x`` (n, d), ``y`` (n,) is a training row, the
    test rows are ``x_test``, ``y_test`` (none if not given); scalers fitted on the training rows
    (``log_target``: on log y, as :func:`load`'s). A DataFrame ``x`` is read as a table
    (:func:`~ssgp_ppl.data.tables.prepare`, with ``table``'s options): its text, date and missing
    values get the messages a ``data=`` table gets."""
    table = TableOptions() if table is None else table
    log_target = _check_log_target(log_target, target_kind)
    if not isinstance(x, pd.DataFrame) and not table.is_default:
        raise SSGPError("inputs=, drop=, dropna=, encode= and dates= apply to a table: data= or "
                        "x= a DataFrame")
    tname = str(y.name) if isinstance(y, pd.Series) and y.name is not None else "y"
    y = _vector(real_array(y, "y"), "y")
    encoding = record = None
    if isinstance(x, pd.DataFrame):
        if len(x) != len(y):
            raise SSGPError(f"x has {len(x)} rows and y {len(y)}: they must be the same rows")
        x_frame = _with_target(x, y, tname, "x")
        x, y, encoding, record = prepare(x_frame, tname, table, "x")
        feats = encoding.feature_names
    else:
        x = real_array(x, "x")
        x = x[:, None] if x.ndim == 1 else x
        if x.ndim != 2 or len(x) != len(y):
            raise SSGPError(f"x must be (n, d) and y (n,) with the same n, got {x.shape} and "
                            f"{y.shape}")
        feats = xnames(x.shape[1])
    if x.shape[1] == 0:
        raise SSGPError("x has no columns: a model needs at least one input")
    check_rows(x, y, "the arrays x, y", feats, tname)
    if log_target:
        _check_positive_target(y, "y", tname, _table_rows(x_frame, encoding, len(y))
                              if encoding is not None else None)
    if len(x) < 2:
        raise SSGPError(f"{len(x)} training rows are too few; need at least 2")
    if (x_test is None) != (y_test is None):
        raise SSGPError("give both x_test and y_test, or neither")
    if x_test is None:
        xt, yt = np.zeros((0, x.shape[1])), np.zeros(0)
    else:
        yt = _vector(real_array(y_test, "y_test"), "y_test")
        if encoding is not None and isinstance(x_test, pd.DataFrame):
            if len(x_test) != len(yt):
                raise SSGPError(f"x_test has {len(x_test)} rows and y_test {len(yt)}: they must be "
                                "the same rows")
            xt, yt, _ = encoding.transform(_with_target(x_test, yt, tname, "x_test"), "x_test",
                                           dropna=table.dropna)
        else:
            xt = real_array(x_test, "x_test", feats)
        xt = xt[:, None] if xt.ndim == 1 else xt
        if xt.ndim != 2 or xt.shape[1] != x.shape[1] or len(xt) != len(yt):
            raise SSGPError(f"x_test must be (n*, {x.shape[1]}) and y_test (n*,), got {xt.shape} "
                            f"and {yt.shape}")
    if len(xt):
        check_rows(xt, yt, "the arrays x_test, y_test", feats, tname)
        if log_target:
            _check_positive_target(yt, "y_test", tname)
    for what, v in (("y", y), ("y_test", yt)):
        if target_kind == "binary" and not np.all((v == 0) | (v == 1)):
            raise SSGPError(f"{what}: a binary target must hold 0 and 1 only")
        if target_kind == "count" and (np.any(v < 0) or np.any(v != np.round(v))):
            raise SSGPError(f"{what}: a count target must hold non-negative "
                            "integers")
    y_scaler = _fit_target(y, log_target) if target_kind == "continuous" else \
        Scaler(np.zeros(()), np.ones(()))
    _check_target(y, y_scaler, name, tname, target_kind)
    x_scaler = _fit_x_scaler(x, x_scaling)

    return Dataset(name, _scaled(x, x_scaler), _scaled(y, y_scaler), _scaled(xt, x_scaler),
                   _scaled(yt, y_scaler), x_scaler, y_scaler, feats, tname, 0, encoding, record)


def _scaled(a: np.ndarray, scaler: Scaler) -> np.ndarray:
    """``a`` in ``scaler``'s standardised units, contiguous float64."""
    return np.ascontiguousarray(scaler.transform(a), dtype=np.float64)


def _with_target(frame: pd.DataFrame, y: np.ndarray, tname: str, what: str) -> pd.DataFrame:
    """``frame`` (the inputs) with the target ``y`` as its column ``tname``, by position."""
    frame = frame.rename(columns=str)
    if tname in frame.columns:
        raise SSGPError(f"{what} has a column {tname!r}, the target's name (y's Series name): "
                        "rename one of them")
    frame = frame.copy()
    frame[tname] = y
    return frame


def _vector(a: np.ndarray, what: str) -> np.ndarray:
    if a.ndim != 1:
        raise SSGPError(f"{what} must be a vector (n,), got shape {a.shape}")
    return a


# --------------------------------------------------------------------------------------------
# Splitting and scaling
# --------------------------------------------------------------------------------------------


def _split_indices(name: str, n: int, spec, rng: np.random.Generator):
    kind = spec[0]
    if kind == "fixed":  # ("fixed", n_train): permutation, first n_train rows train
        n_train = spec[1]
        perm = rng.permutation(n)
        return perm[:n_train], perm[n_train:]
    if kind == "perm":  # ("perm", test_fraction)
        n_test = int(round(n * spec[1]))
        perm = rng.permutation(n)
        return perm[: n - n_test], perm[n - n_test :]
    if kind == "mask":  # ("mask", boolean test mask)
        mask = spec[1]
        return np.flatnonzero(~mask), np.flatnonzero(mask)
    raise AssertionError(kind)  # pragma: no cover


Y_SCALE_RANGE = (1e-150, 1e150)  # a target's sd whose square (predictive variances) is finite


def _check_target(y: np.ndarray, y_scaler: Scaler, name: str, tname: str,
                  target_kind: str) -> None:
    """A continuous target on the training rows (``y_scaler`` fitted on them): not constant,
    its standard deviation within :data:`Y_SCALE_RANGE` (one SSGPError saying what to do
    otherwise)."""
    if target_kind != "continuous":
        return
    if np.ptp(y) == 0:
        raise SSGPError(f"'{name}': target {tname!r} is constant ({y[0]:g}) on the "
                        f"{len(y)} training rows: there is nothing to learn")
    y_sd = float(y_scaler.scale)
    if not Y_SCALE_RANGE[0] <= y_sd <= Y_SCALE_RANGE[1]:
        raise SSGPError(f"'{name}': target {tname!r} has standard deviation {y_sd:.3g}; variances "
                        "in its units would leave float64's range: divide the target by a power "
                        f"of ten so that its spread is between {Y_SCALE_RANGE[0]:g} and "
                        f"{Y_SCALE_RANGE[1]:g}")


def _fit_standard(a: np.ndarray) -> Scaler:
    """Mean and standard deviation per column, in float64 and scaled first by max |a| so that the
    squares can neither overflow (values near 1e308) nor underflow (values near 1e-300); a
    constant column keeps scale 1."""
    a = np.asarray(a, np.float64)
    big = np.max(np.abs(a), axis=0) if a.size else np.ones(a.shape[1:])
    safe = (big == 0) | ((big > 1e-100) & (big < 1e100))  # squares stay in range: as they are
    big = np.where(safe, 1.0, big)
    u = a / big
    mean, std = u.mean(axis=0) * big, u.std(axis=0) * big
    scale = np.where(std > 0, std, 1.0)
    return Scaler(np.asarray(mean, dtype=np.float64), np.asarray(scale, dtype=np.float64))


def _fit_target(y: np.ndarray, log: bool) -> Scaler:
    """The target's scaler: :func:`_fit_standard` of y, or of log y (a :class:`Scaler` with
    ``log``)."""
    return _fit_standard(np.log(y))._replace(log=True) if log else _fit_standard(y)


def _fit_x_scaler(x: np.ndarray, how: str) -> Scaler:
    if how == "standard":
        return _fit_standard(x)
    x = np.asarray(x, np.float64)
    lo, hi = x.min(axis=0), x.max(axis=0)
    half = hi / 2.0 - lo / 2.0  # (hi - lo) / 2 without overflowing at ±1e308
    return Scaler(
        np.asarray(hi / 2.0 + lo / 2.0, dtype=np.float64),
        np.asarray(np.where(half > 0, half, 1.0), dtype=np.float64),
    )


