"""Whether this machine has NVIDIA GPUs (pynvml); False when the driver is absent."""

from __future__ import annotations


def gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # pynvml raises NVMLError subclasses, or ImportError without it
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def gpu_available() -> bool:
    return gpu_count() > 0
