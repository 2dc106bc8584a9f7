"""The report's data: plain records built from a run's trials (pure, but for :func:`write_csv`).

:func:`report_data` reads :class:`~autotune.results.RunInfo` and the trials and returns a
:class:`ReportData` that tests assert on and ``_render`` draws. Nothing here draws.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from autotune.files import write_text_atomic
from autotune.measure import Point
from autotune.objective import Sla
from autotune.results import COMPLETE, Recommendation, RunInfo, TrialResult, Verification, recommendation


@dataclass(frozen=True)
class TrialRow:
    """One trial, at its best point (or its closest point when none met the SLA)."""

    number: int
    label: str  # Candidate.label(), or "" when the trial has no candidate
    params: dict[str, object]
    state: str  # COMPLETE, FAIL or RUNNING
    baseline: bool
    feasible: bool
    reused_from: int | None = None
    reason: str = ""
    log_tail: str = ""
    duration_s: float = 0.0
    # The reported point: the best within the SLA, else the closest (lowest latency) one.
    concurrency: int | None = None
    request_rate: float | None = None
    throughput: float | None = None
    latency_ms: float | None = None  # at the SLA percentile
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    avg_ms: float | None = None
    queue_us: float | None = None
    compute_input_us: float | None = None
    compute_infer_us: float | None = None
    compute_output_us: float | None = None
    avg_batch: float | None = None
    batch_sizes: dict[int, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    pareto: bool = False  # on the trial-level Pareto front

    @property
    def goodput(self) -> float:
        """Throughput within the SLA; 0 for trials with no feasible point."""
        return (self.throughput or 0.0) if self.feasible else 0.0

    @property
    def measured(self) -> bool:
        return self.throughput is not None and self.latency_ms is not None


@dataclass(frozen=True)
class OperatingPoint:
    """One measured (concurrency or rate, throughput, latency) point of one trial."""

    trial: int
    concurrency: int
    request_rate: float
    throughput: float
    latency_ms: float  # at the SLA percentile
    meets_sla: bool
    best: bool  # the trial's reported point


@dataclass(frozen=True)
class VerificationRow:
    """A finalist's repeated measurements, summarised."""

    trial: int
    label: str
    concurrency: int
    repeats: int
    sla_met: int
    median_throughput: float
    min_throughput: float
    max_throughput: float
    max_latency_ms: float  # the worst repeat at the SLA percentile
    median_latency_ms: float = 0.0  # the median repeat's, at the SLA percentile


@dataclass(frozen=True)
class ReportData:
    run: RunInfo
    rows: tuple[TrialRow, ...]
    points: tuple[OperatingPoint, ...]
    front: tuple[TrialRow, ...]  # sorted by latency, lowest first
    winner: TrialRow | None
    winner_chosen: bool  # True: RunInfo.winner; False: the best feasible trial so far
    baseline: TrialRow | None
    gain: float | None  # winner goodput / baseline goodput; None when either is missing or 0
    verifications: tuple[VerificationRow, ...]
    recommended: Recommendation | None = None  # the winner's operating point (verified if it was)

    @property
    def sla(self) -> Sla:
        return self.run.sla

    def count(self, state: str) -> int:
        return sum(1 for r in self.rows if r.state == state)

    @property
    def feasible_count(self) -> int:
        return sum(1 for r in self.rows if r.feasible)


# ---------------------------------------------------------------- building the records


def report_data(run: RunInfo, trials: Sequence[TrialResult]) -> ReportData:
    ordered = sorted(trials, key=lambda t: t.number)
    rows = [trial_row(t, run.sla) for t in ordered]
    front = pareto_front(rows)
    on_front = {r.number for r in front}
    rows = [replace(r, pareto=r.number in on_front) for r in rows]
    by_number = {r.number: r for r in rows}
    winner, chosen = _winner(run, by_number)
    baseline = next((r for r in rows if r.baseline), None)
    recommended = None
    if winner is not None:
        winner_trial = next(t for t in ordered if t.number == winner.number)
        recommended = recommendation(winner_trial, run.verifications, run.sla.percentile)
    return ReportData(
        run=run,
        rows=tuple(rows),
        points=tuple(operating_points(ordered, run.sla)),
        front=tuple(by_number[r.number] for r in front),
        winner=winner,
        winner_chosen=chosen,
        baseline=baseline,
        gain=gain(winner, baseline),
        verifications=tuple(_verification_row(v, by_number, run.sla) for v in run.verifications),
        recommended=recommended,
    )


def trial_row(trial: TrialResult, sla: Sla) -> TrialRow:
    row = TrialRow(
        number=trial.number,
        label=trial.candidate.label() if trial.candidate else "",
        params=dict(trial.params),
        state=trial.state,
        baseline=trial.baseline,
        feasible=trial.feasible,
        reused_from=trial.reused_from,
        reason=trial.reason,
        log_tail=trial.log_tail,
        duration_s=trial.duration_s,
    )
    m = trial.measurement
    if m is None or not m.points:
        return row
    return _at_point(row, m.closest(sla), sla)


def _at_point(row: TrialRow, p: Point, sla: Sla) -> TrialRow:
    s = p.server
    return replace(
        row,
        concurrency=p.concurrency,
        request_rate=p.request_rate,
        throughput=p.throughput,
        latency_ms=p.latency_ms(sla.percentile),
        p50_ms=p.p50_ms,
        p90_ms=p.p90_ms,
        p95_ms=p.p95_ms,
        p99_ms=p.p99_ms,
        avg_ms=p.avg_ms,
        queue_us=s.queue_us,
        compute_input_us=s.compute_input_us,
        compute_infer_us=s.compute_infer_us,
        compute_output_us=s.compute_output_us,
        avg_batch=s.avg_batch,
        batch_sizes=dict(s.batch_sizes),
        warnings=p.warnings,
    )


def operating_points(trials: Iterable[TrialResult], sla: Sla) -> list[OperatingPoint]:
    """Every point measured; a reused trial's points are its source's, so they are not repeated."""
    out: list[OperatingPoint] = []
    for t in trials:
        if t.measurement is None or t.reused_from is not None or not t.measurement.points:
            continue
        shown = t.measurement.closest(sla)
        out.extend(
            OperatingPoint(
                trial=t.number,
                concurrency=p.concurrency,
                request_rate=p.request_rate,
                throughput=p.throughput,
                latency_ms=p.latency_ms(sla.percentile),
                meets_sla=sla.met_by(p),
                best=p == shown,
            )
            for p in t.measurement.points
        )
    return out


def pareto_front(rows: Iterable[TrialRow]) -> list[TrialRow]:
    """The trials no other trial beats on both throughput (up) and latency (down).

    Only COMPLETE, measured trials that are not repeats (``reused_from``) take part;
    infeasible ones too (their closest point), marked by ``feasible``. Trials with exactly
    the same throughput and latency do not dominate each other: all of them are on the front.
    Sorted by latency, then throughput (highest first), then trial number.
    """
    pool = [r for r in rows if r.state == COMPLETE and r.measured and r.reused_from is None]
    front = [r for r in pool if not any(_dominates(o, r) for o in pool)]
    return sorted(front, key=lambda r: (r.latency_ms, -(r.throughput or 0.0), r.number))


def _dominates(a: TrialRow, b: TrialRow) -> bool:
    ta, tb = a.throughput or 0.0, b.throughput or 0.0
    la, lb = a.latency_ms or 0.0, b.latency_ms or 0.0
    return ta >= tb and la <= lb and (ta > tb or la < lb)


def _winner(run: RunInfo, rows: dict[int, TrialRow]) -> tuple[TrialRow | None, bool]:
    if run.winner is not None and run.winner in rows:
        return rows[run.winner], True
    return best_so_far(rows.values()), False


def best_so_far(rows: Iterable[TrialRow]) -> TrialRow | None:
    """The highest-goodput feasible trial; ties go to lower latency, then the earlier trial."""
    feasible = [r for r in rows if r.feasible and r.state == COMPLETE]
    return min(feasible, key=lambda r: (-r.goodput, r.latency_ms or 0.0, r.number), default=None)


def gain(winner: TrialRow | None, baseline: TrialRow | None) -> float | None:
    """The winner's goodput over the baseline's; None when the ratio means nothing."""
    if winner is None or baseline is None or baseline.goodput <= 0:
        return None
    return winner.goodput / baseline.goodput


def _verification_row(v: Verification, rows: dict[int, TrialRow], sla: Sla) -> VerificationRow:
    throughputs = [p.throughput for p in v.points] or [0.0]
    row = rows.get(v.trial)
    return VerificationRow(
        trial=v.trial,
        label=row.label if row else "",
        concurrency=v.concurrency,
        repeats=len(v.points),
        sla_met=v.sla_met,
        median_throughput=v.median_throughput,
        min_throughput=min(throughputs),
        max_throughput=max(throughputs),
        max_latency_ms=max((p.latency_ms(sla.percentile) for p in v.points), default=0.0),
        median_latency_ms=v.median_latency_ms(sla.percentile),
    )


# ---------------------------------------------------------------- tables

# trials.csv's fixed columns; the trial parameters come between "avg_batch" and "label".
CSV_HEAD = (
    "trial", "state", "baseline", "winner", "feasible", "pareto", "goodput",
    "concurrency", "request_rate", "throughput", "latency_ms", "p50_ms", "p90_ms", "p95_ms",
    "p99_ms", "avg_ms", "queue_us", "compute_infer_us", "avg_batch",
)  # fmt: skip
CSV_TAIL = ("label", "reused_from", "duration_s", "reason")


def trials_frame(data: ReportData) -> pd.DataFrame:
    """One row per trial, the parameters as columns (a parameter a trial lacks is empty)."""
    names = list(dict.fromkeys(k for r in data.rows for k in r.params))
    fixed = set(CSV_HEAD) | set(CSV_TAIL)
    columns = {n: (f"param_{n}" if n in fixed else n) for n in names}
    winner = data.winner.number if data.winner else None
    records = [_csv_record(r, columns, r.number == winner) for r in data.rows]
    return pd.DataFrame.from_records(records, columns=[*CSV_HEAD, *columns.values(), *CSV_TAIL])


def _csv_record(r: TrialRow, columns: dict[str, str], winner: bool) -> dict[str, object]:
    return {
        "trial": r.number, "state": r.state, "baseline": r.baseline, "winner": winner,
        "feasible": r.feasible, "pareto": r.pareto, "goodput": r.goodput,
        "concurrency": r.concurrency, "request_rate": r.request_rate, "throughput": r.throughput,
        "latency_ms": r.latency_ms, "p50_ms": r.p50_ms, "p90_ms": r.p90_ms, "p95_ms": r.p95_ms,
        "p99_ms": r.p99_ms, "avg_ms": r.avg_ms, "queue_us": r.queue_us,
        "compute_infer_us": r.compute_infer_us, "avg_batch": r.avg_batch,
        **{columns[k]: v for k, v in r.params.items()},
        "label": r.label, "reused_from": r.reused_from, "duration_s": r.duration_s,
        "reason": r.reason,
    }  # fmt: skip


def write_csv(data: ReportData, path: Path) -> Path:
    """Write trials.csv atomically (the server log tails stay in the HTML report)."""
    write_text_atomic(path, trials_frame(data).to_csv(index=False))
    return path
