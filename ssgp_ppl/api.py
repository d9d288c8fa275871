"""The Python API: `fit`, `compare`, `load`, `catalog` (also as ``ssgp_ppl.fit`` …).

>>> import ssgp_ppl
>>> post = ssgp_ppl.fit("ssgp_svi", data="pendulum")          # doctest: +SKIP
>>> pred = post.predict(x_new)        # raw inputs; mean, var, draws, interval(0.9) of y*
>>> post.save("pendulum.nc"); ssgp_ppl.load("pendulum.nc").predict(x_new)
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from pathlib import Path

import numpy as np

from ssgp_ppl import pipeline
from ssgp_ppl import posterior as _posterior
from ssgp_ppl.data import checks, datasets
from ssgp_ppl.data.tables import TableOptions
from ssgp_ppl.diagnostics.metrics import coverage_off
from ssgp_ppl.entry import CatalogEntry, add_catalog, catalog_files, from_saved, load_entry
from ssgp_ppl.errors import (
    CalibrationWarning,
    CatalogWarning,
    ConvergenceWarning,
    SSGPError,
    check_seed,
)
from ssgp_ppl.inference import methods, sizing
from ssgp_ppl.posterior import Handoff, Posterior, stop_text


def _entry(model, settings) -> CatalogEntry:
    entry = model if isinstance(model, CatalogEntry) else load_entry(model)
    if settings is None:
        return entry
    if isinstance(settings, dict):
        return entry.with_settings(settings.items()) if settings else entry
    if isinstance(settings, list | tuple):
        return entry.with_overrides(list(settings)) if settings else entry
    raise SSGPError(f'settings must be a dict ({{"m": 20}}) or a list of "key=value" texts, got '
                    f"{type(settings).__name__}")


def _positive(value, what: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                              or value < 1):
        raise SSGPError(f"{what} must be a positive integer, got {value!r}")
    return None if value is None else int(value)


def _dataset(entry: CatalogEntry, data, x, y, *, target, split, x_test, y_test, test, table,
             subsample, log_target=False) -> datasets.Dataset:
    """The data of a fit: ``data`` (a name, a file or a DataFrame) or the arrays ``x``, ``y``,
    inputs scaled as the entry's ``[data] x_scaling`` says, the target on its log scale with
    ``log_target``."""
    lik = entry.lik
    scaling = entry.config["data"]["x_scaling"]
    if data is not None and (x is not None or y is not None):
        raise SSGPError("give either data= or x=, y=, not both")
    if data is not None:
        if x_test is not None or y_test is not None:
            raise SSGPError("x_test= and y_test= go with x=, y=; with data= give test= (a file "
                            "or DataFrame of test rows)")
        return datasets.load(data, split=split, target=target, x_scaling=scaling,
                             target_kind=lik.target, table=table, test=test, subsample=subsample,
                             log_target=log_target)
    if x is not None and y is not None:
        for key, value, use in (("target", target, "the target is y"),
                                ("split", split or None, "every row of x trains"),
                                ("subsample", subsample, "every row of x trains"),
                                ("test", test, "give x_test=, y_test=")):
            if value is not None:
                raise SSGPError(f"{key}= applies to data= (a name, a file or a DataFrame); with "
                                f"x=, y= {use}")
        return datasets.from_arrays(x, y, x_test, y_test, x_scaling=scaling,
                                    target_kind=lik.target, table=table, log_target=log_target)
    raise SSGPError("fit needs data= (a name, a file path or a DataFrame) or x= and y= arrays")


def _handoff(entry, ds, method, spectral_points, *, seed, progress) -> Handoff | None:
    """The hand-over of a fit given ``spectral_points`` (None without them)."""
    if spectral_points is None:
        return None
    m = methods.get(method or entry.methods[0])
    if "spectral_points" not in m.accepts:
        takes = ", ".join(k for k, v in methods.REGISTRY.items() if "spectral_points" in v.accepts)
        raise SSGPError(f"spectral_points= applies to the methods that take spectral points "
                        f"({takes}), not to {m.name}")
    points = checks.real_array(spectral_points, "spectral_points")
    want = (entry.config["model"]["m"], ds.n_features)
    if points.shape != want or not np.all(np.isfinite(points)):
        raise SSGPError(f"spectral_points must be a finite (m, d) = {want} array for "
                        f"{entry.name} on these inputs, got shape {points.shape}")
    given = pipeline.prerequisites(entry, ds, m, seed=seed, progress=progress) \
        if m.requires(entry) else Handoff()
    return dataclasses.replace(given, spectral_points=points)


def fit(model: str | Path | CatalogEntry, data=None, x=None, y=None, *, target: str | None = None,
        method: str | None = None, seed: int = 0, steps: int | None = None,
        settings: dict | list[str] | None = None, split: int = 0, x_test=None, y_test=None,
        test=None, inputs=None, drop=None, dropna: bool = False, encode: str | None = None,
        dates: str | None = None, subsample: int | None = None, spectral_points=None,
        log_target: bool = False, force: bool = False, budget: float | None = None,
        progress: bool = True) -> Posterior:
    """Fit a catalog model and return its posterior.

    Parameters
    ----------
    model
        A catalog name (``ssgp_ppl.catalog()``), a TOML path or a loaded entry.
    data
        A known data set name, a CSV/Parquet path or a pandas DataFrame, split into training and
        test rows as ``split`` says; the posterior then carries the test scores in ``metrics``.
    x, y
        Instead of ``data``: (n, d) inputs and (n,) targets, all of them training rows, scored on
        ``x_test``, ``y_test`` if given. A DataFrame ``x`` is read as a table.
    x_test, y_test
        With ``x``, ``y``: the test rows the posterior is scored on (``metrics``).
    target
        The target column of a file or DataFrame ``data`` (default: the last).
    method
        One of ``ssgp_ppl.inference.methods.REGISTRY`` (default: the entry's own).
    seed
        The random seed.
    steps
        SVI/ML steps or NCVMP iterations (default: the entry's).
    settings
        Catalog overrides, ``{"svi.steps": 2000, "m": 20}`` or ``["m=20"]``.
    split
        The split index of ``data``.
    test
        A file or DataFrame of test rows (then every row of ``data`` trains).
    inputs, drop
        For a table: the input columns, or the columns to leave out (a list or ``"a,b"``).
    dropna
        For a table: drop rows with a missing value (else a missing value is an error).
    encode, dates
        For a table: ``"onehot"`` turns text columns into 0/1 inputs, ``"numeric"`` date columns
        into days since 1970-01-01.
    subsample
        Keep this many rows of a named data set before splitting.
    spectral_points
        An (m, d) array of fixed spectral points replacing the entry's own, e.g. the set an NCVMP
        fit kept (``post.handoff.spectral_points``), for the methods that take them.
    log_target
        Fit the model to log y of a positive target (prices, wages): predictions are
        back-transformed (log-normal given each draw) and the metrics are on y. A target value
        <= 0 is an error naming its row. Gaussian-likelihood entries only.
    force
        Run a fit whose memory estimate exceeds the machine's (refused otherwise).
    budget
        For an entry with ``m = "auto"``: the seconds the fit is sized to (an estimate from every
        step of its step budget, not a limit; `ssgp_ppl.inference.sizing`, default
        ``sizing.DEFAULT_BUDGET``); ``post.entry.sizing`` says what was chosen and why.
    progress
        Show progress on stderr (bars of the steps, SMC temperatures and NUTS draws), as
        NumPyro's SVI.run and MCMC do by default.

    Returns
    -------
    Posterior
        ``predict`` (raw inputs, or a DataFrame of the same columns), ``metrics``, ``datatree``,
        ``save``.

    Raises
    ------
    SSGPError
        One error saying what to change: an unknown entry or setting, data that cannot be read
        or used (a bad value named by its row and column), or a fit whose memory estimate
        exceeds the machine's (without ``force``).

    Warns
    -----
    ConvergenceWarning
        When the fit stopped before its stop rule declared convergence (the step budget).
    CalibrationWarning
        When the test coverage of the 90% predictive interval is far from nominal
        (`ssgp_ppl.diagnostics.metrics.coverage_off`).
    """
    entry = _entry(model, settings)
    steps = _positive(steps, "steps")
    seed = check_seed(seed)
    table = TableOptions.of(inputs, drop, dropna, encode, dates)
    ds = _dataset(entry, data, x, y, target=target, split=split, x_test=x_test, y_test=y_test,
                  test=test, table=table, subsample=subsample, log_target=log_target)
    if spectral_points is not None and entry.m_auto and np.ndim(spectral_points) == 2:
        entry = entry.with_settings([("m", int(np.shape(spectral_points)[0]))])  # the points say m
    entry = sizing.resolve(entry, ds, budget=budget, seed=seed, steps=steps, method=method,
                           progress=progress)
    given = _handoff(entry, ds, method, spectral_points, seed=seed, progress=progress)
    post = pipeline.fit(entry, ds, method, seed=seed, steps=steps, progress=progress, force=force,
                        inputs=given)
    if post.info.converged is False:  # None: a method without a stop rule (samplers)
        warnings.warn(f"{entry.name}:{post.method}: {stop_text(post.info)}; raise the budget "
                      "(steps=) or see post.info", ConvergenceWarning, stacklevel=2)
    off = coverage_off(post.metrics["coverage_90"], ds.n_test) \
        if post.metrics and "coverage_90" in post.metrics else None
    if off is not None:
        warnings.warn(f"{entry.name}:{post.method}: {off}", CalibrationWarning, stacklevel=2)
    return post


def compare(model: str | Path | CatalogEntry, data=None, *, out: str | Path | None = None,
            seed: int = 0, settings: dict | list[str] | None = None, target: str | None = None,
            split: int = 0, test=None, subsample: int | None = None, inputs=None, drop=None,
            dropna: bool = False, encode: str | None = None, dates: str | None = None,
            log_target: bool = False, steps: int | None = None, samples: int | None = None,
            chains: int | None = None, small: bool = False, fresh_reference: bool = False,
            overwrite: bool = False, resume: bool = False, sbc: int | None = None,
            budget: float | None = None, progress: bool = True):
    """Fit every method of a catalog entry and its reference on one split; write the report.

    What ``ssgp-ppl compare`` does: each method's test metrics, coverage curve, PSIS-LOO and,
    against the reference (the stored gold reference of the same target where there is one,
    else tempered SMC polished by NUTS, computed here), the posterior comparison on
    symmetry-invariant quantities. The reference is labelled with its verdict wherever it is
    used. The data keywords ``target``, ``split``, ``test``, ``subsample``, ``inputs``, ``drop``,
    ``dropna``, ``encode``, ``dates`` and ``log_target`` are those of ``ssgp_ppl.fit``.

    Parameters
    ----------
    model
        A catalog name, a TOML path or a loaded entry.
    data
        A known data set name, a CSV/Parquet path or a pandas DataFrame (Gaussian targets).
    out
        The output folder (default ``runs/<model>-<data>-compare``): ``comparison.json``,
        ``report.html`` and each method's ``posterior_<method>.nc``.
    seed
        The random seed of every fit.
    settings
        Catalog overrides, ``{"svi.paths": 4}`` or ``["svi.paths=4"]``.
    target, split, test, subsample, inputs, drop, dropna, encode, dates, log_target
        As in ``ssgp_ppl.fit``.
    steps, samples, chains
        The budget of every method: SVI/ML steps and NCVMP iterations; the reference's draws per
        chain and chains (default: the entry's).
    small
        A quick run: small budgets and the first 80 training and 30 test rows.
    fresh_reference
        Compute the reference here even where a stored gold reference matches.
    overwrite, resume
        Replace a comparison already in ``out``; continue an interrupted one.
    sbc
        Add simulation-based calibration of this many simulations (``ssgp-ppl compare --sbc N``:
        `ssgp_ppl.diagnostics.sbc.run` at its small defaults, at most 2 SVI paths (also for a
        loaded entry), ``settings`` on top, on the
        training inputs of this split) into ``out/sbc`` and its section to the report.
    budget
        For an entry with ``m = "auto"``: the seconds the entry's own fit is sized to (as in
        ``ssgp_ppl.fit``); every method and the reference use the m chosen for it.
    progress
        Show progress on stderr.

    Returns
    -------
    Comparison
        ``posteriors`` by method, ``table`` (a pandas DataFrame), ``verdict`` and
        ``reference_label`` of the reference, ``report`` (the HTML file), ``sbc`` (the SBC
        result, None without one) and ``to_dict()`` (what ``comparison.json`` holds).

    Raises
    ------
    SSGPError
        When there is no ``data``, the entry or a setting is unknown, the data cannot be used,
        or ``out`` holds another comparison (without ``overwrite`` or ``resume``).
    """
    from ssgp_ppl import report

    seed = check_seed(seed)
    limits = {k: _positive(v, k) for k, v in (("steps", steps), ("samples", samples),
                                              ("chains", chains))}
    sbc = _positive(sbc, "sbc")
    if data is None:
        raise SSGPError("compare needs data= (a name, a file path or a DataFrame)")
    entry = _entry(model, settings)
    if sbc is not None:  # its entry checked before the comparison runs, not after
        from ssgp_ppl.diagnostics import sbc as sbc_module

        sbc_entry = _entry(sbc_module.small(_entry(model, None)), settings)
        sbc_module.check_entry(sbc_entry)
    table = TableOptions.of(inputs, drop, dropna, encode, dates)
    ds = _dataset(entry, data, None, None, target=target, split=split, x_test=None, y_test=None,
                  test=test, table=table, subsample=subsample, log_target=log_target)
    if small:  # the given settings still apply on top of the quick run's
        entry, ds = report.small(entry, ds)
        entry = _entry(entry, settings)
    entry = report.budget(entry, ds.n_train, **limits)  # the steps m is sized for
    entry = sizing.resolve(entry, ds, budget=budget, seed=seed, progress=progress)
    out = Path(f"runs/{entry.name}-{ds.name}-compare" if out is None else out)
    comparison = report.run_comparison(entry, ds, out, seed=seed, progress=progress,
                                       fresh_reference=fresh_reference, overwrite=overwrite,
                                       resume=resume)
    if sbc is not None:
        sbc_module.add_to_comparison(sbc_entry, ds, out, sims=sbc, seed=seed, progress=progress)
    return comparison


def load_comparison(folder: str | Path):
    """A comparison written by `compare` (or ``ssgp-ppl compare``), read from its folder.

    Parameters
    ----------
    folder
        The comparison's output folder (or its ``comparison.json``).

    Returns
    -------
    Comparison
        Its posteriors are read from the folder's ``posterior_<method>.nc`` files when first
        used.
    """
    from ssgp_ppl.report import read_comparison

    return read_comparison(folder)


def select_beta(model: str | Path | CatalogEntry, data=None, x=None, y=None, *,
                grid: list[float] | None = None, seed: int = 0, steps: int | None = None,
                settings: dict | list[str] | None = None, target: str | None = None,
                split: int = 0, subsample: int | None = None, inputs=None, drop=None,
                dropna: bool = False, encode: str | None = None, dates: str | None = None,
                log_target: bool = False):
    """Pick β of a β-ELBO or DLM entry on a validation split (Wei et al. 2021, §6.1).

    The entry is fitted for every β of ``grid`` at once on the inner training rows (8/75 of the
    training rows are kept for validation) and scored on the validation rows. ``model``,
    ``settings`` and the data keywords (``target``, ``split``, ``subsample``, ``inputs``,
    ``drop``, ``dropna``, ``encode``, ``dates``, ``log_target``) are those of ``ssgp_ppl.fit``
    (the test rows of ``data`` are not used).

    Parameters
    ----------
    model
        A catalog name, a TOML path or a loaded entry, with a β-ELBO or DLM objective.
    data
        A known data set name, a CSV/Parquet path or a pandas DataFrame.
    x, y
        Instead of ``data``: (n, d) inputs and (n,) targets.
    grid
        The β values (default ``[n, n/2, …, 0.01]`` of the inner n).
    seed
        The random seed.
    steps
        SVI steps of each fit (default: the entry's).
    settings
        Catalog overrides, as in ``ssgp_ppl.fit``.
    target, split, subsample, inputs, drop, dropna, encode, dates, log_target
        As in ``ssgp_ppl.fit``.

    Returns
    -------
    BetaSelection
        ``grid``, ``scores`` (validation mean NLL, or MSE for the square-loss DLM),
        ``criterion`` and the chosen ``beta``.
    """
    from ssgp_ppl.inference.selection import select_beta as select

    entry = _entry(model, settings)
    table = TableOptions.of(inputs, drop, dropna, encode, dates)
    ds = _dataset(entry, data, x, y, target=target, split=split, x_test=None, y_test=None,
                  test=None, table=table, subsample=subsample, log_target=log_target)
    return select(entry, ds, grid, seed=check_seed(seed), steps=_positive(steps, "steps"))


def load(path: str | Path) -> Posterior:
    """A posterior saved with `Posterior.save`: it predicts exactly as the saved one did.

    A file saved without a checksum loads after the other checks.

    Parameters
    ----------
    path
        The file `Posterior.save` (or ``ssgp-ppl fit``) wrote.

    Returns
    -------
    Posterior
        The saved posterior.

    Raises
    ------
    SSGPError
        One error naming the file: a file modified or corrupted since it was saved (its sha256
        checksum), a stored entry that is not a valid catalog entry, scalers that are not
        finite, or a file declaring arrays no saved posterior holds (checked before any data
        are read).
    """
    return _posterior.load(path, from_saved)


def catalog() -> list[dict]:
    """The catalog entries (``ssgp-ppl models``).

    A file that is not a valid entry (a user catalog's) is skipped with a
    `CatalogWarning` naming the file and the problem.

    Returns
    -------
    list of dict
        One dict per entry: name, use when, methods, guide, objective, likelihood, description
        and file.
    """
    files, clashes = catalog_files()
    problems = list(clashes.values())
    rows = []
    for name, path in files.items():
        try:
            e = load_entry(path)
        except SSGPError as err:  # its message names the file
            problems.append(str(err))
            continue
        listed = [methods.get(m) for m in e.methods]
        guides = [g for g in (m.guide_label(e) for m in listed) if g]
        rows.append({"name": name, "use when": e.use_when, "methods": ",".join(e.methods),
                     "guide": guides[0] if guides else "-",
                     "objective": listed[0].objective_label(e),
                     "likelihood": e.config["model"]["likelihood"], "description": e.description,
                     "file": str(path)})
    for p in problems:
        warnings.warn(p, CatalogWarning, stacklevel=2)
    return rows


def guides() -> list[dict]:
    """The registered guides (``ssgp-ppl models --guides``): name, description and each setting of
    its ``[inference.svi.<name>]`` table (type, default, allowed values, doc), from its Settings."""
    from ssgp_ppl.model.guides import GUIDES

    def field(f) -> dict:
        types = f.type if isinstance(f.type, tuple) else (f.type,)
        out = {"type": "/".join(t.__name__ for t in types), "default": f.default, "doc": f.doc}
        out.update({k: getattr(f, k) for k in ("choices", "low", "high") if getattr(f, k) is not None})
        if f.open_low:
            out["open_low"] = True
        return out

    return [{"name": name, "description": cls.description,
             "settings": {k: field(f) for k, f in cls.Settings.schema().items()}}
            for name, cls in GUIDES.items()]


__all__ = ["add_catalog", "catalog", "compare", "fit", "guides", "load", "load_comparison",
           "select_beta"]
