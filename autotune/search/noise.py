"""The noise model, and the search's decision constants (the flags' defaults are in settings).

A point's windows are a sample; every verdict (:func:`meets`, :func:`breaks`, :func:`better`,
:func:`not_ahead`, :func:`ahead`) is one on intervals: a mean with Student's t over its windows,
one-sided at :data:`CONFIDENCE`, widened by :data:`SERVER_CV` across servers. docs/search.md
lists the constants."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# ---------------------------------------------------------------- the knobs (docs/search.md lists them)
# every verdict
CONFIDENCE = 0.95  # one-sided, per verdict: a verdict is wrong at most 5% of the times it is given
SERVER_CV = 0.03  # how far a fresh server of one config reads off another's (relative sd)
MIN_WINDOWS = 2  # the fewest windows a point is judged on (its variance needs two)
RESOLUTION = 0.02  # a throughput shown not this share above another cannot beat it by enough to matter
# an open loop's goodput search (search.level_search.find_rate_goodput)
RATE_RESOLUTION = 0.10  # an open loop's search stops once its last good rate is this close to its first bad
RATE_HEADROOM = 0.6  # under this fraction of the limit a rate doubles; above, it grows by 2 resolutions
# the seeds (search.walk.heuristic_seeds)
GPU_SEED_COUNTS = (1, 2)  # instances per GPU the seeds of a KIND_GPU space try
# a point's warm-up after its server's first point (the first gets the plan's)
RAMP_S = 0.3  # warm-up before each point after a server's first one (the first gets the plan's)


# Student's t at 95% one-sided, by degrees of freedom (1-30); above 30, the normal's 1.645.
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771,
        1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706,
        1.703, 1.701, 1.699, 1.697)  # fmt: skip


def t95(df: int) -> float:
    """Student's t quantile at :data:`CONFIDENCE` (one-sided) for ``df`` degrees of freedom."""
    return math.inf if df < 1 else _T95[df - 1] if df <= len(_T95) else 1.645


@dataclass(frozen=True)
class Estimate:
    """A mean and its standard error from ``n`` readings, with ``n - 1`` degrees of freedom or
    (``dof`` >= 0) those of the pooled :class:`Noise` its error comes from."""

    mean: float
    se: float
    n: int
    dof: int = -1

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """From readings (one reading: an infinite error; none: a zero mean)."""
        mean = statistics.fmean(values) if values else 0.0
        se = _stdev(values, mean) / math.sqrt(len(values)) if len(values) >= 2 else math.inf
        return cls(mean, se, len(values))

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
    """How much a window's throughput varies about its point's mean, pooled over points: a
    relative standard deviation with its degrees of freedom."""

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
        """``mean`` with its windows' (``values``) standard error, from the pooled noise where
        that has more degrees of freedom than they have."""
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
    """``a`` is higher than ``b``: the difference's lower bound (:func:`_bound`) is above zero."""
    return a.mean - b.mean - _bound(a, b) > 0


def not_ahead(a: Estimate, b: Estimate, by: float = RESOLUTION) -> bool:
    """``a`` is shown not ahead of ``b`` by ``by`` of ``b``'s figure: the upper bound of ``a``
    less ``b`` (:func:`_bound`) is below it."""
    return a.mean - b.mean + _bound(a, b) < by * abs(b.mean)


def ahead(a: Estimate, b: Estimate, by: float = RESOLUTION) -> bool:
    """``a`` is shown ahead of ``b`` by ``by`` of ``b``'s figure: the lower bound of ``a`` less
    ``b`` (:func:`_bound`) is above it (a winner against your config, raced beside it)."""
    return a.mean - b.mean - _bound(a, b) > by * abs(b.mean)


def relative_bound(a: Estimate, b: Estimate) -> float:
    """The one-sided bound of log(``a`` / ``b``): both relative errors, the fewer degrees of
    freedom (a ratio's interval is its figure times exp(-+ this)); inf without errors to tell."""
    if a.mean <= 0 or b.mean <= 0:
        return math.inf
    return t95(min(a.df, b.df)) * math.hypot(a.se / a.mean, b.se / b.mean)


def _bound(a: Estimate, b: Estimate) -> float:
    """The one-sided bound of ``a`` less ``b``: both errors, the fewer degrees of freedom."""
    return t95(min(a.df, b.df)) * math.hypot(a.se, b.se)


def _stdev(values: Sequence[float], mean: float) -> float:
    """The sample standard deviation of ``values`` about their ``mean`` (floats, fast)."""
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
