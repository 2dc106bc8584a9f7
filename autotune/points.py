"""What a measurement is: the records of a point and of a candidate's search, and how a point's
windows are measured (:class:`WindowPlan`).

A :class:`Point` is one level (a concurrency, or a request rate) measured in windows; a
:class:`Measurement` is a candidate's search over levels for the best throughput that meets
the SLA. This module decides nothing: when a point's windows stop, and everything else the
search decides, is :mod:`autotune.search`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from autotune.gpu import GpuFigures
from autotune.search.noise import Estimate, Noise

if TYPE_CHECKING:
    from autotune.objective import Sla


# Named warnings, each with text a person can act on.
UNSTABLE = "unstable"
ERRORS = "errors"
FEW_SAMPLES = "few-samples"
BEHIND_SCHEDULE = "behind-schedule"
LATE_SENDS = "late-sends"

WARNING_TEXT = {
    UNSTABLE: "throughput or latency never settled within the stability tolerance; "
    "the figures are from the last windows (raise --max-windows or quiet the machine)",
    ERRORS: "the server answered some requests with errors (see the server log)",
    FEW_SAMPLES: "fewer than 100 requests were measured; percentiles are rough",
    BEHIND_SCHEDULE: "the load generator did not send the requested rate (the server saw less load "
    "than asked): the point is not trusted and never meets the SLA",
    LATE_SENDS: "the load generator sent some requests late; their latency counts from the "
    "scheduled send, so the figures are if anything pessimistic",
}


@dataclass(frozen=True)
class WindowPlan:
    """How one operating point is measured: perf_analyzer's windows (autotune.loadgen runs them)."""

    window_s: float = 1.0
    warmup_s: float = 1.0
    tolerance: float = 0.10
    stable_windows: int = 3
    max_windows: int = 8
    min_requests: int = 50  # a window is extended (up to 4x) until it has this many
    percentile: int = 95  # the latency the stability rule watches
    # windows until the latency's interval (autotune.search.noise) lies on one side of this limit (meets
    # or breaks it), at least noise.MIN_WINDOWS, at most max_windows; the point's figures are
    # every window's, each window's kept as its sample. 0 (no limit: a point measured as
    # perf_analyzer measures it): the stability rule above, the figures the last windows'.
    limit_ms: float = 0.0
    # latencies of windows measured before at this level (a race's earlier rounds), pooled with
    # the point's own in the verdict on the limit; and those rounds' own figures (each over all
    # its requests), averaged with the point's in the interval's centre as the race averages them
    before_ms: tuple[float, ...] = ()
    before_figures_ms: tuple[float, ...] = ()
    # the run's window-to-window latency spread, pooled over its points (:func:`warm_windows`
    # reads it where it has more degrees of freedom than a point's own windows)
    latency_noise: Noise = field(default_factory=Noise)


@dataclass(frozen=True)
class ServerBreakdown:
    """Per-request averages from Triton's statistics over the measured windows (microseconds)."""

    queue_us: float = 0.0
    compute_input_us: float = 0.0
    compute_infer_us: float = 0.0
    compute_output_us: float = 0.0
    requests: int = 0
    executions: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)  # batch size -> executions
    steps: dict[str, ServerBreakdown] = field(default_factory=dict)  # an ensemble's steps, each its own

    @property
    def avg_batch(self) -> float:
        total = sum(self.batch_sizes.values())
        return sum(b * n for b, n in self.batch_sizes.items()) / total if total else 0.0

    @property
    def compute_us(self) -> float:
        """A request's time computed: its inputs, the model, its outputs."""
        return self.compute_input_us + self.compute_infer_us + self.compute_output_us

    @property
    def busy_us(self) -> float:
        """A request's time in the server: queued and computed."""
        return self.queue_us + self.compute_us

    def bottleneck(self) -> str:
        """The step a request spends the most time in (queued and computed); "" without steps."""
        return max(self.steps, key=lambda name: self.steps[name].busy_us) if self.steps else ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["batch_sizes"] = {str(k): v for k, v in self.batch_sizes.items()}
        data["steps"] = {name: step.to_dict() for name, step in self.steps.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerBreakdown:
        batches = {int(k): int(v) for k, v in data.get("batch_sizes", {}).items()}
        steps = {name: cls.from_dict(step) for name, step in data.get("steps", {}).items()}
        return cls(**{**data, "batch_sizes": batches, "steps": steps})


@dataclass(frozen=True)
class Point:
    """One operating point, measured to stability (or flagged)."""

    concurrency: int  # closed loop; 0 for open loop
    request_rate: float  # open loop; 0.0 for closed loop
    throughput: float  # completed inferences per second
    avg_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    requests: int
    errors: int
    duration_s: float
    windows: int
    stable: bool
    server: ServerBreakdown = field(default_factory=ServerBreakdown)
    warnings: tuple[str, ...] = ()
    send_rate: float = 0.0  # open loop: requests actually sent per second
    send_late_p99_ms: float = 0.0  # open loop: p99 of (actual send - scheduled send)
    gpus: tuple[GpuFigures, ...] = ()  # the server's GPUs over the kept windows (none on a CPU server)
    passes: int = 1  # measurements merged into it (runs recorded by the stability rules merged passes)
    # the load generator's loop stalled (woken over 15 ms late) this often, and this long in all,
    # over the kept windows: every answer in flight waited for it (autotune.loadgen._load)
    client_stalls: int = 0
    client_stall_ms: float = 0.0
    first_error: str = ""  # the first error the server answered over the kept windows ("" none)
    # each kept window's throughput, and its latency at ``window_percentile``: the sample the
    # point's intervals come from (autotune.search.noise); none in runs recorded by the stability rules
    window_throughputs: tuple[float, ...] = ()
    window_latencies_ms: tuple[float, ...] = ()
    window_percentile: int = 0
    # the latencies of the first windows a warm-up still held (:func:`warm_windows`), dropped
    # from the point's figures and sample
    warm_windows_ms: tuple[float, ...] = ()
    # several models on one server (--models): every model's own figures over the same windows,
    # by name, the tuned one's included; ``throughput`` is then their weighted sum (each model's
    # weight times its throughput: the objective), the latencies the tuned model's
    others: tuple[tuple[str, Point], ...] = ()
    node: str = ""  # on a Ray cluster: the node whose server it was measured on (autotune.fleet)
    # the server it was measured on, by its log's name: a race round's racers share one (race-002+000-1)
    stage: str = ""

    def throughput_estimate(self, noise: Noise | None = None) -> Estimate:
        """Its throughput with the standard error of its windows (none recorded: an infinite
        one), or of ``noise``, pooled over more points (:meth:`Noise.estimate`)."""
        return (noise or Noise()).estimate(self.throughput, self.window_throughputs)

    def latency_estimate(self, percentile: int) -> Estimate:
        """Its latency at ``percentile`` with the standard error of its windows' (none recorded,
        or another percentile's: a standard error of 0, the figure as it is)."""
        if percentile != self.window_percentile or not self.window_latencies_ms:
            return Estimate(self.latency_ms(percentile), 0.0, 0)
        found = Estimate.of(self.window_latencies_ms)
        return Estimate(self.latency_ms(percentile), found.se, found.n)

    def latency_bound(self, percentile: int) -> float:
        """What the SLA holds it to: the upper bound of its latency at ``percentile`` (the figure
        itself for a point without windows recorded: :meth:`latency_estimate`)."""
        return self.latency_estimate(percentile).high

    @property
    def error_rate(self) -> float:
        """The share of the requests answered that were errors (0.0 without any)."""
        answered = self.requests + self.errors
        return self.errors / answered if answered else 0.0

    @property
    def trusted(self) -> bool:
        """Whether its latency can be believed: an open loop that fell behind its schedule
        measured its own backlog too (BEHIND_SCHEDULE), so the point never meets an SLA."""
        return BEHIND_SCHEDULE not in self.warnings

    @property
    def level(self) -> float:
        """The load it was measured at: the concurrency (closed loop) or the request rate (open)."""
        return float(self.concurrency) if self.concurrency else self.request_rate

    @property
    def where(self) -> str:
        """``concurrency 8`` or ``420 req/s``."""
        return f"concurrency {self.concurrency}" if self.concurrency else f"{self.request_rate:.4g} req/s"

    def latency_ms(self, percentile: int) -> float:
        return {50: self.p50_ms, 90: self.p90_ms, 95: self.p95_ms, 99: self.p99_ms}[percentile]

    def other(self, model: str) -> Point | None:
        """The figures of ``model``, served beside the tuned one, over this point's windows (None:
        not measured here)."""
        return next((point for name, point in self.others if name == model), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["server"] = self.server.to_dict()
        data["warnings"] = list(self.warnings)
        data["gpus"] = [g.to_dict() for g in self.gpus]
        data["others"] = [[name, point.to_dict()] for name, point in self.others]
        if not self.node:
            del data["node"]  # one machine: the files stay as they were
        if not self.stage:
            del data["stage"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Point:
        server = ServerBreakdown.from_dict(dict(data.get("server", {})))
        gpus = tuple(GpuFigures.from_dict(g) for g in data.get("gpus", ()))
        warnings = tuple(data["warnings"])
        kinds = ("window_throughputs", "window_latencies_ms", "warm_windows_ms")
        windows = {k: tuple(data.get(k, ())) for k in kinds}
        others = tuple((str(name), cls.from_dict(point)) for name, point in data.get("others", ()))
        return cls(
            **{**data, "server": server, "warnings": warnings, "gpus": gpus, **windows, "others": others}
        )


def same_servers(a: Sequence[Point], b: Sequence[Point]) -> list[tuple[Point, Point]]:
    """Each point of ``a`` with the point of ``b`` measured on its server (:attr:`Point.stage`)."""
    theirs = {p.stage: p for p in b if p.stage}
    return [(p, theirs[p.stage]) for p in a if p.stage in theirs]


@dataclass(frozen=True)
class Measurement:
    """A candidate's goodput search: every point measured (by level) and the best one within the SLA.

    ``pruned``: the search stopped early because this candidate could not beat the best one
    found so far (its first SLA-breaking point already had less throughput); ``best`` is then
    a lower bound of its goodput. ``output_check``: what the check of its answers found before
    it was measured (autotune.outputs): "passed", "reference" (its answers are the ones the
    others are held to: your config's), or "" (not checked)."""

    points: tuple[Point, ...]
    best: Point | None  # highest throughput meeting the SLA; None if no point met it
    pruned: bool = False
    output_check: str = ""
    output_check_s: float = 0.0  # what the check of its answers took (seconds)
    ready_s: float = 0.0  # its server's start until the model was ready, its warm-up included (seconds)

    @cached_property
    def noise(self) -> Noise:
        """The window noise of throughput pooled over its points (:class:`autotune.search.noise.Noise`)."""
        return Noise.pooled(p.window_throughputs for p in self.points)

    @property
    def note(self) -> str:
        """Why a figure is not the whole story, one line ("" when it is): the load generator
        could not keep a rate the search needed (that point is not trusted, and the goodput may
        be a lower bound)."""
        behind = [p for p in self.points if not p.trusted]
        if not behind:
            return ""
        low = min(behind, key=lambda p: p.request_rate)
        return (
            f"not trusted: the load generator fell behind its schedule at {low.where} "
            f"(sent {low.send_rate:.4g} req/s, p99 {low.send_late_p99_ms:.1f} ms late); "
            "rates from there on were not measured truly"
        )

    @property
    def feasible(self) -> bool:
        return self.best is not None

    def closest(self, sla: Sla) -> Point:
        """The point to report when none is feasible: the lowest latency one."""
        if self.best is not None:
            return self.best
        return min(self.points, key=lambda p: p.latency_ms(sla.percentile))


def errors_line(points: Sequence[Point]) -> str:
    """The errors of some points in a line: the worst share of requests answered with errors,
    where, and the server's first error text ("" when none erred)."""
    erred = [p for p in points if p.errors]
    if not erred:
        return ""
    worst = max(erred, key=lambda p: p.error_rate)
    text = next((p.first_error for p in erred if p.first_error), "")
    first = f" (first: {text})" if text else ""
    return f"{worst.error_rate:.0%} of requests answered with errors at {worst.where}{first}"


def bottleneck_line(point: Point) -> str:
    """An ensemble's point: where a request's time goes, step by step, the slowest named
    (``bottleneck: slow (queue 9.1 ms, compute 4.0 ms; toy 0.2 + 1.1 ms)``); "" otherwise."""
    steps = point.server.steps
    name = point.server.bottleneck()
    if not name:
        return ""

    def ms(step: ServerBreakdown) -> tuple[float, float]:
        return step.queue_us / 1000, step.compute_us / 1000

    queue, compute = ms(steps[name])
    rest = "; ".join(f"{n} {q:.1f} + {c:.1f} ms" for n in steps if n != name for q, c in [ms(steps[n])])
    return f"bottleneck: {name} (queue {queue:.1f} ms, compute {compute:.1f} ms{'; ' + rest if rest else ''})"
