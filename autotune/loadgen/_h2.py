"""A minimal HTTP/2 client for unary gRPC calls: one pre-encoded request, many streams.

grpc.aio spends some 200 us of Python per call; a load generator on two shared cores
cannot afford that. This client speaks just enough HTTP/2 (RFC 9113) over cleartext
with prior knowledge, as gRPC does: a stream per call, a HEADERS frame whose header
block is encoded once, DATA frames within the peer's flow-control windows, and the
answer judged by the ``grpc-status`` trailer.

HPACK (RFC 7541), both ways. The request's header block is encoded here, once per
pool, with static-table names and raw literals that never enter a dynamic table.
Received header blocks are decoded by the ``hpack`` package (Huffman-coded strings
included, as proxies and some servers send them), one decoder per connection. Our
SETTINGS announce a header table of size 0 and that decoder starts and stays at 0: a
block that asks for a larger table or refers to a dynamic entry is a protocol error
that closes the connection. With no dynamic table, decoding is a pure function of
the block's bytes, so decoded blocks are cached by their bytes and the decoder runs
only for blocks not seen before (a server repeats the same few blocks call after call).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Callable
from typing import cast
from urllib.parse import unquote

import hpack

from autotune.errors import MeasurementError
from autotune.loadgen._transport import Connection, Connector, Done, InferError, Requests

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
HEADER_TABLE_SIZE, ENABLE_PUSH, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 1, 2, 4, 5
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
OUR_MAX_FRAME = 1 << 20
MAX_STREAM_ID = 2**31 - 1
SHARE = 6  # callers per HTTP/2 connection, as perf_analyzer shares a gRPC channel
GRPC_CODES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)  # fmt: skip
_HEAD = struct.Struct(">BHBBI")  # length (24 bits as 8 + 16), type, flags, stream id
DECODED_CACHE = 256  # header blocks remembered per connection; a server sends a handful
Headers = list[tuple[bytes, bytes]]


class H2ProtocolError(Exception):
    """The peer sent something this client does not understand."""


# ---------------------------------------------------------------- HPACK (the request's block)


def encode_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(data: bytes) -> bytes:
    return encode_int(len(data), 7) + data


def request_header_block(authority: str, path: str) -> bytes:
    """POST, http, the path and gRPC's headers; literals never enter a dynamic table."""

    def literal(index: int, value: str) -> bytes:  # literal without indexing, indexed name
        return encode_int(index, 4) + _string(value.encode())

    return b"".join((
        b"\x83", b"\x86", literal(4, path), literal(1, authority), literal(31, "application/grpc"),
        b"\x00" + _string(b"te") + _string(b"trailers"),
        literal(58, "autotune-loadgen"),
    ))  # fmt: skip


def header_decoder() -> hpack.Decoder:
    """A decoder for a peer told HEADER_TABLE_SIZE 0: its table is 0 from the start, so
    nothing is ever kept (decoding depends on the block's bytes alone), and a size
    update above 0 raises, as a reference to a dynamic entry does."""
    decoder = hpack.Decoder()
    decoder.header_table_size = 0
    decoder.max_allowed_table_size = 0
    return decoder


def decode_block(decoder: hpack.Decoder, block: bytes) -> Headers:
    """Headers of one block as bytes pairs; hpack's errors are the peer's protocol errors."""
    try:
        return cast(Headers, decoder.decode(block, raw=True))
    except hpack.HPACKError as exc:
        raise H2ProtocolError(f"cannot decode a header block ({exc}; we allow no dynamic table)") from exc


# ---------------------------------------------------------------- framing


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return _HEAD.pack(n >> 16, n & 0xFFFF, kind, flags, stream) + payload


def settings_frame(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in values.items()))


def grpc_message(serialized: bytes) -> bytes:
    """gRPC's length-prefixed message: uncompressed flag, 4-byte length, bytes."""
    return b"\x00" + struct.pack(">I", len(serialized)) + serialized


class _Call:
    __slots__ = ("done", "message", "pending", "received", "status", "window")

    def __init__(self, done: Done, window: int) -> None:
        self.done: Done | None = done
        self.window = window
        self.pending = b""  # request bytes waiting for flow-control window
        self.status = b""
        self.message = b""
        self.received = 0


class H2Protocol(asyncio.Protocol):
    """One HTTP/2 connection carrying unary gRPC calls of one pre-encoded request."""

    def __init__(self, header_block: bytes) -> None:
        self.transport: asyncio.Transport | None = None
        self._header_block = header_block
        self._calls: dict[int, _Call] = {}
        self._next_id = 1
        self._send_window = DEFAULT_WINDOW
        self._stream_window = DEFAULT_WINDOW
        self._max_frame = 16_384
        self._blocked: deque[int] = deque()
        self._out: list[bytes] = []  # frames of this loop iteration, written in one send
        self._buffer = b""
        self._headers: dict[int, bytes] = {}  # stream -> header block being continued
        self._header_flags: dict[int, int] = {}
        self._consumed = 0
        self._decoder = header_decoder()
        self._decoded: dict[bytes, Headers] = {}  # block -> headers: valid, as no dynamic table exists
        self.closed: InferError | None = None

    # --------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio hands a BaseTransport; ours are always asyncio.Transport (TCP)
        self.transport = cast(asyncio.Transport, transport)
        settings = {
            HEADER_TABLE_SIZE: 0,
            ENABLE_PUSH: 0,
            INITIAL_WINDOW_SIZE: MAX_WINDOW,
            MAX_FRAME_SIZE: OUR_MAX_FRAME,
        }
        update = frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW))
        self.transport.write(PREFACE + settings_frame(settings) + update)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(InferError(f"connection closed by the server ({exc or 'EOF'})", closed=True))

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        at, size = 0, len(buffer)
        try:
            while size - at >= 9:
                high, low, kind, flags, stream = _HEAD.unpack_from(buffer, at)
                end = at + 9 + (high << 16 | low)
                if end > size:
                    break
                self._frame(kind, flags, stream & 0x7FFFFFFF, buffer, at + 9, end)
                at = end
        except H2ProtocolError as exc:
            self._abort(f"HTTP/2 protocol error: {exc}")
            return
        self._buffer = buffer[at:]

    # --------------------------------------------------------- calls

    def call(self, message: bytes, done: Done) -> None:
        """Start one call; ``done`` gets None or the InferError, later, from the loop."""
        if self._next_id > MAX_STREAM_ID:
            self._abort("stream ids used up")
        if self.closed is not None:
            asyncio.get_running_loop().call_soon(done, self.closed)
            return
        stream = self._next_id
        self._next_id += 2
        call = _Call(done, self._stream_window)
        self._calls[stream] = call
        call.pending = message
        assert self.transport is not None
        self._write(frame(HEADERS, END_HEADERS, stream, self._header_block) + self._data_frames(stream, call))

    def _write(self, data: bytes) -> None:
        """Queue frames; callers woken in the same loop iteration share one send."""
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    def _send_data(self, stream: int, call: _Call) -> None:
        frames = self._data_frames(stream, call)
        if frames:
            self._write(frames)

    def _data_frames(self, stream: int, call: _Call) -> bytes:
        """DATA frames for as much of the call's request as the windows allow."""
        data = call.pending
        allowed = min(len(data), self._send_window, call.window)
        chunks = []
        at = 0
        while at < allowed:
            part = data[at : at + min(self._max_frame, allowed - at)]
            at += len(part)
            last = at == len(data)
            chunks.append(frame(DATA, END_STREAM if last else 0, stream, part))
        if not data:
            chunks.append(frame(DATA, END_STREAM, stream))
        self._send_window -= at
        call.window -= at
        call.pending = data[at:]
        if call.pending:
            self._blocked.append(stream)
        return b"".join(chunks)

    def _unblock(self) -> None:
        for _ in range(len(self._blocked)):
            if self._send_window <= 0:
                return
            stream = self._blocked.popleft()
            call = self._calls.get(stream)
            if call is not None and call.pending:
                self._send_data(stream, call)

    def _finish(self, stream: int) -> None:
        call = self._calls.pop(stream, None)
        if call is not None:
            ok = call.status == b"0"
            _complete(call, None if ok else InferError(_status_text(call.status, call.message)))

    # --------------------------------------------------------- frames

    def _frame(self, kind: int, flags: int, stream: int, buffer: bytes, start: int, end: int) -> None:
        if kind == DATA:
            self._on_data(flags, stream, buffer, start, end)
        elif kind in (HEADERS, CONTINUATION):
            self._on_headers(kind, flags, stream, buffer[start:end])
        elif kind == SETTINGS:
            if not flags & ACK:
                self._on_settings(buffer[start:end])
        elif kind == WINDOW_UPDATE:
            self._on_window_update(stream, int.from_bytes(buffer[start : start + 4], "big") & 0x7FFFFFFF)
        elif kind == PING:
            if not flags & ACK:
                assert self.transport is not None
                self.transport.write(frame(PING, ACK, 0, buffer[start:end]))
        elif kind == RST_STREAM:
            call = self._calls.pop(stream, None)
            code = int.from_bytes(buffer[start : start + 4], "big")
            if call is not None:
                _complete(call, InferError(f"gRPC stream reset by the server (HTTP/2 code {code})"))
        elif kind == GOAWAY:
            self._on_goaway(buffer[start:end])

    def _on_data(self, flags: int, stream: int, buffer: bytes, start: int, end: int) -> None:
        length = end - start
        self._consumed += length
        if self._consumed > MAX_WINDOW // 2:
            assert self.transport is not None
            self.transport.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self._consumed)))
            self._consumed = 0
        call = self._calls.get(stream)
        if call is None:
            return
        if flags & PADDED:
            length -= buffer[start] + 1
        call.received += length
        if flags & END_STREAM:
            self._finish(stream)  # no trailers: status stays empty, reported as an error

    def _on_headers(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == HEADERS:
            if flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            if flags & PRIORITY:
                payload = payload[5:]
            self._header_flags[stream] = flags
        if not flags & END_HEADERS:
            self._headers[stream] = self._headers.get(stream, b"") + payload
            return
        block = self._headers.pop(stream, b"") + payload
        headers = self._decoded.get(block)
        if headers is None:
            headers = decode_block(self._decoder, block)
            if len(self._decoded) < DECODED_CACHE:
                self._decoded[block] = headers
        call = self._calls.get(stream)
        if call is not None:
            for name, value in headers:
                if name == b"grpc-status":
                    call.status = value
                elif name == b"grpc-message":
                    call.message = value
                elif name == b":status" and value != b"200":
                    call.message = b"HTTP status " + value
        if self._header_flags.pop(stream, 0) & END_STREAM:
            self._finish(stream)

    def _on_settings(self, payload: bytes) -> None:
        for at in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, at)
            if key == INITIAL_WINDOW_SIZE:
                delta = value - self._stream_window
                self._stream_window = value
                for call in self._calls.values():
                    call.window += delta
            elif key == MAX_FRAME_SIZE:
                self._max_frame = value
        assert self.transport is not None
        self.transport.write(frame(SETTINGS, ACK, 0))
        self._unblock()

    def _on_window_update(self, stream: int, increment: int) -> None:
        if stream == 0:
            self._send_window += increment
        else:
            call = self._calls.get(stream)
            if call is None:
                return
            call.window += increment
        self._unblock()

    def _on_goaway(self, payload: bytes) -> None:
        last, code = struct.unpack_from(">II", payload)
        detail = payload[8:].decode("utf-8", "replace")
        error = InferError(f"connection closed by the server (GOAWAY {code} {detail})".strip(), closed=True)
        self.closed = error
        for stream in [s for s in self._calls if s > last & 0x7FFFFFFF]:
            _complete(self._calls.pop(stream), error)

    def _abort(self, reason: str) -> None:
        self._fail_all(InferError(f"connection closed: {reason}", closed=True))
        if self.transport is not None:
            self.transport.close()

    def _fail_all(self, error: InferError) -> None:
        if self.closed is None:
            self.closed = error
        calls, self._calls = self._calls, {}
        for call in calls.values():
            _complete(call, error)


def _complete(call: _Call, error: InferError | None) -> None:
    done, call.done = call.done, None
    if done is not None:
        done(error)


def _status_text(status: bytes, message: bytes) -> str:
    if not status:
        return "gRPC call ended without a status " + message.decode("utf-8", "replace")
    code = int(status) if status.isdigit() else -1
    name = GRPC_CODES[code] if 0 <= code < len(GRPC_CODES) else f"status {status.decode()}"
    return f"gRPC {name}: {unquote(message.decode('utf-8', 'replace'))}"


# ---------------------------------------------------------------- shared connections


class GrpcConnection:
    """A caller's handle on a shared HTTP/2 connection: one call at a time."""

    def __init__(
        self, protocol: H2Protocol, messages: Requests, release: Callable[[H2Protocol], None]
    ) -> None:
        self._protocol, self._messages, self._release = protocol, messages, release

    def send(self, done: Done) -> None:
        self._protocol.call(self._messages.next(), done)

    async def close(self) -> None:
        self._release(self._protocol)


class GrpcPool:
    """Hands out GrpcConnections, up to SHARE per HTTP/2 connection; a connection is
    closed when its last handle is."""

    def __init__(
        self, host: str, port: int, messages: bytes | tuple[bytes, ...], stride: int = 0, share: int = SHARE
    ) -> None:
        self._host, self._port, self._share = host, port, share
        path = "/inference.GRPCInferenceService/ModelInfer"
        self._header_block = request_header_block(f"{host}:{port}", path)
        self._messages = (messages,) if isinstance(messages, bytes) else messages
        self._stride = stride
        self._handed = 0  # handles given out: the next one starts at the next message
        self._users: dict[H2Protocol, int] = {}

    async def connect(self) -> Connection:
        protocol = (
            next((p for p, n in self._users.items() if n < self._share and p.closed is None), None)
            or await self._open()
        )
        self._users[protocol] = self._users.get(protocol, 0) + 1
        self._handed += 1
        requests = Requests.for_connection(self._messages, self._handed - 1, self._stride)
        return GrpcConnection(protocol, requests, self._release)

    async def _open(self) -> H2Protocol:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(
                lambda: H2Protocol(self._header_block), self._host, self._port
            )
        except OSError as exc:
            raise MeasurementError(f"cannot connect to {self._host}:{self._port}: {exc}") from exc
        return protocol

    def _release(self, protocol: H2Protocol) -> None:
        left = self._users.get(protocol, 1) - 1
        if left > 0:
            self._users[protocol] = left
            return
        self._users.pop(protocol, None)
        if protocol.transport is not None:
            protocol.transport.close()


def grpc_connector(host: str, port: int, messages: bytes | tuple[bytes, ...], stride: int = 0) -> Connector:
    """Hands out calls that send the requests (gRPC messages: :func:`grpc_message`) in turn
    (:meth:`Requests.for_connection`)."""
    return GrpcPool(host, port, messages, stride).connect
