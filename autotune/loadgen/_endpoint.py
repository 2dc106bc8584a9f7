"""Where the load goes: a server, a protocol and one encoded request (picklable, so a
worker process can rebuild its own connections from it)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.loadgen._h2 import grpc_connector
from autotune.loadgen._inputs import Payload, grpc_request, http_request
from autotune.loadgen._transport import Connector, http_connector

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
