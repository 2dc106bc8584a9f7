"""Connections that send one pre-encoded request again and again, as cheaply as Python can.

HTTP is a raw HTTP/1.1 keep-alive connection (an asyncio Protocol; the request bytes are
built once, one request at a time per connection, like perf_analyzer's HTTP client).
gRPC is a minimal HTTP/2 client (:mod:`._h2`) whose connections are shared by up to six
callers, as perf_analyzer's gRPC client shares its channels. Both raise InferError for an
answer that is not a success, with the server's message; an InferError whose
``closed`` is set means the connection is gone and the caller should open a new one.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from autotune.errors import MeasurementError


class InferError(Exception):
    """The server answered a request with an error, or the connection broke."""

    def __init__(self, message: str, *, closed: bool = False) -> None:
        super().__init__(message)
        self.closed = closed


class Connection(Protocol):
    async def infer(self) -> None: ...

    async def close(self) -> None: ...


Connector = Callable[[], Awaitable[Connection]]


class _Http1(asyncio.Protocol):
    """One HTTP/1.1 exchange at a time; the answer's status and body resolve a future."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = b""
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._lost: InferError | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = InferError(f"connection closed by the server ({exc or 'EOF'})", closed=True)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(self._lost)

    def send(self, request: bytes) -> asyncio.Future[tuple[int, bytes]]:
        waiter: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        if self._lost is not None:
            waiter.set_exception(self._lost)
            return waiter
        self._waiter = waiter
        assert self.transport is not None
        self.transport.write(request)
        return waiter

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        parsed = _parse_response(buffer)
        if parsed is None:
            self._buffer = buffer
            return
        status, body, used = parsed
        self._buffer = buffer[used:]
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((status, body))


def _parse_response(buffer: bytes) -> tuple[int, bytes, int] | None:
    """(status, body, bytes used) of one complete response at the start, or None."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].lower()
    start = end + 4
    at = head.find(b"\r\ncontent-length:")
    if at >= 0:
        stop = head.find(b"\r\n", at + 2)
        length = int(head[at + 17 : stop if stop >= 0 else len(head)])
        if len(buffer) < start + length:
            return None
        return int(buffer[9:12]), buffer[start : start + length], start + length
    if b"\r\ntransfer-encoding: chunked" in head:
        return _parse_chunked(buffer, int(buffer[9:12]), start)
    return int(buffer[9:12]), b"", start


def _parse_chunked(buffer: bytes, status: int, at: int) -> tuple[int, bytes, int] | None:
    parts: list[bytes] = []
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(buffer[at:line_end].split(b";")[0], 16)
        at = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n", at)  # no trailers expected: just the blank line
            return None if trailer_end < 0 else (status, b"".join(parts), trailer_end + 2)
        if len(buffer) < at + size + 2:
            return None
        parts.append(buffer[at : at + size])
        at += size + 2


class HttpConnection:
    def __init__(self, protocol: _Http1, request: bytes) -> None:
        self._protocol, self._request = protocol, request

    @classmethod
    async def open(cls, host: str, port: int, request: bytes) -> HttpConnection:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(_Http1, host, port)
        except OSError as exc:
            raise MeasurementError(f"cannot connect to {host}:{port}: {exc}") from exc
        return cls(protocol, request)

    async def infer(self) -> None:
        status, body = await self._protocol.send(self._request)
        if status != 200:
            raise InferError(f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}")

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        return await self._protocol.send(request)

    async def close(self) -> None:
        if self._protocol.transport is not None:
            self._protocol.transport.close()


def http_connector(host: str, port: int, request: bytes) -> Connector:
    async def connect() -> Connection:
        return await HttpConnection.open(host, port, request)

    return connect


def get_json(host: str, port: int, path: str, timeout: float = 10.0) -> Any:
    """A small synchronous GET for metadata and statistics."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise MeasurementError(f"GET http://{host}:{port}{path} failed: {exc}",
                               hint="is the server running there?") from exc
    finally:
        conn.close()
    if response.status != 200:
        text = body[:200].decode("utf-8", "replace")
        raise HttpStatusError(f"GET {path}: HTTP {response.status}: {text}", status=response.status)
    return json.loads(body)


class HttpStatusError(MeasurementError):
    """A GET answered with a status other than 200."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status
