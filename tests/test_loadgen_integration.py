"""The load generator against a real tritonserver (nvidia-pytriton's): closed and open loop
over HTTP and gRPC, worker processes merged, BYTES inputs, error answers.

One server for the module: the numpy-only ``toy`` model (1 ms per execution) and a
``strings`` model with BYTES input that rejects anything but non-empty UTF-8 text, so a
badly encoded request shows up as an error. No test asserts an absolute time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.launch import Server
from autotune.launch.local import LocalLauncher
from autotune.loadgen import LoadGenerator, WindowPlan
from autotune.loadgen._h2 import grpc_connector, grpc_message
from autotune.loadgen._inputs import ModelIO, Payload, TensorSpec, grpc_request, http_request, random_payload
from autotune.loadgen._transport import HttpConnection, InferError, infer
from autotune.points import ERRORS, Point
from autotune.settings import Workload
from tests.conftest import fast_toy_repo

pytestmark = pytest.mark.integration

PLAN = WindowPlan(window_s=0.5, warmup_s=0.5, max_windows=4, min_requests=20)

STRINGS_CONFIG = """
name: "strings"
backend: "python"
max_batch_size: 4
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "LENGTH" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

STRINGS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            try:
                lengths = np.array([[len(item.decode("utf-8")) for item in row] for row in text], np.int32)
                if (lengths == 0).any():
                    raise ValueError("empty string")
            except (ValueError, AttributeError) as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"bad TEXT: {exc}")))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("LENGTH", lengths)]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = fast_toy_repo(tmp_path_factory.mktemp("server"))
    (repo / "strings" / "1").mkdir(parents=True)
    (repo / "strings" / "config.pbtxt").write_text(STRINGS_CONFIG)
    (repo / "strings" / "1" / "model.py").write_text(STRINGS_MODEL)
    with LocalLauncher().serve(repo, "toy", repo.parent / "server.log") as handle:
        yield handle


def _gen(server: Server, model: str = "toy", **kwargs: Any) -> LoadGenerator:
    return LoadGenerator.connect(server.host, server.http_port, server.grpc_port, model, plan=PLAN, **kwargs)


def _sane(point: Point) -> None:
    assert point.errors == 0 and ERRORS not in point.warnings
    assert point.requests > 0 and point.throughput > 0
    assert 0 < point.p50_ms <= point.p90_ms <= point.p95_ms <= point.p99_ms
    assert point.server.compute_infer_us > 0


def _counted_by_server(point: Point) -> float:
    """Our completions over the server's, in the same windows (1.0 = every request counted)."""
    return point.requests / point.server.requests


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_closed_loop(server: Server, protocol: str) -> None:
    point = _gen(server, protocol=protocol).at_concurrency(3)
    _sane(point)
    assert point.concurrency == 3 and point.request_rate == 0.0 and point.send_rate == 0.0
    assert _counted_by_server(point) == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_open_loop_holds_a_low_rate(server: Server, protocol: str) -> None:
    plan = WindowPlan(window_s=1.0, warmup_s=0.5, max_windows=4, min_requests=20)
    point = _gen(server, protocol=protocol).with_plan(plan).at_rate(60.0)
    _sane(point)
    assert point.concurrency == 0 and point.request_rate == 60.0
    assert point.send_rate == pytest.approx(60.0, rel=0.03)
    assert point.throughput == pytest.approx(60.0, rel=0.05)
    assert point.send_late_p99_ms > 0  # recorded (its size depends on the machine: not asserted)


def test_poisson_open_loop(server: Server) -> None:
    point = _gen(server, protocol="grpc", seed=5).at_rate(80.0, "poisson")
    _sane(point)
    assert point.throughput == pytest.approx(point.send_rate, rel=0.1)  # answered what it sent


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_two_worker_processes_merge(server: Server, protocol: str) -> None:
    gen = _gen(server, protocol=protocol).with_workers(2)
    closed = gen.at_concurrency(4)
    _sane(closed)
    assert _counted_by_server(closed) == pytest.approx(1.0, abs=0.1)  # both processes' counts
    opened = gen.at_rate(60.0)
    assert opened.send_rate == pytest.approx(60.0, rel=0.03)
    assert _counted_by_server(opened) == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_inputs_random_and_from_input_data(server: Server, protocol: str, tmp_path: Path) -> None:
    _sane(_gen(server, "strings", protocol=protocol).at_concurrency(2))
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"TEXT": {"content": ["hello", "wörld"], "shape": [2]}}]}))
    _sane(_gen(server, "strings", protocol=protocol, workload=Workload(str(data), (), 2)).at_concurrency(2))


def _toy_payload(model: str) -> Payload:
    io = ModelIO(model, 8, (TensorSpec("x", "FP32", (16,)),), (TensorSpec("y", "FP32", (16,)),))
    return random_payload(io)


def test_error_answers_carry_the_servers_message(server: Server) -> None:
    payload = _toy_payload("no_such_model")

    async def both() -> tuple[str, str]:
        message = grpc_message(grpc_request(payload).SerializeToString())
        grpc_conn = await grpc_connector(server.host, server.grpc_port, message)()
        raw = http_request(payload, server.host)
        http_conn = await HttpConnection.open(server.host, server.http_port, raw)
        messages: list[str] = []
        for conn in (grpc_conn, http_conn):
            with pytest.raises(InferError) as caught:
                await infer(conn)
            messages.append(str(caught.value))
            await conn.close()
        return messages[0], messages[1]

    grpc_error, http_error = asyncio.run(both())
    assert grpc_error.startswith("gRPC NOT_FOUND") and "no_such_model" in grpc_error
    assert http_error.startswith(("HTTP 400", "HTTP 404")) and "no_such_model" in http_error


def test_grpc_connections_are_shared_and_survive_many_streams(server: Server) -> None:
    payload = _toy_payload("toy")
    message = grpc_message(grpc_request(payload).SerializeToString())
    connect = grpc_connector(server.host, server.grpc_port, message)

    async def burst() -> int:
        conns = [await connect() for _ in range(12)]  # two HTTP/2 connections of six callers
        for _ in range(20):
            await asyncio.gather(*(infer(c) for c in conns))
        protocols = {id(c._protocol) for c in conns}  # type: ignore[attr-defined]
        for c in conns:
            await c.close()
        return len(protocols)

    assert asyncio.run(burst()) == 2
