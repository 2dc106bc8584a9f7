"""The event loop a measurement runs on: uvloop's where it is installed (it spends about
half the CPU per request of asyncio's own loop, so one process drives more load before it
becomes the bottleneck), else asyncio's. ``AUTOTUNE_EVENT_LOOP=asyncio`` picks asyncio's
(to compare the two, or to rule uvloop out)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "AUTOTUNE_EVENT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop``, or None for asyncio's default loop."""
    if os.environ.get(ENV, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    factory = loop_factory()
    if factory is None or sys.version_info < (3, 11):
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def name() -> str:
    """The loop measurements run on, for reports and benchmarks."""
    return "uvloop" if loop_factory() is not None and sys.version_info >= (3, 11) else "asyncio"
