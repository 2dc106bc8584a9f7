"""The embedded load generator: closed-loop concurrency and open-loop request rate.

    gen = LoadGenerator.connect("127.0.0.1", http_port, grpc_port, "bertQA")
    point = gen.at_concurrency(8)          # a measure.Point, measured to stability
    point = gen.at_rate(200.0, "poisson")  # latency counted from the scheduled send time
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import MeasurementError
from autotune.loadgen._closed import Target, WindowPlan, measure_closed
from autotune.loadgen._histogram import LatencyHistogram
from autotune.loadgen._inputs import (
    ModelIO, Payload, grpc_request, http_request, payload_from_file, random_payload,
)
from autotune.loadgen._stats import StatsSnapshot
from autotune.loadgen._transport import Connection, GrpcConnection, HttpConnection, get_json
from autotune.measure import Point

__all__ = ["LatencyHistogram", "LoadGenerator", "ModelIO", "WindowPlan"]

PROTOCOLS = ("http", "grpc")


@dataclass(frozen=True)
class LoadGenerator:
    host: str
    http_port: int
    grpc_port: int
    io: ModelIO
    payload: Payload
    protocol: str = "http"
    plan: WindowPlan = WindowPlan()

    @classmethod
    def connect(
        cls, host: str, http_port: int, grpc_port: int, model: str, *,
        protocol: str = "http", plan: WindowPlan | None = None, batch_size: int = 1,
        input_data: Path | None = None, shapes: Mapping[str, Sequence[int]] | None = None,
    ) -> LoadGenerator:
        """Read the model's metadata, build the request once and check one answer."""
        metadata = get_json(host, http_port, f"/v2/models/{model}")
        config = get_json(host, http_port, f"/v2/models/{model}/config")
        io = ModelIO.from_metadata(metadata, config)
        if input_data is not None:
            payload = payload_from_file(io, input_data, batch_size)
        else:
            payload = random_payload(io, batch_size, shapes)
        gen = cls(host, http_port, grpc_port, io, payload, protocol, plan or WindowPlan())
        gen.check_answer()
        return gen

    def with_plan(self, plan: WindowPlan) -> LoadGenerator:
        return replace(self, plan=plan)

    def at_concurrency(self, concurrency: int) -> Point:
        async def run() -> Point:
            return await measure_closed(await self._target(), concurrency, self.plan)

        return asyncio.run(run())

    def check_answer(self) -> None:
        """One request through tritonclient: every output must come back non-empty."""
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        client = httpclient.InferenceServerClient(f"{self.host}:{self.http_port}", network_timeout=120.0)
        inputs = []
        for spec, array in self.payload.tensors:
            item = httpclient.InferInput(spec.name, list(array.shape), spec.datatype)
            item.set_data_from_numpy(array, binary_data=True)
            inputs.append(item)
        try:
            result = client.infer(self.io.name, inputs)
        except InferenceServerException as exc:
            raise MeasurementError(f"model {self.io.name!r} answered an error: {exc.message()}") from exc
        finally:
            client.close()
        for name in self.payload.outputs:
            out: Any = result.as_numpy(name)
            if out is None or np.size(out) == 0:
                raise MeasurementError(f"model {self.io.name!r} returned an empty output {name!r}")

    async def _target(self) -> Target:
        stats_conn = await HttpConnection.open(self.host, self.http_port, b"")
        stats_request = (
            f"GET /v2/models/{self.io.name}/stats HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
        )

        async def stats() -> StatsSnapshot:
            status, body = await stats_conn.exchange(stats_request)
            if status != 200:
                raise MeasurementError(f"statistics request failed: HTTP {status}")
            return StatsSnapshot.parse(body)

        return Target(connect=self._connector(), stats=stats, batch_size=self.payload.batch_size)

    def _connector(self) -> Any:
        if self.protocol == "grpc":
            request = grpc_request(self.payload)
            url = f"{self.host}:{self.grpc_port}"

            async def grpc_connect() -> Connection:
                return await GrpcConnection.open(url, request)

            return grpc_connect
        raw = http_request(self.payload, self.host)

        async def http_connect() -> Connection:
            return await HttpConnection.open(self.host, self.http_port, raw)

        return http_connect
