"""The search's rules, each a verdict of :mod:`autotune.noise` on measured intervals: a
candidate's goodput search and operating point, how trials compare and rank, and the race of
the finalists on fresh servers."""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

from autotune.noise import Estimate, Noise, better, not_ahead
from autotune.objective import RAW, Scoring, Sla
from autotune.points import Measurement, Point, WindowPlan
from autotune.results import TrialResult, Verification
from autotune.search_space import Candidate

L = TypeVar("L", int, float)  # a level: clients or a request rate


def noise_of(points: Iterable[Point]) -> Noise:
    """The window noise of throughput pooled over ``points`` (:class:`autotune.noise.Noise`)."""
    return Noise.pooled(p.window_throughputs for p in points)


def search_plan(sla: Sla, window_s: float) -> WindowPlan:
    """Windows of ``window_s`` after a warm-up of one window, the latency watched at the SLA's
    percentile; no limit (:func:`judged_at` sets it)."""
    return WindowPlan(window_s=window_s, warmup_s=window_s, percentile=sla.percentile)


def judged_at(
    plan: WindowPlan, limit_ms: float, before: Sequence[Point] = (), noise: Noise | None = None
) -> WindowPlan:
    """``plan`` whose points' windows go on until their latency's interval, pooled with the
    windows of ``before`` (a race's rounds at the level), lies on one side of ``limit_ms``;
    ``noise``: the run's window latency spread (:func:`latency_noise`), which the warm-up test reads."""
    judged = [p for p in before if p.window_percentile == plan.percentile]
    pooled = tuple(w for p in judged for w in p.window_latencies_ms)
    figures = tuple(p.latency_ms(plan.percentile) for p in judged)
    return replace(
        plan, limit_ms=limit_ms, before_ms=pooled, before_figures_ms=figures,
        latency_noise=noise or plan.latency_noise,
    )  # fmt: skip


def latency_noise(points: Iterable[Point], percentile: int) -> Noise:
    """How far a window's latency at ``percentile`` reads off its point's (a relative sd), pooled
    over ``points`` (the run's): the spread :func:`autotune.points.warm_windows` tests a point's
    first window against, with more degrees of freedom than one point's windows have."""
    return Noise.pooled(p.window_latencies_ms for p in points if p.window_percentile == percentile)


def measured_points(results: Iterable[TrialResult]) -> list[Point]:
    """Every point the trials measured (a reused trial's are its source's: not counted twice)."""
    return [
        p
        for r in results
        if r.measurement is not None and r.reused_from is None
        for p in r.measurement.points
    ]


def cannot_win(point: Point, beat: Estimate | None, noise: Noise) -> bool:
    """Whether ``beat`` (the best trial's throughput) is better than ``point``'s across servers."""
    return beat is not None and better(beat, point.throughput_estimate(noise).across_servers())


def grew(point: Point, before: Point, noise: Noise) -> bool:
    """Whether ``point`` is better than ``before`` (same server)."""
    return better(point.throughput_estimate(noise), before.throughput_estimate(noise))


def find_goodput(
    measure_at: Callable[[int], Point], sla: Sla, low: int = 1, high: int = 32, *,
    start: int | None = None, beat: Estimate | None = None,
) -> Measurement:  # fmt: skip
    """A closed loop's goodput search from ``start`` (default ``low``): double the clients while
    the SLA holds and the throughput :func:`grew`, halve while it breaks, then bisect between the
    last level that met it and the first that broke it while the broken one grew over it; pruned
    when a broken level :func:`cannot_win` against ``beat``. Its best: :func:`best_point`."""
    points: dict[int, Point] = {}
    at = _once(measure_at, points)
    first = min(max(start if start is not None else low, low), high)
    good, bad = (first, None) if sla.met_by(at(first)) else (None, first)
    while good is not None and bad is None and good < high:  # grow
        c = min(good * 2, high)
        if not sla.met_by(at(c)):
            bad = c
        elif not grew(at(c), at(good), noise_of(points.values())):  # saturated
            good = c if at(c).throughput > at(good).throughput else good
            break
        else:
            good = c
    pruned = False
    while bad is not None and good is None and bad > low:  # descend
        if pruned := cannot_win(at(bad), beat, noise_of(points.values())):
            break
        c = max(low, bad // 2)
        good, bad = (c, bad) if sla.met_by(at(c)) else (None, c)
    while good is not None and bad is not None and bad - good > 1:  # bisect
        noise = noise_of(points.values())
        if (pruned := cannot_win(at(bad), beat, noise)) or not grew(at(bad), at(good), noise):
            break
        mid = (good + bad) // 2
        good, bad = (mid, bad) if sla.met_by(at(mid)) else (good, mid)
    ordered = tuple(points[c] for c in sorted(points))
    return Measurement(points=ordered, best=best_point(ordered, sla), pruned=pruned)


def _once(measure_at: Callable[[L], Point], points: dict[L, Point]) -> Callable[[L], Point]:
    """``measure_at`` that measures each level once, into ``points``."""
    return lambda level: points[level] if level in points else points.setdefault(level, measure_at(level))


RATE_RESOLUTION = 0.10  # an open loop's search stops once its last good rate is this close to its first bad
RATE_HEADROOM = 0.6  # under this fraction of the limit a rate doubles; above, it grows by 2 resolutions


def find_rate_goodput(
    measure_at: Callable[[float], Point], sla: Sla, low: float, high: float, *,
    start: float, beat: Estimate | None = None, resolution: float = RATE_RESOLUTION,
) -> Measurement:  # fmt: skip
    """An open loop's goodput search over rates (three significant digits) from ``start``: grow
    while the SLA holds (x2 under :data:`RATE_HEADROOM` of the limit, else by 2 ``resolution``),
    halve while it breaks, then bisect geometrically between the last rate that met it and the
    first that broke it to within ``resolution``; pruned as in :func:`find_goodput`."""
    points: dict[float, Point] = {}
    at = _once(measure_at, points)
    rate = _nice(min(max(start, low), high))
    good, bad = (rate, None) if sla.met_by(at(rate)) else (None, rate)
    while good is not None and bad is None and good < high:  # grow
        far = at(good).latency_ms(sla.percentile) < RATE_HEADROOM * sla.limit_ms
        rate = _nice(min(good * (2.0 if far else 1 + 2 * resolution), high))
        if rate <= good:
            break
        good, bad = (rate, None) if sla.met_by(at(rate)) else (good, rate)
    pruned = False
    while bad is not None and good is None and bad > low:  # descend
        if pruned := cannot_win(at(bad), beat, noise_of(points.values())):
            break
        rate = _nice(max(bad / 2, low))
        if rate >= bad:
            break
        good, bad = (rate, bad) if sla.met_by(at(rate)) else (None, rate)
    while good is not None and bad is not None and bad > good * (1 + resolution):  # bisect
        if pruned := cannot_win(at(bad), beat, noise_of(points.values())):
            break
        mid = _nice((good * bad) ** 0.5)
        if not good < mid < bad:
            break
        good, bad = (mid, bad) if sla.met_by(at(mid)) else (good, mid)
    ordered = tuple(points[r] for r in sorted(points))
    return Measurement(points=ordered, best=best_point(ordered, sla), pruned=pruned)


def _nice(rate: float) -> float:
    return float(f"{rate:.3g}")


def best_point(points: Sequence[Point], sla: Sla) -> Point | None:
    """The operating point: the highest level of the points that meet the SLA and are not worse
    (:func:`autotune.noise.better`) than the one of them with the most throughput."""
    feasible = [p for p in points if sla.met_by(p)]
    if not feasible:
        return None
    top = max(feasible, key=lambda p: p.throughput)
    noise = noise_of(points)
    tied = [p for p in feasible if not better(top.throughput_estimate(noise), p.throughput_estimate(noise))]
    return max(tied, key=lambda p: p.level)


def trial_estimate(result: TrialResult, scoring: Scoring = RAW) -> Estimate | None:
    """A trial's goodput as ``scoring`` counts it, with its error (the noise pooled over its
    search's points) across servers; None without an operating point."""
    return result.estimate(scoring.share(result.candidate))


def better_trial(a: TrialResult, b: TrialResult, scoring: Scoring = RAW) -> bool:
    """Whether ``a``'s :func:`trial_estimate` is better than ``b``'s (any is better than none)."""
    mine, theirs = trial_estimate(a, scoring), trial_estimate(b, scoring)
    return mine is not None and (theirs is None or better(mine, theirs))


def score(result: TrialResult, scoring: Scoring = RAW) -> float:
    """A trial's goodput figure as ``scoring`` counts it (per GPU used, where the run does)."""
    return scoring.score(result.goodput(), result.candidate)


def ranked(results: Sequence[TrialResult], scoring: Scoring = RAW) -> list[TrialResult]:
    """The measured (not reused) trials that met the SLA, by :func:`score`, best (then first) first."""
    feasible = (r for r in results if r.feasible and r.reused_from is None)
    return sorted(feasible, key=lambda r: score(r, scoring), reverse=True)


def best_trial(results: Sequence[TrialResult], scoring: Scoring = RAW) -> TrialResult | None:
    """The first of :func:`ranked`; None before any trial met the SLA."""
    return next(iter(ranked(results, scoring)), None)


def incumbent(
    results: Sequence[TrialResult], scoring: Scoring = RAW, candidate: Candidate | None = None
) -> Estimate | None:
    """What ``candidate``'s search must beat: :func:`best_trial`'s :func:`trial_estimate` in the
    candidate's own throughput (per GPU: times its GPUs); None before any trial met the SLA."""
    best = best_trial(results, scoring)
    found = None if best is None else trial_estimate(best, scoring)
    return None if found is None else found.scaled(scoring.share(candidate))


def finalists(results: Sequence[TrialResult], count: int, scoring: Scoring = RAW) -> list[TrialResult]:
    """The first ``count`` :func:`ranked` trials the first one is not :func:`better_trial` than."""
    top = ranked(results, scoring)
    return [r for r in top if not better_trial(top[0], r, scoring)][:count]


Carry = Callable[[Point], float]


def to_limit(result: TrialResult, limit_ms: float, percentile: int) -> Carry:
    """A closed loop's race figure for a round: its throughput carried to the level where its
    latency would reach ``limit_ms``, along the least-squares slopes of log latency and log
    throughput over the levels its own search measured within a doubling of the operating
    point on the side the round is carried to (:func:`_side`), no further than those levels;
    without slopes (one level, latency not growing), as measured."""
    best, measurement = result.best, result.measurement
    if best is None or measurement is None or not best.concurrency:
        return _measured
    top = best.level
    near = [p for p in measurement.points if top / 2 <= p.level <= top * 2 and p.throughput > 0]  # by level
    if len({p.level for p in near}) < 2 or any(p.latency_ms(percentile) <= 0 for p in near):
        return _measured
    levels = [p.level for p in near]
    latency = [math.log(p.latency_ms(percentile)) for p in near]
    throughput = [math.log(p.throughput) for p in near]

    def carried(point: Point) -> float:
        measured = point.latency_ms(percentile)
        if measured <= 0 or point.throughput <= 0:
            return point.throughput
        side = _side(levels, point.level, up=measured < limit_ms)
        grows = _slope(levels[side], latency[side])
        if grows <= 0:
            return point.throughput
        level = point.level + (math.log(limit_ms) - math.log(measured)) / grows
        level = min(max(level, levels[side][0]), levels[side][-1])
        return point.throughput * math.exp(_slope(levels[side], throughput[side]) * (level - point.level))

    return carried


def _side(levels: Sequence[float], here: float, up: bool) -> slice:
    """The part of ``levels`` (rising) a round at ``here`` is carried along: up, from the last
    level at or below it; down, to the first at or above it (a knee's growth below a round says
    nothing of the growth above it); all of them where that leaves fewer than two."""
    if up:
        side = slice(max(bisect.bisect_right(levels, here) - 1, 0), None)
    else:
        side = slice(0, bisect.bisect_left(levels, here) + 1)
    return side if len(levels[side]) >= 2 else slice(None)


def _measured(point: Point) -> float:
    return point.throughput


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ``ys`` over ``xs`` (at least two distinct ``xs``)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def raced(points: Sequence[Point], share: int = 1, carry: Carry | None = None) -> Estimate:
    """A contender's throughput over its rounds (each by ``carry``, else as measured, per
    ``share``): their mean and spread (one round: an infinite error; none: a zero mean)."""
    return Estimate.of([(carry or _measured)(p) for p in points]).scaled(1 / share)


NO_SPREAD = Noise()  # rounds judged on their windows alone, as on one server


def round_spread(samples: Iterable[Sequence[Point]], percentile: int) -> Noise:
    """How far a round's latency at ``percentile`` reads off the other rounds of its contender and
    level, fresh server to fresh server (a relative sd), pooled over ``samples`` (each one
    contender's rounds at one level; those of one round add nothing)."""
    return Noise.pooled([p.latency_ms(percentile) for p in points] for points in samples)


def rounds_latency(points: Sequence[Point], percentile: int, spread: Noise = NO_SPREAD) -> Estimate:
    """The latency at ``percentile`` of a contender's rounds at one level: their mean figure, with
    the error of a mean over this many fresh servers where a ``spread`` (:func:`round_spread`) is
    known (a round's figure holds its windows' noise and its server's, so that is all of it), else
    that of their windows pooled (none without two windows at that percentile)."""
    mean = sum(p.latency_ms(percentile) for p in points) / len(points) if points else 0.0
    across = spread.cv * mean / math.sqrt(len(points)) if spread.df and points else 0.0
    if across:
        return Estimate(mean, across, len(points), spread.df)
    pooled = all(p.window_percentile == percentile for p in points)
    windows = [w for p in points for w in p.window_latencies_ms] if pooled else []
    own = Estimate.of(windows) if len(windows) >= 2 else Estimate(mean, 0.0, 0)  # (none: its figure)
    return Estimate(mean, own.se, own.n)


def rounds_meet(points: Sequence[Point], sla: Sla, spread: Noise = NO_SPREAD) -> bool:
    """Whether rounds at one level meet the SLA: each admitted (:meth:`Sla.admits`) and the
    upper bound of :func:`rounds_latency` (with ``spread``: their mean across servers) within
    the limit."""
    admitted = bool(points) and all(sla.admits(p) for p in points)
    return admitted and rounds_latency(points, sla.percentile, spread).high <= sla.limit_ms


def rounds_break(points: Sequence[Point], sla: Sla) -> bool:
    """Whether rounds at one level break the SLA: one not admitted, or the lower bound of
    :func:`rounds_latency` over the limit (neither this nor :func:`rounds_meet`: undecided)."""
    admitted = all(sla.admits(p) for p in points)
    return not admitted or rounds_latency(points, sla.percentile).low > sla.limit_ms


def outraced(
    rounds: dict[int, Sequence[Point]], shares: dict[int, int], carries: Mapping[int, Carry] | None = None,
    changes: Mapping[int, int] | None = None,
) -> set[int]:  # fmt: skip
    """The contenders (by trial number, with their rounds) that leave the race: those
    :func:`autotune.noise.not_ahead` of the :func:`_top` by :func:`raced` throughput."""
    found = _raced(rounds, shares, carries)
    if not found:
        return set()
    top = _top(found, changes)
    return {n for n, e in found.items() if n != top and not_ahead(e, found[top])}


def _top(
    found: Mapping[int, Estimate],
    changes: Mapping[int, int] | None,
    tie: Callable[[int], float] | None = None,
) -> int:
    """The contender to beat: of those the one with the most throughput is not :func:`better`
    than, the one with the fewest ``changes`` from your config (a winner written back changes
    no more of your file than it must), then the least ``tie`` (default: the most throughput)."""
    leader = max(found, key=lambda n: found[n].mean)
    tied = [n for n, e in found.items() if not better(found[leader], e)]
    near = changes or {}
    return min(tied, key=lambda n: (near.get(n, 0), tie(n) if tie else -found[n].mean))


def _raced(
    rounds: Mapping[int, Sequence[Point]], shares: Mapping[int, int], carries: Mapping[int, Carry] | None
) -> dict[int, Estimate]:
    carry = carries or {}
    return {n: raced(points, shares.get(n, 1), carry.get(n)) for n, points in rounds.items() if points}


def race_leader(
    rounds: Mapping[int, Sequence[Point]], shares: Mapping[int, int], percentile: int,
    carries: Mapping[int, Carry] | None = None, changes: Mapping[int, int] | None = None,
) -> int | None:  # fmt: skip
    """The contender (by trial number) :func:`_top` by :func:`raced` throughput: among ties, the
    one with the fewest ``changes`` from your config, then (unless each has a carry) the lowest
    median latency at ``percentile``; None without any."""
    found = _raced(rounds, shares, carries)
    if not found:
        return None
    if carries is not None and all(n in carries for n in found):
        return _top(found, changes)
    return _top(found, changes, lambda n: statistics.median_high(p.latency_ms(percentile) for p in rounds[n]))


def race_winner(
    verifications: Sequence[Verification], results: Sequence[TrialResult], sla: Sla, scoring: Scoring = RAW,
    yours: Candidate | None = None,
) -> int | None:  # fmt: skip
    """The :func:`race_leader` of the contenders that passed (in a closed loop, :func:`to_limit`
    the limit each was raced at; among ties the nearest to ``yours``); with none, the first
    :func:`ranked` trial not raced."""
    shares = {r.number: scoring.share(r.candidate) for r in results}
    passed = {v.trial: v.points for v in verifications if v.passed and not v.control}
    if passed:
        by_number = {r.number: r for r in results}
        carries = {
            v.trial: to_limit(by_number[v.trial], v.limit_ms, sla.percentile)
            for v in verifications
            if v.trial in passed and v.concurrency and v.limit_ms > 0 and v.trial in by_number
        }
        changes = changes_from(results, yours)
        complete = carries if len(carries) == len(passed) else None
        return race_leader(passed, shares, sla.percentile, complete, changes)
    raced_trials = {v.trial for v in verifications if not v.control}
    return next((r.number for r in ranked(results, scoring) if r.number not in raced_trials), None)


def changes_from(results: Iterable[TrialResult], yours: Candidate | None) -> dict[int, int]:
    """How many fields each trial's candidate changes from ``yours`` (none given: {})."""
    if yours is None:
        return {}
    return {r.number: r.candidate.changes_from(yours) for r in results if r.candidate is not None}


def race_levels(result: TrialResult, sla: Sla) -> list[float]:
    """The levels a contender races at, in turn: its operating point's, then each lower level
    its search found meeting the SLA, highest first (none: half the operating point's)."""
    assert result.best is not None and result.measurement is not None
    top = result.best.level
    met = {p.level for p in result.measurement.points if p.level < top and sla.met_by(p)}
    lower = sorted(met, reverse=True)
    if not lower and top > 1:
        lower = [float(max(1, int(top) // 2))] if result.best.concurrency else [top / 2]
    return [top, *lower]


def level_below(
    level: float, points: Sequence[Point], sla: Sla, listed: Sequence[float], spread: Noise = NO_SPREAD
) -> float | None:
    """The next level down after rounds at ``level`` did not meet the SLA: in a closed loop, the
    clients where the latency's upper bound (:func:`rounds_latency` with ``spread``), taken as
    proportional to them, would reach the limit, if below ``level`` and above the highest lower
    level of ``listed``; else that one; else None."""
    known = max((x for x in listed if x < level), default=None)
    if points and points[0].concurrency and level > 1:
        bound = rounds_latency(points, sla.percentile, spread).high
        guess = min(level - 1, math.floor(level * sla.limit_ms / bound)) if bound > 0 else 0
        if guess >= 1 and (known is None or guess > known):
            return float(guess)
    return known
