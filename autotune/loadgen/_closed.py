"""Kept for imports of ``autotune.loadgen._closed.WindowPlan`` (settings, tuner, cli).

New code imports ``WindowPlan`` from :mod:`autotune.loadgen`; the closed loop itself lives
in :mod:`._load` and the windows in :mod:`._windows`.
"""

from __future__ import annotations

from autotune.loadgen._windows import WindowPlan

__all__ = ["WindowPlan"]
