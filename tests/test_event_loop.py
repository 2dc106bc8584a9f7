"""The load generator's event loop: uvloop's by default, asyncio's on request."""

from __future__ import annotations

import asyncio

import pytest

from autotune.errors import UsageError
from autotune.loadgen import _loop


async def _which() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv(_loop.ENV, raising=False)
    assert _loop.name() == "uvloop"
    assert _loop.run(_which()) == "uvloop"


def test_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_loop.ENV, "asyncio")
    assert _loop.name() == "asyncio"
    assert _loop.run(_which()) == "asyncio"


def test_an_unknown_loop_is_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_loop.ENV, "asycnio")
    with pytest.raises(UsageError, match="AUTOTUNE_EVENT_LOOP must be one of uvloop, asyncio"):
        _loop.name()
