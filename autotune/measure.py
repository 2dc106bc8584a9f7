"""The stability rules (:data:`RULES_STABILITY`): a candidate's goodput search, the close calls
and second looks fitted around perf_analyzer's stability rule.

:func:`find_goodput` decides which concurrency to measure next; it takes the measuring function
as an argument, so the decision logic is pure and tested without a server. The records it makes
are :mod:`autotune.points`'; the rules on intervals are :mod:`autotune.rules`'.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace

from autotune import gpu
from autotune.objective import Sla
from autotune.points import (
    RULES_INTERVALS,
    RULES_STABILITY,
    Measurement,
    Point,
    WindowPlan,
)

# A tuning run's points stop early once they break the SLA by this factor in two windows
# running (WindowPlan.fail_ms): the latency of a clearly failing point is not worth settling,
# and points past the knee are the slowest to settle (an open loop's backlog keeps growing).
DECIDED = 1.5
# Nor is the latency of a point whose windows all lie on one side of the search's limit, out of
# the band that makes a close call (CLOSE: WindowPlan.clear_ms below it, WindowPlan.over_ms above
# it): its verdict is known, and whether it is a close call (a p99 of the windows merged lies
# between the least and the most of theirs). A millisecond's jitter at low concurrency kept cnn's
# first points measuring 7 and 8 windows (the most a point gets) at p99 1-3 ms under a 20 ms
# SLA, for a throughput that three windows had settled. With the band at half the SLA, 159 of the
# 189 windows that mobilenet's five runs measured past each pass's third went to points whose
# p99 lay outside the close-call band, and 164 of cnn's 175 (benchmarks/experiments/
# window_bands.py on the runs of benchmarks/results/vs_model_analyzer-20261125-1834.txt).


def verdict_bands(search_limit_ms: float) -> tuple[float, float]:
    """``(clear_ms, over_ms)`` for a :class:`WindowPlan` of a search whose SLA (tightened by its
    margin) is ``search_limit_ms``: the edges of its close-call band (:func:`close_call`)."""
    return (1 - CLOSE) * search_limit_ms, (1 + CLOSE) * search_limit_ms


def with_bands(plan: WindowPlan, search_limit_ms: float) -> WindowPlan:
    """``plan`` with its close-call bands (:func:`verdict_bands`) drawn around this search limit
    (a candidate's own: with dynamic batching the search keeps twice the margin); a plan
    without bands keeps none. A plan of :data:`RULES_INTERVALS` gets the limit itself."""
    if plan.rules == RULES_INTERVALS:
        return replace(plan, limit_ms=search_limit_ms)
    if not plan.clear_ms:
        return plan
    clear_ms, over_ms = verdict_bands(search_limit_ms)
    return replace(plan, clear_ms=clear_ms, over_ms=over_ms)


# A point whose latency lies within this fraction of the SLA's limit is a close call: one pass
# of windows cannot tell which side it is on (single passes near the knee spread 10-20%), so it
# is measured again, up to CLOSE_PASSES passes, and judged on the median.
CLOSE = 0.10
CLOSE_PASSES = 3
# A pass after a point's first (a close call's, a low reading's) gets at most this many windows:
# the median of the passes decides, where a single pass must settle on its own. Near the limit a
# window's latency rarely settles: the 8 mobilenet runs of 2026-11-26 03:49-05:46 spent a median
# 6.2 s a run (of 49 s of windows) past each pass's third at points measured in more than one
# pass, cnn's 11 runs 3.5 s of 46 (benchmarks/experiments/pass_windows.py).
PASS_WINDOWS = 4

# Feasible points whose throughput is within this fraction of the most any of them has are
# the same throughput to the search (it stops adding concurrency on the same rule): the highest
# level of them below the close-call band is the operating point (:func:`best_point`).
KNEE = 0.03


def pass_plan(plan: WindowPlan) -> WindowPlan:
    """The plan of a point's further passes (:data:`PASS_WINDOWS`)."""
    return replace(plan, max_windows=min(plan.max_windows, max(PASS_WINDOWS, plan.stable_windows)))


def close_call(point: Point, sla: Sla, close: float = CLOSE) -> bool:
    """Whether ``point``'s latency is too near the limit for one pass to decide (trusted points
    only: one the generator measured behind its schedule breaks the SLA whatever its latency)."""
    return point.trusted and abs(point.latency_ms(sla.percentile) - sla.limit_ms) <= close * sla.limit_ms


def settled(
    measure: Callable[[], Point],
    sla: Sla,
    beat: float = 0.0,
    passes: int = CLOSE_PASSES,
    close: float = CLOSE,
    floor: float = 0.0,
    again: Callable[[], Point] | None = None,
) -> Point:
    """One operating point, measured until the SLA decision is known: a close call
    (:func:`close_call`) is measured again (by ``again``, default ``measure``: shorter passes,
    :func:`pass_plan`), up to ``passes`` passes in all, while the
    median of the passes is still one, and the point is their :func:`merged` figures. Only
    where it can matter: a point whose throughput cannot beat ``beat`` (the best goodput so
    far) decides nothing, whichever side of the limit it is on, nor does one within
    :data:`KNEE` of ``floor`` (what a lower level of its search served within the SLA: a close
    call within the knee is not the operating point either way, :func:`best_point`), unless it would end its
    candidate's search on the word of one pass that may have been disturbed (:func:`noisy_prune`):
    that is measured again too.
    The passes stop as soon as their verdict is known (:func:`verdict_known`): more would move
    the figures, not the side of the limit."""
    first = measure()

    def undecided(done: Sequence[Point]) -> bool:
        if verdict_known(done, sla, passes):
            return False
        so_far = merged(done)
        could_win = first.throughput >= beat * (1 - close) and first.throughput * (1 - KNEE) > floor
        return (close_call(so_far, sla, close) and could_win) or noisy_prune(so_far, sla, beat)

    return more_passes(first, again or measure, undecided, passes)


def verdict_known(done: Sequence[Point], sla: Sla, passes: int = CLOSE_PASSES) -> bool:
    """Whether the passes ``done`` so far of a point that gets at most ``passes`` decide the SLA
    verdict of their :func:`merged` figures already: more than half of ``passes`` lie on one side
    of the limit, so the median of all of them lies there too, whatever the rest would measure.
    A close call whose first two passes agree is spared its third (mobilenet's searches took
    a third pass of 1.5 s at 3 or 4 points a run: benchmarks/README.md, 2026-11-25 14:49)."""
    met = sum(sla.met_by(p) for p in done)
    return max(met, len(done) - met) > passes // 2


def more_passes(
    first: Point, measure: Callable[[], Point], again: Callable[[Sequence[Point]], bool], passes: int
) -> Point:
    """``first`` and further passes of ``measure`` while ``again`` holds for the passes so far,
    up to ``passes`` in all: their :func:`merged` point."""
    done = [first]
    while len(done) < passes and again(done):
        done.append(measure())
    return merged(done)


# A pass that would end its config's search within this fraction of the best goodput may be a
# disturbed one, however far over the limit it reads: it is measured again (:func:`noisy_prune`).
PRUNE_SHORT = 0.4


def noisy_prune(point: Point, sla: Sla, beat: float) -> bool:
    """Whether ``point`` would end its candidate's search (it breaks the limit with less
    throughput than ``beat``: nothing below it can win) on evidence one disturbed pass could
    give: its throughput within ``PRUNE_SHORT`` of ``beat``, however far over the limit. A
    disturbed pass lowers throughput and raises the tail at once: embedder's 2 instances, max
    batch 8, read 723 infer/s at p99 80 ms at concurrency 24 (0.65 of the best so far; the server
    computed a batch of 8 in 16.7 ms, against 9.4-11.8 ms at that config's first points in 8
    other runs) and the run lost its best config (2026-11-26 04:44); recommender's 4 instances,
    max batch 4, read 433 infer/s at p99 29.2 ms at 6 clients (0.74 of the best, 1.46x the
    search's limit), then 693-771 at 17.9-19.5 ms in 6 passes on fresh servers (06:59; both in
    benchmarks/README.md). The 1-instance configs these two cores prune
    read 0.08-0.67 of the best, most under 0.6. Until this rule a pass was measured again only
    within 20% of the best and 25% over the limit (mobilenet's 2 instances, max batch 8: 814
    infer/s at 26.7 ms in one run, 888 at 19.2 ms in another, 2026-11-25 01:35)."""
    if not point.trusted or beat <= 0:
        return False
    over = point.latency_ms(sla.percentile) > sla.limit_ms
    return over and beat * (1 - PRUNE_SHORT) <= point.throughput < beat


def low_reading(point: Point, sla: Sla, beat: float, close: float = CLOSE) -> bool:
    """Whether a candidate's best point would drop its config on one window's word: it met the
    SLA, below the contenders (within ``close`` of ``beat``, the best goodput so far: they are
    re-measured before the winner is chosen) but within twice ``close`` of them, where one
    slow window puts a config that could win."""
    return beat > 0 and sla.met_by(point) and beat * (1 - 2 * close) <= point.throughput < beat * (1 - close)


def second_look(
    found: Measurement,
    again: Callable[[float], Point],
    sla: Sla,
    beat: float,
    passes: int = CLOSE_PASSES,
    close: float = CLOSE,
) -> Measurement:
    """The candidate's search, its best point measured again at its level (``again``) while it
    is a :func:`low_reading`, up to ``passes`` in all, and judged on the :func:`merged` passes.
    embedder's 2 instances, max batch 8 screened 1192 infer/s in one run where four others
    measured 1450-1736, and lost to 1477 (benchmarks/results/vs_model_analyzer-20261125-0258.txt)."""
    first = found.best
    if first is None or not low_reading(first, sla, beat, close):
        return found
    looked = more_passes(
        first, lambda: again(first.level), lambda done: low_reading(merged(done), sla, beat, close), passes
    )
    points = tuple(looked if p is first else p for p in found.points)
    return replace(found, points=points, best=best_point(points, sla))


def merged(points: Sequence[Point]) -> Point:
    """Passes at one level as one point: the median of each figure (throughput, each latency,
    the send rate), the sums of the counts (requests, errors, seconds, windows, passes, the client's
    stalls and their time), the first pass's error text, stable only if
    every pass was, every warning of any pass, the last pass's server breakdown, each GPU's
    figures merged (:func:`autotune.gpu.merge`: median utilisation and power, maximum memory),
    and each model served beside it merged the same way."""
    if len(points) == 1:
        return points[0]

    def med(name: str) -> float:
        return statistics.median(float(getattr(p, name)) for p in points)

    last = points[-1]
    return replace(
        last,
        throughput=med("throughput"),
        avg_ms=med("avg_ms"),
        p50_ms=med("p50_ms"),
        p90_ms=med("p90_ms"),
        p95_ms=med("p95_ms"),
        p99_ms=med("p99_ms"),
        requests=sum(p.requests for p in points),
        errors=sum(p.errors for p in points),
        duration_s=sum(p.duration_s for p in points),
        windows=sum(p.windows for p in points),
        passes=sum(p.passes for p in points),
        stable=all(p.stable for p in points),
        warnings=tuple(dict.fromkeys(w for p in points for w in p.warnings)),
        send_rate=med("send_rate"),
        send_late_p99_ms=max(p.send_late_p99_ms for p in points),
        gpus=gpu.merge([p.gpus for p in points]),
        client_stalls=sum(p.client_stalls for p in points),
        client_stall_ms=sum(p.client_stall_ms for p in points),
        first_error=next((p.first_error for p in points if p.first_error), ""),
        others=tuple(
            (name, merged([o for p in points if (o := p.other(name)) is not None])) for name, _ in last.others
        ),
    )


MeasureAt = Callable[[int], Point]


def find_goodput(
    measure_at: MeasureAt,
    sla: Sla,
    low: int = 1,
    high: int = 32,
    *,
    start: int | None = None,
    beat: float = 0.0,
    saturation_gain: float = KNEE,
    batching: bool = False,
) -> Measurement:
    """Search concurrency for the highest throughput whose latency meets the SLA.

    From ``start`` (default ``low``; the tuner passes the best candidate's concurrency, a good
    guess for the next one): doubles while the SLA holds and throughput still grows, or halves
    while it breaks; then bisects between the last point that met the SLA and the first that
    broke it, while the breaking point's throughput is clearly above the last good one's.
    Closed-loop throughput grows with concurrency, so the breaking point's throughput bounds
    every feasible point below it: when that bound is under ``beat`` (the best goodput found
    so far), neither the halving nor the bisection can find a winner, and they stop
    (``pruned``; a candidate that breaks the SLA at the start below ``beat`` is measured once).
    With dynamic ``batching``, a breaking point that reads :func:`disturbed` does not end the
    bisection as saturated: there, latency stays flat while the batches grow with the clients.
    """
    points: dict[int, Point] = {}

    def at(c: int) -> Point:
        if c not in points:
            points[c] = measure_at(c)
        return points[c]

    first = min(max(start if start is not None else low, low), high)
    pruned = False
    if sla.met_by(at(first)):
        good, bad = _grow(at, sla, first, high, saturation_gain)
    else:
        good, bad, pruned = _descend(at, sla, first, low, saturation_gain, beat)
    if good is not None and bad is not None:
        pruned = _bisect(at, sla, good, bad, saturation_gain, beat, batching)
    ordered = tuple(points[c] for c in sorted(points))
    return Measurement(points=ordered, best=best_point(ordered, sla), pruned=pruned)


def _grow(
    at: Callable[[int], Point], sla: Sla, low: int, high: int, gain: float
) -> tuple[int | None, int | None]:
    c, good = low, None
    while True:
        point = at(c)
        if not sla.met_by(point):
            return good, c
        if good is not None and point.throughput < at(good).throughput * (1 + gain):
            return c, None  # saturated: more concurrency only adds latency
        good = c
        if c >= high:
            return good, None
        c = min(c * 2, high)


def _descend(
    at: Callable[[int], Point], sla: Sla, high: int, low: int, gain: float, beat: float
) -> tuple[int | None, int, bool]:
    """Halve from ``high`` (which broke the SLA) to the first level that meets it; stop (pruned,
    True) once the breaking level's throughput, which bounds every level below it, cannot beat
    ``beat``: a candidate that breaks the SLA at the best one's level below the best's goodput
    is measured once."""
    bad = c = high
    while c > low:
        if at(bad).throughput < beat * (1 - gain):
            return None, bad, True
        c = max(low, c // 2)
        if sla.met_by(at(c)):
            return c, bad, False
        bad = c
    return None, bad, False


def _bisect(
    at: Callable[[int], Point], sla: Sla, good: int, bad: int, gain: float, beat: float, batching: bool
) -> bool:
    """Bisect while a level in between could still matter; True when it stopped because none
    could beat ``beat`` (pruned). Every level below ``bad`` has at most ``bad``'s throughput:
    once that is under ``beat`` the config cannot win, and once it is within ``gain`` of
    ``good``'s the levels in between are saturated (they would only add latency), unless, with
    ``batching``, ``bad``'s reading was disturbed (:func:`disturbed`): a level in between tells."""
    while bad - good > 1:
        bound = at(bad).throughput
        if bound < beat * (1 - gain):
            return True
        if bound < at(good).throughput * (1 + gain) and not (batching and disturbed(at(good), at(bad), sla)):
            return False
        mid = (good + bad) // 2
        if sla.met_by(at(mid)):
            if at(mid).throughput < at(good).throughput * (1 + gain):
                return False
            good = mid
        else:
            bad = mid
    return False


# A saturated closed loop's mean latency grows in proportion to its clients (Little's law: the
# clients over the throughput, which holds); a reading whose tail outgrew that by more than this
# fraction, serving less, was disturbed (:func:`disturbed`).
LITTLE_SLACK = 0.25


def disturbed(good: Point, bad: Point, sla: Sla) -> bool:
    """Whether ``bad``, a higher level than ``good`` that broke the SLA, is a disturbed reading
    rather than a saturated one: it served less than ``good`` (a closed loop with more clients
    serves no less, but for noise) while its latency (at the SLA's percentile) grew more than
    its clients by over ``LITTLE_SLACK``. Saturated, more clients only queue: latency grows
    with them, throughput stays. embedder's 2 instances, max batch 8 read 1084 infer/s at p99
    33.0 ms at 21 clients and 1058 at 66.8 ms at 28 (twice the latency for a third more
    clients), and another run 1173 at 31.9 ms at 22 and 1115 at 78.8 ms at 32; both searches
    stopped there as saturated, where a third run served 1293 at 32.7 ms at 26 and
    perf_analyzer re-measured 1159 at 26 against 915 and 969 at the other runs' verified 17
    and 19 (2026-11-26 07:45, benchmarks/README.md). Asked only with dynamic batching
    (:func:`find_goodput`): without it a tail outgrows the clients at the knee itself (cnn's
    2 instances: p99 11.7 ms at 8 clients, 29.9 at 16, serving 917 and 892 infer/s)."""
    if bad.throughput >= good.throughput or good.latency_ms(sla.percentile) <= 0:
        return False
    grew = bad.latency_ms(sla.percentile) / good.latency_ms(sla.percentile)
    return grew > bad.level / good.level * (1 + LITTLE_SLACK)


MeasureRate = Callable[[float], Point]
RATE_RESOLUTION = 0.10  # the rate search stops once the last good rate is this close to the first bad
# Below this fraction of the SLA a rate is far from the knee and the search grows by ``growth``;
# above it, by twice the resolution, so that one bisection brackets the highest rate.
HEADROOM = 0.6


def find_rate_goodput(
    measure_at: MeasureRate,
    sla: Sla,
    low: float,
    high: float,
    *,
    start: float,
    beat: float = 0.0,
    gain: float = 0.03,
    resolution: float = RATE_RESOLUTION,
    growth: float = 2.0,
) -> Measurement:
    """Search the arrival rate (open loop) for the highest one whose latency meets the SLA.

    From ``start`` (the best candidate's rate, or a first guess): grows while the SLA holds (by
    ``growth`` while the latency is under :data:`HEADROOM` of the limit, then by twice the
    resolution), or halves while it breaks; then bisects, geometrically, between the last rate
    that met it and the first that broke it until they are within ``resolution`` of each other.
    A point the generator measured behind its schedule breaks the SLA (:attr:`Point.trusted`),
    as does one with errors. A feasible rate is below the first breaking one, and an open loop
    above what the server sustains completes only what it can, so the breaking point's
    throughput bounds every feasible point's: when that bound cannot beat ``beat`` (the best
    goodput so far) by more than ``gain`` the search stops (``pruned``; a candidate that breaks
    the SLA at the best one's rate is measured once). Rates are rounded to three significant
    digits (the figures people read).
    """
    points: dict[float, Point] = {}

    def at(rate: float) -> Point:
        if rate not in points:
            points[rate] = measure_at(rate)
        return points[rate]

    rate = _nice(min(max(start, low), high))
    good, bad = (rate, None) if sla.met_by(at(rate)) else (None, rate)
    while good is not None and bad is None and good < high:  # grow
        step = growth if at(good).latency_ms(sla.percentile) < HEADROOM * sla.limit_ms else 1 + 2 * resolution
        rate = _nice(min(good * step, high))
        if rate <= good:
            break
        good, bad = (rate, None) if sla.met_by(at(rate)) else (good, rate)
    pruned = False
    while bad is not None and good is None and bad > low:  # descend
        if at(bad).throughput < beat * (1 + gain):
            pruned = True  # nothing below can win
            break
        rate = _nice(max(bad / 2, low))
        if rate >= bad:
            break
        good, bad = (rate, bad) if sla.met_by(at(rate)) else (None, rate)
    while good is not None and bad is not None and bad > good * (1 + resolution):  # bisect
        if at(bad).throughput < beat * (1 + gain):
            pruned = True
            break
        mid = _nice((good * bad) ** 0.5)
        if not good < mid < bad:
            break
        good, bad = (mid, bad) if sla.met_by(at(mid)) else (good, mid)
    ordered = tuple(points[r] for r in sorted(points))
    return Measurement(points=ordered, best=best_point(ordered, sla), pruned=pruned)


def _nice(rate: float) -> float:
    return float(f"{rate:.3g}")


def best_point(points: Sequence[Point], sla: Sla, knee: float = KNEE, close: float = CLOSE) -> Point | None:
    """The operating point among ``points``: of those that meet the SLA and whose throughput is
    within ``knee`` of the highest, the highest level whose latency lies below the close-call
    band (:func:`close_call`: under the limit by more than ``close``), else the lowest of them.
    Within the knee, short windows cannot rank levels by throughput, but a closed loop serves
    no less with more concurrency: mobilenet's searches read 4 and 6 clients at 523 and 534
    infer/s (6 at 17.5 ms of a 20 ms headroom) and chose 4, where perf_analyzer re-measured 469
    infer/s against 553 at 6 (2026-11-26 01:13); the lowest level so cost 17% of the goodput in
    three runs of five. A level in the close-call band is not taken for noise's sake: it leaves
    no room for another instrument's reading (cnn's 2 instances, max batch 8, served 2649, 2622
    and 2549 infer/s at concurrency 16, 24 and 32, at p99 8.1, 13.0 and 21.2 ms, 11:33 in
    benchmarks/README.md). A close call is so never the operating point for being within the
    knee, which :func:`settled` counts on."""
    feasible = [p for p in points if sla.met_by(p)]
    if not feasible:
        return None
    top = max(p.throughput for p in feasible)
    near = [p for p in feasible if p.throughput >= top * (1 - knee)]
    roomy = [p for p in near if not close_call(p, sla, close)]  # feasible: below the band
    return max(roomy, key=lambda p: p.level) if roomy else min(near, key=lambda p: p.level)


def search_plan(sla: Sla, margin: float, window_s: float, rules: str = RULES_STABILITY) -> WindowPlan:
    """A run's plan for its search's points: windows of ``window_s`` after a warm-up of at least
    a second, stopped early past :data:`DECIDED` times the limit, with the close-call bands of
    the search's limit (the SLA tightened by ``margin``; a candidate draws its own: :func:`with_bands`)."""
    clear_ms, over_ms = verdict_bands(sla.tightened(margin).limit_ms)
    return WindowPlan(
        window_s=window_s,
        warmup_s=max(window_s, 1.0),
        percentile=sla.percentile,
        fail_ms=DECIDED * sla.limit_ms,
        clear_ms=clear_ms,
        over_ms=over_ms,
        rules=rules,
    )
