"""The hand-written HTTP/2 client (autotune.loadgen._h2) driven frame by frame.

No server: an H2Protocol is connected to a transport that only records what it is
given, and the server's frames are fed to ``data_received``. This reaches the framing
paths a real tritonserver seldom takes (CONTINUATION, padding, priority, GOAWAY,
RST_STREAM, flow control) and header blocks it never sends (Huffman-coded, or asking
for a dynamic table).
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple

import hpack
import pytest

from autotune.loadgen import _h2
from autotune.loadgen._h2 import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
)
from autotune.loadgen._transport import InferError

PATH = "/inference.GRPCInferenceService/ModelInfer"
MESSAGE = _h2.grpc_message(b"request")
REPLY = _h2.grpc_message(b"reply")
Outcome = list[InferError | None]


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop: calls schedule their sends on the loop."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


class Frame(NamedTuple):
    kind: int
    flags: int
    stream: int
    payload: bytes


class RecordingTransport(asyncio.Transport):
    """Keeps every byte written; close only marks the transport closing."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = bytearray()
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sent += data

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing


def parse(data: bytes) -> list[Frame]:
    frames, at = [], 0
    while at < len(data):
        high, low, kind, flags, stream = struct.unpack_from(">BHBBI", data, at)
        end = at + 9 + (high << 16 | low)
        frames.append(Frame(kind, flags, stream & 0x7FFFFFFF, data[at + 9 : end]))
        at = end
    return frames


class Client:
    """An H2Protocol on a RecordingTransport, as the server sees it."""

    def __init__(self) -> None:
        self.transport = RecordingTransport()
        self.protocol = _h2.H2Protocol(_h2.request_header_block("host:1", PATH))
        self.protocol.connection_made(self.transport)
        assert self.transport.sent.startswith(_h2.PREFACE)
        self.transport.sent.clear()

    def call(self, message: bytes = MESSAGE) -> Outcome:
        outcome: Outcome = []
        self.protocol.call(message, outcome.append)
        return outcome

    def feed(self, *frames: bytes) -> None:
        self.protocol.data_received(b"".join(frames))

    async def sent(self) -> list[Frame]:
        """Frames written since the last look, once the loop has flushed the queued sends."""
        await asyncio.sleep(0)
        frames = parse(bytes(self.transport.sent))
        self.transport.sent.clear()
        return frames


def block(*headers: tuple[str, str], huffman: bool = False) -> bytes:
    """A header block as a server told HEADER_TABLE_SIZE 0 encodes it."""
    encoder = hpack.Encoder()
    encoder.header_table_size = 0  # the block starts with a size update to 0; nothing indexed
    return encoder.encode(list(headers), huffman=huffman)


RESPONSE = block((":status", "200"), ("content-type", "application/grpc"))


def trailers(status: str, message: str = "", huffman: bool = False) -> bytes:
    return block(("grpc-status", status), *([("grpc-message", message)] if message else []), huffman=huffman)


def answer(stream: int, trailer_block: bytes, response: bytes = RESPONSE) -> bytes:
    """Response headers, one reply message, then the trailers that end the stream."""
    return (frame(HEADERS, END_HEADERS, stream, response) + frame(DATA, 0, stream, REPLY)
            + frame(HEADERS, END_HEADERS | END_STREAM, stream, trailer_block))  # fmt: skip


def failure(outcome: Outcome) -> InferError:
    assert len(outcome) == 1 and isinstance(outcome[0], InferError), outcome
    return outcome[0]


def data_of(frames: list[Frame], stream: int = 1) -> list[Frame]:
    return [f for f in frames if f.kind == DATA and f.stream == stream]


# ---------------------------------------------------------------- the request's block


@pytest.mark.parametrize(
    ("value", "bits", "encoded"),
    [(10, 5, b"\x0a"), (1337, 5, b"\x1f\x9a\x0a"), (42, 8, b"\x2a"), (31, 5, b"\x1f\x00"), (30, 5, b"\x1e")],
)
def test_encode_int_matches_rfc_7541(value: int, bits: int, encoded: bytes) -> None:
    assert _h2.encode_int(value, bits) == encoded  # RFC 7541 C.1 and the prefix boundary


def test_request_header_block_decodes_to_a_grpc_post() -> None:
    ours = _h2.request_header_block("host:1", PATH)
    assert _h2.decode_block(_h2.header_decoder(), ours) == [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", PATH.encode()),
        (b":authority", b"host:1"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
        (b"user-agent", b"autotune-loadgen"),
    ]  # fmt: skip
    assert PATH.encode() in ours and b"trailers" in ours  # raw literals, no Huffman coding


# ---------------------------------------------------------------- a call, plain


@in_loop
async def test_call_sends_headers_then_data_and_completes_on_ok_trailers() -> None:
    client = Client()
    outcome = client.call()
    assert outcome == []
    assert await client.sent() == [
        Frame(HEADERS, END_HEADERS, 1, _h2.request_header_block("host:1", PATH)),
        Frame(DATA, END_STREAM, 1, MESSAGE),
    ]
    client.feed(answer(1, trailers("0")))
    assert outcome == [None]


@in_loop
async def test_grpc_core_raw_trailers_with_incremental_indexing() -> None:
    client = Client()
    outcome = client.call()
    # as gRPC's C-core sends trailers: a size update to 0, ":status 200" indexed, literals
    # with incremental indexing and without indexing, a percent-encoded message
    raw = (b"\x20\x88\x40\x0bgrpc-status\x015\x00\x0cgrpc-message\x11model%20not found"
           b"\x5f\x10application/grpc")  # fmt: skip
    client.feed(frame(HEADERS, END_HEADERS | END_STREAM, 1, raw))
    assert str(failure(outcome)) == "gRPC NOT_FOUND: model not found"


# ---------------------------------------------------------------- HEADERS framing


@in_loop
async def test_continuation_frames_carry_the_status() -> None:
    client = Client()
    outcome = client.call()
    client.feed(frame(HEADERS, END_HEADERS, 1, RESPONSE), frame(DATA, 0, 1, REPLY))
    tail = trailers("3", "bad shape")
    parts = tail[:4], tail[4:9], tail[9:]
    client.feed(frame(HEADERS, END_STREAM, 1, parts[0]), frame(CONTINUATION, 0, 1, parts[1]))
    assert outcome == []  # the block is not complete: nothing decided yet
    client.feed(frame(CONTINUATION, END_HEADERS, 1, parts[2]))
    assert str(failure(outcome)) == "gRPC INVALID_ARGUMENT: bad shape"


@in_loop
async def test_padded_headers_and_data_are_stripped() -> None:
    client = Client()
    outcome = client.call()

    def padded(payload: bytes, pad: int = 7) -> bytes:
        return bytes([pad]) + payload + b"\x00" * pad

    client.feed(frame(HEADERS, END_HEADERS | PADDED, 1, padded(RESPONSE)))
    client.feed(frame(DATA, PADDED, 1, padded(REPLY)))
    assert client.protocol._calls[1].received == len(REPLY)  # neither pad length nor padding counted
    client.feed(frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1, padded(trailers("0"))))
    assert outcome == [None]


@pytest.mark.parametrize("flags", [PRIORITY, PRIORITY | PADDED])
@in_loop
async def test_priority_fields_are_skipped(flags: int) -> None:
    client = Client()
    outcome = client.call()
    priority = struct.pack(">IB", 0x80000003, 200)  # exclusive, depends on stream 3, weight 200
    trailers_only = block((":status", "200"), ("grpc-status", "9"), ("grpc-message", "busy"))
    payload = priority + trailers_only
    if flags & PADDED:
        payload = b"\x03" + payload + b"\x00\x00\x00"
    client.feed(frame(HEADERS, END_HEADERS | END_STREAM | flags, 1, payload))
    assert str(failure(outcome)) == "gRPC FAILED_PRECONDITION: busy"


# ---------------------------------------------------------------- GOAWAY, RST_STREAM


@in_loop
async def test_goaway_fails_streams_above_last_stream_id_only() -> None:
    client = Client()
    first, second, third = client.call(), client.call(), client.call()  # streams 1, 3, 5
    await client.sent()
    client.feed(frame(GOAWAY, 0, 0, struct.pack(">II", 3, 0) + b"server shutting down"))
    error = failure(third)
    assert error.closed and "GOAWAY 0 server shutting down" in str(error)
    assert first == [] and second == []
    client.feed(answer(3, trailers("0")), answer(1, trailers("0")))
    assert first == [None] and second == [None]

    late = client.call()
    assert late == []  # never synchronously inside call()
    assert await client.sent() == []  # no stream opened after GOAWAY
    assert late == [client.protocol.closed] and failure(late).closed


@in_loop
async def test_rst_stream_fails_only_that_stream() -> None:
    client = Client()
    reset, other = client.call(), client.call()
    client.feed(frame(RST_STREAM, 0, 1, struct.pack(">I", 8)))  # CANCEL
    error = failure(reset)
    assert "HTTP/2 code 8" in str(error) and not error.closed
    assert other == [] and client.protocol.closed is None
    client.feed(answer(3, trailers("0")))
    assert other == [None]


# ---------------------------------------------------------------- flow control


@in_loop
async def test_connection_window_holds_data_until_window_update() -> None:
    client = Client()
    client.feed(_h2.settings_frame({_h2.INITIAL_WINDOW_SIZE: 1_000_000}))  # only the connection's binds
    await client.sent()
    message = _h2.grpc_message(b"x" * 100_000)
    client.call(message)
    sent = data_of(await client.sent())
    assert sum(len(f.payload) for f in sent) == _h2.DEFAULT_WINDOW
    assert all(len(f.payload) <= 16_384 and not f.flags & END_STREAM for f in sent)

    client.feed(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 100_000)))  # the stream's: no help
    assert data_of(await client.sent()) == []
    client.feed(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 40_000)))
    rest = data_of(await client.sent())
    assert rest[-1].flags & END_STREAM and not any(f.flags & END_STREAM for f in rest[:-1])
    assert b"".join(f.payload for f in sent + rest) == message


@in_loop
async def test_stream_window_update_and_initial_window_size_setting() -> None:
    client = Client()
    client.feed(_h2.settings_frame({_h2.INITIAL_WINDOW_SIZE: 1_000}))
    assert await client.sent() == [Frame(SETTINGS, _h2.ACK, 0, b"")]
    message = _h2.grpc_message(b"y" * 2_995)  # 3000 bytes
    client.call(message)
    sent = data_of(await client.sent())
    assert sum(len(f.payload) for f in sent) == 1_000

    client.feed(frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 1_500)))
    more = data_of(await client.sent())
    assert sum(len(f.payload) for f in more) == 1_500 and not more[-1].flags & END_STREAM

    client.feed(_h2.settings_frame({_h2.INITIAL_WINDOW_SIZE: 1_500}))  # +500 for the open stream
    frames = await client.sent()
    rest = data_of(frames)
    assert Frame(SETTINGS, _h2.ACK, 0, b"") in frames
    assert sum(len(f.payload) for f in rest) == 500 and rest[-1].flags & END_STREAM
    assert b"".join(f.payload for f in sent + more + rest) == message


# ---------------------------------------------------------------- HPACK decoding


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        ("0", "", None),
        ("3", "shape [2]%2C expected [4]", "gRPC INVALID_ARGUMENT: shape [2], expected [4]"),
    ],
)
@in_loop
async def test_huffman_coded_headers_complete_the_call(
    status: str, message: str, expected: str | None
) -> None:
    response = block((":status", "200"), ("content-type", "application/grpc"), huffman=True)
    tail = trailers(status, message, huffman=True)
    assert b"grpc-status" not in tail and b"application/grpc" not in response  # really Huffman-coded
    fresh = hpack.Decoder()
    fresh.max_allowed_table_size = 0
    plain = [(b"grpc-status", status.encode())] + ([(b"grpc-message", message.encode())] if message else [])
    assert list(fresh.decode(tail, raw=True)) == plain  # valid for a decoder with table size 0

    client = Client()
    outcome = client.call()
    client.feed(answer(1, tail, response))
    if expected is None:
        assert outcome == [None]
    else:
        assert str(failure(outcome)) == expected


@in_loop
async def test_huffman_value_coded_by_hand() -> None:
    client = Client()
    outcome = client.call()
    huffman_zero = b"\x81\x07"  # one Huffman byte: "0" is 00000, then 111 of EOS as padding
    client.feed(frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x00\x0bgrpc-status" + huffman_zero))
    assert outcome == [None]


class CountingDecoder(hpack.Decoder):
    def __init__(self) -> None:
        super().__init__()
        self.header_table_size = self.max_allowed_table_size = 0
        self.calls = 0

    def decode(self, data: bytes, raw: bool = False) -> list[hpack.HeaderTuple]:
        self.calls += 1
        return list(super().decode(data, raw))


@in_loop
async def test_cached_blocks_are_not_decoded_again() -> None:
    client = Client()
    decoder = client.protocol._decoder = CountingDecoder()
    tail = trailers("0", huffman=True)
    for _ in range(3):
        outcome = client.call()
        client.feed(answer(client.protocol._next_id - 2, tail))
        assert outcome == [None]
    assert decoder.calls == 2  # the response headers and the trailers, once each
    outcome = client.call()
    client.feed(answer(7, trailers("5", "gone")))
    assert decoder.calls == 3 and str(failure(outcome)) == "gRPC NOT_FOUND: gone"


@in_loop
async def test_decoded_cache_is_bounded() -> None:
    client = Client()
    for i in range(_h2.DECODED_CACHE + 10):
        outcome = client.call()
        client.feed(frame(HEADERS, END_HEADERS | END_STREAM, 1 + 2 * i, trailers("2", f"n{i}")))
        assert str(failure(outcome)) == f"gRPC UNKNOWN: n{i}"  # decoded right past the bound too
    assert len(client.protocol._decoded) == _h2.DECODED_CACHE


@pytest.mark.parametrize(
    "bad",
    [
        b"\x3f\xe1\x1f" + trailers("0"),  # dynamic table size update to 4096
        b"\xbe",  # index 62: a dynamic entry
        b"\x40\x0bgrpc-status\x010\xbe",  # indexes a literal, then refers to it
        b"\x00\x0bgrpc-st",  # truncated
        b"\x00\x01a\x81\xff",  # Huffman string with a bad end
    ],
    ids=["table-size-4096", "dynamic-index", "indexed-then-referred", "truncated", "bad-huffman"],
)
@in_loop
async def test_undecodable_block_aborts_the_connection(bad: bytes) -> None:
    client = Client()
    first, second = client.call(), client.call()
    client.feed(frame(HEADERS, END_HEADERS | END_STREAM, 1, bad))
    for outcome in (first, second):
        error = failure(outcome)
        assert error.closed and str(error).startswith("connection closed: HTTP/2 protocol error: ")
    assert client.transport.closing and client.protocol.closed is not None


@in_loop
async def test_incremental_indexing_keeps_nothing_between_blocks() -> None:
    client = Client()
    outcome = client.call()
    client.feed(frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x40\x0bgrpc-status\x010"))
    assert outcome == [None]  # a literal with incremental indexing decodes ...
    later = client.call()
    client.feed(frame(HEADERS, END_HEADERS | END_STREAM, 3, b"\xbe"))  # ... but is not kept
    assert "HTTP/2 protocol error" in str(failure(later))
