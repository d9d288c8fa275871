"""One-line status messages on stderr for long steps that have no progress bar (a compiled NCVMP
run, LOO, the report's plots): what runs now, then how long it took."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


@contextmanager
def step(what: str, enabled: bool = True):
    """``with step("ncvmp: 10 spectral sets"):`` prints ``what …`` and then ``what: 12.3 s``."""
    if not enabled:
        yield
        return
    print(f"ssgp-ppl: {what} …", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    yield
    print(f"ssgp-ppl: {what}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


__all__ = ["step"]
