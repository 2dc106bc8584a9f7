"""Where the load goes: a server, a protocol and the encoded requests, sent in turn
(picklable, so a worker process can rebuild its own connections from it)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.loadgen._h2 import grpc_connector
from autotune.loadgen._transport import Connector, http_connector

PROTOCOLS = ("http", "grpc")


@dataclass(frozen=True)
class Endpoint:
    host: str
    http_port: int
    grpc_port: int
    protocol: str
    requests: tuple[bytes, ...]  # encoded for the protocol (WorkloadData.encoded), sent in turn
    stride: int = 0  # 0: each connection from another request, in steps of 1; N: from the first, steps of N

    def connector(self) -> Connector:
        """Connections that each send the requests in turn (:attr:`stride`)."""
        if self.protocol == "grpc":
            return grpc_connector(self.host, self.grpc_port, self.requests, self.stride)
        return http_connector(self.host, self.http_port, self.requests, self.stride)
