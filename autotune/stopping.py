"""A stop request (Ctrl-C, SIGTERM, SIGHUP) that cannot be lost.

The signal handler raises KeyboardInterrupt at once, which unwinds whatever runs. But an
exception raised while Python runs a finalizer (a socket's ``__del__``, a garbage-collected
generator) is printed as "Exception ignored" and swallowed, and the tuner would go on as if
nothing happened. So the request is also remembered, and the long loops look at it between
steps: a stop is never missed, at worst it takes effect one measurement later. While a command
runs, such a swallowed stop is not printed either (:func:`_unraisable`): the request stands.

SIGHUP (the terminal was closed) is a stop like SIGTERM. Its terminal may be gone, so from then
on a write to it that fails is dropped (:class:`_Tolerant`) rather than ending the clean-up.

A stop must also end. Unwinding from wherever the signal lands can leave a lock held (an
exception between a lock's ``__enter__`` and its block, which Python does not guard), and the
clean-up then waits on it for ever (a run hung so once after Ctrl-C, of 27 tries). So a signal
also arms a watchdog: a command still stopping :data:`GRACE_S` later prints every thread's stack
and ends with exit code 130. Its servers end with it (:mod:`autotune.guard`); its finished
trials are kept, and the interrupted one is measured again on resume, as after ``kill -9``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

GRACE_S = 120.0  # once a signal asks a command to stop, how long its clean-up may take

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_requested = False
_watchdog: threading.Timer | None = None


def request(signum: int = 0, frame: object = None) -> None:
    """Signal handler: remember the request and unwind now."""
    global _requested
    _requested = True
    raise KeyboardInterrupt


def check() -> None:
    """Raise KeyboardInterrupt if a stop was requested and somehow not acted upon yet."""
    if _requested:
        raise KeyboardInterrupt


def install() -> Callable[[], None]:
    """Route SIGINT, SIGTERM and SIGHUP through :func:`request` (main thread only), at the start
    of a command: no stop is pending then (one requested in an earlier command in this process,
    e.g. a test calling ``autotune.cli.main`` again, was acted upon by that command). Returns
    what undoes it when the command ends: the handlers and the unraisable hook before it back,
    no watchdog left."""
    global _requested
    _requested = False
    _disarm()
    previous: dict[int, Any] = {}  # a handler, or SIG_DFL / SIG_IGN
    for signum in STOP_SIGNALS:
        with contextlib.suppress(ValueError):  # not the main thread (e.g. a test's worker thread)
            before = signal.signal(signum, _on_signal)
            if before is not None:
                previous[signum] = before
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable

    def restore() -> None:
        _disarm()
        sys.unraisablehook = hook
        for signum, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(signum, handler)

    return restore


def _unraisable(unraisable: Any) -> None:
    """A stop swallowed by a finalizer (an event loop's ``__del__``) is not printed: the request
    stands and :func:`check` raises it again. Anything else goes to Python's own hook."""
    if _requested and unraisable.exc_type is KeyboardInterrupt:
        return
    sys.__unraisablehook__(unraisable)


def _on_signal(signum: int, frame: object) -> None:
    """The installed handler: the watchdog armed (once), a closed terminal's writes made
    harmless (SIGHUP), then :func:`request`."""
    global _watchdog
    if _watchdog is None:
        _watchdog = threading.Timer(GRACE_S, _expire)
        _watchdog.daemon = True
        _watchdog.start()
    if signum == signal.SIGHUP:
        sys.stdout, sys.stderr = _Tolerant.of(sys.stdout), _Tolerant.of(sys.stderr)
    request(signum, frame)


class _Tolerant:
    """A text stream whose failed writes are dropped: a closed terminal answers EIO."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @classmethod
    def of(cls, stream: Any) -> Any:
        return stream if isinstance(stream, cls) or stream is None else cls(stream)

    def write(self, text: str) -> int:
        with contextlib.suppress(OSError, ValueError):
            return int(self._stream.write(text))
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _disarm() -> None:
    global _watchdog
    if _watchdog is not None:
        _watchdog.cancel()
        _watchdog = None


def _expire() -> None:
    faulthandler.dump_traceback(all_threads=True)
    sys.stderr.write(
        f"autotune: stopping took over {GRACE_S:g} s, so it ended where it stood (stacks above); its "
        "servers end with it, finished trials are kept (resume with --resume RUN_DIR)\n"
    )
    sys.stderr.flush()
    os._exit(130)
