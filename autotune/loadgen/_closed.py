"""Closed-loop load: N requests always in flight, measured in windows until stable.

Warmup is discarded. Each window records completions into a bounded histogram and ends
with a statistics snapshot from the server; the run stops when the last ``stable_windows``
windows agree within the tolerance (throughput and latency at the plan's percentile), or
at ``max_windows`` with an ``unstable`` warning. The figures come from the last windows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from autotune.errors import MeasurementError
from autotune.loadgen._histogram import LatencyHistogram
from autotune.loadgen._stats import StatsSnapshot, breakdown
from autotune.loadgen._transport import Connection, InferError
from autotune.measure import ERRORS, FEW_SAMPLES, UNSTABLE, Point, is_stable

STATS_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class WindowPlan:
    window_s: float = 1.0
    warmup_s: float = 1.0
    tolerance: float = 0.10
    stable_windows: int = 3
    max_windows: int = 8
    min_requests: int = 50  # a window is extended (up to 4x) until it has this many
    percentile: int = 95  # the latency the stability rule watches


@dataclass
class Window:
    duration_s: float
    completions: int
    errors: int
    histogram: LatencyHistogram
    stats: StatsSnapshot


@dataclass
class Recorder:
    """Mutable per-window tally, shared by the workers of one run (one event loop)."""

    histogram: LatencyHistogram = field(default_factory=LatencyHistogram)
    errors: int = 0
    first_error: str = ""
    started: float = field(default_factory=time.perf_counter)

    def rotate(self) -> tuple[float, LatencyHistogram, int]:
        now = time.perf_counter()
        out = (now - self.started, self.histogram, self.errors)
        self.histogram, self.errors, self.started = LatencyHistogram(), 0, now
        return out

    def fail(self, message: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = message


@dataclass(frozen=True)
class Target:
    """What a run needs: new connections, statistics snapshots, requests' batch size."""

    connect: Callable[[], Awaitable[Connection]]
    stats: Callable[[], Awaitable[StatsSnapshot]]
    batch_size: int = 1


async def measure_closed(target: Target, concurrency: int, plan: WindowPlan) -> Point:
    recorder = Recorder()
    connections = [await target.connect() for _ in range(concurrency)]
    tasks = [asyncio.create_task(_worker(target, conn, recorder)) for conn in connections]
    try:
        windows = await _windows(target, recorder, plan, tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in connections:
            await conn.close()
    return summarise(windows, plan, concurrency=concurrency, rate=0.0, batch=target.batch_size,
                     first_error=recorder.first_error)


async def _worker(target: Target, conn: Connection, recorder: Recorder) -> None:
    clock = time.perf_counter_ns
    while True:
        start = clock()
        try:
            await conn.infer()
        except InferError as exc:
            recorder.fail(str(exc))
            if "connection closed" in str(exc):
                await conn.close()
                conn = await target.connect()
            continue
        recorder.histogram.record(clock() - start)


async def _windows(
    target: Target, recorder: Recorder, plan: WindowPlan, tasks: list[asyncio.Task[None]]
) -> list[Window]:
    await _sleep_watching(plan.warmup_s, tasks)
    before = await _stats(target)
    recorder.rotate()
    windows: list[Window] = []
    while len(windows) < plan.max_windows:
        await _sleep_watching(plan.window_s, tasks)
        waited = plan.window_s
        while recorder.histogram.count < plan.min_requests and waited < 4 * plan.window_s:
            await _sleep_watching(plan.window_s / 4, tasks)
            waited += plan.window_s / 4
        duration, histogram, errors = recorder.rotate()
        windows.append(Window(duration, histogram.count, errors, histogram, await _stats(target)))
        if _stable(windows, plan):
            break
    windows.insert(0, Window(0.0, 0, 0, LatencyHistogram(), before))  # the snapshot before window 1
    return windows


async def _sleep_watching(seconds: float, tasks: list[asyncio.Task[None]]) -> None:
    """Sleep, but surface a worker's failure (e.g. the server went away) at once."""
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for task in done:
        exc = task.exception()
        if exc is not None:
            raise exc


async def _stats(target: Target) -> StatsSnapshot:
    try:
        return await asyncio.wait_for(target.stats(), STATS_TIMEOUT_S)
    except asyncio.TimeoutError as exc:
        raise MeasurementError(f"the server did not answer a statistics request in {STATS_TIMEOUT_S:.0f} s") from exc


def _stable(windows: list[Window], plan: WindowPlan) -> bool:
    throughputs = [w.completions / w.duration_s for w in windows if w.duration_s > 0]
    latencies = [w.histogram.percentile_ns(plan.percentile) for w in windows]
    return is_stable(throughputs[-plan.stable_windows :], latencies[-plan.stable_windows :], plan.tolerance)


def summarise(
    windows: list[Window], plan: WindowPlan, *, concurrency: int, rate: float, batch: int,
    first_error: str = "", extra_warnings: tuple[str, ...] = (),
) -> Point:
    """A Point from the last windows; ``windows[0]`` only holds the snapshot before them."""
    measured = windows[1:]
    kept = measured[-plan.stable_windows :]
    before = windows[len(windows) - len(kept) - 1].stats
    hist = LatencyHistogram.merged(w.histogram for w in kept)
    errors = sum(w.errors for w in kept)
    duration = sum(w.duration_s for w in kept)
    if hist.count == 0:
        reason = first_error or f"no request completed in {duration:.1f} s (is the server hung?)"
        raise MeasurementError(f"no successful request at concurrency {concurrency}: {reason}")
    stable = _stable(measured, plan)
    warnings = [UNSTABLE] if not stable else []
    warnings += [ERRORS] if errors else []
    warnings += [FEW_SAMPLES] if hist.count < 100 else []

    def ms(q: float) -> float:
        return hist.percentile_ns(q) / 1e6

    return Point(
        concurrency=concurrency, request_rate=rate,
        throughput=hist.count * batch / duration,
        avg_ms=hist.mean_ns() / 1e6, p50_ms=ms(50), p90_ms=ms(90), p95_ms=ms(95), p99_ms=ms(99),
        requests=hist.count, errors=errors, duration_s=duration, windows=len(measured), stable=stable,
        server=breakdown(before, kept[-1].stats), warnings=(*warnings, *extra_warnings),
    )
