"""Atomic writes (temporary file + rename): an interrupted run never leaves a half-written file."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_datatree(path: Path, dt) -> None:
    """netCDF (h5netcdf) of a DataTree, written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    dt.to_netcdf(tmp, engine="h5netcdf")
    os.replace(tmp, path)
