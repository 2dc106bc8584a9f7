"""A Triton server's control plane through ``tritonclient``: health, model readiness, metadata,
configuration, statistics, and the repository API (load with a config override, unload).

The load generator's request path is hand-written for speed (``autotune.loadgen``); nothing
else is: everything here is a call of the client library the project depends on. Its
errors (the server's refusals, sockets that do not connect) are translated where they enter
into :class:`~autotune.errors.ControlError`, which keeps the HTTP status when there was one.
"""

from __future__ import annotations

import asyncio
import http.client
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from autotune.errors import ControlError

T = TypeVar("T")
# What tritonclient's transports raise when nothing (or no Triton) answers: sockets, HTTP parsing,
# aiohttp, timeouts; ValueError for a body that is not JSON (another server on that port);
# RuntimeError for a host name geventhttpclient cannot resolve.
_UNREACHABLE = (
    OSError, http.client.HTTPException, aiohttp.ClientError, asyncio.TimeoutError, ValueError, RuntimeError,
)  # fmt: skip


def _status(exc: InferenceServerException) -> int | None:
    status = exc.status()
    return int(status) if status is not None and str(status).isdigit() else None


def _error(what: str, url: str, exc: BaseException) -> ControlError:
    if isinstance(exc, InferenceServerException):
        return ControlError(f"{what}: {exc.message()}", status=_status(exc))
    return ControlError(f"{what}: no answer from {url} ({exc})", hint="is the server running there?")


class ServerControl:
    """One server's HTTP control API; a context manager that closes its connection."""

    def __init__(self, host: str, http_port: int, timeout_s: float = 10.0) -> None:
        self.url = f"{host}:{http_port}"
        self._client = httpclient.InferenceServerClient(
            self.url, connection_timeout=timeout_s, network_timeout=timeout_s
        )

    def __enter__(self) -> ServerControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except (InferenceServerException, *_UNREACHABLE) as exc:
            raise _error(what, self.url, exc) from exc

    def _answers(self, call: Callable[[], bool]) -> bool:
        """A yes/no question; no answer at all is a no."""
        try:
            return bool(call())
        except (InferenceServerException, *_UNREACHABLE):
            return False

    def live(self) -> bool:
        return self._answers(self._client.is_server_live)

    def model_ready(self, model: str) -> bool:
        return self._answers(lambda: self._client.is_model_ready(model))

    def metadata(self, model: str) -> dict[str, Any]:
        what = f"metadata of model {model!r}"
        return dict(self._call(what, lambda: self._client.get_model_metadata(model)))

    def config(self, model: str) -> dict[str, Any]:
        return dict(self._call(f"config of model {model!r}", lambda: self._client.get_model_config(model)))

    def statistics(self, model: str) -> dict[str, Any]:
        what = f"statistics of model {model!r}"
        return dict(self._call(what, lambda: self._client.get_inference_statistics(model)))

    def load(self, model: str, config_json: str | None = None) -> None:
        """Load (or reload) ``model``; with ``config_json`` (a model config as JSON), that config
        instead of the one in the server's repository."""
        self._call(f"loading model {model!r}", lambda: self._client.load_model(model, config=config_json))

    def unload(self, model: str) -> None:
        self._call(f"unloading model {model!r}", lambda: self._client.unload_model(model))


class AsyncStatistics:
    """A model's statistics (``model`` "": every model's) from inside an event loop (between
    measurement windows), so that asking never blocks the load running in the same loop."""

    def __init__(self, host: str, http_port: int, model: str, timeout_s: float = 10.0) -> None:
        self.url, self.model = f"{host}:{http_port}", model
        self._client = aioclient.InferenceServerClient(self.url, conn_timeout=timeout_s)

    async def __call__(self) -> dict[str, Any]:
        return dict(await self._call(self._client.get_inference_statistics(self.model)))

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except (InferenceServerException, *_UNREACHABLE) as exc:
            raise _error(f"statistics of model {self.model!r}", self.url, exc) from exc

    async def close(self) -> None:
        await self._client.close()
