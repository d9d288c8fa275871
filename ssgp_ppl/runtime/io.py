"""Atomic writes: every file the package writes goes to a new temporary file in the target's
directory (a random name created exclusively, never through a planted link, with the mode the
umask gives any new file), is flushed to disk,
then renamed over the target; on any failure the temporary file is removed and the old target is
left as it was. A failed write (a full disk, a read-only file system) is one :class:`SSGPError`
naming the path, and so is a target that exists and is not a regular file (a device such as
/dev/null, a FIFO, a socket, a directory): the rename would replace it with a file."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import stat
from pathlib import Path

from ssgp_ppl.errors import SSGPError

_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | \
    getattr(os, "O_BINARY", 0)


def _new_temporary(path: Path) -> tuple[int, Path]:
    """A new file next to ``path``, created exclusively (mode 0666 less the umask)."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, _EXCLUSIVE, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"))


def file_kind(path: str | Path) -> str | None:
    """What ``path`` is ("a directory", "a FIFO (named pipe)", …) if it exists (through a link
    too) and is not a regular file; None for a regular file or nothing there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((text for test, text in _KINDS if test(mode)), "a special file")


def check_target(path: str | Path) -> None:
    """One :class:`SSGPError` naming ``path`` if it exists (through a link too) and is not a
    regular file: an atomic write would replace it (a device, a FIFO, a directory) with a file."""
    what = file_kind(path)  # nothing there: the write itself reports any problem
    if what is not None:
        raise SSGPError(f"cannot write {path}: it is {what}, not a regular file; give the path "
                        "of a file to write")


def write_bytes_atomic(path: str | Path, data: bytes | memoryview) -> None:
    """``data`` into ``path`` atomically (see the module docstring)."""
    path = Path(path)
    check_target(path)
    try:
        fd, tmp = _new_temporary(path)
    except OSError as e:
        raise SSGPError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            hint = " (the disk is full)" if e.errno == errno.ENOSPC else \
                " (a read-only file system)" if e.errno == errno.EROFS else ""
            raise SSGPError(f"cannot write {path}: {e.strerror or e}{hint}; the previous file, "
                            "if any, is unchanged") from None
        raise
    with contextlib.suppress(OSError):  # the rename survives a crash once the directory is synced
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


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
    """netCDF (h5netcdf) of a DataTree, written atomically: serialised in memory first, so a
    full disk is an error of :func:`write_bytes_atomic`, never a failure inside HDF5 (a target
    that is not a regular file is refused before the tree is serialised)."""
    check_target(path)
    write_bytes_atomic(path, dt.to_netcdf(engine="h5netcdf"))


__all__ = ["check_target", "file_kind", "print_json", "write_bytes_atomic", "write_datatree",
           "write_json", "write_text_atomic"]
