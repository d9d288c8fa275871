"""A run directory (``fit --out DIR``) that two runs cannot corrupt: one run holds it at a time
(an advisory lock; a second run is refused with the holder's pid), and a run already in it is
never overwritten unless the user says so (``--overwrite``) or continues it (``--resume``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from ssgp_ppl.errors import SSGPError

LOCK = ".ssgp-ppl.lock"
RUN_FILES = ("run.json", "metrics.json", "checkpoint.npz", "posterior.nc")


@contextlib.contextmanager
def hold(out: Path) -> Iterator[None]:
    """Hold ``out`` for this process: ``out/.ssgp-ppl.lock`` locked with ``flock`` (released when
    the process ends, even on a crash) and holding our pid for the next run's message."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise SSGPError(f"cannot lock the run directory {out}: {e.strerror or e}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise SSGPError(f"{out} is in use by another ssgp-ppl run (pid {holder}); wait for "
                            "it or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def checkpoints(out: Path) -> list[str]:
    """Names of the checkpoint files in ``out``: ``checkpoint.npz``, and one per path of a
    multi-path fit (``checkpoint-path<k>.npz``, :func:`ssgp_ppl.paths.path_checkpoint`)."""
    return [p.name for p in sorted(out.glob("checkpoint*.npz"))
            if p.name == "checkpoint.npz" or p.name.startswith("checkpoint-path")]


def check_free(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse to start a new run over one that ``out`` holds, unless ``overwrite``; say how to
    continue an interrupted one."""
    if resume or overwrite:
        return
    found = [f for f in RUN_FILES if (out / f).exists()] + \
        [f for f in checkpoints(out) if f not in RUN_FILES]
    if not found or found == ["run.json"]:  # nothing trained yet (it stopped before training)
        return
    metrics = out / "metrics.json"
    interrupted = not metrics.exists()
    steps = None
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        rec = json.loads(metrics.read_text())
        interrupted, steps = bool(rec.get("interrupted")), rec.get("steps")
    if interrupted and any(f.startswith("checkpoint") for f in found):
        at = f" at step {steps}" if isinstance(steps, int) else ""
        raise SSGPError(f"{out} holds an interrupted run{at}: continue it with ssgp-ppl fit "
                        f"--resume {out}, or give --overwrite to start afresh")
    raise SSGPError(f"{out} already holds a run ({', '.join(found)}); choose another --out or "
                    "give --overwrite to replace it")
