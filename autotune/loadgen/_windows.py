"""Measurement windows, perf_analyzer's way, for closed and open loop alike.

Warmup is discarded. Each window collects the load's :class:`Tally` (completions in a
bounded histogram, errors, open-loop lateness) and ends with a statistics snapshot from
the server and, given a GPU probe, one sample of the server's GPUs (taken at the same time,
the probe in a thread; the point's GPU figures summarise the kept windows' samples); a
window with fewer than ``min_requests`` completions is extended (up to 4x).
A plan with a limit (``limit_ms``: the search's and the race's) stops once the latency's
interval over the windows, centred on the point's figure over all their requests (the one it is
judged on), lies on one side of it (:func:`autotune.search.sampling.windows_done`), and
its figures are every window's after the first ones a warm-up still held
(:func:`autotune.search.sampling.warm_windows`: dropped, and recorded on the point), each kept window's
kept as the point's sample. Without one, the run
stops when the last ``stable_windows`` windows agree within the tolerance (throughput and
latency at the plan's percentile), as perf_analyzer's do, and the figures come from them; at
``max_windows`` either stops with an ``unstable`` warning.

Open loop adds ``behind-schedule`` when the generator did not send what the schedule
asked for: fewer than 98% of the due requests (less 2, for small counts) sent in the kept
windows; the server then saw less load than asked, and the point is not trusted. It adds
``late-sends`` when the p99 send lateness is above max(2 ms, 10% of the p50 latency): the
latency counts from the scheduled send, so such a point is pessimistic, not wrong.
An open loop's windows count as stable within the counting noise of their completions too
(``2 / sqrt(n)``: a Poisson window of 50 arrivals varies by 14% by itself).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from autotune import gpu
from autotune.errors import MeasurementError
from autotune.gpu import GpuProbe, GpuSample
from autotune.loadgen._histogram import LatencyHistogram
from autotune.loadgen._load import Tally
from autotune.loadgen._stats import StatsSnapshot, breakdown
from autotune.points import BEHIND_SCHEDULE, ERRORS, FEW_SAMPLES, LATE_SENDS, UNSTABLE, Point, WindowPlan
from autotune.search.sampling import warm_windows, windows_done

STATS_TIMEOUT_S = 10.0
SENT_FRACTION = 0.98
SENT_SLACK = 2  # requests: at a window's end a burst may still wait for a connection
COUNT_NOISE = 2.0  # an open loop's stability tolerance is at least this / sqrt(completions)
LATE_FLOOR_MS = 2.0
LATE_FRACTION = 0.10


class Source(Protocol):
    """A running load: one event loop's, or worker processes' merged."""

    async def wait(self, seconds: float) -> None: ...

    async def collect(self) -> Tally: ...


Stats = Callable[[], Awaitable[StatsSnapshot]]


@dataclass(frozen=True)
class Window:
    tally: Tally
    stats: StatsSnapshot  # the server's counters at the window's end
    gpus: tuple[GpuSample, ...] = ()  # the server's GPUs at the window's end (none: no probe, or no answer)
    beside: tuple[Tally, ...] = ()  # each load of ``run_windows``'s ``beside``, over the same window


async def run_windows(
    source: Source,
    stats: Stats,
    plan: WindowPlan,
    probe: GpuProbe | None = None,
    beside: Sequence[tuple[Source, WindowPlan]] = (),
) -> tuple[StatsSnapshot, list[Window]]:
    """The snapshot before the first window, and the windows measured (each with a sample of
    ``probe``, when there is one). ``beside``: loads of other models running at the same time
    (several models on one server), each with its own plan, collected at every window's end:
    their tallies cover the same time as the window's. The windows stop once every model's may:
    a model beside may still need windows after its warm-up, or to settle on its own limit."""
    await source.wait(plan.warmup_s)
    await source.collect()  # the warmup's tally is dropped
    for other, _ in beside:
        await other.collect()
    before = await _stats(stats)
    windows: list[Window] = []
    while len(windows) < plan.max_windows:
        await source.wait(plan.window_s)
        tally, waited = await source.collect(), plan.window_s
        while tally.completions < plan.min_requests and waited < 4 * plan.window_s:
            await source.wait(plan.window_s / 4)
            tally, waited = tally.then(await source.collect()), waited + plan.window_s / 4
        theirs = tuple([await other.collect() for other, _ in beside])
        snapshot, gpus = await asyncio.gather(_stats(stats), _sample(probe))
        windows.append(Window(tally, snapshot, gpus, theirs))
        if _done(windows, plan)[0] and all(
            _done(beside_windows(windows, i), their_plan)[0] for i, (_, their_plan) in enumerate(beside)
        ):
            break
    return before, windows


def beside_windows(windows: Sequence[Window], i: int) -> list[Window]:
    """The windows of the ``i``-th model beside, each with the window's server snapshot."""
    return [Window(w.beside[i], w.stats) for w in windows]


async def _stats(stats: Stats) -> StatsSnapshot:
    try:
        return await asyncio.wait_for(stats(), STATS_TIMEOUT_S)
    except asyncio.TimeoutError as exc:
        raise MeasurementError(
            f"the server did not answer a statistics request in {STATS_TIMEOUT_S:.0f} s"
        ) from exc


async def _sample(probe: GpuProbe | None) -> tuple[GpuSample, ...]:
    """One sample of the server's GPUs, taken off the event loop (none without a probe)."""
    return await asyncio.to_thread(probe.sample) if probe is not None else ()


def _done(windows: list[Window], plan: WindowPlan) -> tuple[bool, bool]:
    """Whether the windows may stop, and whether they are stable
    (:func:`autotune.search.sampling.windows_done`, which reads the last windows it needs); an
    open loop's tolerance from the kept ones."""
    kept = _kept(windows, plan)
    read = kept if plan.limit_ms > 0 else windows  # the rules read the last windows they need
    throughputs = [w.tally.completions / w.tally.duration_s for w in read if w.tally.duration_s > 0]
    latencies = [_latency_ms(w, plan) for w in read]
    figure = None  # the point's figure over all its requests: only a limit's verdict reads it
    if plan.limit_ms > 0:
        figure = LatencyHistogram.merged(w.tally.latency for w in kept).percentile_ns(plan.percentile) / 1e6
    return windows_done(throughputs, latencies, plan, tolerance(kept, plan), figure)


def _kept(windows: list[Window], plan: WindowPlan) -> list[Window]:
    """The windows a point's figures come from: with a limit, those after the first ones a warm-up
    still held (:func:`autotune.search.sampling.warm_windows`); without, the last ``stable_windows``."""
    if plan.limit_ms <= 0:
        return windows[-plan.stable_windows :]
    return windows[warm_windows([_latency_ms(w, plan) for w in windows], plan.latency_noise) :]


def _latency_ms(window: Window, plan: WindowPlan) -> float:
    return window.tally.latency.percentile_ns(plan.percentile) / 1e6


def tolerance(windows: list[Window], plan: WindowPlan) -> float:
    """The plan's; an open loop's at least the counting noise of its smallest window."""
    if not windows or not all(w.tally.due for w in windows):
        return plan.tolerance
    fewest = max(1, min(int(w.tally.completions) for w in windows))
    return max(plan.tolerance, COUNT_NOISE / math.sqrt(fewest))


def summarise(
    before: StatsSnapshot,
    windows: list[Window],
    plan: WindowPlan,
    *,
    concurrency: int,
    rate: float,
    batch: int,
) -> Point:
    """A Point from the last ``stable_windows`` windows (a plan with a limit: from every window
    after those a warm-up still held, :func:`_kept`), each kept window's throughput and latency
    kept as the point's sample."""
    kept = _kept(windows, plan)
    warm = windows[: len(windows) - len(kept)] if plan.limit_ms > 0 else []
    start = windows[len(windows) - len(kept) - 1].stats if len(windows) > len(kept) else before
    tally = kept[0].tally
    for window in kept[1:]:
        tally = tally.then(window.tally)
    hist = tally.latency
    if hist.count == 0:
        hung = f"no request completed in {tally.duration_s:.1f} s (is the server hung?)"
        reason = tally.first_error or hung
        level = f"request rate {rate:g}/s" if rate else f"concurrency {concurrency}"
        raise MeasurementError(f"no successful request at {level}: {reason}")
    stable = _done(windows, plan)[1]
    samples = [w.tally for w in kept if w.tally.duration_s > 0]

    def ms(q: float) -> float:
        return hist.percentile_ns(q) / 1e6

    late_p99 = tally.lateness.percentile_ns(99) / 1e6
    warnings = [UNSTABLE] if not stable else []
    warnings += [ERRORS] if tally.errors else []
    warnings += [FEW_SAMPLES] if hist.count < 100 else []
    warnings += [BEHIND_SCHEDULE] if rate and behind_schedule(tally) else []
    warnings += [LATE_SENDS] if rate and late_sends(late_p99, ms(50)) else []
    return Point(
        concurrency=concurrency, request_rate=rate,
        throughput=hist.count * batch / tally.duration_s,
        avg_ms=hist.mean_ns() / 1e6, p50_ms=ms(50), p90_ms=ms(90), p95_ms=ms(95), p99_ms=ms(99),
        requests=hist.count, errors=tally.errors, duration_s=tally.duration_s, windows=len(windows),
        stable=stable, server=breakdown(start, kept[-1].stats), warnings=tuple(warnings),
        send_rate=tally.sent / tally.duration_s if rate else 0.0, send_late_p99_ms=late_p99,
        gpus=gpu.summarise([w.gpus for w in kept]),
        client_stalls=tally.stalls, client_stall_ms=tally.stall_s * 1000,
        first_error=tally.first_error[:300],
        window_throughputs=tuple(t.completions * batch / t.duration_s for t in samples),
        window_latencies_ms=tuple(t.latency.percentile_ns(plan.percentile) / 1e6 for t in samples),
        window_percentile=plan.percentile,
        warm_windows_ms=tuple(_latency_ms(w, plan) for w in warm),
    )  # fmt: skip


def behind_schedule(tally: Tally) -> bool:
    """The generator did not send what its schedule asked (see the module docstring)."""
    return tally.sent < SENT_FRACTION * tally.due - SENT_SLACK


def late_sends(late_p99_ms: float, p50_ms: float) -> bool:
    """The generator sent requests late (counted in their latency; see the module docstring)."""
    return late_p99_ms > max(LATE_FLOOR_MS, LATE_FRACTION * p50_ms)
