"""The SLA constraint and the scores a study optimises (pure).

A latency SLA is a percentile (50, 90, 95 or 99) and a limit in milliseconds, optionally with
a ceiling on the GPU memory a point may use (``max_gpu_memory_mb``: the most any one GPU used,
:func:`autotune.gpu.peak_memory_mb`; a point without GPU figures is not held to it). A
candidate is feasible when its best operating point meets the SLA; its scores are the goodput
(the highest throughput that meets the SLA) and that point's latency.

:class:`Scoring` says what the goodput is compared by: the throughput itself, or, when the
search space holds candidates that use different numbers of GPUs (:func:`scoring_for`), the
throughput per GPU used, so that two GPUs must do twice the work of one to win. It is decided
once per run and told to every comparison: the study's scores, the search's pruning bound, the
finalists and the winner (:mod:`autotune.search`), the console and the report.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from autotune.errors import UsageError
from autotune.gpu import peak_memory_mb
from autotune.search_space import decode_gpus

if TYPE_CHECKING:
    from autotune.points import Point
    from autotune.search_space import Candidate, SearchSpace

PERCENTILES = (50, 90, 95, 99)
ABSURD_MS = 3_600_000.0  # an hour: a latency SLA beyond it is a typo


@dataclass(frozen=True)
class Sla:
    percentile: int
    limit_ms: float
    max_gpu_memory_mb: float | None = None  # None (or 0, made None): no limit
    # models served beside the tuned one (--models): each must meet its own SLA at every point
    # the tuned model's SLA admits (:meth:`admits`, read off :meth:`Point.other`)
    others: tuple[tuple[str, Sla], ...] = ()

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise UsageError(f"SLA percentile must be one of {PERCENTILES}, got {self.percentile}")
        if not self.limit_ms > 0:
            raise UsageError(f"SLA must be > 0 ms, got {self.limit_ms:g}")
        if self.limit_ms > ABSURD_MS:
            raise UsageError(f"SLA of {self.limit_ms:g} ms is over an hour; is the unit right?")
        memory = self.max_gpu_memory_mb
        if memory is not None and not memory >= 0:
            raise UsageError(f"--max-gpu-memory-mb must be >= 0 (0: no limit), got {memory:g}")
        object.__setattr__(self, "max_gpu_memory_mb", float(memory) if memory else None)

    @property
    def label(self) -> str:
        memory = f", GPU memory <= {self.max_gpu_memory_mb:g} MiB" if self.max_gpu_memory_mb else ""
        beside = "".join(f"; {name} {sla.label}" for name, sla in self.others)
        return f"p{self.percentile} <= {self.limit_ms:g} ms{memory}{beside}"

    def tightened(self, margin: float) -> Sla:
        """The SLA the search keeps: the limit times (1 - ``margin``), the headroom that
        ``--margin`` asks for (the window plan's verdict bands and the verification's headroom
        are both drawn from it); the models beside it keep the same headroom."""
        others = tuple((name, sla.tightened(margin)) for name, sla in self.others)
        return replace(self, limit_ms=self.limit_ms * (1.0 - margin), others=others)

    def memory_over_mb(self, point: Point) -> float:
        """How far the point's peak GPU memory is over the limit (MiB; 0 when within it, when
        there is no limit, or when the point has no GPU figures)."""
        if self.max_gpu_memory_mb is None or not point.gpus:
            return 0.0
        return max(peak_memory_mb(point.gpus) - self.max_gpu_memory_mb, 0.0)

    def met_by(self, point: Point) -> bool:
        """No errors, a trusted point (:attr:`Point.trusted`), its latency within the limit (the
        upper bound of its interval, where its windows were recorded: :meth:`Point.latency_bound`) and
        its peak GPU memory within the memory limit (:meth:`memory_over_mb`)."""
        return self.admits(point) and point.latency_bound(self.percentile) <= self.limit_ms

    def admits(self, point: Point) -> bool:
        """What the SLA asks of a point besides its latency: no errors, trusted, within the
        memory limit, and every model served beside it (:attr:`others`) within its own SLA
        there (measured at the same time: :meth:`Point.other`; a point without its figures is
        not admitted)."""
        mine = point.errors == 0 and point.trusted and self.memory_over_mb(point) == 0.0
        return mine and all(self._beside_met(point, name, sla) for name, sla in self.others)

    @staticmethod
    def _beside_met(point: Point, name: str, sla: Sla) -> bool:
        theirs = point.other(name)
        return theirs is not None and sla.met_by(theirs)

    def beside_over_ms(self, point: Point) -> float:
        """How far the models beside it are over their limits at ``point``, the worst of them,
        in this SLA's milliseconds (their excess relative to their limit, times this limit; 0
        when every one meets it)."""
        worst = 0.0
        for name, sla in self.others:
            theirs = point.other(name)
            if theirs is None:
                return self.limit_ms
            excess = (theirs.latency_ms(sla.percentile) - sla.limit_ms) / sla.limit_ms
            worst = max(worst, excess * self.limit_ms)
        return worst

    def violation(self, point: Point) -> float:
        """Optuna constraint value: <= 0 when met, else how far over the limit (ms). GPU memory
        over its limit adds its relative excess times the latency limit (so it counts in ms too:
        10% over the memory limit weighs as 10% over the latency limit)."""
        over = point.latency_ms(self.percentile) - self.limit_ms
        memory = self.memory_over_mb(point)
        if memory > 0 and self.max_gpu_memory_mb:
            over = max(over, 0.0) + self.limit_ms * memory / self.max_gpu_memory_mb
        beside = self.beside_over_ms(point) if self.others else 0.0
        if beside > 0:
            over = max(over, 0.0) + beside
        return over if point.errors == 0 and point.trusted else max(over, 0.0) + self.limit_ms

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"percentile": self.percentile, "limit_ms": self.limit_ms}
        data |= {"max_gpu_memory_mb": self.max_gpu_memory_mb} if self.max_gpu_memory_mb else {}
        return data | ({"others": [[n, s.to_json()] for n, s in self.others]} if self.others else {})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sla:
        memory = data.get("max_gpu_memory_mb")
        others = tuple((str(n), Sla.from_json(s)) for n, s in data.get("others", ()))
        return cls(
            int(data["percentile"]), float(data["limit_ms"]), float(memory) if memory else None, others
        )


@dataclass(frozen=True)
class Scoring:
    """What a candidate's goodput is compared by: the throughput (``per_gpu`` False), or the
    throughput per GPU it uses (:meth:`gpus_used`; a CPU candidate counts as one, see
    :meth:`share`). ``server_gpus``: how many GPUs the server side has (what ``gpus: all`` uses)."""

    per_gpu: bool = False
    server_gpus: int = 0

    def gpus_used(self, candidate: Candidate | None) -> int:
        """GPUs a candidate's instances run on: none for KIND_CPU; its ``gpus`` list, else (no
        list: Triton puts ``count`` instances on every GPU) all the server's."""
        return 0 if candidate is None else candidate.gpus_used(self.server_gpus)

    def share(self, candidate: Candidate | None) -> int:
        """What the candidate's throughput is divided by: 1, or per GPU its GPUs used. A CPU
        candidate (0 GPUs) counts as one: it occupies the machine, and dividing by nothing would
        crown it whatever it does."""
        return max(self.gpus_used(candidate), 1) if self.per_gpu else 1

    def score(self, throughput: float, candidate: Candidate | None) -> float:
        """The throughput as the objective counts it."""
        return throughput / self.share(candidate)

    @property
    def label(self) -> str:
        return "goodput per GPU" if self.per_gpu else "goodput"

    def to_json(self) -> dict[str, Any]:
        return {"per_gpu": self.per_gpu, "server_gpus": self.server_gpus}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Scoring:
        """Read :meth:`to_json` back; a run recorded before it compared throughputs."""
        if not data:
            return cls()
        return cls(bool(data.get("per_gpu", False)), int(data.get("server_gpus", 0)))


RAW = Scoring()  # goodputs compared as they are (every run recorded before per-GPU scoring)


def scoring_for(space: SearchSpace, server_gpus: int) -> Scoring:
    """Per GPU when the space's candidates use different numbers of GPUs (KIND_CPU none,
    KIND_GPU its ``gpus`` list or all ``server_gpus``), counting a CPU candidate as one
    (:meth:`Scoring.share`); else the throughput."""
    counts = {max(n, 1) for n in gpu_counts(space, server_gpus)}
    return Scoring(per_gpu=len(counts) > 1, server_gpus=server_gpus)


def gpu_counts(space: SearchSpace, server_gpus: int) -> set[int]:
    """The numbers of GPUs the space's candidates can use."""
    out = set()
    for kind in space.kind:
        if kind != "KIND_GPU":
            out.add(0)
            continue
        out |= {len(decode_gpus(gpus)) or server_gpus for gpus in space.gpus}
    return out


def scores(point: Point, sla: Sla, share: int = 1) -> tuple[float, float]:
    """The study's objectives: (throughput up, per ``share`` GPUs (:meth:`Scoring.share`);
    latency at the SLA percentile down)."""
    return point.throughput / share, point.latency_ms(sla.percentile)
