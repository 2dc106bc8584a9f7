"""The noise model: a point's windows are a sample, and every verdict is a statement about intervals.

A point measured in k windows has k readings of its throughput and k of its latency at the
SLA's percentile. Their mean, with Student's t over the windows (each window a batch mean, as
criterion.rs and AIPerf take them), is an interval with a stated error rate: :data:`CONFIDENCE`
one-sided, for each verdict on its own. A window says nothing of how a freshly started server
reads against another: :data:`SERVER_CV` (a relative standard deviation between servers) widens
every comparison between points measured on different servers, until the finalists' race,
which measures it on fresh servers itself.

The verdicts, each one rule:

- **meets** the SLA: the latency's upper bound is within the limit; **breaks** it: the lower
  bound is over; otherwise **undecided** (measure more windows, or at the budget say so and
  count it as not meeting);
- **better**: a throughput's lower bound is over another's upper bound (the difference's
  bound, with both standard errors); **cannot win**: the best one's is better than this one;
  neither: **tied**; **not ahead**: the difference's upper bound (this one less the other)
  lies below :data:`RESOLUTION` of the other's figure: this one cannot beat it by a
  difference worth having (a non-inferiority test, the other way round).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# ---------------------------------------------------------------- the knobs

CONFIDENCE = 0.95  # one-sided, per verdict: a verdict is wrong at most 5% of the times it is given
SERVER_CV = 0.03  # how far a fresh server of one config reads off another's (relative sd)
MIN_WINDOWS = 2  # the fewest windows a point is judged on (its variance needs two)
RESOLUTION = 0.02  # a throughput shown not this share above another cannot beat it by enough to matter

# Student's t at 95% one-sided, by degrees of freedom (1-30); above 30, the normal's 1.645.
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771,
        1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706,
        1.703, 1.701, 1.699, 1.697)  # fmt: skip


def t95(df: int) -> float:
    """Student's t quantile at :data:`CONFIDENCE` (one-sided) for ``df`` degrees of freedom."""
    if df < 1:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else 1.645


@dataclass(frozen=True)
class Estimate:
    """A mean and its standard error from ``n`` readings, with ``n - 1`` degrees of freedom or
    (``dof`` >= 0) those of the pooled noise its error comes from (:class:`Noise`)."""

    mean: float
    se: float
    n: int
    dof: int = -1

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """From readings (one reading: an infinite error; none: a zero mean)."""
        if not values:
            return cls(0.0, math.inf, 0)
        mean = statistics.fmean(values)
        if len(values) < 2:
            return cls(mean, math.inf, 1)
        return cls(mean, _stdev(values, mean) / math.sqrt(len(values)), len(values))

    @property
    def df(self) -> int:
        return self.dof if self.dof >= 0 else max(0, self.n - 1)

    @property
    def low(self) -> float:
        """The one-sided lower bound at :data:`CONFIDENCE` (no error: the mean itself)."""
        return self.mean - t95(self.df) * self.se if self.se else self.mean

    @property
    def high(self) -> float:
        """The one-sided upper bound at :data:`CONFIDENCE` (no error: the mean itself)."""
        return self.mean + t95(self.df) * self.se if self.se else self.mean

    def across_servers(self) -> Estimate:
        """This estimate as one to compare with another server's: :data:`SERVER_CV` added."""
        return Estimate(self.mean, math.hypot(self.se, SERVER_CV * abs(self.mean)), self.n, self.dof)

    def scaled(self, factor: float) -> Estimate:
        """The same estimate of ``factor`` times the quantity (per GPU: divided by the GPUs)."""
        return Estimate(self.mean * factor, self.se * factor, self.n, self.dof)


@dataclass(frozen=True)
class Noise:
    """How much a window's throughput varies about its point's mean, pooled over points (each
    on its own server, its windows a sample): a relative standard deviation with its degrees of
    freedom. A point's own two or three windows say little of their spread; the points of a
    search, all of one model on one machine, say it with many more."""

    cv: float = 0.0
    df: int = 0

    @classmethod
    def pooled(cls, samples: Iterable[Sequence[float]]) -> Noise:
        """From samples of window throughputs (those of fewer than two windows add nothing)."""
        squares, df = 0.0, 0
        for values in samples:
            mean = statistics.fmean(values) if values else 0.0
            if len(values) >= 2 and mean > 0:
                squares += (len(values) - 1) * (_stdev(values, mean) / mean) ** 2
                df += len(values) - 1
        return cls(math.sqrt(squares / df), df) if df else cls()

    def estimate(self, mean: float, values: Sequence[float]) -> Estimate:
        """``mean`` (a point's figure) with the standard error of its windows ``values``: the
        pooled noise's where it has more degrees of freedom than the point's own."""
        own = Estimate.of(values)
        if self.df <= own.df or not values:
            return Estimate(mean, own.se, own.n)
        return Estimate(mean, self.cv * abs(mean) / math.sqrt(len(values)), len(values), self.df)


def meets(latency: Estimate, limit_ms: float) -> bool:
    """The latency's upper bound is within the limit."""
    return latency.high <= limit_ms


def breaks(latency: Estimate, limit_ms: float) -> bool:
    """The latency's lower bound is over the limit."""
    return latency.low > limit_ms


def better(a: Estimate, b: Estimate) -> bool:
    """``a`` is higher than ``b``: the difference's lower bound (both errors, the fewer degrees
    of freedom of the two) is above zero."""
    return a.mean - b.mean - _bound(a, b) > 0


def not_ahead(a: Estimate, b: Estimate, by: float = RESOLUTION) -> bool:
    """``a`` is shown not ahead of ``b`` by ``by`` of ``b``'s figure: the difference's upper
    bound (``a`` less ``b``; both errors, the fewer degrees of freedom) is below it. Whatever is
    worse than ``b`` (:func:`better`) is not ahead of it either."""
    return a.mean - b.mean + _bound(a, b) < by * abs(b.mean)


def _bound(a: Estimate, b: Estimate) -> float:
    """How far the difference of ``a`` and ``b`` may lie from its figure, one-sided at
    :data:`CONFIDENCE` (both errors, the fewer degrees of freedom of the two)."""
    return t95(min(a.df, b.df)) * math.hypot(a.se, b.se)


def _stdev(values: Sequence[float], mean: float) -> float:
    """The sample standard deviation of ``values`` about their ``mean`` (floats, fast)."""
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
