"""A point's sample: when its windows stop (:func:`windows_done`), and which first windows a
warm-up still held (:func:`warm_windows`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from autotune.points import WindowPlan
from autotune.search.noise import MIN_WINDOWS, Estimate, Noise, breaks, meets, t95


def is_stable(throughputs: Sequence[float], latencies: Sequence[float], tolerance: float) -> bool:
    """perf_analyzer's rule: the last 3 windows' throughputs and latencies each within
    ``tolerance`` of their mean."""
    if len(throughputs) < 3 or len(latencies) < 3:
        return False
    return _within(throughputs[-3:], tolerance) and _within(latencies[-3:], tolerance)


def windows_done(
    throughputs: Sequence[float], latencies_ms: Sequence[float], plan: WindowPlan, tolerance: float,
    figure_ms: float | None = None,
) -> tuple[bool, bool]:  # fmt: skip
    """Whether a point's windows so far (each one's throughput and latency, every window: the
    rules read the last ones they need) may stop, and whether they are stable. With a limit:
    once at least :data:`autotune.search.noise.MIN_WINDOWS` put the latency's interval (with the plan's
    windows before) on one side of it (they are then "stable"); without, perf_analyzer's
    stability (:func:`is_stable`, ``tolerance``). The interval is the one the point is judged
    on: centred on ``figure_ms``, its latency over all its windows' requests so far
    (:meth:`Point.latency_estimate`; with rounds before, the mean of their figures and it, as
    :func:`autotune.search.racing.rounds_latency`), its error the windows'; None: the windows' mean."""
    if plan.limit_ms > 0:
        if len(latencies_ms) < MIN_WINDOWS:
            return False, False
        latency = Estimate.of([*plan.before_ms, *latencies_ms])
        if figure_ms is not None:
            centre = sum([*plan.before_figures_ms, figure_ms]) / (len(plan.before_figures_ms) + 1)
            latency = Estimate(centre, latency.se, latency.n)
        settled = meets(latency, plan.limit_ms) or breaks(latency, plan.limit_ms)
        return settled, settled
    stable = is_stable(throughputs, latencies_ms, tolerance)
    return stable, stable


def warm_windows(latencies_ms: Sequence[float], noise: Noise | None = None) -> int:
    """How many of a point's first windows a warm-up still held (the initial transient, by a
    test rather than a fixed ramp): the first window is dropped while its latency lies above the
    one-sided bound, at :data:`autotune.search.noise.CONFIDENCE`, of one more window read as the later
    ones are; one window is always left. The spread is ``noise`` (the run's, pooled over its
    points) where that has more degrees of freedom than the later windows, or theirs where they
    read wider; else theirs alone: a fixed fraction would be a guess about every other machine.
    Only a slow window is dropped: a warm-up is slow."""
    dropped = 0
    while len(latencies_ms) - dropped >= 2:
        first, later = latencies_ms[dropped], latencies_ms[dropped + 1 :]
        mean = statistics.fmean(later)
        found, own = (noise or Noise()).estimate(mean, later), Estimate.of(later)
        # a point noisier than the run's is judged by its own spread, where it has one
        se = max(found.se, own.se) if math.isfinite(own.se) else found.se
        if mean <= 0 or not 0 < se < math.inf:
            break
        # one more window's own spread (se * sqrt(n)) and that of the later windows' mean (se)
        if not first > mean + t95(found.df) * se * math.sqrt(found.n + 1):
            break
        dropped += 1
    return dropped


def _within(values: Sequence[float], tolerance: float) -> bool:
    mean = sum(values) / len(values)
    if mean <= 0:
        return False
    return all(abs(v - mean) <= tolerance * mean for v in values)
