"""The probes that sample a server's GPUs (:class:`autotune.gpu.GpuProbe`), and the run's choice of one.

:class:`MetricsProbe` reads the server's Prometheus ``/metrics`` (any launcher: the figures are
those of the machine the server runs on); :class:`NvmlProbe` reads this machine's driver through
pynvml, for a local server whose metrics lack GPU lines. :func:`choose_probe` asks once per run,
on its first server, and :func:`autotune.gpu.probe_kind` decides. A probe never raises: a
scrape that fails (refused, timed out, unreadable) is no sample, never a failed point.

The metrics are a plain HTTP GET (the standard library's, with no proxy: the load itself goes
straight to the server too); tritonclient has no call for them.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.client import HTTPException
from types import ModuleType

from autotune.gpu import GpuProbe, GpuSample, parse_metrics, probe_kind

SCRAPE_TIMEOUT_S = 1.0  # a window is 0.5-1 s: a slow scrape only delays the next window's start
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str | None:
    """The text at ``url``; None when it cannot be had (refused, timed out, an HTTP error)."""
    try:
        with _DIRECT.open(url, timeout=timeout_s) as response:
            return str(response.read().decode("utf-8", "replace"))
    except (OSError, HTTPException, ValueError):  # URLError and timeouts are OSErrors; a bad URL, ValueError
        return None


def scraped_gpus(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> tuple[GpuSample, ...] | None:
    """The GPUs the metrics at ``url`` report (``()``: none, or text that is not Prometheus'),
    or None when the endpoint does not answer."""
    text = scrape(url, timeout_s)
    if text is None:
        return None
    try:
        return parse_metrics(text)
    except ValueError:  # prometheus-client's parser on a malformed line
        return ()


@dataclass(frozen=True)
class MetricsProbe:
    """The GPUs of the server's ``/metrics`` at ``url``. Triton refreshes them every
    ``--metrics-interval-ms`` (our launchers: 500 ms; a remote server's own setting, 2 s by
    default, so short windows there may see the same figures twice)."""

    url: str
    timeout_s: float = SCRAPE_TIMEOUT_S

    def sample(self) -> tuple[GpuSample, ...]:
        return scraped_gpus(self.url, self.timeout_s) or ()


@dataclass(frozen=True)
class NvmlProbe:
    """Every GPU of this machine, through pynvml (all of them: NVML does not follow
    CUDA_VISIBLE_DEVICES). Only for a server that runs here."""

    def sample(self) -> tuple[GpuSample, ...]:
        with _nvml() as nvml:
            if nvml is None:
                return ()
            try:
                count = int(nvml.nvmlDeviceGetCount())
                return tuple(_device_sample(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count))
            except nvml.NVMLError:
                return ()


def local_gpu_count() -> int:
    """GPUs of this machine (pynvml); 0 when the driver or pynvml is absent. Only for a server
    that runs here (the local launcher), never for a container engine or a remote server."""
    with _nvml() as nvml:
        if nvml is None:
            return 0
        try:
            return int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError:
            return 0


def choose_probe(metrics_url: str, launcher: str) -> GpuProbe | None:
    """The probe for a run's servers, asked of its first one (:func:`autotune.gpu.probe_kind`
    decides); None: the run samples no GPUs."""
    found = scraped_gpus(metrics_url) if metrics_url else None
    local = local_gpu_count() if launcher == "local" else 0
    kind = probe_kind(len(found or ()), launcher, local)
    if kind == "metrics":
        return MetricsProbe(metrics_url)
    return NvmlProbe() if kind == "nvml" else None


def at_server(probe: GpuProbe | None, metrics_url: str) -> GpuProbe | None:
    """``probe`` for another server of the same run: a metrics probe reads that server's own
    ``/metrics`` (each server a run starts has its metrics on a port of its own)."""
    if isinstance(probe, MetricsProbe) and metrics_url:
        return replace(probe, url=metrics_url)
    return probe


@contextmanager
def _nvml() -> Iterator[ModuleType | None]:
    """pynvml, initialised for the block and shut down after it; None without pynvml or a driver."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        yield None
        return
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _device_sample(nvml: ModuleType, handle: object) -> GpuSample:
    uuid = nvml.nvmlDeviceGetUUID(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    try:
        utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
    except nvml.NVMLError:  # not supported (e.g. a MIG device)
        utilization = 0.0
    try:
        power_w = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
    except nvml.NVMLError:
        power_w = 0.0
    return GpuSample(
        uuid if isinstance(uuid, str) else uuid.decode(), utilization, float(memory.used), power_w
    )
