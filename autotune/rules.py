"""The search's rules, in one place: each a verdict of :mod:`autotune.noise` on measured
intervals. Their knobs are the noise model's (:data:`~autotune.noise.CONFIDENCE`,
:data:`~autotune.noise.SERVER_CV`, :data:`~autotune.noise.MIN_WINDOWS`,
:data:`~autotune.noise.RESOLUTION`), an open loop's :data:`RATE_RESOLUTION` and
:data:`RATE_HEADROOM`, and the run's settings (the SLA and its margin, the budget,
``--finalists`` and ``--repeats``).

- **A point** meets the SLA when its latency's upper bound is within the limit
  (:meth:`autotune.objective.Sla.met_by`); its windows go on until that or the opposite is
  known, or the budget ends them (then it does not meet it: undecided).
- **A point's plan** (:func:`search_plan`, :func:`judged_at`): windows until its latency's
  interval lies on one side of the search's limit.
- **A candidate's goodput search** (:func:`find_goodput`) doubles the clients while the SLA
  holds and the throughput is better than the last level's, halves while it breaks, then
  bisects between the last level that met it and the first that broke it while the broken
  one is better than the met one; it stops early (pruned) where the broken level, which
  bounds every level below it, cannot win against the best so far. Its operating point
  (:func:`best_point`) is the highest level of those that meet the SLA and are not worse
  than the best of them. In an open loop (:func:`find_rate_goodput`) the same over request
  rates, bisected geometrically to :data:`RATE_RESOLUTION`.
- **Trials** compare by their operating points' throughputs across servers
  (:meth:`~autotune.noise.Estimate.across_servers`): :func:`better_trial`.
- **The finalists** are the trials that are not worse than the best (at most ``--finalists``),
  raced on fresh servers (:func:`autotune.finals.race`): a contender's rounds at a level are
  judged together (:func:`rounds_meet`, :func:`rounds_break`), in a closed loop each round's
  throughput carried to the limit along its search's slopes (:func:`to_limit`), over the rounds
  with their spread (:func:`raced`); it steps down by :func:`level_below`; after each round
  those shown not ahead of the leader leave (:func:`outraced`); the leader
  (:func:`race_leader`) must meet the SLA where it stands.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from autotune.noise import Estimate, Noise, better, not_ahead
from autotune.objective import RAW, Scoring, Sla
from autotune.points import Measurement, Point, WindowPlan
from autotune.results import TrialResult, Verification
from autotune.search_space import Candidate


def noise_of(points: Iterable[Point]) -> Noise:
    """The window noise of throughput pooled over ``points`` (:class:`autotune.noise.Noise`)."""
    return Noise.pooled(p.window_throughputs for p in points)


def search_plan(sla: Sla, window_s: float) -> WindowPlan:
    """A run's plan for its points: windows of ``window_s`` after a warm-up of at least a
    second, the latency watched at the SLA's percentile (each search and race round draws its
    limit: :func:`judged_at`)."""
    return WindowPlan(window_s=window_s, warmup_s=max(window_s, 1.0), percentile=sla.percentile)


def judged_at(plan: WindowPlan, limit_ms: float) -> WindowPlan:
    """``plan`` with its points' windows going on until their latency's interval lies on one
    side of ``limit_ms`` (a candidate's own search limit: :meth:`autotune.trials.Trials.search_sla`)."""
    return replace(plan, limit_ms=limit_ms)


def cannot_win(point: Point, beat: Estimate | None, noise: Noise) -> bool:
    """Whether ``point``'s throughput, measured on its own server, is worse than ``beat`` (the
    best trial's, on another): a level at or above it that breaks the SLA bounds every level
    below it, so its candidate cannot win."""
    return beat is not None and better(beat, point.throughput_estimate(noise).across_servers())


def grew(point: Point, before: Point, noise: Noise) -> bool:
    """Whether ``point`` (a higher level, on the same server) serves more than ``before``."""
    return better(point.throughput_estimate(noise), before.throughput_estimate(noise))


def find_goodput(
    measure_at: Callable[[int], Point],
    sla: Sla,
    low: int = 1,
    high: int = 32,
    *,
    start: int | None = None,
    beat: Estimate | None = None,
) -> Measurement:
    """A closed loop's goodput search (see the module docstring), from ``start`` (default
    ``low``: the tuner passes the best candidate's level); ``beat``: the best trial's
    throughput so far."""
    points: dict[int, Point] = {}

    def at(c: int) -> Point:
        if c not in points:
            points[c] = measure_at(c)
        return points[c]

    def pooled() -> Noise:
        return noise_of(points.values())

    first = min(max(start if start is not None else low, low), high)
    good: int | None = None
    bad: int | None = None
    pruned = False
    if sla.met_by(at(first)):
        good = c = first
        while c < high:  # grow
            c = min(c * 2, high)
            if not sla.met_by(at(c)):
                bad = c
                break
            if not grew(at(c), at(good), pooled()):
                good = c if at(c).throughput > at(good).throughput else good
                break  # saturated: more clients only add latency
            good = c
    else:
        bad = c = first
        while c > low:  # descend
            if cannot_win(at(bad), beat, pooled()):
                pruned = True
                break
            c = max(low, c // 2)
            if sla.met_by(at(c)):
                good = c
                break
            bad = c
    while good is not None and bad is not None and bad - good > 1 and not pruned:  # bisect
        if cannot_win(at(bad), beat, pooled()):
            pruned = True
            break
        if not grew(at(bad), at(good), pooled()):
            break  # the levels between serve no more than the one that met the SLA
        mid = (good + bad) // 2
        if sla.met_by(at(mid)):
            good = mid
        else:
            bad = mid
    ordered = tuple(points[c] for c in sorted(points))
    return Measurement(points=ordered, best=best_point(ordered, sla), pruned=pruned)


MeasureRate = Callable[[float], Point]
RATE_RESOLUTION = 0.10  # an open loop's search stops once its last good rate is this close to its first bad
# Below this fraction of the limit a rate is far from the knee and the search doubles it; above,
# it grows by twice the resolution, so that one bisection brackets the highest rate.
RATE_HEADROOM = 0.6


def find_rate_goodput(
    measure_at: MeasureRate,
    sla: Sla,
    low: float,
    high: float,
    *,
    start: float,
    beat: Estimate | None = None,
    resolution: float = RATE_RESOLUTION,
) -> Measurement:
    """An open loop's goodput search over request rates, from ``start`` (the best candidate's
    rate, or a first guess): grows while the SLA holds (doubling while the latency is under
    :data:`RATE_HEADROOM` of the limit, then by twice ``resolution``), or halves while it
    breaks; then bisects, geometrically, between the last rate that met it and the first that
    broke it until they are within ``resolution`` of each other. An open loop above what the
    server sustains completes only what it can, so a broken rate's throughput bounds every
    rate's below it: the search stops (pruned) once that cannot win against ``beat``
    (:func:`cannot_win`). Rates are rounded to three significant digits (the figures people
    read)."""
    points: dict[float, Point] = {}

    def at(rate: float) -> Point:
        if rate not in points:
            points[rate] = measure_at(rate)
        return points[rate]

    def hopeless(rate: float) -> bool:
        return cannot_win(at(rate), beat, noise_of(points.values()))

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
        if pruned := hopeless(bad):
            break
        rate = _nice(max(bad / 2, low))
        if rate >= bad:
            break
        good, bad = (rate, bad) if sla.met_by(at(rate)) else (None, rate)
    while good is not None and bad is not None and bad > good * (1 + resolution):  # bisect
        if pruned := hopeless(bad):
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
    """The operating point: of the points that meet the SLA and are not worse than the one
    with the most throughput (on its server: :func:`autotune.noise.better`), the highest level
    (a closed loop serves no less with more clients; within the noise, the most it can)."""
    feasible = [p for p in points if sla.met_by(p)]
    if not feasible:
        return None
    top = max(feasible, key=lambda p: p.throughput)
    noise = noise_of(points)
    tied = [p for p in feasible if not better(top.throughput_estimate(noise), p.throughput_estimate(noise))]
    return max(tied, key=lambda p: p.level)


# ---------------------------------------------------------------- trials


def trial_estimate(result: TrialResult, scoring: Scoring = RAW) -> Estimate | None:
    """A trial's goodput as the objective counts it (per GPU where ``scoring`` says so), with
    its operating point's error (the noise pooled over its search's points) and the error
    between servers; None when it has none."""
    best = result.best
    if best is None or result.measurement is None:
        return None
    found = best.throughput_estimate(result.measurement.noise).across_servers()
    return found.scaled(1 / scoring.share(result.candidate))


def better_trial(a: TrialResult, b: TrialResult, scoring: Scoring = RAW) -> bool:
    """Whether ``a``'s goodput is better than ``b``'s across servers (a trial without a
    feasible point has none: any is better than it)."""
    mine, theirs = trial_estimate(a, scoring), trial_estimate(b, scoring)
    if mine is None:
        return False
    return theirs is None or better(mine, theirs)


def best_trial(results: Sequence[TrialResult], scoring: Scoring = RAW) -> TrialResult | None:
    """The measured trial with the best goodput figure (as ``scoring`` counts it) that met the
    SLA; None before any did."""
    feasible = [r for r in results if r.feasible and r.reused_from is None]
    return max(feasible, key=lambda r: scoring.score(r.goodput(), r.candidate), default=None)


def incumbent(
    results: Sequence[TrialResult], scoring: Scoring = RAW, candidate: Candidate | None = None
) -> Estimate | None:
    """The best trial's goodput (its figure, its errors across servers) in ``candidate``'s own
    throughput (per GPU: times the GPUs it uses): what its search must beat; None before any
    trial met the SLA."""
    best = best_trial(results, scoring)
    found = None if best is None else trial_estimate(best, scoring)
    if found is None:
        return None
    return found.scaled(scoring.share(candidate))


# ---------------------------------------------------------------- the race of the finalists


def finalists(results: Sequence[TrialResult], count: int, scoring: Scoring = RAW) -> list[TrialResult]:
    """The contenders, best first: the measured trials that met the SLA and are not worse than
    the best one (:func:`better_trial`), at most ``count``."""
    ranked = sorted(
        (r for r in results if r.feasible and r.reused_from is None),
        key=lambda r: scoring.score(r.goodput(), r.candidate),
        reverse=True,
    )
    return [r for r in ranked if not better_trial(ranked[0], r, scoring)][:count]


Carry = Callable[[Point], float]


def to_limit(result: TrialResult, limit_ms: float, percentile: int) -> Carry:
    """How a closed loop's race compares a contender's rounds: each round's throughput carried to
    the level at which its latency would reach ``limit_ms``, along the slopes of log latency and
    log throughput over the level that the contender's search measured within one doubling of
    its operating point (least squares), no further than the levels they were fitted over. A
    fresh server's bias scales a curve, not its slopes; carried, rounds with room left under the
    limit, or at other levels, compare where each config would serve: at the limit. Where the
    search gave no such slopes (one level there, or latency that does not grow), a round's
    throughput as measured."""
    best, measurement = result.best, result.measurement
    if best is None or measurement is None or not best.concurrency:
        return _measured
    top = best.level
    near = [p for p in measurement.points if top / 2 <= p.level <= top * 2 and p.throughput > 0]
    if len({p.level for p in near}) < 2 or any(p.latency_ms(percentile) <= 0 for p in near):
        return _measured
    levels = [p.level for p in near]
    latency = _slope(levels, [math.log(p.latency_ms(percentile)) for p in near])
    throughput = _slope(levels, [math.log(p.throughput) for p in near])
    if latency <= 0:
        return _measured
    low, high = min(levels), max(levels)

    def carried(point: Point) -> float:
        measured = point.latency_ms(percentile)
        if measured <= 0 or point.throughput <= 0:
            return point.throughput
        level = point.level + (math.log(limit_ms) - math.log(measured)) / latency
        level = min(max(level, low), high)
        return point.throughput * math.exp(throughput * (level - point.level))

    return carried


def _measured(point: Point) -> float:
    return point.throughput


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ``ys`` over ``xs`` (at least two distinct ``xs``)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def raced(points: Sequence[Point], share: int = 1, carry: Carry | None = None) -> Estimate:
    """A contender's throughput over its race's rounds, each on a fresh server: each round's
    figure (carried to the limit by ``carry``: :func:`to_limit`; else as measured), their mean
    with their spread over the rounds, which holds the servers' noise and the windows' (one
    round: no error yet)."""
    if not points:
        return Estimate(0.0, math.inf, 0)
    return Estimate.of([(carry or _measured)(p) for p in points]).scaled(1 / share)


def rounds_latency(points: Sequence[Point], percentile: int) -> Estimate:
    """The latency at ``percentile`` of a contender's rounds at one level, their windows pooled
    (each window a batch mean, as within a point): the rounds' mean figure, the windows' error."""
    windows = (
        [w for p in points for w in p.window_latencies_ms]
        if all(p.window_percentile == percentile for p in points)
        else []
    )
    mean = sum(p.latency_ms(percentile) for p in points) / len(points) if points else 0.0
    if len(windows) < 2:
        return Estimate(mean, 0.0, 0)  # judged on its figure
    return Estimate(mean, Estimate.of(windows).se, len(windows))


def rounds_meet(points: Sequence[Point], sla: Sla) -> bool:
    """Whether a contender's rounds at one level meet the SLA together: every round without
    errors and trusted, the pooled latency's upper bound (:func:`rounds_latency`) within the limit."""
    if not points or not all(sla.admits(p) for p in points):
        return False
    return rounds_latency(points, sla.percentile).high <= sla.limit_ms


def rounds_break(points: Sequence[Point], sla: Sla) -> bool:
    """Whether a contender's rounds at one level break the SLA: a round with errors, untrusted
    or over the memory limit, or the pooled latency's lower bound over the limit (not meeting
    it and not breaking it: undecided, one more round tells)."""
    if not all(sla.admits(p) for p in points):
        return True
    return rounds_latency(points, sla.percentile).low > sla.limit_ms


def outraced(
    rounds: dict[int, Sequence[Point]], shares: dict[int, int], carries: Mapping[int, Carry] | None = None
) -> set[int]:
    """The contenders (by trial number, each with the rounds it met the SLA in) that leave the
    race: those shown not ahead of the leader, the one with the most throughput (carried to the
    limit where ``carries`` has the contender's: :func:`raced`), by
    :data:`~autotune.noise.RESOLUTION` (:func:`autotune.noise.not_ahead`: more rounds could not
    show it the better by a difference worth having; the worse ones among them). Those that
    leave keep their rounds: the winner is chosen from all of them."""
    found = _raced(rounds, shares, carries)
    if not found:
        return set()
    top = max(found, key=lambda n: found[n].mean)
    lead = found[top]
    return {n for n, e in found.items() if n != top and not_ahead(e, lead)}


def _raced(
    rounds: Mapping[int, Sequence[Point]], shares: Mapping[int, int], carries: Mapping[int, Carry] | None
) -> dict[int, Estimate]:
    carry = carries or {}
    return {n: raced(points, shares.get(n, 1), carry.get(n)) for n, points in rounds.items() if points}


def race_leader(
    rounds: Mapping[int, Sequence[Point]],
    shares: Mapping[int, int],
    percentile: int,
    carries: Mapping[int, Carry] | None = None,
) -> int | None:
    """Of the contenders (by trial number, each with its rounds at its level): carried to the
    limit (``carries``, one for each: :func:`to_limit`), the one with the most throughput there
    (latency left under the limit is throughput it would serve, so the tie the intervals leave
    goes by it too); else, of the ones not worse than the one with the most throughput
    (:func:`raced`), the lowest latency at ``percentile`` (their rounds' median). None without any."""
    found = _raced(rounds, shares, carries)
    if not found:
        return None
    if carries is not None and all(n in carries for n in found):
        return max(found, key=lambda n: found[n].mean)
    leader = max(found.values(), key=lambda e: e.mean)
    tied = [n for n, e in found.items() if not better(leader, e)]
    return min(tied, key=lambda n: statistics.median_high(p.latency_ms(percentile) for p in rounds[n]))


def race_winner(
    verifications: Sequence[Verification], results: Sequence[TrialResult], sla: Sla, scoring: Scoring = RAW
) -> int | None:
    """The race's winner: :func:`race_leader` of the contenders whose rounds at their level met
    the SLA together (:attr:`Verification.passed`, as :func:`autotune.finals.race` records it),
    in a closed loop carried to the limit each was raced against (:attr:`Verification.limit_ms`,
    :func:`to_limit`); with none such, the trial of the best goodput not raced."""
    shares = {r.number: scoring.share(r.candidate) for r in results}
    passed = {v.trial: v.points for v in verifications if v.passed}
    if passed:
        by_number = {r.number: r for r in results}
        carries = {
            v.trial: to_limit(by_number[v.trial], v.limit_ms, sla.percentile)
            for v in verifications
            if v.passed and v.concurrency and v.limit_ms > 0 and v.trial in by_number
        }
        return race_leader(passed, shares, sla.percentile, carries if len(carries) == len(passed) else None)
    raced_trials = {v.trial for v in verifications}
    rest = [r for r in results if r.feasible and r.reused_from is None and r.number not in raced_trials]
    if not rest:
        return None
    return max(rest, key=lambda r: scoring.score(r.goodput(), r.candidate)).number


def race_levels(result: TrialResult, sla: Sla) -> list[float]:
    """The levels a contender races at, in turn: its operating point, then each lower level its
    search found meeting the SLA, highest first (none: half its operating point's)."""
    assert result.best is not None and result.measurement is not None
    top = result.best.level
    lower = sorted(
        {p.level for p in result.measurement.points if p.level < top and sla.met_by(p)}, reverse=True
    )
    if not lower and top > 1:
        lower = [float(max(1, int(top) // 2))] if result.best.concurrency else [top / 2]
    return [top, *lower]


def level_below(level: float, points: Sequence[Point], sla: Sla, listed: Sequence[float]) -> float | None:
    """The next level down for a contender whose rounds at ``level`` did not meet the SLA: in a
    closed loop, the clients at which its latency's upper bound would reach the limit were
    latency proportional to them (Little's law at saturation), where that is below ``level`` and
    above the highest lower level of ``listed`` (:func:`race_levels`); else that one; None
    when there is none."""
    below = [x for x in listed if x < level]
    known = max(below) if below else None
    if points and points[0].concurrency and level > 1:
        bound = rounds_latency(points, sla.percentile).high
        guess = min(level - 1, math.floor(level * sla.limit_ms / bound)) if bound > 0 else 0
        if guess >= 1 and (known is None or guess > known):
            return float(guess)
    return known
