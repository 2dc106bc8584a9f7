"""Triton's per-model statistics: snapshots and the per-request breakdown between two of them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autotune.points import ServerBreakdown

_PHASES = ("success", "queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class StatsSnapshot:
    totals: Mapping[str, tuple[int, int]]  # phase -> (count, ns)
    executions: int
    batches: Mapping[int, int]  # batch size -> executions
    steps: Mapping[str, StatsSnapshot] = field(default_factory=dict)  # an ensemble's steps, by name

    @classmethod
    def parse(
        cls,
        body: bytes | str | Mapping[str, Any],
        version: str = "",
        model: str = "",
        steps: tuple[str, ...] = (),
    ) -> StatsSnapshot:
        """The statistics of ``model`` (default: the first model's), and with them those of
        ``steps`` (the statistics of every model asked for: an ensemble and its steps)."""
        doc = json.loads(body) if isinstance(body, bytes | str) else body
        every = doc.get("model_stats", [])
        models = [m for m in every if m.get("name") == model] if model else every
        if version:
            models = [m for m in models if m.get("version") == version] or models
        if not models:
            return cls({}, 0, {})
        found = {m.get("name"): cls._of(m) for m in every if m.get("name") in steps}
        return replace(cls._of(models[0]), steps=found)

    @classmethod
    def _of(cls, stats: Mapping[str, Any]) -> StatsSnapshot:
        inference = stats.get("inference_stats", {})
        totals = {
            p: (int(inference.get(p, {}).get("count", 0)), int(inference.get(p, {}).get("ns", 0)))
            for p in _PHASES
        }
        batches = {
            int(b["batch_size"]): int(b.get("compute_infer", {}).get("count", 0))
            for b in stats.get("batch_stats", [])
        }
        return cls(totals, int(stats.get("execution_count", 0)), batches)


def breakdown(before: StatsSnapshot, after: StatsSnapshot) -> ServerBreakdown:
    """Average microseconds per request in each phase, and executions per batch size."""

    def per_request(phase: str) -> float:
        count = after.totals.get(phase, (0, 0))[0] - before.totals.get(phase, (0, 0))[0]
        ns = after.totals.get(phase, (0, 0))[1] - before.totals.get(phase, (0, 0))[1]
        return ns / count / 1000.0 if count > 0 else 0.0

    batches = {b: n - before.batches.get(b, 0) for b, n in after.batches.items()}
    empty = StatsSnapshot({}, 0, {})
    return ServerBreakdown(
        steps={name: breakdown(before.steps.get(name, empty), step) for name, step in after.steps.items()},
        queue_us=per_request("queue"),
        compute_input_us=per_request("compute_input"),
        compute_infer_us=per_request("compute_infer"),
        compute_output_us=per_request("compute_output"),
        requests=after.totals.get("success", (0, 0))[0] - before.totals.get("success", (0, 0))[0],
        executions=after.executions - before.executions,
        batch_sizes={b: n for b, n in sorted(batches.items()) if n > 0},
    )
