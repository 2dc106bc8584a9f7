"""A stop request swallowed by a finalizer is still acted upon (pure logic)."""

from __future__ import annotations

import signal
import sys

import pytest

from autotune import stopping


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


def test_a_new_run_starts_with_no_stop_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop acted upon by an earlier run in this process does not stop the next one."""
    monkeypatch.setattr(stopping, "_requested", True)
    installed: list[int] = []
    monkeypatch.setattr(stopping.signal, "signal", lambda signum, handler: installed.append(signum))
    stopping.install()
    assert sorted(installed) == sorted([signal.SIGINT, signal.SIGTERM])
    stopping.check()  # nothing pending: no KeyboardInterrupt
