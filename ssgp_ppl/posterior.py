"""The result of every inference method: a typed :class:`Posterior` that predicts, saves and loads.

A method (:mod:`ssgp_ppl.inference.methods`) returns the posterior draws of the model's sites, the fitted
scalers, the predictive rule (:mod:`ssgp_ppl.model.predictive`) and typed :class:`FitInfo`; the pipeline
(:func:`ssgp_ppl.pipeline.fit`) adds the test-split prediction, its scores and the ArviZ DataTree.
:meth:`Posterior.predict` takes raw inputs in original units and returns the predictive of y* in
original units; :meth:`Posterior.save` / :func:`load` round-trip everything it needs in one netCDF
file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import pandas as pd
import xarray as xr

from ssgp_ppl.data.checks import check_finite, check_scaled_range, real_array
from ssgp_ppl.data.datasets import Scaler
from ssgp_ppl.data.tables import TableEncoding, frame
from ssgp_ppl.errors import SSGPError, check_seed, one_line
from ssgp_ppl.inference.fitinfo import (  # noqa: F401  (FitInfo and stop_text are this module's too)
    FitInfo,
    Sizing,
    info_from_flat,
    info_from_json,
    info_to_json,
    stop_text,
)
from ssgp_ppl.inference.partitions import Partitions
from ssgp_ppl.model.predictive import (
    STATE_ARRAYS,
    Moments,
    Prediction,
    SiteRule,
    check_test_inputs,
    prediction,
    rule_from_state,
)

if TYPE_CHECKING:  # pragma: no cover
    from ssgp_ppl.entry import CatalogEntry

SAVE_FORMAT = 3  # 3: the target's transform ("log": fitted on log y) and the test prediction's;
# 2: FitInfo with the method's own info and the paths' as tables of their own; a guide's settings
# in [inference.svi.<guide>] of the saved entry
READ_FORMATS = (1, 2, 3)  # 1: one flat FitInfo table (fitinfo.info_from_flat), flat guide settings
REPR_METRICS = ("nmse", "rmse", "mnlp", "coverage_90", "error_rate", "mre")  # in repr(posterior)
TEST_ARRAYS = ("mean", "var", "mean_f", "var_f", "var_y", "draws")
STATE_GROUP = "ssgp_ppl_state"  # the group of a saved posterior that holds what predict needs
CHECKSUM = "ssgp_ppl_sha256"  # the state group's attribute holding state_checksum(...)
# the state group's arrays: the rule's (predictive.STATE_ARRAYS) and those save adds
SAVED_ARRAYS = re.compile(
    rf"{STATE_ARRAYS.pattern}|posterior_\w+|params_\w+|[xy]_scaler_(?:mean|scale)|log_p|log_q"
    rf"|losses|path_of_draw|test_(?:{'|'.join(TEST_ARRAYS)})")
# a file may declare at most this many bytes of arrays per byte of its size, plus LAYOUT_SLACK_BYTES
# (save writes them uncompressed: a file of its own declares fewer bytes than it has)
LAYOUT_BYTES_PER_BYTE = 16
LAYOUT_SLACK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Handoff:
    """What one method's fit gives another: type-II estimates (for an empirical-Bayes
    reference), the spectral points NCVMP's restarts kept, the k-means partitions, and where a
    path of a multi-path fit starts (:mod:`ssgp_ppl.inference.paths`)."""

    type2: dict | None = None
    spectral_points: np.ndarray | None = None
    partitions: Partitions | None = None
    start: dict | None = None  # starting values of the sites (a multi-path fit's dispersed start)


@runtime_checkable
class PredictiveRule(Protocol):
    """What a posterior predicts with (:mod:`ssgp_ppl.model.predictive`: ``SiteRule``, ``NCVMPRule``,
    ``LocalFitsRule``, ``StackedRule``): per-draw f* moments at standardised inputs, and the
    arrays and attributes :meth:`Posterior.save` stores (``predictive.rule_from_state`` reads
    them back)."""

    @property
    def closed_form(self) -> bool:  # one Gaussian per point, not per draw of the sites
        ...

    @property
    def fits_at_prediction(self) -> bool:  # fits run when it predicts (the local fits)
        ...

    def moments(self, x, *, client=None, progress: bool = False) -> Moments: ...

    def state(self) -> tuple[dict, dict]: ...


@dataclass(eq=False, kw_only=True)
class Posterior:
    """A fitted catalog entry: draws, predictive rule, scalers and method info.

    Returned by `ssgp_ppl.fit` and `ssgp_ppl.load`, not made by hand.

    Attributes
    ----------
    entry
        The catalog entry fitted (`CatalogEntry`).
    method
        The inference method (``svi``, ``ml``, ``ncvmp``, ``smc``, …).
    dataset
        The data's name.
    sites
        Site name -> (chain, draw, ...) draws in the model's standardised units (type-II values
        repeated per draw).
    rule
        The predictive rule the draws predict with.
    x_scaler, y_scaler
        The scalers fitted on the training rows (inputs; target, or log target).
    info
        What the method reports besides its draws: times, steps, whether its stop rule declared
        convergence, the sampler's diagnostics.
    log_p, log_q
        (chain, draw) joint log density and the guide's log density where defined (VI draws,
        for PSIS-LOO); None elsewhere.
    losses
        The loss per step (SVI, ML) or the negative bound per iteration (NCVMP).
    y_centre
        The training mean a closed-form fit was centred on (NCVMP); 0 elsewhere.
    handoff
        What this fit gives another method: type-II estimates, kept spectral points,
        partitions.
    sample_stats
        A sampler's own statistics (NUTS: energy, tree depth, …).
    params
        The fitted guide or type-II parameters (constrained; SVI and ML).
    feature_names
        The training inputs' columns (a DataFrame given to `predict` is read by them).
    encoding
        A user table's encoding (`TableEncoding`), applied to a DataFrame given to `predict`.
    path_of_draw
        Multi-path fits: the path of each draw (S,).
    path_posteriors
        Multi-path fits: each path's own posterior (not saved).
    test
        The test split's `Prediction` (None without test rows).
    metrics
        The test scores (NMSE, MNLP, CRPS, coverage, …), None without test rows.
    datatree
        The ArviZ DataTree: posterior, sample statistics, predictions, the data's attributes.
    """

    entry: CatalogEntry
    method: str
    dataset: str
    sites: dict
    rule: PredictiveRule
    x_scaler: Scaler
    y_scaler: Scaler
    info: FitInfo = field(default_factory=FitInfo)
    log_p: np.ndarray | None = None
    log_q: np.ndarray | None = None
    losses: np.ndarray | None = None
    y_centre: float = 0.0
    handoff: Handoff = field(default_factory=Handoff)
    sample_stats: xr.Dataset | None = None  # a sampler's own statistics (NUTS: energy, …)
    params: dict | None = None  # fitted guide / type-II parameters (constrained; SVI and ML)
    feature_names: tuple = ()  # the training inputs' columns (a DataFrame given to predict)
    encoding: TableEncoding | None = None  # a user table's encoding (applied to predict's DataFrame)
    path_of_draw: np.ndarray | None = None  # multi-path fits: the path of each draw (S,)
    path_posteriors: tuple = ()  # multi-path fits: each path's own posterior (not saved)
    test: Prediction | None = None
    metrics: dict | None = None
    datatree: xr.DataTree | None = None

    @property
    def model(self) -> str:
        return self.entry.name

    def _summary(self) -> dict:
        """What a reader wants first: entry, method, data, draws, test scores, how it stopped."""
        draws = next(iter(self.sites.values())).shape[:2] if self.sites else (0, 0)
        out = {"model": self.entry.name, "method": self.method, "data": self.dataset,
               "inputs": self.n_features, "draws": f"{draws[0]} × {draws[1]}"}
        if self.entry.sizing is not None:
            out["sizing"] = self.entry.sizing.text()
        if self.y_scaler.log:
            out["target"] = "log-transformed (fitted on log y; predictions and scores in y)"
        if self.metrics:
            out.update({k: self.metrics[k] for k in REPR_METRICS if k in self.metrics})
        stop = stop_text(self.info)
        if stop is not None:
            out["stop"] = stop
        return out

    def __repr__(self) -> str:
        """One line per field of :meth:`_summary` (the draws and arrays are not printed)."""
        def fmt(v):
            return f"{v:.4g}" if isinstance(v, float) else str(v)

        body = "".join(f"\n  {k}: {fmt(v)}" for k, v in self._summary().items())
        return f"Posterior({body}\n)"

    def _repr_html_(self) -> str:
        """A small table for notebooks (as xarray's rich repr)."""
        import html

        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>"
                       f"{html.escape(f'{v:.4g}' if isinstance(v, float) else str(v))}</td></tr>"
                       for k, v in self._summary().items())
        return f"<b>ssgp_ppl Posterior</b><table>{rows}</table>"

    @property
    def n_features(self) -> int:
        return int(np.shape(self.x_scaler.mean)[0])

    @property
    def chains(self) -> int:
        return int(next(iter(self.sites.values())).shape[0]) if self.sites else 1

    @property
    def flat_sites(self) -> dict:
        """Site draws with (chain, draw) flattened to one axis S."""
        return {k: np.reshape(v, (-1,) + np.shape(v)[2:]) for k, v in self.sites.items()}

    @property
    def mean(self) -> np.ndarray:
        """Predictive mean of y* on the test split (original units)."""
        return self._test().mean

    @property
    def var(self) -> np.ndarray:
        """Predictive variance of y* on the test split (original units)."""
        return self._test().var

    def _test(self) -> Prediction:
        if self.test is None:
            raise SSGPError("this posterior has no test-split prediction; use predict(x_new)")
        return self.test

    def replace(self, **changes) -> Posterior:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ prediction

    def draw_moments(self, x_std, *, client=None, progress: bool = False) -> Moments:
        """Per-draw f* moments at standardised inputs: the rule's own, or, for a closed-form rule
        with draws of q (NCVMP), the degenerate f* of each draw (for the invariants)."""
        if isinstance(self.rule, SiteRule) or not self.sites:
            return self.rule.moments(x_std, client=client, progress=progress)
        rule = SiteRule("degenerate", self.flat_sites)
        mom = rule.moments(x_std)
        return mom._replace(mean_f=mom.mean_f + self.y_centre, var_f=np.zeros_like(mom.var_f))

    def predict_standardised(self, x_std, *, seed: int = 0, client=None,
                             progress: bool = False) -> Prediction:
        """`predict` at inputs already in the model's standardised units.

        Parameters
        ----------
        x_std
            (n*, d) inputs scaled as the training inputs were (``x_scaler``).
        seed
            The random seed of the y* draws.
        client
            A ``distributed.Client``: the rows are predicted in chunks on it.
        progress
            Show progress on stderr.

        Returns
        -------
        Prediction
            The predictive of y*, in the original units of the target.

        Raises
        ------
        SSGPError
            When ``x_std`` is not (n*, d), or holds a missing, infinite or out-of-range value
            (named by its row and column).
        """
        seed = check_seed(seed)
        names = self.feature_names or None
        x_std = real_array(x_std, "predict: x_std", names)
        check_test_inputs(np.zeros((1, self.n_features)), x_std)
        self._check_rows(x_std, "predict's x_std", names)
        check_scaled_range(x_std, "predict: x_std", names)
        return self._predict(x_std, seed, client, progress)

    def predict(self, x_new, *, seed: int = 0, client=None, progress: bool = False) -> Prediction:
        """The predictive of y* at new inputs.

        Parameters
        ----------
        x_new
            (n*, d) raw inputs in the training data's columns and units; a 1-d array is n*
            values of a single input or one row of d inputs. A DataFrame is read by its column
            names, encoded as the training table was.
        seed
            The random seed of the y* draws.
        client
            A ``distributed.Client``: the rows are predicted in chunks on it.
        progress
            Show progress on stderr.

        Returns
        -------
        Prediction
            Mean, variance, one y* draw per posterior draw and ``interval(level)``, in the
            original units of the target.

        Raises
        ------
        SSGPError
            When a value is missing, not numeric, infinite or out of range (named by its row,
            counted from 0, and its column), or the inputs do not have the training columns.
        """
        seed = check_seed(seed)
        names = self.feature_names or None
        if isinstance(x_new, pd.DataFrame) and self.encoding is not None:  # as the training table
            x_new = self.encoding.transform(x_new, "predict's DataFrame", target=False,
                                            dropna=None)[0]
            names = self.encoding.feature_names
        elif isinstance(x_new, pd.DataFrame):  # the training inputs' columns, by name
            x_new = frame(x_new, "predict's DataFrame")
            missing = [c for c in self.feature_names if c not in x_new.columns]
            if missing or not self.feature_names:
                raise SSGPError(f"predict: the DataFrame lacks the input columns {missing} the model "
                                "was fitted on" if missing else "predict: this posterior has no "
                                "column names; pass an array in the training column order")
            x_new = x_new[list(self.feature_names)]
        x_new = real_array(x_new, "predict: x_new", names)
        if x_new.ndim == 0:
            raise SSGPError(f"predict: x_new must be an (n*, {self.n_features}) array of inputs, "
                            f"got the single number {float(x_new)!r}")
        if x_new.ndim == 1:  # n* values of a single input, or one row of d inputs
            x_new = x_new[:, None] if self.n_features == 1 else x_new[None]
        if x_new.ndim != 2:
            raise SSGPError(f"predict: x_new must be (n*, {self.n_features}), got shape "
                            f"{x_new.shape}")
        if x_new.shape[1] != self.n_features:  # before the scaler broadcasts
            cols = f": {', '.join(names)}" if names else ""
            raise SSGPError(f"predict: x_new has {x_new.shape[1]} columns but the model was built "
                            f"for {self.n_features} (the training inputs'{cols})"[:300])
        self._check_rows(x_new, "predict's x_new", names)
        x_std = self.x_scaler.transform(x_new)  # a finite input beyond float64 once scaled: ±inf
        check_scaled_range(x_std, "predict", names, raw=x_new)
        return self._predict(x_std, seed, client, progress)

    @staticmethod
    def _check_rows(x, what: str, names) -> None:
        """At least one row, every value finite (the first bad one named by row and column)."""
        if len(x) == 0:
            raise SSGPError("predict: no rows to predict")
        check_finite(x, what, names, rows=True)

    def _predict(self, x_std, seed: int, client, progress: bool) -> Prediction:
        """The prediction at checked standardised inputs (:meth:`predict_standardised`)."""
        num = int(np.prod(next(iter(self.sites.values())).shape[:2])) if self.sites else 1
        return prediction(self.rule, self.entry.lik, x_std, self.y_scaler, seed=seed, num=num,
                          client=client, progress=progress)

    # ------------------------------------------------------------------ save / load

    def save(self, path: str | Path) -> Path:
        """Write the posterior to one netCDF file, which `ssgp_ppl.load` reads back.

        The file holds the DataTree (if any) plus a group with the rule's arrays, the sites, the
        scalers and, as JSON attributes, the catalog configuration, method and info, with the
        sha256 of all of it (`state_checksum`) that `ssgp_ppl.load` checks.

        Parameters
        ----------
        path
            The file to write (replaced if it exists).

        Returns
        -------
        Path
            ``path``.

        Raises
        ------
        SSGPError
            When ``path`` is not a file path.
        """
        from ssgp_ppl.runtime.io import write_datatree

        if not isinstance(path, str | os.PathLike):
            raise SSGPError(f"save takes a file path, got {type(path).__name__}")
        path = Path(path)
        arrays, rule_attrs = self.rule.state()
        arrays, rule_attrs = dict(arrays), dict(rule_attrs)
        # the draws are stored once: in the DataTree's posterior group where it holds them as they
        # are, else here; the rule's copy of a site draw is then a reference to them
        post = self.datatree["posterior"] if self.datatree is not None and \
            "posterior" in self.datatree.children else None
        in_tree = post is not None and all(
            k in post.data_vars and post[k].dtype == np.asarray(v).dtype
            and np.array_equal(post[k].values, v) for k, v in self.sites.items())
        if not in_tree:
            arrays.update({f"posterior_{k}": np.asarray(v) for k, v in self.sites.items()})
        flat = self.flat_sites
        shared = [k for k in flat if f"site_{k}" in arrays and arrays[f"site_{k}"].dtype ==
                  flat[k].dtype and np.array_equal(arrays[f"site_{k}"], flat[k])]
        for k in shared:
            del arrays[f"site_{k}"]
        rule_attrs["sites_from_posterior"] = shared
        for name, sc in (("x_scaler", self.x_scaler), ("y_scaler", self.y_scaler)):
            arrays[f"{name}_mean"], arrays[f"{name}_scale"] = np.asarray(sc.mean), np.asarray(sc.scale)
        for k, v in (("log_p", self.log_p), ("log_q", self.log_q), ("losses", self.losses),
                     ("path_of_draw", self.path_of_draw)):
            if v is not None:
                arrays[k] = np.asarray(v)
        arrays.update({f"params_{k}": np.asarray(v) for k, v in (self.params or {}).items()})
        if self.test is not None:  # the test split's predictive (post.mean, post.var)
            arrays.update({f"test_{k}": np.asarray(self.test._asdict()[k]) for k in TEST_ARRAYS})
        ds = xr.Dataset({k: (tuple(f"{k}_dim{i}" for i in range(np.ndim(v))), np.asarray(v))
                         for k, v in arrays.items()})
        saved_entry = {"name": self.entry.name, "path": str(self.entry.path),
                       "config": self.entry.config}
        if self.entry.sizing is not None:
            saved_entry["sizing"] = self.entry.sizing.to_json()
        meta = {"format": SAVE_FORMAT, "entry": saved_entry,
                "method": self.method, "dataset": self.dataset, "rule": rule_attrs,
                "info": info_to_json(self.info), "y_centre": self.y_centre,
                "feature_names": list(self.feature_names),
                "target_transform": "log" if self.y_scaler.log else None,
                "encoding": None if self.encoding is None else self.encoding.to_json(),
                "sites": list(self.sites), "sites_in_datatree": in_tree,
                "test": None if self.test is None else {"y_scale": self.test.y_scale,
                                                        "y_shift": self.test.y_shift,
                                                        "gaussian": bool(self.test.gaussian),
                                                        "log": bool(self.test.log)},
                "metrics": self.metrics}
        text = json.dumps(meta, allow_nan=True)
        ds.attrs["ssgp_ppl"] = text
        ds.attrs[CHECKSUM] = state_checksum(text, arrays, self.sites if in_tree else {})
        dt = self.datatree.copy() if self.datatree is not None else xr.DataTree()
        dt[STATE_GROUP] = xr.DataTree(ds)
        write_datatree(path, dt)
        return path


def state_checksum(text: str, arrays: dict, tree_sites: dict) -> str:
    """sha256 (hex) of a saved posterior's state: the JSON attribute's ``text``, every array of the
    state group and the site draws kept in the DataTree's posterior group, each by name, dtype,
    shape and values (NaNs as the one NaN a netCDF file reads back)."""
    h = hashlib.sha256(json.dumps(["ssgp_ppl", len(text)]).encode() + text.encode())
    for group, named in (("state", arrays), ("posterior", tree_sites)):
        for k in sorted(named):
            a = np.asarray(named[k])
            if a.dtype.kind == "f":
                a = np.where(np.isnan(a), np.nan, a).astype(a.dtype)
            if a.dtype.kind in "biuf":
                a = np.ascontiguousarray(a, a.dtype.newbyteorder("<"))
                data = a.tobytes()
            else:  # never written by save: hashed as text, so that it only mismatches
                data = repr(a.tolist()).encode()
            h.update(json.dumps([group, str(k), a.dtype.str, list(a.shape), len(data)]).encode())
            h.update(data)
    return h.hexdigest()


def check_layout(path: Path) -> None:
    """One SSGPError if the file's metadata (read without any of its data) declares what no saved
    posterior holds: more bytes of arrays than LAYOUT_BYTES_PER_BYTE per byte of the file (plus
    LAYOUT_SLACK_BYTES; a declared but unwritten array costs the file nothing), or a state-group
    variable :meth:`Posterior.save` never writes (name, dimensions, a non-numeric type, a
    subgroup)."""
    import h5netcdf
    import h5py

    def walk(group, where):
        for name, v in group.variables.items():
            yield where, name, tuple(v.dimensions), tuple(int(n) for n in v.shape), v.dtype
        for name, sub in group.groups.items():
            yield from walk(sub, f"{where}/{name}".lstrip("/"))

    size = path.stat().st_size
    try:
        with h5py.File(path, "r") as f:  # HDF5 errors here, before h5netcdf half-opens the file
            dict(f.attrs)
        with h5netcdf.File(path, "r") as f:
            found = list(walk(f, ""))
            state = f.groups.get(STATE_GROUP)
            subgroups = list(state.groups) if state is not None else []
    except Exception as e:  # a damaged file fails anywhere in HDF5 or h5netcdf
        raise SSGPError(f"{path}: not a saved posterior ({type(e).__name__}: {one_line(e)})") from None

    def nbytes(shape, dtype):
        return math.prod(shape) * (dtype.itemsize if isinstance(dtype, np.dtype) else 16)

    total = sum(nbytes(shape, dtype) for *_, shape, dtype in found)
    if total > LAYOUT_SLACK_BYTES + LAYOUT_BYTES_PER_BYTE * size:
        where, name, _, shape, dtype = max(found, key=lambda v: nbytes(v[3], v[4]))
        raise SSGPError(f"{path}: declares {total / 1e9:.3g} GB of arrays in a {size:,}-byte file "
                        f"({where}/{name}: {shape} {dtype}); not a posterior written by "
                        "Posterior.save, refused before reading it")
    if subgroups:
        raise SSGPError(f"{path}: {STATE_GROUP}/{subgroups[0]}: a group Posterior.save never writes")
    for where, name, dims, shape, dtype in found:
        if where != STATE_GROUP:
            continue
        what = f"{path}: {STATE_GROUP}/{name}:"
        if not SAVED_ARRAYS.fullmatch(name):
            raise SSGPError(f"{what} not an array Posterior.save writes")
        if dims != tuple(f"{name}_dim{i}" for i in range(len(shape))):
            raise SSGPError(f"{what} dimensions {dims} are not those Posterior.save writes")
        if not isinstance(dtype, np.dtype) or dtype.kind not in "biuf":
            raise SSGPError(f"{what} type {dtype} is not numeric")


# the guides' settings that format 1 kept flat in [inference.svi]
_FLAT_GUIDE_SETTINGS = ("psi", "df", "init_scale", "components", "spread")


def _guide_tables_from_flat(config: dict) -> dict:
    """A format-1 saved entry's configuration with its guide's settings moved from
    ``[inference.svi]`` into ``[inference.svi.<guide>]`` (and the other guides' dropped)."""
    svi = config.get("inference", {}).get("svi") if isinstance(config.get("inference"), dict) \
        else None
    if not isinstance(svi, dict) or not isinstance(svi.get("guide"), str):
        return config
    from ssgp_ppl.model.guides import GUIDES  # guides imports this module's neighbours: not at the top

    own = GUIDES[svi["guide"]].Settings.schema() if svi["guide"] in GUIDES else {}
    flat = {k: svi[k] for k in _FLAT_GUIDE_SETTINGS if k in svi}
    svi = {k: v for k, v in svi.items() if k not in flat}
    if own:
        svi[svi["guide"]] = {k: v for k, v in flat.items() if k in own}
    return {**config, "inference": {**config["inference"], "svi": svi}}


def _check_scaler(path: Path, arrays: dict, name: str, ndim: int) -> Scaler:
    """The saved scaler ``name``: finite means, finite and positive scales, of one shape."""
    mean, scale = arrays[f"{name}_mean"], arrays[f"{name}_scale"]
    if mean.ndim != ndim or mean.shape != scale.shape or (ndim and not mean.size):
        raise SSGPError(f"{path}: {name}_mean / {name}_scale: shapes {mean.shape} and "
                        f"{scale.shape} are not those of a saved scaler")
    if not np.isfinite(mean).all():
        raise SSGPError(f"{path}: {name}_mean: a saved scaler's means must be finite")
    if not (np.isfinite(scale).all() and (scale > 0).all()):
        raise SSGPError(f"{path}: {name}_scale: a saved scaler's scales must be finite and > 0, "
                        f"got {np.ravel(scale)[:4].tolist()}")
    return Scaler(mean, scale)


def load(path: str | Path, make_entry) -> Posterior:
    """A :class:`Posterior` saved by :meth:`Posterior.save` (it predicts as the saved one did);
    ``make_entry(name, path, config, src)`` rebuilds its catalog entry, validated as a catalog
    file whose errors name ``src`` (:func:`ssgp_ppl.entry.from_saved`).

    Before any data are read, the file's layout is checked (:func:`check_layout`); the state's
    sha256 (:func:`state_checksum`) must match the one saved, else the file was modified or
    corrupted; the entry is validated as a catalog file and the scalers must be finite. A file
    without a checksum attribute loads after these checks alone. Every problem is one
    :class:`SSGPError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise SSGPError(f"{path}: no such file (save a posterior with Posterior.save)")
    check_layout(path)
    try:
        with xr.open_datatree(os.fspath(path), engine="h5netcdf") as opened:
            dt = opened.load()
    except Exception as e:  # a damaged file fails anywhere in HDF5, h5netcdf or xarray
        raise SSGPError(f"{path}: not a saved posterior ({type(e).__name__}: {one_line(e)})") from None
    if STATE_GROUP not in dt.children:
        raise SSGPError(f"{path}: not a saved posterior (no '{STATE_GROUP}' group; posterior.nc "
                        "files of `ssgp-ppl fit` before save/load hold the DataTree only)")
    try:
        return _from_tree(path, dt, make_entry)
    except SSGPError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError,
            RecursionError) as e:  # a file edited by hand, without a checksum
        raise SSGPError(f"{path}: not a valid saved posterior ({type(e).__name__}: "
                        f"{one_line(e)[:200]})") from None


_META_TYPES = {"entry": dict, "method": str, "dataset": str, "rule": dict, "info": dict,
               "y_centre": (int, float), "feature_names": list, "encoding": (str, type(None)),
               "sites": list, "sites_in_datatree": bool, "test": (dict, type(None)),
               "metrics": (dict, type(None)),
               "target_transform": (str, type(None))}  # the JSON attribute's keys (formats 1-3;
# target_transform absent before format 3: no transform)


def _refit(meta) -> str:
    """How to get the posterior again: refit the entry the file names (MODEL where it names none)."""
    entry = meta.get("entry") if isinstance(meta, dict) else None
    name = entry.get("name") if isinstance(entry, dict) else None
    model = name if isinstance(name, str) and re.fullmatch(r"[\w.-]{1,64}", name) else "MODEL"
    return (f"refit it: `ssgp-ppl fit {model} --data DATA --out DIR` writes DIR/posterior.nc (in "
            "Python, ssgp_ppl.fit(...).save(path))")


def _from_tree(path: Path, dt: xr.DataTree, make_entry) -> Posterior:
    ds = dt[STATE_GROUP].to_dataset()
    text = ds.attrs.get("ssgp_ppl")
    if not isinstance(text, str):
        raise SSGPError(f"{path}: not a saved posterior ({STATE_GROUP} has no 'ssgp_ppl' attribute)")
    meta = json.loads(text)
    found = meta.get("format") if isinstance(meta, dict) else None
    if found not in READ_FORMATS or isinstance(found, bool):
        raise SSGPError(f"{path}: saved posterior format {found!r} is not one this version reads "
                        f"({', '.join(map(str, READ_FORMATS))}); {_refit(meta)}")
    for key, types in _META_TYPES.items():
        value = meta.get(key)
        if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
            raise SSGPError(f"{path}: {STATE_GROUP}'s attribute '{key}' is not that of a saved "
                            "posterior")
    if not all(isinstance(k, str) for k in [*meta["sites"], *meta["feature_names"]]):
        raise SSGPError(f"{path}: {STATE_GROUP}'s attribute 'sites' or 'feature_names' is not "
                        "that of a saved posterior")
    arrays = {k: np.asarray(v.values) for k, v in ds.data_vars.items()}
    if meta["sites_in_datatree"]:
        draws = dt["posterior"].to_dataset()
        sites = {k: np.asarray(draws[k].values) for k in meta["sites"]}
    else:
        sites = {k: arrays[f"posterior_{k}"] for k in meta["sites"]}
    saved = ds.attrs.get(CHECKSUM)
    if saved is not None and (not isinstance(saved, str) or saved != state_checksum(
            text, arrays, sites if meta["sites_in_datatree"] else {})):
        raise SSGPError(f"{path}: the saved posterior was modified or corrupted after it was saved "
                        f"(its sha256 checksum does not match); {_refit(meta)}")
    e = meta["entry"]
    if not (isinstance(e["name"], str) and isinstance(e["path"], str) and
            isinstance(e["config"], dict)):
        raise SSGPError(f"{path}: entry: expected a name, a path and a configuration table")
    config = e["config"] if found > 1 else _guide_tables_from_flat(e["config"])
    entry = make_entry(e["name"], Path(e["path"]), config, f"{path} (saved entry)")
    if e.get("sizing") is not None:
        try:
            entry = dataclasses.replace(entry, sizing=Sizing.from_json(e["sizing"]))
        except SSGPError as err:
            raise SSGPError(f"{path}: entry: {err}") from None
    x_scaler = _check_scaler(path, arrays, "x_scaler", 1)
    y_scaler = _check_scaler(path, arrays, "y_scaler", 0)
    transform = meta.get("target_transform")  # absent before format 3: no transform
    if transform not in (None, "log"):
        raise SSGPError(f"{path}: target_transform: {transform!r} is not a "
                        "transform this version knows (log)"[:300])
    y_scaler = y_scaler._replace(log=transform == "log")
    if not math.isfinite(meta["y_centre"]):
        raise SSGPError(f"{path}: y_centre: must be a finite number, got {meta['y_centre']!r}")
    for k in meta["rule"].get("sites_from_posterior", []):
        arrays[f"site_{k}"] = np.reshape(sites[k], (-1,) + sites[k].shape[2:])

    tree = dt.copy()
    del tree[STATE_GROUP]
    info = info_from_flat(meta["info"], meta["method"]) if found == 1 else \
        info_from_json(meta["info"])
    params = {k[len("params_"):]: v for k, v in arrays.items() if k.startswith("params_")}
    test = None
    if meta.get("test") is not None:
        test = Prediction(*(arrays[f"test_{k}"] for k in TEST_ARRAYS), meta["test"]["y_scale"],
                          meta["test"]["y_shift"], meta["test"]["gaussian"],
                          log=bool(meta["test"].get("log", False)))
    return Posterior(entry=entry, method=meta["method"], dataset=meta["dataset"], sites=sites,
                     rule=rule_from_state(arrays, meta["rule"]), x_scaler=x_scaler,
                     y_scaler=y_scaler, info=info, log_p=arrays.get("log_p"),
                     log_q=arrays.get("log_q"), losses=arrays.get("losses"),
                     y_centre=float(meta["y_centre"]), test=test, metrics=meta["metrics"],
                     params=params or None, path_of_draw=arrays.get("path_of_draw"),
                     feature_names=tuple(meta["feature_names"]),
                     encoding=TableEncoding.from_json(meta["encoding"]) if meta.get("encoding")
                     else None,
                     datatree=tree if tree.children else None)


__all__ = ["FitInfo", "Handoff", "Posterior", "load", "state_checksum", "stop_text"]
