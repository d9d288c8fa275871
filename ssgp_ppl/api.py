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
from ssgp_ppl.errors import CatalogWarning, SSGPError, check_seed
from ssgp_ppl.posterior import Posterior
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

    ``model``: a catalog name (``ssgp_ppl.catalog()``), a TOML path or a loaded entry;
    ``settings``: catalog overrides, ``{"svi.steps": 2000, "m": 20}`` or ``["m=20"]``.
    Data, one of: ``data`` a known data set name, a CSV/Parquet path or a pandas DataFrame
    (``target`` its target column, default the last), split into training and test rows as
    ``split`` says (the posterior then carries the test scores in ``metrics``); or ``x`` (n, d),
    ``y`` (n,) arrays, all of them training rows, scored on ``x_test``, ``y_test`` if given.
    ``method``: one of ``ssgp_ppl.methods.REGISTRY`` (default: the entry's own).
    A file or DataFrame ``data``, or a DataFrame ``x`` (:class:`~ssgp_ppl.tables.TableOptions`):
    ``inputs`` / ``drop``
    choose the input columns (a list or ``"a,b"``), ``dropna`` drops rows with missing values,
    ``encode="onehot"`` turns text columns into 0/1 inputs, ``dates="numeric"`` date columns into
    days since 1970-01-01; ``test`` a file or DataFrame of test rows (then every row of ``data``
    trains). The posterior's ``predict`` takes a DataFrame of the same columns. ``force``: run
    a fit whose memory estimate exceeds the machine's (refused otherwise).
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
    return pipeline.fit(entry, ds, method, seed=seed, steps=steps, progress=progress, force=force)


def load(path: str | Path) -> Posterior:
    """A posterior saved with :meth:`Posterior.save`: it predicts exactly as the saved one did.

    Refused with one :class:`~ssgp_ppl.errors.SSGPError` naming the file: a file modified or
    corrupted since it was saved (its sha256 checksum), a stored entry that is not a valid catalog
    entry, scalers that are not finite, and a file declaring arrays no saved posterior holds
    (checked before any data are read). A file saved without a checksum loads after the other
    checks."""
    return _posterior.load(path, from_saved)


def catalog() -> list[dict]:
    """The catalog entries: name, methods, guide, objective, description and the file
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
        rows.append({"name": name, "methods": ",".join(e.methods),
                     "guide": guides[0] if guides else "-",
                     "objective": listed[0].objective_label(e), "description": e.description,
                     "file": str(path)})
    for p in problems:
        warnings.warn(p, CatalogWarning, stacklevel=2)
    return rows


def guides() -> list[dict]:
    """The registered guides (``ssgp-ppl models --guides``): name, description and each setting of
    its ``[inference.svi.<name>]`` table (type, default, allowed values, doc), from its Settings."""
    from ssgp_ppl.guides import GUIDES

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


__all__ = ["fit", "load", "catalog", "add_catalog", "guides"]
