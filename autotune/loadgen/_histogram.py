"""A bounded latency histogram: log-spaced buckets, ~0.5% relative precision, fixed memory.

Recording is O(1) and allocates nothing per request; percentiles are read by a cumulative
scan. The buckets are fixed, so histograms of windows or of worker processes merge by
adding counts. Pickling sends only the non-empty buckets, as two arrays (indices and
counts): what crosses between processes is a few kilobytes, whatever the request count.
Values are nanoseconds.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

_GROWTH = 1.005
_LOG_GROWTH = math.log(_GROWTH)
_MIN_NS = 1_000  # 1 us: everything below lands in bucket 0
_MAX_NS = 600 * 1_000_000_000  # 10 minutes: everything above lands in the last bucket
_BUCKETS = int(math.log(_MAX_NS / _MIN_NS) / _LOG_GROWTH) + 2
_LOG = math.log
_SCALE = 1.0 / _LOG_GROWTH


class LatencyHistogram:
    __slots__ = ("_counts", "count", "max_ns", "min_ns", "total_ns")

    def __init__(self) -> None:
        self._counts = array("q", bytes(8 * _BUCKETS))
        self.count = 0
        self.total_ns = 0
        self.min_ns = 0
        self.max_ns = 0

    def record(self, ns: int) -> None:
        if ns <= _MIN_NS:
            self._counts[0] += 1
        else:
            index = int(_LOG(ns / _MIN_NS) * _SCALE) + 1
            self._counts[index if index < _BUCKETS else _BUCKETS - 1] += 1
        if self.count == 0 or ns < self.min_ns:
            self.min_ns = ns
        if ns > self.max_ns:
            self.max_ns = ns
        self.count += 1
        self.total_ns += ns

    def merge(self, other: LatencyHistogram) -> None:
        if other.count == 0:
            return
        mine = np.frombuffer(self._counts, dtype=np.int64)
        mine += np.frombuffer(other._counts, dtype=np.int64)
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
        cumulative = np.cumsum(np.frombuffer(self._counts, dtype=np.int64))
        index = int(np.searchsorted(cumulative, rank))
        if index >= _BUCKETS:
            return float(self.max_ns)
        return min(max(_value(index), float(self.min_ns)), float(self.max_ns))

    def bucket_counts(self) -> tuple[NDArray[Any], NDArray[Any]]:
        """(indices, counts) of the non-empty buckets."""
        counts = np.frombuffer(self._counts, dtype=np.int64)
        indices = np.flatnonzero(counts)
        return indices.astype(np.int32), counts[indices].copy()

    @classmethod
    def from_bucket_counts(
        cls, indices: NDArray[Any], counts: NDArray[Any], *, total_ns: int, min_ns: int, max_ns: int
    ) -> LatencyHistogram:
        out = cls()
        np.frombuffer(out._counts, dtype=np.int64)[indices] = counts
        out.count = int(counts.sum())
        out.total_ns, out.min_ns, out.max_ns = total_ns, min_ns, max_ns
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        indices, counts = self.bucket_counts()
        return (_restore, (indices, counts, self.total_ns, self.min_ns, self.max_ns))


def _restore(
    indices: NDArray[Any], counts: NDArray[Any], total_ns: int, min_ns: int, max_ns: int
) -> LatencyHistogram:
    return LatencyHistogram.from_bucket_counts(
        indices, counts, total_ns=total_ns, min_ns=min_ns, max_ns=max_ns
    )


def _value(index: int) -> float:
    """A bucket's representative value: the geometric middle of its bounds."""
    if index == 0:
        return float(_MIN_NS)
    return float(_MIN_NS * _GROWTH ** (index - 0.5))
