"""The SLA constraint and the scores a study optimises (pure).

A latency SLA is a percentile (50, 90, 95 or 99) and a limit in milliseconds. A candidate
is feasible when its best operating point meets the SLA; its scores are the goodput (the
highest throughput that meets the SLA) and that point's latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.errors import UsageError

if TYPE_CHECKING:
    from autotune.measure import Point

PERCENTILES = (50, 90, 95, 99)
ABSURD_MS = 3_600_000.0  # an hour: a latency SLA beyond it is a typo


@dataclass(frozen=True)
class Sla:
    percentile: int
    limit_ms: float

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise UsageError(f"SLA percentile must be one of {PERCENTILES}, got {self.percentile}")
        if not self.limit_ms > 0:
            raise UsageError(f"SLA must be > 0 ms, got {self.limit_ms:g}")
        if self.limit_ms > ABSURD_MS:
            raise UsageError(f"SLA of {self.limit_ms:g} ms is over an hour; is the unit right?")

    @property
    def label(self) -> str:
        return f"p{self.percentile} <= {self.limit_ms:g} ms"

    def met_by(self, point: Point) -> bool:
        """No errors, a trusted point (:attr:`Point.trusted`), its latency within the limit."""
        return point.errors == 0 and point.trusted and point.latency_ms(self.percentile) <= self.limit_ms

    def violation(self, point: Point) -> float:
        """Optuna constraint value: <= 0 when met, else how far over the limit (ms)."""
        over = point.latency_ms(self.percentile) - self.limit_ms
        return over if point.errors == 0 and point.trusted else max(over, 0.0) + self.limit_ms


def scores(point: Point, sla: Sla) -> tuple[float, float]:
    """The study's objectives: (throughput up, latency at the SLA percentile down)."""
    return point.throughput, point.latency_ms(sla.percentile)
