"""Stop signals handled for a block of code: one place installs and restores the handlers that
``fit`` (finish the chunk and checkpoint), ``compare`` (stop like Ctrl-C) and the run-directory
move (hold signals back) need."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@contextlib.contextmanager
def handled(names: tuple[str, ...], handler: Callable,
            keep_ignored: Callable[[str], bool] = lambda name: True) -> Iterator[dict]:
    """``handler(num, frame)`` for each signal of ``names`` this platform has, in the main thread
    only (where Python runs handlers); a signal the process inherited as ignored (``nohup``)
    stays ignored unless ``keep_ignored(name)`` is False. Yields {signal: previous handler} and
    restores those handlers on leaving."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for name in names:
            num = getattr(signal, name, None)
            if num is None:
                continue
            old = signal.getsignal(num)
            if old is signal.SIG_IGN and keep_ignored(name):
                continue
            previous[num] = old if old is not None else signal.SIG_DFL
            signal.signal(num, handler)
    try:
        yield previous
    finally:
        for num, old in previous.items():
            signal.signal(num, old)


__all__ = ["STOP_SIGNALS", "handled"]
