"""Atomic writes (temporary file + rename): an interrupted run never leaves a half-written file."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _finite(obj):
    """NaN and ±inf -> None (strict JSON has no such numbers; None reads as "not defined")."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def write_json(path: Path, obj) -> None:
    """Strict JSON (non-finite floats written as null), atomically."""
    write_text_atomic(path, json.dumps(_finite(obj), indent=2, ensure_ascii=False,
                                       allow_nan=False) + "\n")


def print_json(doc, out: str | Path | None = None) -> None:
    """A benchmark's JSON document on stdout, and atomically in ``out`` (its folder made) if given."""
    text = json.dumps(doc, indent=1)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(out), text + "\n")
    print(text)


def write_datatree(path: Path, dt) -> None:
    """netCDF (h5netcdf) of a DataTree, written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    dt.to_netcdf(tmp, engine="h5netcdf")
    os.replace(tmp, path)
