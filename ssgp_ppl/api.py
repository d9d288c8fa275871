"""The Python API: :func:`fit`, :func:`load`, :func:`catalog` (also as ``ssgp_ppl.fit`` …).

>>> import ssgp_ppl
>>> post = ssgp_ppl.fit("ssgp_svi", data="pendulum")          # doctest: +SKIP
>>> pred = post.predict(x_new)        # raw inputs; mean, var, draws, interval(0.9) of y*
>>> post.save("pendulum.nc"); ssgp_ppl.load("pendulum.nc").predict(x_new)
"""

from __future__ import annotations

import numbers
import warnings
from pathlib import Path

from ssgp_ppl import datasets, methods, pipeline
from ssgp_ppl import posterior as _posterior
from ssgp_ppl.entry import CatalogEntry, add_catalog, catalog_files, from_saved, load_entry
from ssgp_ppl.errors import CatalogWarning, ConvergenceWarning, SSGPError, check_seed
from ssgp_ppl.posterior import Posterior, stop_text
from ssgp_ppl.tables import TableOptions


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


def fit(model: str | Path | CatalogEntry, data=None, x=None, y=None, *, target: str | None = None,
        method: str | None = None, seed: int = 0, steps: int | None = None,
        settings: dict | list[str] | None = None, split: int = 0, x_test=None, y_test=None,
        test=None, inputs=None, drop=None, dropna: bool = False, encode: str | None = None,
        dates: str | None = None, force: bool = False, progress: bool = False) -> Posterior:
    """Fit a catalog model and return its :class:`~ssgp_ppl.posterior.Posterior`.

    Parameters
    ----------
    model : str, path or CatalogEntry
        A catalog name (``ssgp_ppl.catalog()``), a TOML path or a loaded entry.
    data : str, path or pandas.DataFrame, optional
        A known data set name, a CSV/Parquet path or a DataFrame, split into training and test
        rows as ``split`` says (the posterior then carries the test scores in ``metrics``).
    x, y : array-like, optional
        Instead of ``data``: (n, d) inputs and (n,) targets, all of them training rows. A
        DataFrame ``x`` is read as a table (its text, date and missing values as ``data``'s).
    target : str, optional
        The target column of a file or DataFrame ``data`` (default: the last).
    method : str, optional
        One of ``ssgp_ppl.methods.REGISTRY`` (default: the entry's own).
    seed : int
        The fit's random seed.
    steps : int, optional
        The step (iteration) budget of an iterative method (default: the entry's).
    settings : dict or list of str, optional
        Catalog overrides: ``{"svi.steps": 2000, "m": 20}`` or ``["m=20"]``.
    split : int
        Which train/test split of ``data`` (a seed, or a test-mask column).
    x_test, y_test : array-like, optional
        Test rows for ``x``, ``y``: the posterior's ``metrics`` score them.
    test : str, path or pandas.DataFrame, optional
        Test rows for a file or DataFrame ``data``, which then trains on every row.
    inputs, drop : str or list of str, optional
        The input columns, or the columns to leave out (a list or ``"a,b"``).
    dropna : bool
        Drop rows with a missing value in a used column (otherwise an error naming it).
    encode : str, optional
        ``"onehot"``: turn text columns into one 0/1 input per category.
    dates : str, optional
        ``"numeric"``: turn date columns into days since 1970-01-01.
    force : bool
        Run a fit whose memory estimate exceeds the machine's (refused otherwise).
    progress : bool
        Show the fit's progress bar.

    Returns
    -------
    Posterior
        The fitted posterior: ``predict``, ``metrics``, ``datatree`` (ArviZ), ``save``, ``info``.

    Warns
    -----
    ConvergenceWarning
        When the fit stopped before its stop rule declared convergence (the step budget).
    """
    entry = _entry(model, settings)
    lik = entry.lik
    scaling = entry.config["data"]["x_scaling"]
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, numbers.Integral)
                              or steps < 1):
        raise SSGPError(f"steps must be a positive integer, got {steps!r}")
    steps = None if steps is None else int(steps)
    seed = check_seed(seed)
    if data is not None and (x is not None or y is not None):
        raise SSGPError("give either data= or x=, y=, not both")
    table = TableOptions.of(inputs, drop, dropna, encode, dates)
    if data is not None:
        if x_test is not None or y_test is not None:
            raise SSGPError("x_test= and y_test= go with x=, y=; with data= give test= (a file "
                            "or DataFrame of test rows)")
        ds = datasets.load(data, split=split, target=target, x_scaling=scaling,
                           target_kind=lik.target, table=table, test=test)
    elif x is not None and y is not None:
        for key, value, use in (("target", target, "the target is y"),
                                ("split", split or None, "every row of x trains"),
                                ("test", test, "give x_test=, y_test=")):
            if value is not None:
                raise SSGPError(f"{key}= applies to data= (a name, a file or a DataFrame); with "
                                f"x=, y= {use}")
        ds = datasets.from_arrays(x, y, x_test, y_test, x_scaling=scaling, target_kind=lik.target,
                                  table=table)
    else:
        raise SSGPError("fit needs data= (a name, a file path or a DataFrame) or x= and y= arrays")
    post = pipeline.fit(entry, ds, method, seed=seed, steps=steps, progress=progress, force=force)
    if post.info.converged is False:  # None: a method without a stop rule (samplers)
        warnings.warn(f"{entry.name}:{post.method}: {stop_text(post.info)}; raise the budget "
                      "(steps=) or see post.info", ConvergenceWarning, stacklevel=2)
    return post


def load(path: str | Path) -> Posterior:
    """A posterior saved with :meth:`Posterior.save`: it predicts exactly as the saved one did.

    Refused with one :class:`~ssgp_ppl.errors.SSGPError` naming the file: a file modified or
    corrupted since it was saved (its sha256 checksum), a stored entry that is not a valid catalog
    entry, scalers that are not finite, and a file declaring arrays no saved posterior holds
    (checked before any data are read). A file saved without a checksum loads after the other
    checks."""
    return _posterior.load(path, from_saved)


def catalog() -> list[dict]:
    """The catalog entries: name, when to use it, methods, guide, objective, description and the file
    (``ssgp-ppl models``). A file that is not a valid entry (a user catalog's) is skipped with a
    :class:`~ssgp_ppl.errors.CatalogWarning` naming the file and the problem."""
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
                     "objective": listed[0].objective_label(e), "description": e.description,
                     "file": str(path)})
    for p in problems:
        warnings.warn(p, CatalogWarning, stacklevel=2)
    return rows


__all__ = ["fit", "load", "catalog", "add_catalog"]
