"""autotune: find the best Triton Inference Server configuration under a latency SLA."""

from __future__ import annotations

__version__ = "0.1.0"
