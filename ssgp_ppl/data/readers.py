"""Readers: a data file as raw arrays or a table — the named sets' formats (headerless CSV,
Auto-MPG's text, the UCI folders, airline, BlogFeedback) and a user's CSV / TSV / TXT / Parquet
file — and the parsed-array cache of the large ones."""

from __future__ import annotations

import csv
import gzip
import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from ssgp_ppl.data.checks import check_rows
from ssgp_ppl.data.tables import check_names, check_width
from ssgp_ppl.errors import SSGPError, one_line
from ssgp_ppl.runtime.io import write_bytes_atomic

AUTOMPG_INPUTS = (
    "cylinders",
    "displacement",
    "horsepower",
    "weight",
    "acceleration",
    "model_year",
)

_AIRLINE_TARGET = "arrDelay"

_BLOG_COLUMNS = 281  # 280 inputs + target
_BLOG_INPUTS = 60
_BLOG_ROWS = 60_000
_FILE_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt", ".txt.gz", ".parquet")
_CACHE_VERSION = "v1"


def xnames(d: int) -> tuple[str, ...]:
    return tuple(f"x{i}" for i in range(d))


def need_file(path: Path, root: Path) -> Path:
    if not path.is_file():
        raise SSGPError(
            f"data file '{path}' is missing from data directory '{root}'; "
            "pass --data-dir or set SSGP_PPL_DATA"
        )
    return path


def read_headerless_csv(path: Path, name: str) -> np.ndarray:
    try:
        df = pd.read_csv(path, header=None, dtype=np.float64, engine="c")
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise SSGPError(f"cannot parse {path} for '{name}': {one_line(e)}") from None
    return df.to_numpy(dtype=np.float64)


def read_autompg(path: Path) -> tuple[np.ndarray, np.ndarray]:
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


def read_uci_txt(folder: Path, root: Path, name: str):
    data = need_file(folder / "data.txt", root)
    try:
        feats = _read_ints(need_file(folder / "index_features.txt", root))
        tgt = _read_ints(need_file(folder / "index_target.txt", root))
        n_splits = _read_ints(need_file(folder / "n_splits.txt", root))
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
    check_rows(x, y, name, xnames(x.shape[1]), "y")
    return np.ascontiguousarray(x), np.ascontiguousarray(y), int(n_splits[0])


def _read_ints(path: Path) -> list[int]:
    return [int(float(t)) for t in path.read_text().split()]


def read_airline(path: Path):
    root = path.parents[1]
    need_file(path, root)
    with gzip.open(path, "rt") as f:
        header = [h.strip() for h in f.readline().strip().split(",")]
    if _AIRLINE_TARGET not in header:
        raise SSGPError(f"{path}: no '{_AIRLINE_TARGET}' column; columns: {', '.join(header)}")
    a = cached_parse(path, "airline", lambda: _parse_float_csv(path, len(header)))
    if a.shape[1] != len(header):
        raise SSGPError(f"{path}: parsed {a.shape[1]} columns, header names {len(header)}")
    t = header.index(_AIRLINE_TARGET)
    feats = tuple(h for i, h in enumerate(header) if i != t)
    x = np.ascontiguousarray(np.delete(a, t, axis=1))
    y = np.ascontiguousarray(a[:, t])
    check_rows(x, y, "airline", feats, _AIRLINE_TARGET)
    return x, y, feats, _AIRLINE_TARGET


def _parse_float_csv(path: Path, ncol: int) -> np.ndarray:
    try:
        df = pd.read_csv(path, header=0, dtype=np.float64, engine="c")
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise SSGPError(f"cannot parse {path}: {one_line(e)}") from None
    return df.to_numpy(dtype=np.float64)


def read_blog(path: Path) -> tuple[np.ndarray, np.ndarray]:
    need_file(path, path.parents[1])
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
    check_rows(x, y, "blog", xnames(x.shape[1]), "y")
    return x, y


def _cache_dir() -> Path:
    env = os.environ.get("SSGP_PPL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "ssgp_ppl"


def cached_parse(path: Path, tag: str, parse) -> np.ndarray:
    """Return ``parse()``, cached as .npy keyed by the SHA-256 of the source's bytes (an edit
    that keeps the size and the modification time still gets a fresh parse).

    The cache lives in ``$SSGP_PPL_CACHE`` or ``~/.cache/ssgp_ppl``; it is written atomically
    (:func:`ssgp_ppl.runtime.io.write_bytes_atomic`); an unwritable or corrupt cache just means re-parsing.
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


def looks_like_path(s: str) -> bool:
    low = s.lower()
    return os.sep in s or "/" in s or any(low.endswith(suf) for suf in _FILE_SUFFIXES)


def file_stem(path: Path) -> str:
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


def read_table(path: Path) -> pd.DataFrame:
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


__all__ = ["AUTOMPG_INPUTS", "HEADER_CHARS", "cached_parse", "file_stem", "looks_like_path",
    "need_file", "read_airline", "read_autompg", "read_blog", "read_headerless_csv", "read_table",
    "read_uci_txt", "xnames"]
