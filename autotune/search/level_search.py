"""A config's goodput. :func:`search_levels` searches levels for the highest throughput that meets
the SLA. A closed loop moves by clients (:class:`Clients`). An open loop moves by rates
(:class:`Rates`). :func:`best_point` picks the operating point. :func:`search_plan` and
:func:`judged_at` say how the points are measured."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from autotune.objective import RAW, Scoring, Sla
from autotune.points import Measurement, Point, WindowPlan
from autotune.results import TrialResult
from autotune.search.noise import RATE_HEADROOM, RATE_RESOLUTION, Estimate, Noise, better
from autotune.search.ranking import best_trial, trial_estimate
from autotune.search_space import Candidate

L = TypeVar("L", int, float)  # a level: clients or a request rate


def noise_of(points: Iterable[Point]) -> Noise:
    """The noise of window throughputs, pooled over ``points`` (:class:`autotune.search.noise.Noise`)."""
    return Noise.pooled(p.window_throughputs for p in points)


def search_plan(sla: Sla, window_s: float) -> WindowPlan:
    """A plan of ``window_s`` windows after a warm-up of one window. It watches the latency at
    the SLA's percentile. It has no limit yet. :func:`judged_at` sets one."""
    return WindowPlan(window_s=window_s, warmup_s=window_s, percentile=sla.percentile)


def judged_at(
    plan: WindowPlan, limit_ms: float, before: Sequence[Point] = (), noise: Noise | None = None
) -> WindowPlan:
    """``plan`` with the limit ``limit_ms``. A point's windows then go on until their latency's
    interval lies on one side of the limit. The interval pools the windows of ``before``, a race's
    rounds at this level, where they were recorded at the plan's percentile. ``noise`` is the run's
    window latency spread (:func:`latency_noise`), which the warm-up test reads. Without it, the
    plan keeps its own."""
    judged = [p for p in before if p.window_percentile == plan.percentile]
    pooled = tuple(w for p in judged for w in p.window_latencies_ms)
    figures = tuple(p.latency_ms(plan.percentile) for p in judged)
    return replace(
        plan, limit_ms=limit_ms, before_ms=pooled, before_figures_ms=figures,
        latency_noise=noise or plan.latency_noise,
    )  # fmt: skip


def latency_noise(points: Iterable[Point], percentile: int) -> Noise:
    """How far a window's latency at ``percentile`` reads off its point's, as a relative sd pooled
    over ``points``, the run's points. :func:`autotune.search.sampling.warm_windows` tests a
    point's first window against this spread. It has more degrees of freedom than one point's
    windows have."""
    return Noise.pooled(p.window_latencies_ms for p in points if p.window_percentile == percentile)


def measured_points(results: Iterable[TrialResult]) -> list[Point]:
    """Every point the trials measured. A reused trial's points are its source's, so they are not
    counted twice."""
    return [
        p
        for r in results
        if r.measurement is not None and r.reused_from is None
        for p in r.measurement.points
    ]


def cannot_win(point: Point, beat: Estimate | None, noise: Noise) -> bool:
    """Whether ``beat``, the best trial's throughput, is better than ``point``'s across servers.
    False when ``beat`` is None."""
    return beat is not None and better(beat, point.throughput_estimate(noise).across_servers())


def grew(point: Point, before: Point, noise: Noise) -> bool:
    """Whether ``point``'s throughput is better than ``before``'s, both on the same server."""
    return better(point.throughput_estimate(noise), before.throughput_estimate(noise))


class Levels(Protocol[L]):
    """How a goodput search moves between levels. The levels are a closed loop's clients
    (:class:`Clients`) or an open loop's rates (:class:`Rates`). :func:`search_levels` is the one
    search over either."""

    @property
    def low(self) -> L: ...

    @property
    def high(self) -> L: ...

    def first(self, start: L | None) -> L:
        """The level the search starts at: ``start`` held within the bounds. Without ``start``,
        the lowest level."""
        ...

    def up(self, good: L, at: Callable[[L], Point], sla: Sla) -> L | None:
        """The next level above ``good``, the last level that met the SLA. None when there is no
        level above it."""
        ...

    def down(self, bad: L) -> L | None:
        """The next level below ``bad``, the first level that broke the SLA. None when there is
        no level below it."""
        ...

    def flat(self, above: Point, below: Point, noise: Noise, beat: Estimate | None) -> bool:
        """Whether ``above`` serves no more than ``below``, so that no level above ``below`` (going
        up) or between them (bisecting) is worth trying. Where ``above`` could lead (its mean above
        ``beat``'s, the best trial's; or no trial to beat), the means decide; else a growth not
        shown (:func:`grew`)."""
        ...

    def apart(self, good: L, bad: L) -> bool:
        """Whether a level between ``good`` and ``bad`` is still worth trying."""
        ...

    def middle(self, good: L, bad: L) -> L | None:
        """The level that bisects ``good`` and ``bad``. None when no level lies between them."""
        ...


@dataclass(frozen=True)
class Clients:
    """A closed loop's levels, in whole clients. They are doubled and halved, and bisected down
    to one client. A level serves no more than the one below (:meth:`flat`) when its growth is
    not shown (:func:`grew`); for a config that could lead, when its mean is not higher."""

    low: int = 1
    high: int = 32

    def first(self, start: int | None) -> int:
        return min(max(start if start is not None else self.low, self.low), self.high)

    def up(self, good: int, at: Callable[[int], Point], sla: Sla) -> int | None:
        return min(good * 2, self.high)

    def down(self, bad: int) -> int | None:
        return max(self.low, bad // 2)

    def flat(self, above: Point, below: Point, noise: Noise, beat: Estimate | None) -> bool:
        if beat is None or above.throughput > beat.mean:  # where the answer may lie: a level is cheap
            return above.throughput <= below.throughput
        return not grew(above, below, noise)

    def apart(self, good: int, bad: int) -> bool:
        return bad - good > 1

    def middle(self, good: int, bad: int) -> int | None:
        return (good + bad) // 2


@dataclass(frozen=True)
class Rates:
    """An open loop's levels, as rates of three significant digits. A rate doubles while its
    latency is under :data:`RATE_HEADROOM` of the limit, and grows by two ``resolution`` above
    that. Going down, it halves. Bisection is geometric, down to within ``resolution``. Arrivals
    do not saturate, so only the latency decides."""

    low: float
    high: float
    resolution: float = RATE_RESOLUTION

    def first(self, start: float | None) -> float:
        return nice_rate(min(max(start if start is not None else self.low, self.low), self.high))

    def up(self, good: float, at: Callable[[float], Point], sla: Sla) -> float | None:
        far = at(good).latency_ms(sla.percentile) < RATE_HEADROOM * sla.limit_ms
        rate = nice_rate(min(good * (2.0 if far else 1 + 2 * self.resolution), self.high))
        return rate if rate > good else None

    def down(self, bad: float) -> float | None:
        rate = nice_rate(max(bad / 2, self.low))
        return rate if rate < bad else None

    def flat(self, above: Point, below: Point, noise: Noise, beat: Estimate | None) -> bool:
        return False

    def apart(self, good: float, bad: float) -> bool:
        return bad > good * (1 + self.resolution)

    def middle(self, good: float, bad: float) -> float | None:
        mid = nice_rate((good * bad) ** 0.5)
        return mid if good < mid < bad else None


def search_levels(
    measure_at: Callable[[L], Point], sla: Sla, levels: Levels[L], start: L | None = None,
    beat: Estimate | None = None,
) -> Measurement:  # fmt: skip
    """A config's goodput search from ``start``. It goes up while the SLA holds and each level
    serves more than the one below (:meth:`Levels.flat`), and down while the SLA breaks. Then it
    bisects between the last level that met the SLA and the first that broke it, while they are
    apart and the broken level serves more. The search is pruned when a broken level
    :func:`cannot_win` against ``beat``. Each level is measured once. The best point is
    :func:`best_point`'s."""
    points: dict[L, Point] = {}
    at = _once(measure_at, points)
    first = levels.first(start)
    good, bad = (first, None) if sla.met_by(at(first)) else (None, first)
    while good is not None and bad is None and good < levels.high:  # up
        level = levels.up(good, at, sla)
        if level is None:
            break
        if not sla.met_by(at(level)):
            bad = level
        elif levels.flat(at(level), at(good), noise_of(points.values()), beat):
            good = level if at(level).throughput > at(good).throughput else good
            break
        else:
            good = level
    pruned = False
    while bad is not None and good is None and bad > levels.low:  # down
        if pruned := cannot_win(at(bad), beat, noise_of(points.values())):
            break
        level = levels.down(bad)
        if level is None:
            break
        good, bad = (level, bad) if sla.met_by(at(level)) else (None, level)
    while good is not None and bad is not None and levels.apart(good, bad):  # bisect
        noise = noise_of(points.values())
        if (pruned := cannot_win(at(bad), beat, noise)) or levels.flat(at(bad), at(good), noise, beat):
            break
        level = levels.middle(good, bad)
        if level is None:
            break
        good, bad = (level, bad) if sla.met_by(at(level)) else (good, level)
    ordered = tuple(points[level] for level in sorted(points))
    return Measurement(points=ordered, best=best_point(ordered, sla), pruned=pruned)


def find_goodput(
    measure_at: Callable[[int], Point], sla: Sla, low: int = 1, high: int = 32, *,
    start: int | None = None, beat: Estimate | None = None,
) -> Measurement:  # fmt: skip
    """A closed loop's goodput search (:func:`search_levels` over :class:`Clients`)."""
    return search_levels(measure_at, sla, Clients(low, high), start, beat)


def find_rate_goodput(
    measure_at: Callable[[float], Point], sla: Sla, low: float, high: float, *,
    start: float, beat: Estimate | None = None, resolution: float = RATE_RESOLUTION,
) -> Measurement:  # fmt: skip
    """An open loop's goodput search (:func:`search_levels` over :class:`Rates`)."""
    return search_levels(measure_at, sla, Rates(low, high, resolution), start, beat)


def _once(measure_at: Callable[[L], Point], points: dict[L, Point]) -> Callable[[L], Point]:
    """``measure_at``, but each level is measured once and kept in ``points``."""
    return lambda level: points[level] if level in points else points.setdefault(level, measure_at(level))


def nice_rate(rate: float) -> float:
    """A rate of three significant digits, as an open loop's levels are."""
    return float(f"{rate:.3g}")


def best_point(points: Sequence[Point], sla: Sla) -> Point | None:
    """The operating point, or None when no point meets the SLA. Of the points that meet the
    SLA, it keeps those that the one with the most throughput is not
    :func:`autotune.search.noise.better` than. It returns the one of these at the highest level."""
    feasible = [p for p in points if sla.met_by(p)]
    if not feasible:
        return None
    top = max(feasible, key=lambda p: p.throughput)
    noise = noise_of(points)
    tied = [p for p in feasible if not better(top.throughput_estimate(noise), p.throughput_estimate(noise))]
    return max(tied, key=lambda p: p.level)


def incumbent(
    results: Sequence[TrialResult], scoring: Scoring = RAW, candidate: Candidate | None = None
) -> Estimate | None:
    """What ``candidate``'s search must beat: the :func:`trial_estimate` of :func:`best_trial`,
    in the candidate's own throughput. Per GPU, it is multiplied by the candidate's GPUs. None
    when no trial has met the SLA yet."""
    best = best_trial(results, scoring)
    found = None if best is None else trial_estimate(best, scoring)
    return None if found is None else found.scaled(scoring.share(candidate))
