"""Wake-ups at a due time with microsecond precision, inside the event loop.

asyncio's timers wake through ``epoll_wait``, whose timeout is whole milliseconds (Python
rounds up): a schedule kept with ``asyncio.sleep`` sends requests 0.5 ms late on average
and 1 ms at worst, before any load. On Linux a ``timerfd`` on CLOCK_MONOTONIC (the clock
of :func:`time.monotonic_ns`) armed at the absolute due time wakes the loop within the
kernel's timer slack (~50 us). Python 3.11 has no ``os.timerfd_create``, so it is reached
through ctypes; where that is not possible the timer falls back to ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import time
from collections.abc import Callable
from typing import Any

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class DueTimer:
    """``timer.arm(ns, callback)``: call ``callback()`` from the loop at CLOCK_MONOTONIC time
    ``ns`` (at once if past). One pending wake-up at a time; arming again replaces it."""

    def __init__(self) -> None:
        self._fd = -1
        self._callback: Callable[[], None] | None = None
        self._spec = _Itimerspec()
        self._settime: Any = None  # libc's timerfd_settime, once opened
        self._handle: asyncio.TimerHandle | None = None
        if sys.platform.startswith("linux"):
            self._open()

    def _open(self) -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            create, settime = libc.timerfd_create, libc.timerfd_settime
        except (OSError, AttributeError):
            return
        fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            return
        settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
        self._fd, self._settime = fd, settime
        asyncio.get_running_loop().add_reader(fd, self._fired)

    @property
    def precise(self) -> bool:
        return self._fd >= 0

    def arm(self, due_ns: int, callback: Callable[[], None]) -> None:
        self._callback = callback
        if self._settime is None:
            loop = asyncio.get_running_loop()
            if self._handle is not None:
                self._handle.cancel()
            self._handle = loop.call_later(max(0, due_ns - time.monotonic_ns()) / 1e9, self._run)
            return
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(max(due_ns, 1), 1_000_000_000)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed before this read: not fired yet
            return
        self._run()

    def _run(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()

    def close(self) -> None:
        self._callback = None
        if self._handle is not None:
            self._handle.cancel()
        if self._fd >= 0:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._settime = None
