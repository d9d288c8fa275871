"""Declarative settings: a :class:`Field` per key, validated with the file and dotted key named.

The catalog (:mod:`ssgp_ppl.entry`), every inference method (:mod:`ssgp_ppl.inference.methods`), every guide
(:mod:`ssgp_ppl.model.guides`) and the predictive use these to declare and check their own TOML tables:
a component's :class:`Settings` is a frozen dataclass whose fields are made by :func:`setting`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import TYPE_CHECKING, Any, NamedTuple

from ssgp_ppl.data.tables import duplicates
from ssgp_ppl.errors import SSGPError

if TYPE_CHECKING:  # pragma: no cover
    from ssgp_ppl.entry import CatalogEntry


def is_int(v) -> bool:
    """An integer value as JSON and TOML give it (``True`` is not one)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


class Field(NamedTuple):
    """One catalog key: its type, default, allowed values / bounds and a one-line doc."""

    type: type | tuple
    default: Any
    doc: str
    choices: tuple | None = None
    low: float | None = None  # inclusive lower bound
    high: float | None = None  # inclusive upper bound
    open_low: bool = False  # lower bound exclusive
    auto: bool = False  # the text "auto" is accepted too: resolved against the data later


def setting(type_, default, doc: str, **bounds):
    """A Settings field: its catalog :class:`Field` rides in the metadata."""
    f = Field(type_, default, doc, **bounds)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"field": f})
    return dataclasses.field(default=default, metadata={"field": f})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Base of every component's settings (no fields: a component without settings)."""

    @classmethod
    def schema(cls) -> dict[str, Field]:
        return {f.name: f.metadata["field"] for f in dataclasses.fields(cls)}

    @classmethod
    def of(cls, entry: CatalogEntry, name: str):
        """The entry's (validated) ``[inference.<name>]`` table as this type (its own keys: a
        table may hold sub-tables, as ``[inference.svi]`` holds its guide's)."""
        table = entry.config["inference"][name]
        return cls(**{k: table[k] for k in cls.schema()})


def check_value(f: Field, value, where: str) -> None:
    """One SSGPError naming ``where`` if ``value`` is not of ``f``'s type, choices or bounds."""
    if f.auto and value == "auto":
        return
    types = f.type if isinstance(f.type, tuple) else (f.type,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        want = " or ".join([t.__name__ for t in types] + (["'auto'"] if f.auto else []))
        raise SSGPError(f"{where}: expected {want}, got {type(value).__name__} {value!r}")
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not value:
        raise SSGPError(f"{where}: must not be empty")
    if isinstance(value, list) and any(isinstance(v, list | dict) for v in value):
        raise SSGPError(f"{where}: expected a list of values, got a nested list or table")
    for v in items:
        if isinstance(v, float) and not math.isfinite(v):  # TOML and --set accept nan and inf
            raise SSGPError(f"{where}: must be a finite number, got {v!r}")
        if f.choices is not None and v not in f.choices:
            raise SSGPError(f"{where}: {v!r} is not one of {', '.join(map(str, f.choices))}")
        if f.low is not None and (v < f.low or (f.open_low and v == f.low)):
            op = ">" if f.open_low else ">="
            raise SSGPError(f"{where}: must be {op} {f.low:g}, got {v!r}")
        if f.high is not None and v > f.high:
            raise SSGPError(f"{where}: must be <= {f.high:g}, got {v!r}")
    dup = duplicates(value) if isinstance(value, list) else []
    if dup:
        raise SSGPError(f"{where}: {dup[0]!r} is listed twice")


def validate(raw: dict, schema: dict, prefix: str, src: str) -> dict:
    """``raw`` checked against ``schema`` (nested dicts of :class:`Field`), defaults filled in."""
    out = {}
    for key in raw:
        if key not in schema:
            where = f"{prefix}{key}"
            known = ", ".join(schema)
            raise SSGPError(f"{src}: unknown key '{where}' (known here: {known})")
    for key, f in schema.items():
        where = f"{src}: {prefix}{key}"
        if isinstance(f, dict):
            sub = raw.get(key, {})
            if not isinstance(sub, dict):
                raise SSGPError(f"{where}: expected a table")
            out[key] = validate(sub, f, f"{prefix}{key}.", src)
        elif key in raw:
            check_value(f, raw[key], where)
            out[key] = float(raw[key]) if f.type == (int, float) else raw[key]
        elif f.default is None:
            raise SSGPError(f"{where}: required key is missing")
        else:
            out[key] = copy.copy(f.default)
    return out


def leaf_paths(schema: dict, prefix=()) -> list[tuple[str, ...]]:
    """Every key of ``schema`` as a tuple path."""
    paths = []
    for k, f in schema.items():
        paths += leaf_paths(f, prefix + (k,)) if isinstance(f, dict) else [prefix + (k,)]
    return paths


__all__ = ["Field", "check_value", "is_int", "is_number", "leaf_paths", "validate"]
