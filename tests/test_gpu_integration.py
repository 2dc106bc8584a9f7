"""GPU figures against a real tritonserver (nvidia-pytriton's, through the local launcher): its
metrics endpoint, the probe a run chooses, and a measured point's figures. On this CPU-only
machine the server's metrics have no GPU lines and a point has none; the ``gpu`` test (skipped
without a GPU) measures a local server on one.
"""

from __future__ import annotations

import csv
import importlib.util
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.gpu import parse_metrics
from autotune.gpu_probe import MetricsProbe, choose_probe, local_gpu_count, scrape
from autotune.launch import Server, free_ports
from autotune.launch._base import Ports
from autotune.launch.local import LocalLauncher
from autotune.loadgen import LoadGenerator, WindowPlan
from tests.conftest import fast_toy_repo

pytestmark = pytest.mark.integration

PLAN = WindowPlan(window_s=0.5, warmup_s=0.5, max_windows=4, min_requests=20)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("gpu")
    with LocalLauncher().serve(fast_toy_repo(root), "toy", root / "server.log") as running:
        yield running


def _generator(server: Server) -> LoadGenerator:
    return LoadGenerator.connect(server.host, server.http_port, server.grpc_port, "toy", plan=PLAN)


def test_a_local_server_serves_its_metrics(server: Server) -> None:
    assert server.metrics_url.startswith("http://127.0.0.1:") and server.metrics_url.endswith("/metrics")
    text = scrape(server.metrics_url)
    assert text is not None and 'nv_inference_count{model="toy",version="1"}' in text
    if local_gpu_count() == 0:
        assert parse_metrics(text) == ()


@pytest.mark.skipif(local_gpu_count() > 0, reason="a CPU-only machine's server")
def test_a_cpu_server_s_point_has_no_gpu_figures(server: Server) -> None:
    assert choose_probe(server.metrics_url, "local") is None  # no sampling at all
    point = _generator(server).with_gpu_probe(MetricsProbe(server.metrics_url)).at_concurrency(2)
    assert point.requests > 0 and point.gpus == ()


def test_a_metrics_port_taken_at_start_is_retried_on_others(tmp_path: Path) -> None:
    """Triton opens its metrics port just after its HTTP one, and exits if it is taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        tried: list[Ports] = []

        class Clashing(LocalLauncher):
            def _ports(self) -> Ports:
                tried.append(Ports(*free_ports(2), port) if not tried else super()._ports())
                return tried[-1]

        with Clashing().serve(fast_toy_repo(tmp_path), "toy", tmp_path / "server.log") as running:
            assert len(tried) == 2 and running.metrics_url == f"http://127.0.0.1:{tried[1].metrics}/metrics"
            assert scrape(running.metrics_url) is not None


@pytest.mark.gpu
@pytest.mark.skipif(local_gpu_count() == 0, reason="needs an NVIDIA GPU on this machine")
def test_a_gpu_server_s_point_has_gpu_figures(server: Server) -> None:
    probe = choose_probe(server.metrics_url, "local")
    assert probe is not None
    point = _generator(server).with_gpu_probe(probe).at_concurrency(2)
    assert len(point.gpus) >= 1
    assert all(g.uuid and g.memory_mb > 0 and 0.0 <= g.utilization <= 1.0 for g in point.gpus)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(local_gpu_count() == 0, reason="needs an NVIDIA GPU on this machine")
def test_the_gpu_path_end_to_end(tmp_path: Path) -> None:
    """scripts/gpu_path.py (a KIND_GPU torch model: its metrics, the FP16 output check, a tuning
    run with every trial's GPU figures); it needs torch in the Python that runs the stub."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_path.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with (tmp_path / "trials.csv").open(encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["state"] == "COMPLETE"]
    assert rows and all(r["gpu_memory_mb"] for r in rows), "every measured trial has its GPU figures"
