"""Open-loop send schedules: when each request is due, as nanosecond offsets from the start.

``constant`` spaces requests exactly 1/rate apart; ``poisson`` draws exponential gaps
(mean 1/rate) from a seeded generator, so a run can be repeated request for request.
Offsets are made in numpy chunks, so the per-request cost is one list step.

A rate shared by W worker processes gives each a schedule of rate/W: constant schedules
are interleaved by a phase of ``worker/rate`` (together: exactly 1/rate apart); Poisson
schedules use independent seeds (the sum of independent Poisson processes is a Poisson
process of the summed rate).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from autotune.errors import UsageError

DISTRIBUTIONS = ("constant", "poisson")
CHUNK = 4096


@dataclass(frozen=True)
class Schedule:
    rate: float  # requests per second
    distribution: str = "constant"
    seed: int = 0
    worker: int = 0  # this share's index, for the phase (constant) or the seed (poisson)
    workers: int = 1

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            known = ", ".join(DISTRIBUTIONS)
            raise UsageError(f"distribution must be one of {known}, got {self.distribution!r}")
        if not self.rate > 0:
            raise UsageError(f"request rate must be > 0, got {self.rate}")

    def share(self, worker: int, workers: int) -> Schedule:
        """This schedule's part for one of ``workers`` processes."""
        return Schedule(self.rate, self.distribution, self.seed, worker, workers)

    @property
    def share_rate(self) -> float:
        return self.rate / self.workers

    def offsets(self) -> Iterator[int]:
        """Due times in ns from the start, forever, increasing."""
        for chunk in self.chunks():
            yield from chunk.tolist()

    def chunks(self) -> Iterator[NDArray[np.int64]]:
        gap = 1e9 / self.share_rate
        if self.distribution == "constant":
            phase = self.worker * 1e9 / self.rate
            start = 0
            while True:
                yield (phase + gap * np.arange(start, start + CHUNK)).astype(np.int64)
                start += CHUNK
        rng = np.random.default_rng([self.seed, self.worker])
        base = 0.0
        while True:
            times = base + np.cumsum(rng.exponential(gap, CHUNK))
            base = float(times[-1])
            yield times.astype(np.int64)
