"""The noise model and the search's decision constants. The flags' defaults are in settings.

A point's windows are a sample. Every verdict (:func:`meets`, :func:`breaks`, :func:`better`,
:func:`not_ahead`, :func:`ahead`) compares intervals. An interval is a mean over the windows with a
one-sided Student's t bound at :data:`CONFIDENCE`. Across servers, :data:`SERVER_CV` widens it.
docs/search.md lists the constants."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# ---------------------------------------------------------------- the knobs (docs/search.md lists them)
# Every verdict uses these.
CONFIDENCE = 0.95  # one-sided, per verdict: a verdict is wrong at most 5% of the times it is given
SERVER_CV = 0.03  # how far fresh servers of one config read apart, as a relative sd
MIN_WINDOWS = 2  # the fewest windows a point is judged on; its variance needs two
RESOLUTION = 0.02  # a throughput shown less than this share above another cannot beat it by enough to matter
# An open loop's goodput search uses these (search.level_search.find_rate_goodput).
RATE_RESOLUTION = 0.10  # the search stops once its first bad rate is within this share of its last good one
RATE_HEADROOM = 0.6  # below this fraction of the limit a rate doubles; above it, it grows by 2 resolutions
# The seeds use this (search.walk.heuristic_seeds).
GPU_SEED_COUNTS = (1, 2)  # the instance counts per GPU that the seeds of a KIND_GPU space try
# Every point after a server's first one uses this. The first point gets the plan's warm-up.
RAMP_S = 0.3  # seconds of warm-up before each point after a server's first one


# One-sided Student's t at 95%, for 1 to 30 degrees of freedom. Above 30, t95 uses the normal's 1.645.
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771,
        1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706,
        1.703, 1.701, 1.699, 1.697)  # fmt: skip


def t95(df: int) -> float:
    """The one-sided Student's t quantile at :data:`CONFIDENCE` for ``df`` degrees of freedom.
    It is infinite below one degree of freedom."""
    return math.inf if df < 1 else _T95[df - 1] if df <= len(_T95) else 1.645


@dataclass(frozen=True)
class Estimate:
    """A mean and its standard error from ``n`` readings. It has ``n - 1`` degrees of freedom,
    unless ``dof`` (>= 0) gives those of the pooled :class:`Noise` that its error comes from."""

    mean: float
    se: float
    n: int
    dof: int = -1

    @classmethod
    def of(cls, values: Sequence[float]) -> Estimate:
        """The estimate from ``values``. One reading gives an infinite error. No readings give a
        zero mean."""
        mean = statistics.fmean(values) if values else 0.0
        se = _stdev(values, mean) / math.sqrt(len(values)) if len(values) >= 2 else math.inf
        return cls(mean, se, len(values))

    @property
    def df(self) -> int:
        return self.dof if self.dof >= 0 else max(0, self.n - 1)

    @property
    def low(self) -> float:
        """The one-sided lower bound at :data:`CONFIDENCE`. With a zero error, it is the mean."""
        return self.mean - t95(self.df) * self.se if self.se else self.mean

    @property
    def high(self) -> float:
        """The one-sided upper bound at :data:`CONFIDENCE`. With a zero error, it is the mean."""
        return self.mean + t95(self.df) * self.se if self.se else self.mean

    def across_servers(self) -> Estimate:
        """This estimate with :data:`SERVER_CV` added to its error, to compare with another
        server's."""
        return Estimate(self.mean, math.hypot(self.se, SERVER_CV * abs(self.mean)), self.n, self.dof)

    def scaled(self, factor: float) -> Estimate:
        """The estimate of ``factor`` times the quantity. For a figure per GPU, ``factor`` is one
        over the GPUs."""
        return Estimate(self.mean * factor, self.se * factor, self.n, self.dof)


@dataclass(frozen=True)
class Noise:
    """How much a window's throughput varies about its point's mean, pooled over points. It is a
    relative standard deviation (``cv``) with its degrees of freedom (``df``). Latencies are pooled
    the same way."""

    cv: float = 0.0
    df: int = 0

    @classmethod
    def pooled(cls, samples: Iterable[Sequence[float]]) -> Noise:
        """The noise pooled over ``samples`` of window throughputs. A sample adds nothing when it
        has fewer than two windows or a mean of zero or less."""
        squares, df = 0.0, 0
        for values in samples:
            mean = statistics.fmean(values) if values else 0.0
            if len(values) >= 2 and mean > 0:
                squares += (len(values) - 1) * (_stdev(values, mean) / mean) ** 2
                df += len(values) - 1
        return cls(math.sqrt(squares / df), df) if df else cls()

    def estimate(self, mean: float, values: Sequence[float]) -> Estimate:
        """``mean`` with the standard error of its windows, ``values``. The error comes from this
        pooled noise when that has more degrees of freedom than the windows. Else it comes from the
        windows themselves."""
        own = Estimate.of(values)
        if self.df <= own.df or not values:
            return Estimate(mean, own.se, own.n)
        return Estimate(mean, self.cv * abs(mean) / math.sqrt(len(values)), len(values), self.df)


@dataclass(frozen=True)
class NodeSpread:
    """How far one config reads apart between nodes, beyond how far fresh servers on one node
    read apart: a relative sd (``cv``), from ``across`` pairs of rounds on two nodes and ``within``
    pairs on one."""

    cv: float
    across: int
    within: int


def node_spread(racers: Iterable[Sequence[tuple[str, float]]]) -> NodeSpread | None:
    """The node part of the noise, from race rounds: each racer's rounds as (node, throughput).

    Two rounds of one racer differ in the log by their servers' spread and their windows' (on one
    node), and by the nodes' too (on two): half the difference of the mean squares of the two kinds
    of pairs is the nodes' variance. None without both kinds of pairs."""
    within: list[float] = []
    across: list[float] = []
    for rounds in racers:
        read = [(node, math.log(t)) for node, t in rounds if node and t > 0]
        for i, (node_a, a) in enumerate(read):
            for node_b, b in read[i + 1 :]:
                (within if node_a == node_b else across).append((a - b) ** 2)
    if not within or not across:
        return None
    variance = (statistics.fmean(across) - statistics.fmean(within)) / 2
    return NodeSpread(math.sqrt(max(0.0, variance)), len(across), len(within))


def meets(latency: Estimate, limit_ms: float) -> bool:
    """Whether the latency's upper bound is within ``limit_ms``."""
    return latency.high <= limit_ms


def breaks(latency: Estimate, limit_ms: float) -> bool:
    """Whether the latency's lower bound is over ``limit_ms``."""
    return latency.low > limit_ms


def better(a: Estimate, b: Estimate, paired: Estimate | None = None) -> bool:
    """Whether ``a`` is shown higher than ``b``. The lower bound of ``a`` less ``b``
    (:func:`_bound`, or ``paired``'s) must be above zero."""
    return a.mean - b.mean - _bound(a, b, paired) > 0


def not_ahead(a: Estimate, b: Estimate, by: float = RESOLUTION, paired: Estimate | None = None) -> bool:
    """Whether ``a`` is shown not to lead ``b`` by ``by`` times ``b``'s figure. The upper bound of
    ``a`` less ``b`` (:func:`_bound`, or ``paired``'s) must be below that margin."""
    return a.mean - b.mean + _bound(a, b, paired) < by * abs(b.mean)


def ahead(a: Estimate, b: Estimate, by: float = RESOLUTION) -> bool:
    """Whether ``a`` is shown to lead ``b`` by ``by`` times ``b``'s figure. The lower bound of
    ``a`` less ``b`` (:func:`_bound`) must be above that margin. A winner is tested this way against
    your config, raced beside it."""
    return a.mean - b.mean - _bound(a, b) > by * abs(b.mean)


def relative_bound(a: Estimate, b: Estimate) -> float:
    """The one-sided bound of log(``a`` / ``b``). It combines both relative errors and uses the
    fewer degrees of freedom. A ratio's interval is its figure times exp(-this) to exp(+this). It is
    inf when a mean is not positive or the errors cannot tell."""
    if a.mean <= 0 or b.mean <= 0:
        return math.inf
    return t95(min(a.df, b.df)) * math.hypot(a.se / a.mean, b.se / b.mean)


def _bound(a: Estimate, b: Estimate, paired: Estimate | None = None) -> float:
    """The one-sided bound of ``a`` less ``b``. It combines both errors and uses the fewer
    degrees of freedom; ``paired``: their differences read pair by pair (each reading of ``a``
    beside one of ``b``, on one server), whose own error it is then."""
    if paired is not None:
        return t95(paired.df) * paired.se
    return t95(min(a.df, b.df)) * math.hypot(a.se, b.se)


def _stdev(values: Sequence[float], mean: float) -> float:
    """The sample standard deviation of ``values`` about their known ``mean``. It is a fast
    version for floats."""
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
