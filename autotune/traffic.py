"""How candidates are loaded and searched: a closed loop (concurrency) or an open loop (a rate).

:class:`Loader` binds a run's :class:`~autotune.settings.Traffic` (and its recorded arrival
pattern, read once) to the load generator: one point at a level, a candidate's goodput search,
and the open-loop check of a concurrency run's winner.
A level is a concurrency (closed loop) or a request rate in requests per second (open loop);
:attr:`autotune.points.Point.level` reads it back from a point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.loadgen import read_intervals
from autotune.objective import Sla
from autotune.points import Measurement, Point
from autotune.search.level_search import find_goodput, find_rate_goodput, nice_rate
from autotune.search.noise import Estimate, breaks, meets
from autotune.search_space import SearchSpace
from autotune.serving import Load
from autotune.settings import Traffic

# The open-loop check of a concurrency run's winner goes down to this fraction of the rate its
# closed loop was credited with, to this resolution: a few points, not a second search (it
# informs, it does not choose; 0.25 takes a point fewer than 0.15 on bertQA: 5 instead of 6).
CHECK_FLOOR = 0.125
CHECK_RESOLUTION = 0.25
CHECK_DISTRIBUTION = "poisson"  # arrivals as independent users send them
CHECK_POINTS = 1 + round(
    math.log2(1 / CHECK_FLOOR)
)  # its rates at most: the credited one, halved to the floor


@dataclass(frozen=True)
class Loader:
    traffic: Traffic
    intervals: tuple[int, ...] = ()  # the recorded gaps (microseconds), for distribution "intervals"

    @classmethod
    def read(cls, traffic: Traffic) -> Loader:
        """The traffic with its arrival pattern read and checked (a UsageError naming the line)."""
        return cls(traffic, read_intervals(Path(traffic.intervals)) if traffic.intervals else ())

    @property
    def open_loop(self) -> bool:
        return self.traffic.open_loop

    def point(self, gen: Load, level: float) -> Point:
        """One point at ``level``: a concurrency, or a rate with the run's arrivals."""
        if not self.open_loop:
            return gen.at_concurrency(int(level))
        if self.intervals:
            return gen.at_intervals(self.intervals, level)
        return gen.at_rate(level, self.traffic.distribution)

    def search(
        self,
        at: Callable[[float], Point],
        sla: Sla,
        space: SearchSpace,
        start: float | None,
        beat: Estimate | None,
        first_guess: Callable[[], float],
    ) -> Measurement:
        """The candidate's goodput search (:func:`autotune.search.level_search.find_goodput`, or in
        an open loop :func:`autotune.search.level_search.find_rate_goodput`) from ``start`` (the best
        candidate's level; None
        for the first candidate: a closed loop starts at the lowest concurrency, an open loop at
        ``first_guess()``, the rate one client alone gets answered at); ``beat``: the best
        trial's throughput so far, across servers."""
        if not self.open_loop:
            first = None if start is None else int(start)
            lo, hi = space.concurrency_min, space.concurrency_max
            return find_goodput(lambda c: at(float(c)), sla, lo, hi, start=first, beat=beat)
        rate = first_guess() if start is None else start
        return find_rate_goodput(at, sla, space.rate_min, space.rate_max, start=rate, beat=beat)


def check_sustained(at: Callable[[float], Point], sla: Sla, credited_rate: float) -> float:
    """A concurrency run's winner in an open loop: its credited rate first; if that breaks the
    SLA, lower rates down to :data:`CHECK_FLOOR` of it (few points: :data:`CHECK_RESOLUTION`).
    It stops at the first rate left undecided (:func:`at_the_limit`): the limit lies there to
    within what the windows resolve. Returns that rate, 0.0 where every rate was settled."""

    def judged(rate: float) -> Point:
        point = at(rate)
        if at_the_limit(point, sla):
            raise _AtTheLimit(point.request_rate)
        return point

    try:
        low, resolution = credited_rate * CHECK_FLOOR, CHECK_RESOLUTION
        find_rate_goodput(judged, sla, low, credited_rate, start=credited_rate, resolution=resolution)
    except _AtTheLimit as stopped:
        return stopped.rate
    return 0.0


def check_rates(credited_rate: float) -> list[float]:
    """The rates :func:`check_sustained` bisects between, highest first (its rounding may move
    one in the third digit): the credited one times the bisection's step (the largest
    power-of-two root of 2 within :data:`CHECK_RESOLUTION`), down to :data:`CHECK_FLOOR` of it.
    Several workers measure the highest untried ones at once."""
    halvings = math.ceil(math.log2(1 / math.log2(1 + CHECK_RESOLUTION)))
    steps = round(math.log2(1 / CHECK_FLOOR) * 2**halvings)
    return [nice_rate(credited_rate * 2 ** (-k / 2**halvings)) for k in range(steps + 1)]


def sustained_of(points: Sequence[Point], sla: Sla) -> tuple[float, bool]:
    """What rates measured at once settle, read from the highest down: the first that meets the
    SLA, or the first left undecided (:func:`at_the_limit`), ends it. Returns that rate (0.0:
    none yet) and whether it was undecided."""
    for point in sorted(points, key=lambda p: -p.request_rate):
        if at_the_limit(point, sla):
            return point.request_rate, True
        if sla.met_by(point):
            return point.request_rate, False
    return 0.0, False


def at_the_limit(point: Point, sla: Sla) -> bool:
    """Admitted by the SLA, and its latency's interval still holds the limit after its windows:
    neither :func:`autotune.search.noise.meets` nor :func:`autotune.search.noise.breaks` it (undecided)."""
    latency = point.latency_estimate(sla.percentile)
    return sla.admits(point) and not meets(latency, sla.limit_ms) and not breaks(latency, sla.limit_ms)


class _AtTheLimit(Exception):
    """Ends the open-loop check at ``rate``, left undecided."""

    def __init__(self, rate: float) -> None:
        super().__init__(rate)
        self.rate = rate


def requests_per_s(point: Point) -> float:
    """The requests per second a point completed (its throughput counts inferences)."""
    return point.requests / point.duration_s if point.duration_s > 0 else 0.0
