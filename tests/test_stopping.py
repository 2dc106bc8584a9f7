"""A stop request swallowed by a finalizer is still acted upon (pure logic)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune import stopping

ROOT = Path(__file__).resolve().parents[1]


def test_a_stop_raised_inside_a_finalizer_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stopping, "_requested", False)
    stopping.check()  # nothing requested: no-op

    class Finalized:
        def __del__(self) -> None:  # the signal lands while Python runs a finalizer
            stopping.request()

    swallowed: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: swallowed.append(u.exc_type))
    Finalized()  # dropped at once: __del__ runs and its KeyboardInterrupt is printed, not raised
    assert swallowed == [KeyboardInterrupt]
    # the KeyboardInterrupt went to "Exception ignored in"; the next check raises it again
    with pytest.raises(KeyboardInterrupt):
        stopping.check()


def test_a_stop_swallowed_by_a_finalizer_is_not_printed_while_a_command_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An event loop's ``__del__`` that the stop's KeyboardInterrupt lands in printed its traceback
    before the resume line (SIGTERM in the middle of a run); any other unraisable still prints."""
    printed: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "__unraisablehook__", lambda u: printed.append(u.exc_type))
    monkeypatch.setattr(stopping, "_requested", False)
    restore = stopping.install()
    try:

        class Finalized:
            def __init__(self, error: type[BaseException]) -> None:
                self.error = error

            def __del__(self) -> None:
                raise self.error

        stopping._requested = True  # as the signal handler sets it
        Finalized(KeyboardInterrupt)
        Finalized(ValueError)
    finally:
        restore()
    assert printed == [ValueError]
    assert sys.unraisablehook is not stopping._unraisable  # the hook before the command is back


def test_a_new_run_starts_with_no_stop_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop acted upon by an earlier run in this process does not stop the next one."""
    monkeypatch.setattr(stopping, "_requested", True)
    installed: list[int] = []
    monkeypatch.setattr(stopping.signal, "signal", lambda signum, handler: installed.append(signum))
    stopping.install()
    assert sorted(installed) == sorted([signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
    stopping.check()  # nothing pending: no KeyboardInterrupt


def test_a_command_restores_the_handlers_it_found_and_leaves_no_watchdog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stopping, "_requested", False)
    before = signal.getsignal(signal.SIGINT)
    restore = stopping.install()
    try:
        assert signal.getsignal(signal.SIGINT) == stopping._on_signal
        with pytest.raises(KeyboardInterrupt):
            stopping._on_signal(signal.SIGINT, None)  # as the signal would
        assert stopping._watchdog is not None and stopping._watchdog.is_alive()
    finally:
        restore()
    assert stopping._watchdog is None and signal.getsignal(signal.SIGINT) == before


def test_a_stop_that_hangs_ends_after_the_grace_with_every_thread_s_stack() -> None:
    """A clean-up that waits on a lock the interrupt left held: the watchdog ends the process
    (exit 130) and shows where it waited."""
    code = textwrap.dedent(
        """
        import os, signal, threading, time
        from autotune import stopping
        stopping.GRACE_S = 0.5
        stopping.install()
        held = threading.Lock()
        held.acquire()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)
        except KeyboardInterrupt:
            held.acquire()  # waits for ever
        """
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 130 and time.monotonic() - started < 8
    assert "autotune: stopping took over 0.5 s, so it ended where it stood" in done.stderr
    assert 'File "<string>", line 12' in done.stderr  # the main thread's stack: the held.acquire()
