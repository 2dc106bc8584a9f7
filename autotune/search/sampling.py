"""A point's sample. :func:`windows_done` says when a point's windows may stop.
:func:`warm_windows` says how many of its first windows were still warming up."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from autotune.points import WindowPlan
from autotune.search.noise import MIN_WINDOWS, Estimate, Noise, breaks, meets, t95


def is_stable(throughputs: Sequence[float], latencies: Sequence[float], tolerance: float) -> bool:
    """Whether the windows are stable by perf_analyzer's rule. The last 3 windows' throughputs,
    and their latencies, must each lie within ``tolerance`` (a fraction) of their mean."""
    if len(throughputs) < 3 or len(latencies) < 3:
        return False
    return _within(throughputs[-3:], tolerance) and _within(latencies[-3:], tolerance)


def windows_done(
    throughputs: Sequence[float], latencies_ms: Sequence[float], plan: WindowPlan, tolerance: float,
    figure_ms: float | None = None,
) -> tuple[bool, bool]:  # fmt: skip
    """Whether a point's windows may stop, and whether they are stable.

    ``throughputs`` and ``latencies_ms`` hold every window so far. Each rule reads the last ones
    it needs. When ``plan`` has a latency limit, the windows stop once there are at least
    :data:`autotune.search.noise.MIN_WINDOWS` of them and the latency's interval lies on one side
    of the limit. They then count as stable. The interval pools the plan's earlier windows with
    these, and it is the interval the point is judged on. Its error is the windows'. Its centre is
    ``figure_ms``, the latency over all the point's requests so far (:meth:`Point.latency_estimate`).
    With earlier rounds, the centre is the mean of their figures and ``figure_ms``, as in
    :func:`autotune.search.racing.rounds_latency`. When ``figure_ms`` is None, the centre is the
    pooled windows' mean. Without a limit, the rule is perf_analyzer's stability
    (:func:`is_stable` with ``tolerance``)."""
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
    """How many of a point's first windows were still warming up.

    A test finds this initial transient, rather than a fixed ramp. Windows are dropped from the
    front while the first one's latency lies above the one-sided bound, at
    :data:`autotune.search.noise.CONFIDENCE`, for one more window like the later ones. One window
    is always left. Only a slow window is dropped, because a warm-up is slow. The spread is the
    run's ``noise``, pooled over its points, when that has more degrees of freedom than the later
    windows. The later windows' own spread is used instead when it is wider, or when the pooled
    noise has no more degrees of freedom. A fixed fraction would be a guess about every other
    machine."""
    dropped = 0
    while len(latencies_ms) - dropped >= 2:
        first, later = latencies_ms[dropped], latencies_ms[dropped + 1 :]
        mean = statistics.fmean(later)
        found, own = (noise or Noise()).estimate(mean, later), Estimate.of(later)
        # A point noisier than the run is judged by its own spread, when it has one.
        se = max(found.se, own.se) if math.isfinite(own.se) else found.se
        if mean <= 0 or not 0 < se < math.inf:
            break
        # One more window varies by its own spread (se * sqrt(n)) and by that of the later windows'
        # mean (se). Together they give se * sqrt(n + 1).
        if not first > mean + t95(found.df) * se * math.sqrt(found.n + 1):
            break
        dropped += 1
    return dropped


def _within(values: Sequence[float], tolerance: float) -> bool:
    mean = sum(values) / len(values)
    if mean <= 0:
        return False
    return all(abs(v - mean) <= tolerance * mean for v in values)
