"""What a point is and how it is judged: the SLA, the stability rule of a point measured as
perf_analyzer measures it, the latency histogram, and the open loop's rate search
(:func:`autotune.search.level_search.find_rate_goodput`)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from autotune.errors import UsageError
from autotune.loadgen._histogram import LatencyHistogram
from autotune.objective import Sla
from autotune.points import BEHIND_SCHEDULE, Point
from autotune.search.level_search import best_point, find_goodput, find_rate_goodput
from autotune.search.noise import RATE_RESOLUTION, Estimate, Noise
from autotune.search.sampling import is_stable, warm_windows
from autotune.traffic import at_the_limit, check_rates, check_sustained, sustained_of


def point(c: int, throughput: float, p95: float, errors: int = 0) -> Point:
    return Point(
        c, 0.0, throughput, p95 * 0.8, p95 * 0.7, p95 * 0.9, p95, p95 * 1.2, 100, errors, 1.0, 3, True
    )


def test_infeasible_candidate_reports_the_closest_point() -> None:
    result = find_goodput(lambda c: point(c, 10.0 * c, 80.0 * c), Sla(95, 50.0), 1, 32)
    assert result.best is None and not result.feasible
    assert [p.concurrency for p in result.points] == [1]
    assert result.closest(Sla(95, 50.0)).concurrency == 1


def test_points_with_errors_never_meet_the_sla() -> None:
    sla = Sla(95, 50.0)
    assert not sla.met_by(point(1, 100.0, 10.0, errors=1))
    assert best_point([point(1, 100.0, 10.0, errors=1), point(2, 50.0, 20.0)], sla).concurrency == 2  # type: ignore[union-attr]
    assert sla.violation(point(1, 100.0, 10.0, errors=1)) > 0 >= sla.violation(point(1, 100.0, 10.0))


@pytest.mark.parametrize(
    ("tput", "lat", "stable"),
    [
        ([100, 101, 99], [10, 10.5, 9.8], True),
        ([100, 130, 99], [10, 10, 10], False),
        ([100, 100, 100], [10, 10, 14], False),
        ([100, 100], [10, 10], False),
        ([50, 300, 100, 101, 99], [1, 99, 10, 10, 10], True),  # only the last three count
    ],
)
def test_stability_rule(tput: list[float], lat: list[float], stable: bool) -> None:
    assert is_stable(tput[-3:], lat[-3:], 0.10) is stable


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, 1e12])
def test_sla_must_be_positive_and_sane(bad: float) -> None:
    with pytest.raises(UsageError):
        Sla(95, bad)


def test_histogram_percentiles_match_exact_ones_within_precision() -> None:
    rng = random.Random(7)
    values = [int(rng.lognormvariate(16, 0.6)) for _ in range(20000)]
    hist = LatencyHistogram()
    for v in values:
        hist.record(v)
    values.sort()
    for q in (50, 90, 95, 99):
        exact = values[math.ceil(q / 100 * len(values)) - 1]
        assert abs(hist.percentile_ns(q) - exact) / exact < 0.006
    assert hist.percentile_ns(100) == values[-1] and hist.min_ns == values[0]
    assert hist.mean_ns() == pytest.approx(sum(values) / len(values))


def test_histogram_merge_equals_one_histogram() -> None:
    a, b, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for i in range(1, 5000):
        (a if i % 2 else b).record(i * 997)
        both.record(i * 997)
    merged = LatencyHistogram.merged([a, b])
    assert merged.count == both.count and merged.max_ns == both.max_ns and merged.min_ns == both.min_ns
    assert all(merged.percentile_ns(q) == both.percentile_ns(q) for q in (1, 50, 99.9))


def test_histogram_is_bounded() -> None:
    hist = LatencyHistogram()
    hist.record(0)
    hist.record(10**15)  # absurd values land in the edge buckets
    assert hist.count == 2 and hist.percentile_ns(100) == 10**15
    assert LatencyHistogram().percentile_ns(95) == 0.0


# ---------------------------------------------------------------- the rate search (open loop)


def open_point(rate: float, throughput: float, p95: float, *, behind: bool = False, errors: int = 0) -> Point:
    warnings = (BEHIND_SCHEDULE,) if behind else ()
    return Point(
        0, rate, throughput, p95 * 0.8, p95 * 0.7, p95 * 0.9, p95, p95 * 1.2, 100, errors, 1.0, 3, True,
        warnings=warnings, window_throughputs=(throughput * 0.99, throughput, throughput * 1.01),
    )  # fmt: skip


def best(throughput: float) -> Estimate:
    """The best trial's throughput so far, as the search is told it (across servers)."""
    return Estimate(throughput, 0.01 * throughput, 3).across_servers()


def queue(capacity: float, service_ms: float):  # type: ignore[no-untyped-def]
    """An open-loop server (M/M/1-like): latency service / (1 - load), unbounded at capacity;
    above capacity it completes only ``capacity`` requests per second."""

    def at(rate: float) -> Point:
        load = rate / capacity
        p95 = service_ms / (1 - load) * 3 if load < 1 else 1e6
        return open_point(rate, min(rate, capacity), p95)

    return at


def test_rate_search_finds_the_highest_rate_within_the_sla_to_its_resolution() -> None:
    calls: list[float] = []
    at = queue(capacity=400.0, service_ms=5.0)  # meets p95 <= 50 ms below 280 req/s

    def measure(rate: float) -> Point:
        calls.append(rate)
        return at(rate)

    result = find_rate_goodput(measure, Sla(95, 50.0), 1.0, 1e5, start=100.0)
    assert result.best is not None and 250.0 <= result.best.request_rate <= 280.0
    rates = sorted(calls)
    assert len(calls) == len(set(calls)) and len(calls) <= 7
    first_bad = min(r for r in rates if r > result.best.request_rate)
    assert first_bad <= result.best.request_rate * (1 + RATE_RESOLUTION)  # bracketed to the resolution
    # 100 req/s: p95 20 ms, far under the limit: doubled; 200: 30 ms, 60% of it: +20%
    assert calls[:3] == [100.0, 200.0, 240.0]


def test_rate_search_from_a_start_above_the_sla_halves_first() -> None:
    result = find_rate_goodput(queue(400.0, 5.0), Sla(95, 50.0), 1.0, 1e5, start=1000.0)
    assert [p.request_rate for p in result.points][-3:] == sorted(p.request_rate for p in result.points)[-3:]
    assert [p.request_rate for p in result.points if p.request_rate >= 500] == [500.0, 1000.0]
    assert result.best is not None and 250.0 <= result.best.request_rate <= 280.0 and not result.pruned


def test_a_point_behind_schedule_never_meets_the_sla_and_the_measurement_says_why() -> None:
    def measure(rate: float) -> Point:  # the server keeps up; the generator cannot send above 300/s
        return open_point(rate, min(rate, 300.0), 2.0, behind=rate > 300.0)

    result = find_rate_goodput(measure, Sla(95, 50.0), 1.0, 1e5, start=100.0)
    assert result.best is not None and result.best.request_rate <= 300.0
    assert not Sla(95, 50.0).met_by(measure(400.0))  # 2 ms, but not trusted
    lowest = min(p.request_rate for p in result.points if not p.trusted)
    assert "behind its schedule" in result.note and f"at {lowest:.4g} req/s" in result.note
    assert find_rate_goodput(queue(400.0, 5.0), Sla(95, 50.0), 1.0, 1e5, start=100.0).note == ""


def test_rate_search_prunes_a_candidate_that_cannot_beat_the_best() -> None:
    calls: list[float] = []

    def measure(rate: float) -> Point:
        calls.append(rate)
        return queue(capacity=100.0, service_ms=5.0)(rate)

    result = find_rate_goodput(measure, Sla(95, 50.0), 1.0, 1e5, start=400.0, beat=best(300.0))
    assert result.pruned and result.best is None and calls == [400.0]  # completes 100/s: cannot win
    kept = find_rate_goodput(queue(100.0, 5.0), Sla(95, 50.0), 1.0, 1e5, start=400.0, beat=best(50.0))
    assert not kept.pruned and kept.best is not None


def test_rate_search_stays_within_its_bounds_and_ends_when_nothing_meets_the_sla() -> None:
    never = lambda r: open_point(r, r, 500.0)  # noqa: E731
    result = find_rate_goodput(never, Sla(95, 50.0), 10.0, 1e5, start=80.0)
    assert result.best is None and not result.pruned
    assert [p.request_rate for p in result.points] == [10.0, 20.0, 40.0, 80.0]
    capped = find_rate_goodput(lambda r: open_point(r, r, 1.0), Sla(95, 50.0), 1.0, 300.0, start=100.0)
    assert [p.request_rate for p in capped.points] == [100.0, 200.0, 300.0]
    odd = find_rate_goodput(never, Sla(95, 50.0), 51.59, 412.7, start=412.7)  # rounded bounds end
    assert odd.best is None and len(odd.points) <= 5


def test_a_candidate_shown_worse_than_the_best_at_its_rate_is_measured_once() -> None:
    calls: list[float] = []

    def measure(rate: float) -> Point:
        calls.append(rate)
        return queue(capacity=300.0, service_ms=5.0)(rate)  # meets the SLA below ~210 req/s

    result = find_rate_goodput(measure, Sla(95, 50.0), 1.0, 1e5, start=400.0, beat=best(400.0))
    assert calls == [400.0] and result.pruned and result.best is None  # completes 300/s: worse
    level = find_rate_goodput(measure, Sla(95, 50.0), 1.0, 1e5, start=300.0, beat=best(300.0))
    assert sorted(p.request_rate for p in level.points) == [150.0, 212.0, 300.0]  # as the best: could tie
    better = find_rate_goodput(measure, Sla(95, 50.0), 1.0, 1e5, start=180.0, beat=best(180.0))
    assert better.best is not None and better.best.request_rate > 180.0
    assert len(better.points) <= 3  # 180 met near the limit, 216 (x1.2) broke, one bisection


def test_the_open_loop_check_stops_at_the_first_rate_its_windows_leave_undecided() -> None:
    """The check (credited rate, then halving and bisection) ends at a rate whose latency
    interval holds the limit, returning it; with every rate settled it bisects to its
    resolution and returns 0.0. Windows +-20% around the figure: 37-76 ms hold a 50 ms limit."""
    sla, surface = Sla(95, 50.0), queue(capacity=400.0, service_ms=5.0)  # p95 15 / (1 - rate/400)
    calls: list[float] = []

    def windowed(spread: float):  # type: ignore[no-untyped-def]
        def at(rate: float) -> Point:
            calls.append(rate)
            p = surface(rate)
            windows = (p.p95_ms * (1 - spread), p.p95_ms, p.p95_ms * (1 + spread))
            return replace(p, window_latencies_ms=windows, window_percentile=95)

        return at

    assert check_sustained(windowed(0.2), sla, 400.0) == 283.0  # 400 breaks, 200 meets, 283: 51 ms
    assert calls == [400.0, 200.0, 283.0] and at_the_limit(windowed(0.2)(283.0), sla)
    calls.clear()
    assert check_sustained(windowed(0.01), sla, 400.0) == 0.0  # settled everywhere: bisected on
    assert calls == [400.0, 200.0, 283.0, 238.0]  # 238 meets: within the resolution of 283
    assert not at_the_limit(replace(windowed(0.2)(283.0), errors=1), sla)  # not admitted: broken
    # several workers: the bisection's rates, the highest first, settle where the bisection did
    rates = check_rates(400.0)
    assert rates[:5] == [400.0, 336.0, 283.0, 238.0, 200.0] and rates[-1] == 50.0 and len(rates) == 13
    assert sustained_of([windowed(0.01)(r) for r in rates[:4]], sla) == (238.0, False)  # 238 meets
    assert sustained_of([windowed(0.2)(r) for r in rates[:4]], sla) == (283.0, True)  # 283 undecided
    assert sustained_of([windowed(0.01)(r) for r in rates[:2]], sla) == (0.0, False)  # both broke: on


def test_a_first_window_a_warm_up_held_is_dropped_by_the_runs_own_noise_not_a_fixed_ramp() -> None:
    """The first window is dropped while it lies above the one-sided 95% bound of one more window
    read as the later ones are: their own spread, or the run's pooled where it knows more."""
    run = Noise(cv=0.05, df=40)  # windows read 5% apart across the run's points
    assert warm_windows([23.7, 17.8, 15.7, 15.9, 16.0], run) == 2  # a decaying tail: two dropped
    assert warm_windows([10.0, 10.3, 9.9], run) == 0  # within the run's noise: kept
    assert warm_windows([8.0, 10.3, 9.9], run) == 0  # a fast first window is no warm-up
    assert warm_windows([20.0, 10.0], run) == 1  # the run's spread judges even two windows
    assert warm_windows([20.0, 10.0]) == 0  # one later window and no run's noise: nothing to judge by
    assert warm_windows([40.0, 30.0, 20.0, 10.0], run) == 3  # one window is always left
    # the later windows' own spread where the run's knows less: wide when two windows read far
    # apart, so a window 1.7x over stays; at six close ones, one 1.6x over goes
    assert warm_windows([20.0, 10.0, 14.0], Noise(cv=0.05, df=1)) == 0
    assert warm_windows([16.0, 10.0, 10.5, 9.8, 10.2, 10.1]) == 1
    # with no warm-up, a first window is dropped about 5% of the time (the verdicts' confidence)
    rng = random.Random(7)
    drawn = [[rng.gauss(10.0, 0.5) for _ in range(4)] for _ in range(4000)]
    share = sum(warm_windows(w, Noise(cv=0.05, df=200)) > 0 for w in drawn) / len(drawn)
    assert 0.02 < share < 0.08


def test_a_point_names_its_node_only_on_a_ray_cluster() -> None:
    plain = Point(4, 0.0, 100.0, 5.0, 4.0, 6.0, 7.0, 8.0, 500, 0, 5.0, 3, True)
    assert "node" not in plain.to_dict()  # one machine: the files stay as they were
    named = replace(plain, node="host/3f2a9c1e")
    assert Point.from_dict(named.to_dict()) == named and Point.from_dict(plain.to_dict()) == plain
