"""autotune.launch's own functions: how many GPUs a launcher's servers have (server_gpus), asked of
the side where they run; what a killed run's servers left behind (reap_shared_memory)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from autotune.gpu_probe import local_gpu_count
from autotune.launch import ServerGpus, free_ports, server_gpus
from autotune.launch.remote import metrics_url
from autotune.settings import DockerOptions, Launch, RemoteOptions


def test_a_local_server_has_this_machine_s_gpus() -> None:
    assert server_gpus(Launch("local")) == ServerGpus(local_gpu_count())


@pytest.mark.parametrize(("gpus", "count"), [("", 0), ("0,1", 2), ("all", 1)])
def test_a_container_has_the_gpus_it_is_given(gpus: str, count: int) -> None:
    assert server_gpus(Launch("docker", docker=DockerOptions(gpus=gpus))) == ServerGpus(count)


def test_a_remote_server_without_metrics_counts_as_none_with_a_note() -> None:
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}/metrics"
    found = server_gpus(Launch("remote", remote=RemoteOptions("127.0.0.1:8000", metrics_url=url)))
    assert found.count == 0
    assert url in found.note and "--metrics-url" in found.note and "\n" not in found.note


def test_a_remote_server_s_metrics_default_to_triton_s_port_on_its_host() -> None:
    assert metrics_url(RemoteOptions("http://gpu-box:9000")) == "http://gpu-box:8002/metrics"
    assert metrics_url(RemoteOptions("gpu-box:9000", metrics_url="http://m:1/x")) == "http://m:1/x"


def test_shared_memory_a_gone_run_s_servers_left_is_removed_and_a_live_one_s_kept(tmp_path: Path) -> None:
    from autotune.launch.local import SHM_PREFIX, reap_shared_memory

    gone = subprocess.Popen(["true"])
    gone.wait()
    left = tmp_path / f"{SHM_PREFIX}{gone.pid}_0_region"  # a killed run's stub's
    live = tmp_path / f"{SHM_PREFIX}{os.getpid()}_3_region"  # a running tuner's
    other = tmp_path / "triton_python_backend_shm_region_x"  # not ours
    for region in (left, live, other):
        region.write_bytes(b"")
    assert reap_shared_memory(tmp_path) == [left]
    assert not left.exists() and live.exists() and other.exists()
