"""Open-loop send schedules: when each request is due, as nanosecond offsets from the start.

``constant`` spaces requests exactly 1/rate apart; ``poisson`` draws exponential gaps
(mean 1/rate) from a seeded generator, so a run can be repeated request for request, and
scales each block of :data:`BLOCK` gaps to exactly its mean length (see there).
Offsets are made in numpy chunks, so the per-request cost is one list step.

A rate shared by W worker processes gives each a schedule of rate/W: constant schedules
are interleaved by a phase of ``worker/rate`` (together: exactly 1/rate apart); Poisson
schedules use independent seeds (the sum of independent Poisson processes is a Poisson
process of the summed rate).

``Schedule.replay`` loops a recorded pattern instead (perf_analyzer's ``--request-intervals``:
one gap in microseconds per line): the first request is due at 0, each next one its gap
later; its rate is the pattern's mean. W workers take every W-th request of that one
sequence, so together they send the pattern exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from autotune.errors import UsageError

DISTRIBUTIONS = ("constant", "poisson")
CHUNK = 4096
# Poisson arrivals come in blocks of this many, each exactly BLOCK / rate seconds long: within a
# block the arrival times are those of a Poisson process given its count (uniform, in order),
# so a measured window has Poisson's bursts at the rate asked. Unconditioned, one seed's
# first seconds can run 10% light, and every point measured with that seed with them.
BLOCK = 64


@dataclass(frozen=True)
class Schedule:
    rate: float  # requests per second
    distribution: str = "constant"
    seed: int = 0
    worker: int = 0  # this share's index, for the phase (constant) or the seed (poisson)
    workers: int = 1
    intervals_us: tuple[int, ...] = ()  # distribution "intervals": the gaps replayed, looped

    def __post_init__(self) -> None:
        if self.distribution == "intervals":
            if not self.intervals_us or min(self.intervals_us) < 0 or sum(self.intervals_us) <= 0:
                raise UsageError("request intervals must be >= 0 microseconds, not all 0")
        elif self.distribution not in DISTRIBUTIONS:
            known = ", ".join(DISTRIBUTIONS)
            raise UsageError(f"distribution must be one of {known}, got {self.distribution!r}")
        if not self.rate > 0:
            raise UsageError(f"request rate must be > 0, got {self.rate}")

    @classmethod
    def replay(cls, intervals_us: Sequence[int], rate: float | None = None) -> Schedule:
        """A recorded pattern of gaps (microseconds), looped; at its own mean rate, or scaled
        to ``rate`` (every gap times the pattern's rate over ``rate``: the same shape, faster
        or slower)."""
        gaps = tuple(int(g) for g in intervals_us)
        return cls(pattern_rate(gaps) if rate is None else rate, "intervals", intervals_us=gaps)

    def share(self, worker: int, workers: int) -> Schedule:
        """This schedule's part for one of ``workers`` processes."""
        return replace(self, worker=worker, workers=workers)

    @property
    def share_rate(self) -> float:
        return self.rate / self.workers

    def offsets(self) -> Iterator[int]:
        """Due times in ns from the start, forever, increasing."""
        for chunk in self.chunks():
            yield from chunk.tolist()

    def chunks(self) -> Iterator[NDArray[np.int64]]:
        if self.distribution == "intervals":
            yield from self._replayed()
            return
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
            blocks = rng.exponential(1.0, (CHUNK // BLOCK, BLOCK))
            blocks *= gap * BLOCK / blocks.sum(axis=1, keepdims=True)  # each block: exactly BLOCK gaps long
            times = base + np.cumsum(blocks.ravel())
            base = float(times[-1])
            yield times.astype(np.int64)

    def _replayed(self) -> Iterator[NDArray[np.int64]]:
        scale = pattern_rate(self.intervals_us) / self.rate  # 1.0 at the pattern's own rate
        gaps = np.asarray(self.intervals_us, dtype=np.float64) * (1000 * scale)
        size = CHUNK * self.workers  # a multiple of workers: every chunk starts at a request of worker 0
        at, due = 0, 0.0  # the next request of the whole sequence, and when it is due (ns)
        while True:
            steps = gaps[(at + np.arange(size)) % len(gaps)]
            times = due + np.concatenate(([0.0], np.cumsum(steps[:-1])))
            due = float(times[-1] + steps[-1])
            at += size
            yield times[self.worker :: self.workers].astype(np.int64)


def pattern_rate(intervals_us: Sequence[int]) -> float:
    """A pattern's own rate: requests per second at its mean gap (0.0 for no gaps)."""
    total = sum(intervals_us)
    return 1e6 * len(intervals_us) / total if intervals_us and total > 0 else 0.0


def read_intervals(path: Path) -> tuple[int, ...]:
    """perf_analyzer's ``--request-intervals`` file: one gap in microseconds per line
    (blank lines skipped). A UsageError naming the line on anything else."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--request-intervals: cannot read {path}: {exc}") from exc
    gaps = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            gap = int(line.strip())
        except ValueError:
            gap = -1
        if gap < 0:
            raise UsageError(
                f"--request-intervals {path}, line {number}: {line.strip()[:40]!r} is not a whole number "
                "of microseconds >= 0"
            )
        gaps.append(gap)
    if not gaps or sum(gaps) <= 0:
        raise UsageError(
            f"--request-intervals {path}: no intervals (one gap in microseconds per line, not all 0)"
        )
    return tuple(gaps)
