"""A stop request (Ctrl-C, SIGTERM) that cannot be lost.

The signal handler raises KeyboardInterrupt at once, which unwinds whatever runs. But an
exception raised while Python runs a finalizer (a socket's ``__del__``, a garbage-collected
generator) is printed as "Exception ignored" and swallowed, and the tuner would go on as if
nothing happened. So the request is also remembered, and the long loops look at it between
steps: a stop is never missed, at worst it takes effect one measurement later.
"""

from __future__ import annotations

import contextlib
import signal

_requested = False


def request(signum: int = 0, frame: object = None) -> None:
    """Signal handler: remember the request and unwind now."""
    global _requested
    _requested = True
    raise KeyboardInterrupt


def check() -> None:
    """Raise KeyboardInterrupt if a stop was requested and somehow not acted upon yet."""
    if _requested:
        raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT and SIGTERM through :func:`request` (main thread only), at the start of a
    command: no stop is pending then (one requested in an earlier command in this process,
    e.g. a test calling ``autotune.cli.main`` again, was acted upon by that command)."""
    global _requested
    _requested = False
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread (e.g. a test's worker thread)
            signal.signal(signum, request)
