"""GPU figures (autotune.gpu): reading a server's /metrics, summarising a point's samples, merging
passes, and the choice of how a run samples its GPUs.

tests/data/metrics_cpu.txt is a real /metrics of the CPU tritonserver of the nvidia-pytriton
wheel (2.51), taken by curl after a few requests to the toy model, served by the local launcher
with metrics on. tests/data/metrics_h200.txt is the same server's on a GPU machine (one NVIDIA
H200), captured by scripts/gpu_path.py; a server with two GPUs is that capture with its GPU lines
given again under a second GPU's uuid (:func:`_two_gpus`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.gpu import (
    MIB,
    GpuFigures,
    GpuSample,
    parse_metrics,
    peak_memory_mb,
    probe_kind,
    summarise,
)

DATA = Path(__file__).parent / "data"
GPU0, GPU1 = "GPU-0fe227cb-b22d-7149-144f-6a99ca763fc4", "GPU-0b0b0b0b-0000-4000-8000-000000000002"


def _two_gpus() -> str:
    """The H200 capture with a second GPU: each GPU line again under GPU1's uuid, its
    utilisation and power halved."""
    text = (DATA / "metrics_h200.txt").read_text()
    extra = []
    for line in text.splitlines():
        if line.startswith("nv_gpu_") and GPU0 in line:
            name, value = line.rsplit(" ", 1)
            half = "utilization" in name or "power_usage" in name
            extra.append(f"{name.replace(GPU0, GPU1)} {float(value) / 2 if half else float(value)}")
    return text + "\n".join(extra) + "\n"


def test_a_cpu_server_s_metrics_have_no_gpus() -> None:
    text = (DATA / "metrics_cpu.txt").read_text()
    assert "nv_inference_count" in text  # a real capture, with the model's counters in it
    assert parse_metrics(text) == ()


def test_a_gpu_server_s_metrics_give_each_gpu_in_the_order_they_appear() -> None:
    real = (DATA / "metrics_h200.txt").read_text()
    assert "nv_inference_count" in real and "nv_energy_consumption" in real  # a real capture
    assert parse_metrics(real) == (GpuSample(GPU0, 0.0, 1390411776.0, 120.92),)
    assert parse_metrics(_two_gpus()) == (
        GpuSample(GPU0, 0.0, 1390411776.0, 120.92),
        GpuSample(GPU1, 0.0, 1390411776.0, 60.46),
    )


def test_a_gpu_missing_a_figure_gets_zero_and_lines_without_a_uuid_are_skipped() -> None:
    text = (
        "# TYPE nv_gpu_memory_used_bytes gauge\n"
        'nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 1048576\n'
        "nv_gpu_memory_used_bytes 7\n"
    )
    assert parse_metrics(text) == (GpuSample("GPU-a", 0.0, 1048576.0, 0.0),)


def test_a_point_averages_utilisation_and_power_and_keeps_the_most_memory() -> None:
    scrapes = [
        (GpuSample("a", 0.2, 100 * MIB, 100.0), GpuSample("b", 0.0, 10 * MIB, 50.0)),
        (),  # a scrape that failed
        (GpuSample("a", 0.6, 300 * MIB, 200.0),),  # b missing from this one
    ]
    a, b = summarise(scrapes)
    assert a == GpuFigures("a", pytest.approx(0.4), 300.0, 150.0)
    assert b == GpuFigures("b", 0.0, 10.0, 50.0)
    assert summarise([(), ()]) == ()


def test_peak_memory_is_the_fullest_gpu() -> None:
    figures = (GpuFigures("a", 0.5, 1200.0, 100.0), GpuFigures("b", 0.5, 4000.0, 100.0))
    assert peak_memory_mb(figures) == 4000.0
    assert peak_memory_mb(()) == 0.0


def test_figures_round_trip_through_a_dict() -> None:
    figures = GpuFigures(GPU0, 0.63, 2048.0, 212.5)
    assert GpuFigures.from_dict(figures.to_dict()) == figures


@pytest.mark.parametrize(
    ("metrics_gpus", "launcher", "local_gpus", "kind"),
    [
        (2, "remote", 0, "metrics"),  # the server's own metrics win, whatever the launcher
        (1, "local", 4, "metrics"),
        (1, "docker", 0, "metrics"),
        (0, "local", 1, "nvml"),  # a local server whose metrics lack GPU lines: this machine's driver
        (0, "local", 0, "none"),  # a CPU-only machine: no sampling at all
        (0, "docker", 2, "none"),  # never this machine's GPUs for a container or a remote server
        (0, "remote", 2, "none"),
    ],
)
def test_the_probe_a_run_samples_with(metrics_gpus: int, launcher: str, local_gpus: int, kind: str) -> None:
    assert probe_kind(metrics_gpus, launcher, local_gpus) == kind
