"""The load generator's pure parts, without a server: schedules, the histogram (merged
across real processes), window tallies and lateness accounting, the behind-schedule rule,
perf_analyzer input data, HTTP/1.1 response parsing and the HPACK subset of the gRPC client.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import pickle
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import autotune.loadgen as loadgen
from autotune.errors import MeasurementError, UsageError
from autotune.gpu import MIB, GpuSample
from autotune.loadgen._histogram import LatencyHistogram
from autotune.loadgen._inputs import ModelIO, TensorSpec, http_request, payload_from_file, raw_bytes
from autotune.loadgen._load import Job, Load, Recorder, Tally, clock
from autotune.loadgen._schedule import BLOCK, Schedule, read_intervals
from autotune.loadgen._stats import StatsSnapshot
from autotune.loadgen._timer import DueTimer
from autotune.loadgen._transport import Connection, Done, InferError, _parse_response
from autotune.loadgen._windows import behind_schedule, late_sends, run_windows, summarise
from autotune.points import Point, WindowPlan
from autotune.search.noise import Noise


def test_exported_names() -> None:
    assert set(loadgen.__all__) == {
        "DISTRIBUTIONS", "PROTOCOLS", "Beside", "LatencyHistogram", "LoadGenerator", "ModelIO", "Payload",
        "Schedule",
        "StatsSnapshot", "WindowPlan", "WorkloadData", "breakdown", "model_io", "read_intervals",
        "read_workload",
    }  # fmt: skip


# ---------------------------------------------------------------- schedules


def _first(schedule: Schedule, n: int) -> NDArray[np.int64]:
    return np.concatenate([c for _, c in zip(range(-(-n // 4096)), schedule.chunks(), strict=False)])[:n]


@pytest.mark.parametrize("distribution", ["constant", "poisson"])
def test_schedule_mean_rate(distribution: str) -> None:
    offsets = _first(Schedule(250.0, distribution, seed=7), 20_000)
    assert np.all(np.diff(offsets) >= 0)
    rate = (len(offsets) - 1) / ((offsets[-1] - offsets[0]) / 1e9)
    assert rate == pytest.approx(250.0, rel=0.03)


def test_constant_schedule_is_evenly_spaced() -> None:
    gaps = np.diff(_first(Schedule(1000.0), 5000))
    assert gaps.min() >= 999_999 and gaps.max() <= 1_000_001


def test_poisson_gaps_are_exponential_and_seeded() -> None:
    gaps = np.diff(_first(Schedule(100.0, "poisson", seed=3), 20_000)) / 1e9
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: CV 1
    again = _first(Schedule(100.0, "poisson", seed=3), 1000)
    other = _first(Schedule(100.0, "poisson", seed=4), 1000)
    assert np.array_equal(again, _first(Schedule(100.0, "poisson", seed=3), 1000))
    assert not np.array_equal(again, other)


def test_poisson_blocks_keep_the_rate_asked() -> None:
    """Every block of BLOCK arrivals spans exactly BLOCK / rate: a window sees the rate asked."""
    offsets = _first(Schedule(20.0, "poisson", seed=0), 4096 * 2)
    spans = np.diff(np.concatenate(([0], offsets))).reshape(-1, BLOCK).sum(axis=1) / 1e9
    assert np.allclose(spans, BLOCK / 20.0, rtol=1e-6)
    first_six_seconds = np.count_nonzero(offsets < 6e9)
    assert abs(first_six_seconds - 120) <= BLOCK // 2  # never a whole block off


@pytest.mark.parametrize("distribution", ["constant", "poisson"])
def test_worker_shares_add_up_to_the_rate(distribution: str) -> None:
    whole = Schedule(600.0, distribution, seed=1)
    shares = [_first(whole.share(i, 3), 6000) for i in range(3)]
    horizon = min(s[-1] for s in shares)
    merged = np.sort(np.concatenate([s[s <= horizon] for s in shares]))
    rate = len(merged) / (horizon / 1e9)
    assert rate == pytest.approx(600.0, rel=0.03)
    if distribution == "constant":  # interleaved: exactly 1/rate apart together
        gaps = np.diff(merged)
        assert gaps.min() >= 1e9 / 600 - 2 and gaps.max() <= 1e9 / 600 + 2


def test_schedule_rejects_bad_input() -> None:
    with pytest.raises(UsageError, match="distribution"):
        Schedule(10.0, "uniform")
    with pytest.raises(UsageError, match="rate"):
        Schedule(0.0)


def test_a_recorded_pattern_is_replayed_looped_and_shared_exactly() -> None:
    pattern = Schedule.replay([1000, 0, 3000])  # microseconds: a burst of two, then a pause
    assert pattern.rate == pytest.approx(750.0)  # 3 requests every 4 ms
    ms = 1_000_000
    assert _first(pattern, 7).tolist() == [0, 1 * ms, 1 * ms, 4 * ms, 5 * ms, 5 * ms, 8 * ms]
    whole = _first(pattern, 9000)
    shares = [_first(pattern.share(i, 2), 4500) for i in range(2)]
    assert np.array_equal(np.sort(np.concatenate(shares)), whole)  # two workers send the pattern itself
    assert shares[0].tolist()[:3] == [0, 1_000_000, 5_000_000]


def test_request_intervals_file(tmp_path: Path) -> None:
    path = tmp_path / "intervals.txt"
    path.write_text("1000\n\n2500\n 0 \n")
    assert read_intervals(path) == (1000, 2500, 0)
    for text, message in [("", "no intervals"), ("0\n0\n", "no intervals"), ("10\nabc\n", "line 2: 'abc'"),
                          ("-5\n", "line 1: '-5'"), ("1.5\n", "line 1")]:  # fmt: skip
        path.write_text(text)
        with pytest.raises(UsageError, match=message):
            read_intervals(path)
    with pytest.raises(UsageError, match="cannot read"):
        read_intervals(tmp_path / "missing.txt")
    with pytest.raises(UsageError, match="request intervals"):
        Schedule.replay([])


def test_job_split() -> None:
    assert [j.concurrency for j in Job(concurrency=5).split(2)] == [3, 2]
    assert [j.concurrency for j in Job(concurrency=1).split(4)] == [1]  # no idle processes
    shares = Job(schedule=Schedule(100.0), pool=8).split(2)
    assert [j.schedule.share_rate for j in shares if j.schedule] == [50.0, 50.0]
    assert [j.pool for j in shares] == [4, 4]


# ---------------------------------------------------------------- histogram


def test_histogram_percentiles_within_half_a_percent() -> None:
    hist = LatencyHistogram()
    values = np.random.default_rng(0).lognormal(mean=15, sigma=0.6, size=20_000).astype(np.int64)
    for v in values.tolist():
        hist.record(v)
    for q in (50, 90, 95, 99):
        exact = float(np.percentile(values, q, method="inverted_cdf"))
        assert hist.percentile_ns(q) == pytest.approx(exact, rel=0.006)
    assert hist.count == len(values) and hist.total_ns == int(values.sum())
    assert hist.min_ns == values.min() and hist.max_ns == values.max()


def test_histogram_pickles_as_bucket_arrays() -> None:
    hist = LatencyHistogram()
    for v in (5_000, 5_000, 80_000, 3_000_000):
        hist.record(v)
    data = pickle.dumps(hist)
    assert len(data) < 1000  # only the non-empty buckets travel
    back = pickle.loads(data)
    assert (back.count, back.total_ns, back.min_ns, back.max_ns) == (4, hist.total_ns, 5_000, 3_000_000)
    assert back.percentile_ns(50) == hist.percentile_ns(50)


_CHILD = """
import pickle, sys
import numpy as np
from autotune.loadgen._histogram import LatencyHistogram
hist = LatencyHistogram()
for v in np.random.default_rng(int(sys.argv[1])).integers(10_000, 50_000_000, 5000).tolist():
    hist.record(v)
sys.stdout.buffer.write(pickle.dumps(hist))
"""


def test_histograms_merge_across_processes() -> None:
    """Two real processes record, ship their histograms as arrays, the parent adds counts:
    the same figures as one histogram that saw every value."""
    parts = [
        pickle.loads(
            subprocess.run([sys.executable, "-c", _CHILD, str(seed)], check=True, capture_output=True).stdout
        )
        for seed in (1, 2)
    ]
    merged = LatencyHistogram.merged(parts)
    whole = LatencyHistogram()
    for seed in (1, 2):
        for v in np.random.default_rng(seed).integers(10_000, 50_000_000, 5000).tolist():
            whole.record(v)
    assert merged.count == whole.count == 10_000
    assert (merged.total_ns, merged.min_ns, merged.max_ns) == (whole.total_ns, whole.min_ns, whole.max_ns)
    for q in (50, 90, 95, 99):
        assert merged.percentile_ns(q) == whole.percentile_ns(q)


# ---------------------------------------------------------------- tallies and lateness


def _tally(duration: float, latencies: list[int], late: list[int], due: int, sent: int) -> Tally:
    tally = Tally(duration, due=due, sent=sent)
    for v in latencies:
        tally.latency.record(v)
    for v in late:
        tally.lateness.record(v)
    return tally


def test_tally_then_adds_time_and_parallel_averages_it() -> None:
    a = _tally(1.0, [1_000_000] * 10, [10_000] * 10, 10, 10)
    b = _tally(1.0, [2_000_000] * 30, [20_000] * 30, 30, 30)
    later = a.then(b)
    assert (later.duration_s, later.completions, later.due, later.sent) == (2.0, 40, 40, 40)
    together = Tally.parallel([a, b])
    assert (together.duration_s, together.completions, together.lateness.count) == (1.0, 40, 40)


def test_recorder_rotate_starts_a_fresh_window() -> None:
    recorder = Recorder()
    recorder.latency.record(1_000_000)
    recorder.sent, recorder.due = 1, 2
    recorder.fail("HTTP 500: boom")
    recorder.fail("HTTP 500: again")
    first = recorder.rotate(connections=3)
    assert (first.completions, first.sent, first.due, first.errors, first.connections) == (1, 1, 2, 2, 3)
    assert first.first_error == "HTTP 500: boom"
    second = recorder.rotate(connections=3)
    assert (second.completions, second.errors, second.first_error) == (0, 0, "")


def test_behind_schedule_and_late_sends_rules() -> None:
    on_time = _tally(1.0, [5_000_000] * 100, [100_000] * 100, due=100, sent=100)
    assert not behind_schedule(on_time)
    unsent = _tally(1.0, [5_000_000] * 90, [100_000] * 90, due=100, sent=90)
    assert behind_schedule(unsent)
    waiting = _tally(1.0, [5_000_000] * 18, [100_000] * 18, due=20, sent=18)
    assert not behind_schedule(waiting)  # two of a small window still waiting for a connection
    assert late_sends(late_p99_ms=2.5, p50_ms=5.0)  # late beyond the 2 ms floor
    assert not late_sends(late_p99_ms=2.5, p50_ms=40.0)  # but within 10% of p50
    assert not late_sends(late_p99_ms=0.1, p50_ms=5.0)


class _Steady:
    """A load whose windows complete ``per_window`` requests each (the first: ``first``), at 5 ms."""

    def __init__(self, per_window: int, first: int) -> None:
        self.counts = iter([0, first])  # the warmup's tally, then the first window's
        self.per_window = per_window

    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(0)

    async def collect(self) -> Tally:
        return _tally(1.0, [5_000_000] * next(self.counts, self.per_window), [], 0, 0)


class _ScriptedProbe:
    """GPU samples in turn (``()``: a scrape that failed); counts its calls."""

    def __init__(self, samples: list[tuple[GpuSample, ...]]) -> None:
        self.samples, self.calls = iter(samples), 0

    def sample(self) -> tuple[GpuSample, ...]:
        self.calls += 1
        return next(self.samples)


def _measured(probe: _ScriptedProbe | None) -> tuple[Point, int]:
    plan = WindowPlan(window_s=1.0, warmup_s=0.0, stable_windows=3, max_windows=6, min_requests=1)

    async def stats() -> StatsSnapshot:
        return StatsSnapshot({}, 0, {})

    async def scenario() -> tuple[Point, int]:
        before, windows = await run_windows(_Steady(100, first=10), stats, plan, probe)
        return summarise(before, windows, plan, concurrency=4, rate=0.0, batch=1), len(windows)

    return asyncio.run(scenario())


def test_each_window_samples_the_gpus_and_the_point_summarises_the_kept_ones() -> None:
    def gpu(utilization: float, mib: int) -> tuple[GpuSample, ...]:
        return (GpuSample("GPU-a", utilization, mib * MIB, 100.0 * utilization),)

    # window 1 (10 requests) is not kept: the point is windows 2-4, one of whose scrapes failed
    probe = _ScriptedProbe([gpu(1.0, 9000), gpu(0.2, 100), (), gpu(0.6, 300)])
    point, windows = _measured(probe)
    assert windows == 4 and probe.calls == 4
    (figures,) = point.gpus
    assert (figures.uuid, figures.memory_mb) == ("GPU-a", 300.0)
    assert figures.utilization == pytest.approx(0.4) and figures.power_w == pytest.approx(40.0)


def test_without_a_probe_a_point_has_no_gpu_figures() -> None:
    point, windows = _measured(None)
    assert windows == 4 and point.gpus == ()
    assert _measured(_ScriptedProbe([()] * 4))[0].gpus == ()  # a server whose metrics have no GPUs


def test_a_point_counts_the_client_stalls_of_its_kept_windows() -> None:
    class Stalling(_Steady):
        async def collect(self) -> Tally:
            tally = await super().collect()
            tally.stalls, tally.stall_s = 2, 0.05  # each window: two stalls, 50 ms late in all
            return tally

    plan = WindowPlan(window_s=1.0, warmup_s=0.0, stable_windows=3, max_windows=6, min_requests=1)

    async def stats() -> StatsSnapshot:
        return StatsSnapshot({}, 0, {})

    async def scenario() -> Point:
        before, windows = await run_windows(Stalling(100, first=10), stats, plan)
        return summarise(before, windows, plan, concurrency=4, rate=0.0, batch=1)

    point = asyncio.run(scenario())  # windows 2-4 kept
    assert point.client_stalls == 6 and point.client_stall_ms == pytest.approx(150.0)
    assert Point.from_dict(point.to_dict()) == point


class _Latencies:
    """A load whose windows complete 100 requests each at the given latencies (ms), in turn."""

    def __init__(self, latencies_ms: list[float]) -> None:
        self.latencies = iter([0.0, *latencies_ms])  # the warmup's, then each window's

    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(0)

    async def collect(self) -> Tally:
        return _tally(1.0, [int(next(self.latencies) * 1e6)] * 100, [], 0, 0)


def _windows_until_decided(
    latencies_ms: list[float], limit_ms: float, noise: Noise | None = None
) -> tuple[Point, int]:
    plan = WindowPlan(window_s=1.0, warmup_s=0.0, max_windows=6, min_requests=1, limit_ms=limit_ms)
    plan = replace(plan, latency_noise=noise) if noise is not None else plan

    async def stats() -> StatsSnapshot:
        return StatsSnapshot({}, 0, {})

    async def scenario() -> tuple[Point, int]:
        before, windows = await run_windows(_Latencies(latencies_ms), stats, plan)
        return summarise(before, windows, plan, concurrency=4, rate=0.0, batch=1), len(windows)

    return asyncio.run(scenario())


def test_a_points_windows_stop_once_its_latency_interval_lies_on_one_side_of_the_limit() -> None:
    """With a limit, the windows go on until the latency's interval over all of them is within
    it or over it (at least two), and the point's figures and sample are every window's; without
    one, perf_analyzer's rule (the last three windows agree) to ``max_windows``."""
    over = [60.0, 64.0, 61.0, 66.0, 60.0, 65.0]  # far over a 20 ms limit
    point, windows = _windows_until_decided(over, limit_ms=20.0)
    assert windows == 2 and point.stable and point.window_latencies_ms == (60.0, 64.0)
    growing = [40.0, 80.0, 160.0, 320.0, 640.0, 1280.0]  # a backlog: never stable
    point, windows = _windows_until_decided(growing, limit_ms=0.0)  # no limit: to max_windows
    assert windows == 6 and not point.stable and len(point.window_latencies_ms) == 3  # the last three
    jitter = [1.0, 1.4, 1.1, 1.5, 1.0, 1.3]  # more than 10% apart, all far below a 20 ms limit
    point, windows = _windows_until_decided(jitter, limit_ms=20.0)
    assert windows == 2 and point.stable and not point.warnings
    assert _windows_until_decided(jitter, limit_ms=0.0)[1] == 6
    straddling = [12.0, 20.0, 12.5, 19.5, 12.0, 20.0]  # the p95 over all requests: 20 ms, undecided
    point, windows = _windows_until_decided(straddling, limit_ms=20.0)
    assert windows == 6 and not point.stable and len(point.window_latencies_ms) == 6
    # the interval is centred where the point is judged, its p95 over all requests: windows whose
    # mean (20 ms) sits on the limit, but with half the requests at 25 ms, break it (the windows'
    # mean left it undecided)
    halves = [15.0, 25.0, 15.5, 24.5, 15.0, 25.0]
    point, windows = _windows_until_decided(halves, limit_ms=20.0)
    assert windows == 6 and point.stable and point.p95_ms > 20.0
    assert point.latency_bound(95) > point.latency_estimate(95).low > 20.0  # the verdict: breaks


def test_the_windows_go_on_until_a_model_beside_has_its_own_verdict() -> None:
    """Several models on one server: the tuned model settles in two windows, but the model beside
    it warmed up in its first (dropped); the windows go on until it too keeps two and its interval
    lies on one side of its own limit. Stopped at two, its one window's interval was unbounded,
    and the point broke its SLA at 10 ms of 20 (a flaky shared-server run)."""
    from autotune.loadgen import Beside
    from autotune.loadgen._windows import beside_windows

    noise = Noise(0.05, 20)
    plan = WindowPlan(window_s=1.0, warmup_s=0.0, max_windows=6, min_requests=1, limit_ms=20.0)
    plan = replace(plan, latency_noise=noise)
    raced = replace(plan, before_ms=(9.0,), before_figures_ms=(9.0,))  # the tuned model's earlier rounds
    twin = Beside(None, 1.0, 99, 2.0).judged(raced)  # type: ignore[arg-type]
    assert (twin.percentile, twin.limit_ms, twin.before_ms, twin.before_figures_ms) == (99, 40.0, (), ())
    twin = replace(twin, limit_ms=20.0)

    async def stats() -> StatsSnapshot:
        return StatsSnapshot({}, 0, {})

    async def scenario(beside: list[float]) -> tuple[int, Point]:
        source, theirs = _Latencies([10.0, 10.5, 10.2, 10.4, 10.1, 10.3]), _Latencies(beside)
        before, windows = await run_windows(source, stats, plan, beside=[(theirs, twin)])
        mine = beside_windows(windows, 0)
        return len(windows), summarise(before, mine, twin, concurrency=4, rate=0.0, batch=1)

    windows, point = asyncio.run(scenario([60.0, 10.0, 10.5, 10.2, 10.4, 10.1]))
    assert windows == 3 and point.warm_windows_ms == (60.0,) and point.window_latencies_ms == (10.0, 10.5)
    assert point.stable and point.latency_bound(99) < 20.0
    windows, point = asyncio.run(scenario([10.0, 10.5, 10.2, 10.4, 10.1, 10.3]))  # warm: two windows do
    assert windows == 2 and point.latency_bound(99) < 20.0


class _Gate:
    """An in-memory connection for the bookkeeping: answers are held until the gate opens."""

    def __init__(self, gate: dict[str, Any]) -> None:
        self._gate = gate

    def send(self, done: Done) -> None:
        gate = self._gate
        gate["sends"] = gate.get("sends", 0) + 1

        def answer(_: object) -> None:
            gate["answers"] = gate.get("answers", 0) + 1
            done(None)

        if gate["open"]:
            asyncio.get_running_loop().call_soon(answer, None)
        else:
            gate["held"].append(answer)

    async def close(self) -> None:
        return None


def test_open_loop_accounts_for_requests_it_could_not_send() -> None:
    """A server that does not answer: the pool grows to its cap, then due requests wait in
    the backlog; due counts them, sent does not, and lateness is recorded for every send."""

    async def scenario() -> tuple[Tally, Tally, int]:
        gate: dict[str, Any] = {"open": False, "held": []}

        async def connect() -> Connection:
            return _Gate(gate)

        load = Load(connect, max_connections=5)
        job = Job(schedule=Schedule(2000.0), pool=2)
        await load.prepare(job)
        load.start(job, clock())
        await load.wait(0.1)
        stuck = load.rotate()
        gate["open"] = True  # answers flow again: the backlog drains
        for done in gate["held"]:
            asyncio.get_running_loop().call_soon(done, None)
        await load.wait(0.1)
        flowing = load.rotate()
        unanswered = gate["sends"] - gate.get("answers", 0)  # sent, answers due in the loop's next turn
        await load.stop()
        return stuck, flowing, unanswered

    stuck, flowing, unanswered = asyncio.run(scenario())
    assert stuck.connections == 5 and stuck.sent == 5 and stuck.due > 50
    assert stuck.lateness.count == stuck.sent and stuck.completions == 0
    assert behind_schedule(stuck)
    assert flowing.sent > flowing.due  # the backlog went out late
    # the held answers came in too, and every answer of the window's own sends but those the
    # window's end sent (rotate dispatches what fell due: their answers come in the next turn)
    assert unanswered <= flowing.connections
    assert flowing.completions == flowing.sent + stuck.sent - unanswered
    assert flowing.lateness.percentile_ns(99) > flowing.lateness.percentile_ns(10)


def test_closed_loop_counts_errors_and_reconnects() -> None:
    opened = 0

    class Flaky:
        """Every third answer is a broken connection, every third an error answer."""

        def __init__(self) -> None:
            self.calls = 0

        def send(self, done: Done) -> None:
            self.calls += 1
            error = None
            if self.calls % 3 == 0:
                error = InferError("connection closed by the server (EOF)", closed=True)
            elif self.calls % 3 == 1:
                error = InferError("HTTP 500: model failed")
            asyncio.get_running_loop().call_soon(done, error)

        async def close(self) -> None:
            return None

    async def scenario() -> Tally:
        async def connect() -> Connection:
            nonlocal opened
            opened += 1
            return Flaky()

        load = Load(connect)
        await load.prepare(Job(concurrency=2))
        load.start(Job(concurrency=2), clock())
        await load.wait(0.05)
        tally = load.rotate()
        await load.stop()
        return tally

    tally = asyncio.run(scenario())
    assert tally.errors > 0 and tally.completions > 0 and opened > 2  # reconnected
    assert tally.first_error in ("HTTP 500: model failed", "connection closed by the server (EOF)")


def test_a_loop_held_up_counts_as_a_stall_and_a_free_one_does_not() -> None:
    """The watcher (autotune.loadgen._load) counts a wake over STALL_NS late as a stall of the
    loop, with its lateness; a loop that keeps running counts none."""

    class Instant:
        def send(self, done: Done) -> None:
            asyncio.get_running_loop().call_later(0.002, done, None)

        async def close(self) -> None:
            return None

    async def scenario(hold_s: float) -> Tally:
        async def connect() -> Connection:
            return Instant()

        load = Load(connect)
        await load.prepare(Job(concurrency=2))
        load.start(Job(concurrency=2), clock())
        await load.wait(0.03)
        if hold_s:
            time.sleep(hold_s)  # the loop does not run: as when its thread waits for a core
        await load.wait(0.03)
        tally = load.rotate()
        await load.stop()
        return tally

    free = asyncio.run(scenario(0.0))
    assert (free.stalls, free.stall_s) == (0, 0.0) and free.completions > 0
    held = asyncio.run(scenario(0.08))
    assert held.stalls == 1 and 0.07 < held.stall_s < 0.2
    both = Tally.parallel([held, held]).then(free)
    assert (both.stalls, both.stall_s) == (2, held.stall_s * 2)


def test_a_server_gone_fails_the_load_once_and_leaves_no_unretrieved_error() -> None:
    """Every connection breaks and every reconnect fails (the server died): the load fails
    with the first reason, and no reconnect's exception is left for asyncio to print
    ("Task exception was never retrieved", seen when tritonserver crashed under a trial)."""
    unhandled: list[str] = []
    connects = 0

    class Dying:
        def send(self, done: Done) -> None:
            error = InferError("connection closed by the server (EOF)", closed=True)
            asyncio.get_running_loop().call_soon(done, error)

        async def close(self) -> None:
            return None

    async def scenario() -> str:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unhandled.append(ctx["message"]))

        async def connect() -> Connection:
            nonlocal connects
            connects += 1
            if connects > 3:  # the three slots opened; every reconnect is refused
                raise MeasurementError("cannot connect to 127.0.0.1:1: refused")
            return Dying()

        load = Load(connect)
        await load.prepare(Job(concurrency=3))
        load.start(Job(concurrency=3), clock())
        with pytest.raises(MeasurementError) as failed:
            await load.wait(1.0)
        await load.stop()
        await asyncio.sleep(0.01)
        gc.collect()
        return str(failed.value)

    reason = asyncio.run(scenario())
    assert reason == "cannot connect to 127.0.0.1:1: refused"
    assert connects == 6  # each slot tried to reconnect
    assert unhandled == []


def test_closed_loop_opens_each_connection_while_requests_flow() -> None:
    """Triton's HTTP server gives a new connection to its first HTTP thread with no work
    pending: every connection after the first must open while requests are in flight, and
    what is answered before the clock starts is not counted."""
    in_flight_at_open: list[int] = []
    in_flight = 0

    class Slow:
        def send(self, done: Done) -> None:
            nonlocal in_flight
            in_flight += 1

            def answer() -> None:
                nonlocal in_flight
                in_flight -= 1
                done(None)

            asyncio.get_running_loop().call_later(0.001, answer)

        async def close(self) -> None:
            return None

    async def scenario() -> tuple[int, int, Tally]:
        async def connect() -> Connection:
            in_flight_at_open.append(in_flight)
            await asyncio.sleep(0.002)  # a connect takes time; answers come back meanwhile
            return Slow()

        load = Load(connect)
        job = Job(concurrency=4)
        await load.prepare(job)
        before_start = load.recorder.latency.count
        load.start(job, clock())
        at_start = load.recorder.latency.count
        await load.wait(0.05)
        tally = load.rotate()
        await load.stop()
        return before_start, at_start, tally

    before_start, at_start, tally = asyncio.run(scenario())
    assert in_flight_at_open[0] == 0 and all(n >= 1 for n in in_flight_at_open[1:])
    assert before_start > 0  # requests flowed while the connections opened
    assert at_start == 0 and tally.completions > 0  # start() begins a fresh window


# ---------------------------------------------------------------- input data

IO = ModelIO(
    "m", 8,
    (TensorSpec("ids", "INT64", (4,)), TensorSpec("text", "BYTES", (2,)), TensorSpec("img", "FP32", (-1, 2))),
    (TensorSpec("out", "FP32", (1,)),),
)  # fmt: skip


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(doc))
    return path


def test_input_data_plain_content_and_shape_forms(tmp_path: Path) -> None:
    doc = {"data": [{
        "ids": [1, 2, 3, 4],
        "text": {"content": ["hello", "wörld"], "shape": [2]},
        "img": {"content": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5], "shape": [3, 2]},
    }]}  # fmt: skip
    payload = payload_from_file(IO, _write(tmp_path, doc), batch_size=2)
    arrays = {spec.name: array for spec, array in payload.tensors}
    assert arrays["ids"].dtype == np.int64 and arrays["ids"].shape == (2, 4)
    assert arrays["text"].shape == (2, 2) and arrays["text"][1, 1] == "wörld".encode()
    assert arrays["img"].shape == (2, 3, 2) and arrays["img"].dtype == np.float32
    assert raw_bytes(arrays["text"][0], "BYTES") == b"\x05\x00\x00\x00hello\x06\x00\x00\x00w\xc3\xb6rld"
    request = http_request(payload, "127.0.0.1")
    assert b'"datatype":"BYTES"' in request and b'"shape":[2,3,2]' in request


def test_input_data_b64_and_shape_flag(tmp_path: Path) -> None:
    ids = np.arange(4, dtype=np.int64)
    doc = {"data": [{"ids": {"b64": base64.b64encode(ids.tobytes()).decode()},
                     "text": ["a", "b"], "img": [1, 2, 3, 4]}]}  # fmt: skip
    payload = payload_from_file(IO, _write(tmp_path, doc), shapes={"img": (2, 2)})
    arrays = {spec.name: array for spec, array in payload.tensors}
    assert arrays["ids"].tolist() == [[0, 1, 2, 3]]
    assert arrays["img"].shape == (1, 2, 2)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"nodata": []}, "not perf_analyzer input data"),
        ({"data": []}, "not perf_analyzer input data"),
        ({"data": [[{"ids": [1]}]]}, "sequence data is not supported"),
        ({"data": [{"ids": [1, 2, 3, 4], "text": ["a", "b"]}]}, "no data for input 'img'"),
        ({"data": [{"ids": [1, 2, 3], "text": ["a", "b"], "img": [1, 2]}]}, "3 values do not fit shape"),
        ({"data": [{"ids": ["x"] * 4, "text": ["a", "b"], "img": [1, 2]}]}, "cannot read the data as INT64"),
        ({"data": [{"ids": {"b64": "!!"}, "text": ["a", "b"], "img": [1, 2]}]}, "is not base64"),
        ({"data": [{"ids": {"shape": [4]}, "text": ["a", "b"], "img": [1, 2]}]}, "needs 'content' or 'b64'"),
    ],
)
def test_input_data_errors_are_usage_errors(tmp_path: Path, doc: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        payload_from_file(IO, _write(tmp_path, doc))


def test_input_data_not_json(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text("{not json")
    with pytest.raises(UsageError, match="not perf_analyzer input data"):
        payload_from_file(IO, path)


# ---------------------------------------------------------------- wire formats


def test_http_response_parsing() -> None:
    body = b'{"ok":1}'
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n"
    assert _parse_response(head + body + b"HTTP/1.1") == (200, body, len(head) + 8)
    assert _parse_response(head + body[:3]) is None


def test_http_chunked_response() -> None:
    chunked = b"HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nerr:\r\n4\r\n bad\r\n0\r\n\r\n"
    assert _parse_response(chunked) == (400, b"err: bad", len(chunked))
    assert _parse_response(chunked[:-3]) is None


def test_due_timer_never_fires_early() -> None:
    async def scenario() -> list[int]:
        timer = DueTimer()
        fired: list[int] = []
        dues = [clock() + d for d in (3_000_000, 0, -1_000_000)]  # future, now, past
        for due in dues:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def fire(done: asyncio.Future[None] = done) -> None:
                fired.append(clock())
                done.set_result(None)

            timer.arm(due, fire)
            await done
        timer.close()
        return [f - d for f, d in zip(fired, dues, strict=True)]

    assert all(late >= 0 for late in asyncio.run(scenario()))
    if sys.platform.startswith("linux"):

        async def precise() -> bool:
            timer = DueTimer()
            try:
                return timer.precise
            finally:
                timer.close()

        assert asyncio.run(precise())


def test_a_recorded_pattern_is_scaled_to_the_rate_asked() -> None:
    """The same shape, faster: at twice the pattern's rate every gap is half as long."""
    own = Schedule.replay([1000, 0, 3000])  # 3 requests per 4 ms: 750/s
    assert own.rate == pytest.approx(750.0)
    twice = Schedule.replay([1000, 0, 3000], rate=1500.0)
    assert _first(twice, 7).tolist() == [0, 500_000, 500_000, 2_000_000, 2_500_000, 2_500_000, 4_000_000]
    shares = [_first(twice.share(i, 2), 3) for i in range(2)]
    assert sorted(np.concatenate(shares).tolist()) == _first(twice, 6).tolist()


def test_the_first_windows_a_warm_up_held_are_dropped_recorded_and_replaced() -> None:
    """A fresh server's slow first windows (beyond the run's window noise) leave the point's
    figures and sample, are recorded on it, and the windows go on until enough are kept; the
    same windows without a limit (perf_analyzer's rule) keep the last three, as before."""
    tail = [40.0, 24.0, 15.0, 15.5, 14.8, 15.2]  # a 20 ms limit: the tail alone would break it
    point, windows = _windows_until_decided(tail, limit_ms=20.0, noise=Noise(cv=0.05, df=60))
    assert point.warm_windows_ms == (40.0, 24.0) and point.window_latencies_ms == (15.0, 15.5)
    assert windows == 4 and point.stable and point.p95_ms < 20.0
    assert Point.from_dict(point.to_dict()) == point
    # the run's noise unknown: the windows' own spread tells the tail only once four are read
    point, windows = _windows_until_decided(tail, limit_ms=20.0)
    assert point.warm_windows_ms == (40.0, 24.0) and windows == 4
    point, windows = _windows_until_decided([40.0, 15.0, 15.5, 14.8], limit_ms=20.0)
    assert point.warm_windows_ms == (40.0,) and windows == 3  # two could not tell: a third did
