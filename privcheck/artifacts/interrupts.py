"""SIGTERM handled like Ctrl-C, so that a terminated command cleans up what it was writing.

By default SIGTERM (`kill PID`, a CI job's timeout, `docker stop`) ends the process at once: no `finally` block runs,
so temporary files, staging directories and the output directory's lock would be left behind. Inside
`terminate_as_interrupt()` SIGTERM raises KeyboardInterrupt instead, which unwinds the stack through every writer's
cleanup (docs/artifacts.md); the CLI then exits as for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["terminate_as_interrupt"]


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"terminated by signal {signum}")


@contextlib.contextmanager
def terminate_as_interrupt():
    """For the block, SIGTERM raises KeyboardInterrupt in the main thread; the previous handler is restored after.
    Outside the main thread (where Python cannot install handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
