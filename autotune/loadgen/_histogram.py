"""A bounded latency histogram: log-spaced buckets, ~0.5% relative precision, fixed memory.

Recording is O(1) and allocates nothing per request; percentiles are read by a cumulative
scan. Histograms of windows merge by adding counts. Values are nanoseconds.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable

_GROWTH = 1.005
_LOG_GROWTH = math.log(_GROWTH)
_MIN_NS = 1_000  # 1 us: everything below lands in bucket 0
_MAX_NS = 600 * 1_000_000_000  # 10 minutes: everything above lands in the last bucket
_BUCKETS = int(math.log(_MAX_NS / _MIN_NS) / _LOG_GROWTH) + 2


class LatencyHistogram:
    __slots__ = ("_counts", "count", "max_ns", "min_ns", "total_ns")

    def __init__(self) -> None:
        self._counts = array("q", bytes(8 * _BUCKETS))
        self.count = 0
        self.total_ns = 0
        self.min_ns = 0
        self.max_ns = 0

    def record(self, ns: int) -> None:
        self._counts[_bucket(ns)] += 1
        if self.count == 0 or ns < self.min_ns:
            self.min_ns = ns
        if ns > self.max_ns:
            self.max_ns = ns
        self.count += 1
        self.total_ns += ns

    def merge(self, other: LatencyHistogram) -> None:
        if other.count == 0:
            return
        counts = self._counts
        for i, n in enumerate(other._counts):
            if n:
                counts[i] += n
        self.min_ns = other.min_ns if self.count == 0 else min(self.min_ns, other.min_ns)
        self.max_ns = max(self.max_ns, other.max_ns)
        self.count += other.count
        self.total_ns += other.total_ns

    @classmethod
    def merged(cls, parts: Iterable[LatencyHistogram]) -> LatencyHistogram:
        out = cls()
        for part in parts:
            out.merge(part)
        return out

    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0

    def percentile_ns(self, q: float) -> float:
        """The q-th percentile (0 < q <= 100), nearest-rank, clamped to the exact min/max."""
        if self.count == 0:
            return 0.0
        rank = max(1, math.ceil(q / 100.0 * self.count))
        if rank >= self.count:
            return float(self.max_ns)
        seen = 0
        for i, n in enumerate(self._counts):
            seen += n
            if seen >= rank:
                return min(max(_value(i), float(self.min_ns)), float(self.max_ns))
        return float(self.max_ns)


def _bucket(ns: int) -> int:
    if ns <= _MIN_NS:
        return 0
    index = int(math.log(ns / _MIN_NS) / _LOG_GROWTH) + 1
    return index if index < _BUCKETS else _BUCKETS - 1


def _value(index: int) -> float:
    """A bucket's representative value: the geometric middle of its bounds."""
    if index == 0:
        return float(_MIN_NS)
    return _MIN_NS * _GROWTH ** (index - 0.5)
