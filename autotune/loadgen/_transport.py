"""Connections that send pre-encoded requests again and again, as cheaply as Python can.

HTTP is a raw HTTP/1.1 keep-alive connection (an asyncio Protocol; the request bytes are
built once, one request at a time per connection, like perf_analyzer's HTTP client). With
several requests (a workload of several entries) each connection sends them in turn, the
n-th connection starting at the n-th, so that every entry is in flight from the start.
gRPC is a minimal HTTP/2 client (:mod:`._h2`) whose connections are shared by up to six
callers, as perf_analyzer's gRPC client shares its channels. Both raise InferError for an
answer that is not a success, with the server's message; an InferError whose
``closed`` is set means the connection is gone and the caller should open a new one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

from autotune.errors import MeasurementError


class InferError(Exception):
    """The server answered a request with an error, or the connection broke."""

    def __init__(self, message: str, *, closed: bool = False) -> None:
        super().__init__(message)
        self.closed = closed


Done = Callable[[InferError | None], None]


class Connection(Protocol):
    """One request at a time. ``send`` starts it and calls ``done`` exactly once, from the
    event loop, with None or the error (never synchronously inside ``send``)."""

    def send(self, done: Done) -> None: ...

    async def close(self) -> None: ...


Connector = Callable[[], Awaitable[Connection]]


async def infer(conn: Connection) -> None:
    """One request, awaited (for checks and tests; the load uses ``send`` directly)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(error: InferError | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    conn.send(done)
    await future


Answer = Callable[[int, bytes, InferError | None], None]


class _Http1(asyncio.Protocol):
    """One HTTP/1.1 exchange at a time; the answer (status, body) goes to a callback."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = b""
        self._answer: Answer | None = None
        self._lost: InferError | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio hands a BaseTransport; ours are always asyncio.Transport (TCP)
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = InferError(f"connection closed by the server ({exc or 'EOF'})", closed=True)
        answer, self._answer = self._answer, None
        if answer is not None:
            answer(0, b"", self._lost)

    def send(self, request: bytes, answer: Answer) -> None:
        if self._lost is not None:
            asyncio.get_running_loop().call_soon(answer, 0, b"", self._lost)
            return
        self._answer = answer
        assert self.transport is not None
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        parsed = _parse_response(buffer)
        if parsed is None:
            self._buffer = buffer
            return
        status, body, used = parsed
        self._buffer = buffer[used:]
        answer, self._answer = self._answer, None
        if answer is not None:
            answer(status, body, None)


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


class Requests:
    """Pre-encoded requests taken in turn from a start, ``step`` at a time (wrapping): one
    request costs an index step."""

    __slots__ = ("_at", "_items", "_step")

    def __init__(self, items: tuple[bytes, ...], start: int = 0, step: int = 1) -> None:
        if not items:
            raise ValueError("no requests")
        self._items, self._at, self._step = items, start % len(items), step % len(items)

    @classmethod
    def for_connection(cls, items: tuple[bytes, ...], number: int, stride: int) -> Requests:
        """What the ``number``-th connection (from 0) sends: stride 0, every request from the
        ``number``-th on; stride N, from the first in steps of N (perf_analyzer's order)."""
        return cls(items, number, 1) if stride == 0 else cls(items, 0, stride)

    def next(self) -> bytes:
        items = self._items
        if len(items) == 1:
            return items[0]
        at = self._at
        after = at + self._step
        self._at = after if after < len(items) else after - len(items)
        return items[at]


class HttpConnection:
    def __init__(self, protocol: _Http1, requests: Requests) -> None:
        self._protocol, self._requests = protocol, requests
        self._done: Done | None = None

    @classmethod
    async def open(cls, host: str, port: int, requests: Requests | bytes) -> HttpConnection:
        """A connection that sends ``requests`` in turn (or one request, again and again)."""
        if isinstance(requests, bytes):
            requests = Requests((requests,))
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(_Http1, host, port)
        except OSError as exc:
            raise MeasurementError(f"cannot connect to {host}:{port}: {exc}") from exc
        return cls(protocol, requests)

    def send(self, done: Done) -> None:
        self._done = done
        self._protocol.send(self._requests.next(), self._answered)

    def _answered(self, status: int, body: bytes, error: InferError | None) -> None:
        done, self._done = self._done, None
        if done is None:
            return
        if error is None and status != 200:
            error = InferError(f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}")
        done(error)

    async def close(self) -> None:
        if self._protocol.transport is not None:
            self._protocol.transport.close()


def http_connector(host: str, port: int, requests: bytes | tuple[bytes, ...], stride: int = 0) -> Connector:
    """Opens connections that send ``requests`` in turn (:meth:`Requests.for_connection`)."""
    items = (requests,) if isinstance(requests, bytes) else requests
    opened = 0

    async def connect() -> Connection:
        nonlocal opened
        opened += 1
        return await HttpConnection.open(host, port, Requests.for_connection(items, opened - 1, stride))

    return connect
