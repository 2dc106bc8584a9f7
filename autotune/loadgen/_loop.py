"""The event loop a measurement runs on: uvloop's where it is installed (less CPU per
request than asyncio's own loop, so one process drives more load before it becomes the
bottleneck), else asyncio's. ``AUTOTUNE_EVENT_LOOP=asyncio`` picks asyncio's (to compare
the two, or to rule uvloop out); ``uvloop`` insists on uvloop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from autotune.errors import UsageError

T = TypeVar("T")

ENV = "AUTOTUNE_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")


def name() -> str:
    """The loop measurements run on: "uvloop" or "asyncio"."""
    asked = os.environ.get(ENV, "").strip().lower()
    if asked and asked not in CHOICES:
        raise UsageError(f"{ENV} must be one of {', '.join(CHOICES)}, got {asked!r}")
    if asked == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if asked == "uvloop":
            raise UsageError(f"{ENV}=uvloop but uvloop is not installed (pip install uvloop)") from None
        return "asyncio"
    return "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    if name() == "uvloop":
        import uvloop

        result: T = uvloop.run(main)
        return result
    return asyncio.run(main)
