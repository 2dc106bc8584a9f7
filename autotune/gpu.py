"""GPU figures of the server side: which GPUs it has, and what each did during a measured point.

The server's own Prometheus endpoint is the source (``/metrics``: ``nv_gpu_utilization`` 0-1,
``nv_gpu_memory_used_bytes``, ``nv_gpu_power_usage`` in watts, one sample per GPU labelled
``gpu_uuid``); it works alike for a local process, a container and a remote server, and it
answers for the machine the server runs on, not the one autotune runs on. pynvml is the
fallback for a local server whose metrics lack them (:func:`probe_kind` decides once per run).

A point's figures are summarised from samples taken at its windows' ends
(:func:`summarise`): utilisation and power averaged, memory the maximum. A server without GPU
figures gets no sampling at all, so a CPU-only run costs nothing extra.

This module is values and the pure rules over them; the probes that read a server's metrics
or the local driver are in :mod:`autotune.gpu_probe`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

from prometheus_client.parser import text_string_to_metric_families

UTILIZATION = "nv_gpu_utilization"
MEMORY_USED = "nv_gpu_memory_used_bytes"
POWER = "nv_gpu_power_usage"
MIB = 1024 * 1024
ProbeKind = Literal["metrics", "nvml", "none"]


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment, as the server's metrics tell it."""

    uuid: str
    utilization: float  # 0..1
    memory_used_bytes: float
    power_w: float


@dataclass(frozen=True)
class GpuFigures:
    """One GPU over a measured point: average utilisation and power, maximum memory used."""

    uuid: str
    utilization: float  # average, 0..1
    memory_mb: float  # maximum, MiB
    power_w: float  # average, watts

    def to_dict(self) -> dict[str, float | str]:
        return {"uuid": self.uuid, "utilization": self.utilization, "memory_mb": self.memory_mb,
                "power_w": self.power_w}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, float | str]) -> GpuFigures:
        figures = (float(data[name]) for name in ("utilization", "memory_mb", "power_w"))
        return cls(str(data["uuid"]), *figures)


class GpuProbe(Protocol):
    """Samples the server's GPUs at one moment; blocking (the load generator calls it off its
    event loop). It never raises: a sample that cannot be had is ``()``."""

    def sample(self) -> tuple[GpuSample, ...]: ...


_PerGpu = TypeVar("_PerGpu", GpuSample, GpuFigures)  # a figure of one GPU (its uuid)


def parse_metrics(text: str) -> tuple[GpuSample, ...]:
    """The GPUs a ``/metrics`` text reports, in the order they first appear (none: no GPU figures)."""
    values: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in (UTILIZATION, MEMORY_USED, POWER):
            continue
        for sample in family.samples:
            uuid = sample.labels.get("gpu_uuid")
            if uuid is not None and sample.name == family.name:
                values.setdefault(uuid, {})[family.name] = float(sample.value)
    return tuple(
        GpuSample(uuid, v.get(UTILIZATION, 0.0), v.get(MEMORY_USED, 0.0), v.get(POWER, 0.0))
        for uuid, v in values.items()
    )


def summarise(samples: Sequence[Sequence[GpuSample]]) -> tuple[GpuFigures, ...]:
    """Per GPU over the samples taken during a point (each a scrape of every GPU)."""
    return tuple(
        GpuFigures(
            uuid,
            statistics.fmean(s.utilization for s in seen),
            max(s.memory_used_bytes for s in seen) / MIB,
            statistics.fmean(s.power_w for s in seen),
        )
        for uuid, seen in _by_gpu(samples).items()
    )


def peak_memory_mb(figures: Sequence[GpuFigures]) -> float:
    """The most memory any one GPU used (0 without GPUs)."""
    return max((f.memory_mb for f in figures), default=0.0)


def _by_gpu(groups: Sequence[Sequence[_PerGpu]]) -> dict[str, list[_PerGpu]]:
    """The items of several scrapes (or passes) gathered per GPU, in the order GPUs first appear."""
    out: dict[str, list[_PerGpu]] = {}
    for group in groups:
        for item in group:
            out.setdefault(item.uuid, []).append(item)
    return out


def probe_kind(metrics_gpus: int, launcher: str, local_gpus: int) -> ProbeKind:
    """How a run samples its servers' GPUs, decided on its first server: from the server's
    ``/metrics`` when they report GPUs (``metrics_gpus``); else, for a server that runs here
    (the local launcher), from pynvml when this machine has GPUs (``local_gpus``: a server
    whose metrics lack GPU lines, e.g. a build without them); else not at all."""
    if metrics_gpus > 0:
        return "metrics"
    if launcher == "local" and local_gpus > 0:
        return "nvml"
    return "none"
