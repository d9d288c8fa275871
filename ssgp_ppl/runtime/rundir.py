"""A run directory (``fit --out DIR``, ``compare --out DIR``) that two runs cannot corrupt: one
run holds it at a time (an advisory lock; a second run is refused with the holder's pid), and a
run already in it is never overwritten unless the user says so (``--overwrite``) or continues it
(``--resume``). A comparison is written to a staging directory inside it and moved into place
when it is complete, so a partial comparison never sits beside a finished one."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.runtime import signals

LOCK = ".ssgp-ppl.lock"
RUN_FILES = ("run.json", "metrics.json", "checkpoint.npz", "posterior.nc")
COMPARE_FILES = ("comparison.json", "report.html")  # a finished comparison (and posterior_*.nc)
STAGING = ".ssgp-ppl-staging"  # a comparison in progress, moved into its directory when complete


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
    multi-path fit (``checkpoint-path<k>.npz``, :func:`ssgp_ppl.inference.paths.path_checkpoint`)."""
    return [p.name for p in sorted(out.glob("checkpoint*.npz"))
            if p.name == "checkpoint.npz" or p.name.startswith("checkpoint-path")]


def check_free(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse to start a new run over one that ``out`` holds, unless ``overwrite``; say how to
    continue an interrupted one."""
    if resume or overwrite:
        return
    if staged(out):
        raise SSGPError(f"{out} holds an interrupted comparison; choose another --out or give "
                        "--overwrite to replace it")
    found = run_files(out)
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


def run_files(out: Path) -> list[str]:
    """Names of the files of a run in ``out``: a fit's and a comparison's."""
    return [f for f in (*RUN_FILES, *COMPARE_FILES) if (out / f).exists()] + \
        [f for f in checkpoints(out) if f not in RUN_FILES] + \
        [p.name for p in sorted(out.glob("posterior_*.nc"))]


def staged(out: Path) -> list[str]:
    """Names of the posteriors an interrupted comparison left in ``out``'s staging directory."""
    return [p.name for p in sorted((out / STAGING).glob("posterior_*.nc"))]


def stage(out: Path, *, resume: bool, overwrite: bool) -> Path:
    """The staging directory of a comparison in ``out`` (held by this process): the interrupted
    one's with ``resume``, else a new empty one. A run already in ``out`` is refused unless
    ``overwrite`` (it is replaced when the new one is complete, :func:`publish`)."""
    staging = out / STAGING
    if resume and overwrite:
        raise SSGPError("--resume continues the comparison in its directory and --overwrite "
                        "starts afresh: give one of them")
    if resume:
        if staging.is_dir() and not staging.is_symlink():
            return staging
        if (out / "comparison.json").exists():
            raise SSGPError(f"{out} holds a finished comparison: nothing to resume (give "
                            "--overwrite to run it again)")
        raise SSGPError(f"{out} holds no interrupted comparison to resume")
    if not overwrite:
        if staged(out):
            raise SSGPError(f"{out} holds an interrupted comparison: continue it with ssgp-ppl "
                            f"compare --resume {out}, or give --overwrite to start afresh")
        found = run_files(out)
        if found:
            raise SSGPError(f"{out} already holds a run ({', '.join(found)}); choose another "
                            "--out or give --overwrite to replace it")
    if staging.is_symlink() or staging.is_file():
        staging.unlink()
    elif staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    return staging


def publish(out: Path, staging: Path, names: list[str]) -> None:
    """Move the files ``names`` of a complete comparison from ``staging`` into ``out``, replacing
    the run there: its report goes first and the new report comes last, and signals wait until
    the moves are done."""
    with _signals_deferred():
        old = run_files(out)
        for f in sorted(old, key=lambda f: f not in COMPARE_FILES):  # the old report first
            (out / f).unlink(missing_ok=True)
        for f in sorted(names, key=lambda f: f in COMPARE_FILES):
            os.replace(staging / f, out / f)
        shutil.rmtree(staging)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back until the block ends (then the first one is raised
    again); a signal ignored here stays ignored. Only in the main thread, where handlers run."""
    pending = []
    try:
        with signals.handled(signals.STOP_SIGNALS, lambda num, frame: pending.append(num)):
            yield
    finally:
        if pending:
            signal.raise_signal(pending[0])


__all__ = ["COMPARE_FILES", "LOCK", "RUN_FILES", "STAGING", "check_free", "checkpoints", "hold",
           "publish", "run_files", "stage", "staged"]
