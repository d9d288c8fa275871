"""From a user's table to model inputs: which columns, which rows, how non-numeric columns become
numbers.

:class:`TableOptions` is what the user asks (``--inputs``, ``--drop``, ``--dropna``,
``--encode onehot``, ``--dates numeric``); :func:`prepare` fits a :class:`TableEncoding` on the
training table (the input columns, the categories of each one-hot column, the date columns) and
returns the numeric inputs; :meth:`TableEncoding.transform` applies the same encoding to another
table (``--test FILE``, ``Posterior.predict`` of a DataFrame), refusing a category it never saw.
The encoding is saved with the posterior and recorded in the DataTree's attributes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ssgp_ppl.errors import DataWarning, SSGPError, one_line

ENCODINGS = ("none", "onehot")
DATES = ("none", "numeric")
DAY_NS = 86_400 * 10**9  # a date becomes days since 1970-01-01 (float)
MAX_COLUMNS = 100_000  # columns of a user's table (each input column is checked and encoded)
# names that R, pandas and spreadsheets give a written-out row index
INDEX_NAMES = re.compile(r"(|unnamed: ?\d+|rownames|row[._]?names|row[._]?id|index|\.\.\.1|id)",
                         re.IGNORECASE)


def check_width(count: int, where: str) -> None:
    """Refuse a table of more than :data:`MAX_COLUMNS` columns (before any per-column work)."""
    if count > MAX_COLUMNS:
        raise SSGPError(f"{where} has {count} columns; at most {MAX_COLUMNS} columns are supported "
                        "(select the input columns in a smaller file)")


def duplicates(names) -> list:
    """The names (hashable values) that occur more than once in ``names``, each once, in the order
    of their first occurrence; linear in their number."""
    return [c for c, k in Counter(names).items() if k > 1]


def check_names(names, where: str) -> None:
    """One SSGPError if a column name occurs more than once."""
    dup = duplicates(names)
    if dup:
        raise SSGPError(f"{where} has duplicate column names: {', '.join(map(repr, dup))}")


def frame(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """``df`` with its column names as text, none of them twice."""
    df = df.rename(columns=str)
    check_names(df.columns, where)
    return df


@dataclass(frozen=True)
class TableOptions:
    """How a table becomes inputs (``ssgp-ppl``'s ``--inputs``, ``--drop``, ``--dropna``,
    ``--encode``, ``--dates``; the keywords of the same names of `ssgp_ppl.fit`).

    Parameters
    ----------
    inputs
        The input columns (default: every column but the target and ``drop``).
    drop
        Columns that are not inputs (not with ``inputs``).
    dropna
        Drop rows with a missing value in a used column (else a missing value is an error).
    encode
        ``"onehot"``: a categorical (text) column becomes one 0/1 input per category;
        ``"none"``: a text column is an error naming this option.
    dates
        ``"numeric"``: a date column becomes days since 1970-01-01, and the encoding records
        that it is a date (the report draws it on a date axis); ``"none"``: a date column is an
        error naming this option.

    Raises
    ------
    SSGPError
        When an option has an unknown value, both ``inputs`` and ``drop`` are given, or a
        column is listed twice.
    """

    inputs: tuple[str, ...] | None = None
    drop: tuple[str, ...] = ()
    dropna: bool = False
    encode: str = "none"
    dates: str = "none"

    def __post_init__(self):
        if self.encode not in ENCODINGS:
            raise SSGPError(f"encode must be one of {', '.join(ENCODINGS)}, got {self.encode!r}")
        if self.dates not in DATES:
            raise SSGPError(f"dates must be one of {', '.join(DATES)}, got {self.dates!r}")
        if self.inputs is not None and self.drop:
            raise SSGPError("give the input columns (inputs) or the columns to drop, not both")
        for flag, cols in (("inputs", self.inputs or ()), ("drop", self.drop)):
            dup = duplicates(cols)
            if dup:
                raise SSGPError(f"--{flag}: column {', '.join(map(repr, dup))} is listed twice")

    @property
    def is_default(self) -> bool:
        return self == TableOptions()

    @classmethod
    def of(cls, inputs=None, drop=None, dropna=False, encode=None, dates=None) -> TableOptions:
        """Options from the CLI / API forms.

        Parameters
        ----------
        inputs, drop
            Column lists: a sequence, or one comma-separated string (``"a,b"``); None for none.
        dropna
            As the class's.
        encode, dates
            As the class's; None for ``"none"``.

        Returns
        -------
        TableOptions
            The options.

        Raises
        ------
        SSGPError
            When a column list is empty, or as the class raises.
        """
        def cols(v):
            if v is None:
                return None
            items = v.split(",") if isinstance(v, str) else list(v)
            out = tuple(str(c).strip() for c in items if str(c).strip())
            if not out:
                raise SSGPError(f"an empty column list: {v!r}")
            return out

        return cls(cols(inputs), cols(drop) or (), bool(dropna), encode or "none", dates or "none")


@dataclass(frozen=True)
class TableEncoding:
    """The encoding fitted on the training table; saved with the posterior.

    Parameters
    ----------
    columns
        Per input column ``(name, kind, categories)``: kind ``numeric``, ``date`` (days since
        1970-01-01 as the input) or ``onehot`` with its categories, sorted (empty otherwise).
    target
        The target column.
    """

    columns: tuple[tuple[str, str, tuple[str, ...]], ...]
    target: str

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The model's input names: a one-hot column gives ``column=category`` per category."""
        out = []
        for name, kind, cats in self.columns:
            out += [f"{name}={c}" for c in cats] if kind == "onehot" else [name]
        return tuple(out)

    def transform(self, df: pd.DataFrame, where: str, *, target: bool = True,
                  dropna: bool | None = False) -> tuple[np.ndarray, np.ndarray | None, int]:
        """Encode another table (a test file, a DataFrame to predict) as the training table was.

        Parameters
        ----------
        df
            The table, with the input columns (and the target where ``target``).
        where
            What the errors call the table (``'test.csv'``).
        target
            Whether the table has the target column.
        dropna
            True: drop the rows with a missing value; False: refuse them, naming ``--dropna``;
            None: refuse them (the caller has no such option).

        Returns
        -------
        tuple
            ``(x, y, dropped)``: the inputs (n, d), the targets (n,) or None, and the number of
            rows dropped.

        Raises
        ------
        SSGPError
            When a column is missing, a value of a numeric column is not a number (named by its
            row and column), a category was never seen in training, or a value is missing and
            not dropped.
        """
        df = frame(df, where)
        need = [c for c, _, _ in self.columns] + ([self.target] if target else [])
        missing = [c for c in need if c not in df.columns]
        if missing:
            what = "columns" if self.target in missing else "input columns"
            raise SSGPError(f"{where} lacks the {what} {', '.join(missing)} the model was "
                            "fitted on")
        numeric = [(c, "input column") for c, kind, _ in self.columns if kind == "numeric"]
        numeric += [(self.target, "target")] if target else []
        df = df[need].assign(**{c: _numeric(df[c], c, where, what) for c, what in numeric})
        df, dropped = _missing(df, need, where, dropna)
        parts = []
        for name, kind, cats in self.columns:
            col = df[name]
            if kind == "numeric":
                parts.append(col.to_numpy()[:, None])
            elif kind == "date":
                parts.append(_days(col, name, where)[:, None])
            else:
                values = col.astype(str)
                unseen = sorted(set(values) - set(cats))
                if unseen:
                    raise SSGPError(f"{where}: column '{name}' has categories the model never saw: "
                                    f"{', '.join(unseen[:5])}{' …' if len(unseen) > 5 else ''}")
                parts.append((values.to_numpy()[:, None] == np.asarray(cats)[None]).astype(float))
        x = np.concatenate(parts, axis=1) if parts else np.zeros((len(df), 0))
        y = df[self.target].to_numpy() if target else None
        return np.ascontiguousarray(x), y, dropped

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TableEncoding:
        """The encoding `to_json` wrote.

        Parameters
        ----------
        text
            The JSON text.

        Returns
        -------
        TableEncoding
            The encoding.

        Raises
        ------
        SSGPError
            When ``text`` is not an encoding `to_json` wrote.
        """
        try:
            d = json.loads(text)
            columns = tuple((c[0], c[1], tuple(c[2])) for c in d["columns"])
            target = d["target"]
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise SSGPError(f"a saved table encoding is corrupt ({type(e).__name__}: "
                            f"{one_line(e)[:120]})") from None
        for name, kind, cats in columns:
            if not (isinstance(name, str) and kind in ("numeric", "date", "onehot")
                    and all(isinstance(c, str) for c in cats)):
                raise SSGPError(f"a saved table encoding is corrupt (column {name!r} of kind "
                                f"{kind!r})"[:200])
        if not isinstance(target, str):
            raise SSGPError(f"a saved table encoding is corrupt (target {target!r})"[:200])
        return cls(columns, target)


def prepare(df: pd.DataFrame, target: str | None, options: TableOptions, where: str):
    """Fit the encoding on ``df``: ``(x, y, encoding, record)``, where ``record`` says what was
    done (options, rows dropped, encoded columns) for run.json and the DataTree's attributes."""
    check_width(df.shape[1], where)
    df = frame(df, where)
    cols = list(df.columns)
    if df.shape[1] == 0 or df.shape[0] == 0:
        raise SSGPError(f"{where} is empty (no data rows)")
    target = cols[-1] if target is None else target
    known = set(cols)
    if target not in known:
        raise SSGPError(f"target column '{target}' not found in {where}; available: {', '.join(cols)}")
    for flag, names in (("inputs", options.inputs or ()), ("drop", options.drop)):
        unknown = [c for c in names if c not in known]
        if unknown:
            raise SSGPError(f"--{flag}: no column {', '.join(map(repr, unknown))} in {where}; "
                            f"available: {', '.join(cols)}")
        if target in names:
            raise SSGPError(f"--{flag}: '{target}' is the target column")
    drop = set(options.drop)
    index = []
    if cols[0] == "" and target != "" and options.inputs is None:  # a nameless column: no input
        index = [""]
        drop.add("")
        warnings.warn(f"{where}: column 1 has no name (row labels or a row index written with "
                      "the table); left out", DataWarning, stacklevel=3)
    elif options.inputs is None and cols[0] != target and cols[0] not in drop and \
            _integers(df[cols[0]]):
        first, v = cols[0], df[cols[0]].to_numpy()
        counting = len(v) > 2 and v[0] in (0, 1) and bool(np.all(np.diff(v) == 1))
        if INDEX_NAMES.fullmatch(str(first).strip()) and pd.Series(v).is_unique:
            index = [first]  # named as a row index: not an input unless listed in --inputs
            drop.add(first)
            warnings.warn(f"{where}: column '{first}' is a row index, not an input; left out "
                          "(list it in --inputs / inputs= to use it)", DataWarning, stacklevel=3)
        elif counting:  # a time step, or an index under another name
            warnings.warn(f"{where}: column '{first}' counts the rows ({v[0]}, {v[0] + 1}, …, "
                          f"{v[-1]}); it is used as an input (--drop {first} / drop= if it is a "
                          "row index)", DataWarning, stacklevel=3)
    inputs = list(options.inputs) if options.inputs is not None else \
        [c for c in cols if c != target and c not in drop]
    if not inputs:
        raise SSGPError(f"{where} has no input columns besides target '{target}'")
    text = [c for c in inputs if _text_column(df[c], options)]
    if len(text) > 1:  # every one named at once, not the first of several
        raise SSGPError(f"{where}: {len(text)} input columns are not numeric: "
                        f"{', '.join(repr(c) for c in text)}; use --encode onehot "
                        f"(encode='onehot') or --drop {','.join(text)}")
    kinds = [_kind(df[c], c, where, options) for c in inputs]
    kept = df[df[[*inputs, target]].notna().all(axis=1)]  # the categories of the rows used
    encoding = TableEncoding(tuple(
        (c, k, tuple(sorted(set(kept[c].astype(str)))) if k == "onehot" else ())
        for c, k in zip(inputs, kinds, strict=True)), target)
    x, y, dropped = encoding.transform(df, where, dropna=options.dropna)
    if not len(x):
        raise SSGPError(f"{where}: no rows left after dropping those with missing values")
    record = {"options": dataclasses.asdict(options), "rows_dropped": dropped,
              "columns": {c: k for c, k, _ in encoding.columns if k != "numeric"},
              "index_columns_left_out": index}
    return x, y, encoding, record


def _kind(col: pd.Series, name: str, where: str, options: TableOptions) -> str:
    """numeric, date or onehot; a non-numeric column without the option that encodes it is an
    error saying which option to use."""
    if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
        return "numeric"
    if pd.api.types.is_datetime64_any_dtype(col) or _parses_as_dates(col):
        if options.dates == "numeric":
            return "date"
        raise SSGPError(f"{where}: input column '{name}' holds dates; use --dates numeric "
                        f"(dates='numeric': days since 1970-01-01) or --drop {name}")
    if options.encode == "onehot":
        return "onehot"
    n = col.dropna().astype(str).nunique()
    raise SSGPError(f"{where}: input column '{name}' is not numeric (categorical, {n} values); use "
                    f"--encode onehot (encode='onehot') or --drop {name}")


def _integers(col: pd.Series) -> bool:
    """Whether ``col`` holds whole numbers only (an integer column, or floats without a fraction
    or a missing value)."""
    if pd.api.types.is_bool_dtype(col):
        return False
    if pd.api.types.is_integer_dtype(col):
        return True
    return bool(pd.api.types.is_float_dtype(col) and col.notna().all()
                and (col == col.round()).all())


def _text_column(col: pd.Series, options: TableOptions) -> bool:
    """A column that needs --encode onehot (text that is neither numbers nor, with --dates, dates)."""
    if options.encode == "onehot" or pd.api.types.is_bool_dtype(col) or \
            pd.api.types.is_numeric_dtype(col) or pd.api.types.is_datetime64_any_dtype(col):
        return False
    return not _parses_as_dates(col)


def _parses_as_dates(col: pd.Series) -> bool:
    values = col.dropna().astype(str)
    if values.empty or values.str.fullmatch(r"[-+]?\d+(\.\d*)?").all():
        return False
    try:
        pd.to_datetime(values.head(200), format="mixed")
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def _missing(df: pd.DataFrame, cols: list[str], where: str, dropna: bool | None):
    """``df`` without its rows with a missing value (``dropna``), else an error naming the
    columns and counts and the first; also (the rows dropped)."""
    na = df[cols].isna()
    if not na.to_numpy().any():
        return df, 0
    if dropna:
        keep = ~na.any(axis=1)
        return df[keep], int((~keep).sum())
    counts = na.sum()
    parts = [f"'{c}' {int(k)}" for c, k in counts.items() if k]
    i, j = np.unravel_index(int(np.argmax(na.to_numpy())), na.shape)
    advice = "every input must be given" if dropna is None else \
        "use --dropna (dropna=True) to drop those rows"
    raise SSGPError(f"{where}: missing values (column and count: {', '.join(parts)}); {advice} "
                    f"(the first: row {i}, column '{cols[j]}' is missing)")


def _numeric(col: pd.Series, name: str, where: str, what: str) -> pd.Series:
    """``col`` as float64; numbers held as objects (or text) count, anything else there is named
    by its row."""
    if col.dtype == object or isinstance(col.dtype, pd.StringDtype):
        values = pd.to_numeric(col, errors="coerce")
        bad = (values.isna() & col.notna()).to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            v = col.iloc[i]
            raise SSGPError(f"{where}: row {i}, column '{name}' holds {type(v).__name__} {v!r}, "
                            "not a number"[:300])
        col = values
    if not (pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col)):
        raise SSGPError(f"{what} '{name}' in {where} is not numeric")
    if pd.api.types.is_complex_dtype(col):
        raise SSGPError(f"{what} '{name}' in {where} holds complex numbers; give real numbers")
    return col.astype(np.float64)


def _days(col: pd.Series, name: str, where: str) -> np.ndarray:
    try:
        t = pd.to_datetime(col, format="mixed") if not pd.api.types.is_datetime64_any_dtype(col) \
            else col
    except (ValueError, TypeError, OverflowError) as e:
        raise SSGPError(f"{where}: column '{name}' is not a date column ({e})") from None
    if getattr(t.dt, "tz", None) is not None:
        t = t.dt.tz_convert("UTC").dt.tz_localize(None)
    return t.to_numpy(dtype="datetime64[ns]").astype(np.int64) / DAY_NS


__all__ = ["DATES", "ENCODINGS", "MAX_COLUMNS", "TableEncoding", "TableOptions", "check_names",
           "check_width", "duplicates", "frame", "prepare"]
