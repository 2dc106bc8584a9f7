"""Connections that send one pre-encoded request again and again, as cheaply as Python can.

HTTP is a raw HTTP/1.1 keep-alive connection on asyncio streams (the request bytes are
built once); gRPC uses grpc.aio with a prebuilt ModelInferRequest. Both raise InferError
for an answer that is not a success, with the server's message.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from typing import Any, Protocol

from autotune.errors import MeasurementError


class InferError(Exception):
    """The server answered a request with an error."""


class Connection(Protocol):
    async def infer(self) -> None: ...

    async def close(self) -> None: ...


class HttpConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> None:
        self._reader, self._writer, self._request = reader, writer, request

    @classmethod
    async def open(cls, host: str, port: int, request: bytes) -> HttpConnection:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            raise MeasurementError(f"cannot connect to {host}:{port}: {exc}") from exc
        return cls(reader, writer, request)

    async def infer(self) -> None:
        status, body = await self.exchange(self._request)
        if status != 200:
            raise InferError(f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}")

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        self._writer.write(request)
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise InferError(f"connection closed by the server: {exc}") from exc
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        if at >= 0:
            end = lower.index(b"\r\n", at + 2)
            body = await self._reader.readexactly(int(lower[at + 17 : end]))
        elif b"transfer-encoding: chunked" in lower:
            body = await self._chunked()
        else:
            body = b""
        return status, body

    async def _chunked(self) -> bytes:
        parts = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except ConnectionError:
            pass


class GrpcConnection:
    def __init__(self, channel: Any, request: Any) -> None:
        from tritonclient.grpc import service_pb2_grpc

        self._channel = channel
        self._call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer
        self._request = request

    @classmethod
    async def open(cls, url: str, request: Any) -> GrpcConnection:
        import grpc

        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        return cls(grpc.aio.insecure_channel(url, options=options), request)

    async def infer(self) -> None:
        import grpc

        try:
            await self._call(self._request)
        except grpc.aio.AioRpcError as exc:
            raise InferError(f"gRPC {exc.code().name}: {exc.details()}") from exc

    async def close(self) -> None:
        await self._channel.close()


def get_json(host: str, port: int, path: str, timeout: float = 10.0) -> Any:
    """A small synchronous GET for metadata and statistics."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise MeasurementError(f"GET http://{host}:{port}{path} failed: {exc}") from exc
    finally:
        conn.close()
    if response.status != 200:
        raise MeasurementError(f"GET {path}: HTTP {response.status}: {body[:200].decode('utf-8', 'replace')}")
    return json.loads(body)
