"""SVI checkpoints: the optimiser state, the random key and the loss trace, written atomically.

A checkpoint is one ``.npz`` file (temporary file + rename, so a crash or Ctrl-C never leaves half
a file). It carries a *fingerprint* of the run (entry, its configuration, data, seed, method,
steps): resuming from a checkpoint written by another run is an error naming the key that
differs, never a silent restart. Resuming continues the same chunks with the same key stream, so
the final parameters equal those of an uninterrupted run with the same seed.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ssgp_ppl.errors import SSGPError
from ssgp_ppl.runtime.io import write_bytes_atomic
from ssgp_ppl.settings import is_int, is_number

FORMAT = 2  # 2: the stop rule's state is the chunk means and their middle steps
DEFAULT_EVERY = 1000  # steps between saves


class Checkpoint(NamedTuple):
    """Where and how often :func:`ssgp_ppl.inference.runners.run_svi` saves its state.

    ``every``: steps between saves (saved at the first chunk boundary past each multiple, and at
    the end); ``resume``: continue from ``path`` (an error if it is missing, corrupt or from
    another run); ``fingerprint``: JSON-able description of the run (None: :func:`load` reads
    without checking, e.g. to inspect a file).
    """

    path: Path
    every: int = DEFAULT_EVERY
    fingerprint: dict | None = None
    resume: bool = False


class Saved(NamedTuple):
    """A loaded checkpoint: the flattened SVI state and the runner's bookkeeping."""

    leaves: list[np.ndarray]
    key: np.ndarray
    done: int
    losses: np.ndarray
    means: np.ndarray  # (chunks,) the stop rule's chunk means
    mids: np.ndarray  # (chunks,) their chunks' middle steps
    converged: bool
    seconds: float
    first_chunk: tuple[int, float]


def fingerprint(**items) -> dict:
    """A JSON-able run description; nested configuration dicts are kept as a short hash."""
    out = {}
    for k, v in items.items():
        if isinstance(v, dict):
            text = json.dumps(v, sort_keys=True, default=str)
            v = hashlib.sha256(text.encode()).hexdigest()[:16]
        out[k] = v if isinstance(v, int | float | str | bool | None) else str(v)
    return out


def save(ckpt: Checkpoint, leaves, key, done: int, losses, means, mids, converged: bool,
         seconds: float, first_chunk: tuple[int, float]) -> None:
    """Write the checkpoint atomically (:func:`ssgp_ppl.runtime.io.write_bytes_atomic`)."""
    path = Path(ckpt.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"leaf_{i}": np.asarray(a) for i, a in enumerate(leaves)}
    meta = {"format": FORMAT, "fingerprint": ckpt.fingerprint or {}, "leaves": len(leaves),
            "done": int(done), "converged": bool(converged), "seconds": float(seconds),
            "first_chunk": [int(first_chunk[0]), float(first_chunk[1])]}
    buf = io.BytesIO()
    np.savez(buf, key=np.asarray(key), losses=np.asarray(losses),  # the run's own dtype
             means=np.asarray(means, np.float64), mids=np.asarray(mids, np.float64),
             meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
    write_bytes_atomic(path, buf.getbuffer())


def load(ckpt: Checkpoint) -> Saved:
    """Read and check a checkpoint: missing, corrupt or another run's file is an SSGPError."""
    path = Path(ckpt.path)
    if not path.is_file():
        raise SSGPError(f"no checkpoint at {path} (nothing to resume)")
    try:
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:  # closed if np.load fails
            meta = json.loads(z["meta"].tobytes().decode())
            leaves = [z[f"leaf_{i}"] for i in range(int(meta["leaves"]))]
            fmt = meta.get("format")
            arrays = {k: z[k] for k in ("key", "losses", "means", "mids")} if fmt == FORMAT else {}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, UnicodeDecodeError,
            MemoryError, TypeError) as e:  # MemoryError: a header claiming a huge array
        raise SSGPError(f"checkpoint {path} is corrupt or unreadable ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:120]}); delete it to start afresh") from None
    if fmt != FORMAT:
        raise SSGPError(f"checkpoint {path} has format {fmt!r}; this version reads format {FORMAT} "
                        "(its stop rule keeps other state): finish the run with the version that "
                        "wrote it, or delete the file to start afresh")
    _check_meta(meta, arrays, path)
    mine, theirs = ckpt.fingerprint, meta.get("fingerprint", {})
    for k in sorted(set(mine or {}) | set(theirs)) if mine is not None else ():
        if mine.get(k) != theirs.get(k):
            raise SSGPError(f"checkpoint {path} belongs to another run: {k} is "
                            f"{theirs.get(k)!r} there and {mine.get(k)!r} here")
    return Saved(leaves, arrays["key"], int(meta["done"]), arrays["losses"], arrays["means"],
                 arrays["mids"], bool(meta["converged"]), float(meta["seconds"]),
                 tuple(meta["first_chunk"]))


def _check_meta(meta: dict, arrays: dict, path) -> None:
    """The metadata's types and ranges, and their consistency with the arrays (one loss per step
    done): a hand-edited or damaged checkpoint is refused before its values are used."""
    def bad(what):
        raise SSGPError(f"checkpoint {path} is corrupt ({what}); delete it to start afresh")

    done, first = meta.get("done"), meta.get("first_chunk")
    if not is_int(done) or done < 0:
        bad(f"steps done {done!r} is not an integer >= 0")
    if np.ndim(arrays["losses"]) != 1 or arrays["losses"].shape[0] != done:
        bad(f"{done} steps done but {np.size(arrays['losses'])} losses")
    if not isinstance(meta.get("converged"), bool):
        bad("'converged' is not true or false")
    if not is_number(meta.get("seconds")) or meta["seconds"] < 0:
        bad(f"seconds {meta.get('seconds')!r} is not a number >= 0")
    if not (isinstance(first, list) and len(first) == 2 and is_int(first[0])
            and is_number(first[1])):
        bad(f"first_chunk {first!r} is not [steps, seconds]")
    if np.shape(arrays["means"]) != np.shape(arrays["mids"]):
        bad("the convergence monitor's arrays differ in length")


def restore_leaves(template_leaves, saved: Saved, path) -> list:
    """The saved leaves, checked against the fresh state's shapes and dtypes."""
    if len(template_leaves) != len(saved.leaves):
        raise SSGPError(f"checkpoint {path} holds {len(saved.leaves)} state arrays; this run has "
                        f"{len(template_leaves)} (another model or guide)")
    for i, (t, s) in enumerate(zip(template_leaves, saved.leaves, strict=True)):
        if tuple(np.shape(t)) != s.shape or np.dtype(getattr(t, "dtype", s.dtype)) != s.dtype:
            raise SSGPError(f"checkpoint {path}: state array {i} is {s.dtype}{list(s.shape)}, "
                            f"this run needs {np.dtype(t.dtype)}{list(np.shape(t))} "
                            "(another model, guide or precision)")
    return list(saved.leaves)


def _sha(*arrays) -> str:
    digest = hashlib.sha256()
    for a in arrays:
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()[:16]


def run_fingerprint(entry, data, method: str, seed: int,
                    steps: int | None, given: dict | None = None) -> dict:
    """What a checkpoint must match to be resumed: the entry and its configuration (its
    ``description`` and ``paper`` texts aside: they do not change the run), the
    data (name, split, sizes and a hash of the scaled training rows), seed, method, steps, the
    float width, the arrays ``given`` to :func:`ssgp_ppl.pipeline.fit` (spectral points, type-II values,
    partitions; hashed) and the JAX / NumPyro versions (another version need not reproduce the
    same bits)."""
    extra = {f"{k}_sha256": _sha(*[np.asarray(v) for v in (a.values() if isinstance(a, dict)
                                                           else [a])])
             for k, a in (given or {}).items() if a is not None}
    import jax
    import numpyro

    config = {k: v for k, v in entry.config.items() if k not in ("description", "paper")}
    return fingerprint(model=entry.name, config=config, data=data.name,
                                  split=data.split, n_train=data.n_train,
                                  n_features=data.n_features,
                                  data_sha256=_sha(data.x_train, data.y_train), seed=seed,
                                  method=method, steps=steps,
                                  x64=bool(jax.config.read("jax_enable_x64")),
                                  jax=jax.__version__, numpyro=numpyro.__version__, **extra)


__all__ = ["DEFAULT_EVERY", "Checkpoint", "Saved", "fingerprint", "load", "restore_leaves",
           "run_fingerprint", "save"]
