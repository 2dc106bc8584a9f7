"""Where the load goes: a server, a protocol and one encoded request (picklable, so a
worker process can rebuild its own connections from it)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.loadgen._h2 import grpc_connector
from autotune.loadgen._inputs import Payload, grpc_request, http_request
from autotune.loadgen._stats import StatsSnapshot
from autotune.loadgen._transport import Connector, HttpConnection, http_connector

PROTOCOLS = ("http", "grpc")


@dataclass(frozen=True)
class Endpoint:
    host: str
    http_port: int
    grpc_port: int
    protocol: str
    payload: Payload

    def connector(self) -> Connector:
        if self.protocol == "grpc":
            return grpc_connector(self.host, self.grpc_port, grpc_request(self.payload).SerializeToString())
        return http_connector(self.host, self.http_port, http_request(self.payload, self.host))

    async def stats_connection(self) -> StatsReader:
        return StatsReader(await HttpConnection.open(self.host, self.http_port, b""), self)


class StatsReader:
    """The model's statistics over one kept-alive HTTP connection."""

    def __init__(self, conn: HttpConnection, endpoint: Endpoint) -> None:
        self._conn = conn
        path = f"/v2/models/{endpoint.payload.model}/stats"
        self._request = f"GET {path} HTTP/1.1\r\nHost: {endpoint.host}\r\n\r\n".encode()

    async def __call__(self) -> StatsSnapshot:
        from autotune.errors import MeasurementError

        status, body = await self._conn.exchange(self._request)
        if status != 200:
            raise MeasurementError(f"statistics request failed: HTTP {status}")
        return StatsSnapshot.parse(body)

    async def close(self) -> None:
        await self._conn.close()
