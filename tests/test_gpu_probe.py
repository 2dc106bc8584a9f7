"""The GPU probes (autotune.gpu_probe) where nothing answers, and on this machine's driver. What a
real server's metrics give is tested against tritonserver in tests/test_gpu_integration.py."""

from __future__ import annotations

import time

import pytest

from autotune.gpu_probe import MetricsProbe, NvmlProbe, choose_probe, local_gpu_count, scrape, scraped_gpus
from autotune.launch import free_ports


@pytest.fixture
def dead_url() -> str:
    """A metrics URL where nothing listens."""
    (port,) = free_ports(1)
    return f"http://127.0.0.1:{port}/metrics"


def test_an_endpoint_that_does_not_answer_is_no_text_and_no_sample(dead_url: str) -> None:
    started = time.monotonic()
    assert scrape(dead_url) is None and scraped_gpus(dead_url) is None
    assert MetricsProbe(dead_url).sample() == ()  # a failed scrape is no sample, never an error
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize("url", ["", "not a url", "http://", "ftp://127.0.0.1:1/metrics"])
def test_a_bad_url_is_no_text(url: str) -> None:
    assert scrape(url, timeout_s=0.5) is None


def test_the_driver_probe_sees_every_gpu_of_this_machine() -> None:
    samples = NvmlProbe().sample()  # () on a machine without GPUs or driver
    assert len(samples) == local_gpu_count()
    assert all(s.uuid and s.memory_used_bytes > 0 and 0.0 <= s.utilization <= 1.0 for s in samples)


def test_a_run_without_metrics_samples_only_a_local_server_s_gpus(dead_url: str) -> None:
    for launcher in ("docker", "remote"):
        assert choose_probe(dead_url, launcher) is None
        assert choose_probe("", launcher) is None
    local = choose_probe(dead_url, "local")
    assert local == (NvmlProbe() if local_gpu_count() else None)


def test_a_metrics_probe_follows_each_server_of_the_run() -> None:
    """Each server a run starts serves its metrics on a port of its own: the probe chosen on the
    first reads the later ones at theirs (a real H200 run filled only trial 0's GPU figures)."""
    from autotune.gpu_probe import MetricsProbe, NvmlProbe, at_server

    first = MetricsProbe("http://127.0.0.1:40001/metrics")
    assert at_server(first, "http://127.0.0.1:40002/metrics") == MetricsProbe(
        "http://127.0.0.1:40002/metrics"
    )
    assert at_server(first, "") == first  # a server without metrics of its own
    assert at_server(NvmlProbe(), "http://127.0.0.1:40002/metrics") == NvmlProbe()
    assert at_server(None, "http://127.0.0.1:40002/metrics") is None
