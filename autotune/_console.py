"""What a person sees: progress bars while tuning, a summary table at the end (rich)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.events import Events
from autotune.measure import Point
from autotune.results import COMPLETE, Outcome, TrialResult, recommendation
from autotune.search_space import Candidate

console = Console(stderr=True, highlight=False)


class RichEvents(Events):
    """Two bars: trials done of the budget, and the trial in flight with its latest point."""

    def __init__(self, percentile: int = 95) -> None:
        self.run_dir: Path | None = None
        self._pct = percentile  # the SLA's: the latency shown
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
            transient=False,
            disable=not console.is_terminal,
        )
        self._trials: Any = None
        self._current: Any = None
        self._started = time.monotonic()

    def __enter__(self) -> RichEvents:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)

    def run_started(self, run_dir: Path, total: int, budget_s: float | None) -> None:
        self.run_dir = run_dir
        budget = f", budget {budget_s / 60:.0f} min" if budget_s else ""
        self._log(f"run directory: {run_dir}{budget}")
        self._trials = self._progress.add_task("trials", total=total, status="")

    def trial_started(self, number: int, candidate: Candidate, baseline: bool) -> None:
        tag = " (baseline: your config)" if baseline else ""
        if self._current is not None:
            self._progress.remove_task(self._current)
        self._current = self._progress.add_task(
            f"trial {number}", total=None, status=f"{candidate.label()}{tag}: starting server"
        )

    def point_measured(self, number: int, point: Point) -> None:
        self._progress.update(
            self._current,
            status=f"{point.where}: {point.throughput:.0f} infer/s, "
            f"p{self._pct} {point.latency_ms(self._pct):.1f} ms",
        )

    def trial_finished(self, result: TrialResult) -> None:
        if self._trials is not None:
            self._progress.advance(self._trials)
        self._log(_trial_line(result, self._pct))

    def verification_failed(self, result: TrialResult, reason: str) -> None:
        label = result.candidate.label() if result.candidate else "?"
        self._log(f"verify {result.number:>3} {label}: FAILED {reason} (not a finalist any more)")

    def verifying(self, trial: int, where: str, repeat: int, repeats: int) -> None:
        if self._current is not None:
            self._progress.update(
                self._current, description=f"verify {trial}", status=f"{where}, repeat {repeat}/{repeats}"
            )

    def checking_open_loop(self, trial: int, credited_rate: float) -> None:
        if self._current is not None:
            self._progress.update(
                self._current,
                description=f"open loop {trial}",
                status=f"arrivals at a rate, from {credited_rate:.4g} req/s down",
            )

    def _log(self, text: str) -> None:
        if self._progress.disable:
            print(text, file=sys.stderr, flush=True)
        else:
            self._progress.console.print(text)


def _trial_line(result: TrialResult, pct: int) -> str:
    label = result.candidate.label() if result.candidate else "?"
    head = f"trial {result.number:>3} {label}"
    if result.state != COMPLETE:
        return f"{head}: FAILED {result.reason}"
    if result.reused_from is not None:
        return f"{head}: same as trial {result.reused_from}"
    assert result.measurement is not None
    best = result.best
    if best is None:
        point = result.measurement.points[0]
        latency = point.latency_ms(pct)
        note = f"; {result.measurement.note}" if result.measurement.note else ""
        if result.measurement.pruned:
            return (
                f"{head}: cannot beat the best, p{pct} {latency:.1f} ms at {point.where}, not refined{note}"
            )
        return f"{head}: misses the SLA even at {point.where} (p{pct} {latency:.1f} ms){note}"
    pruned = ", not refined: cannot beat the best" if result.measurement.pruned else ""
    note = f"\n    {result.measurement.note}" if result.measurement.note else ""
    return (
        f"{head}: {best.throughput:.0f} infer/s at {best.where}, "
        f"p{pct} {best.latency_ms(pct):.1f} ms ({result.duration_s:.0f} s{pruned}){note}"
    )


def print_summary(outcome: Outcome) -> None:
    out = Console(highlight=False)
    info, winner, base = outcome.info, outcome.winner, outcome.baseline
    table = Table(title=f"{info.model}: best config under {info.sla.label}")
    load = "request rate" if info.open_loop_run else "concurrency"
    for col in ("", "config", load, "infer/s", "p50 ms", f"p{info.sla.percentile} ms", "verified"):
        table.add_column(col)
    for name, result in (("winner", winner), ("baseline", base)):
        if result is None:
            continue
        point = recommendation(result, info.verifications, info.sla.percentile)
        if point is None:
            continue
        v = point.verification
        table.add_row(
            name,
            result.candidate.label() if result.candidate else "?",
            point.where.removeprefix("concurrency "),
            f"{point.throughput:.0f}",
            f"{point.p50_ms:.1f}",
            f"{point.latency_ms:.1f}",
            f"{v.sla_met}/{len(v.points)} repeats met the SLA" if v else "-",
        )
    if table.row_count:
        out.print(table)
    if outcome.all_failed:
        out.print("[bold red]every trial failed[/]: see the report for each one's reason and server log")
    elif winner is None:
        out.print("[bold red]no config met the SLA[/]: see the report for the closest ones")
    elif base is not None and base.best is not None and winner.best is not None:
        # both from the search's measurements: the baseline is not verified
        gain = winner.goodput() / max(base.goodput(), 1e-9)
        out.print(f"winner vs your config: {gain:.2f}x throughput at the SLA (search measurements)")
    if info.open_loop is not None:
        out.print(info.open_loop.summary())
    if info.winner_diff:
        out.print("changes against your config.pbtxt:")
        out.print(info.winner_diff, markup=False, highlight=False)
    out.print(f"report: {outcome.run_dir / 'report.html'}")
    if winner is not None:
        out.print(f"apply it: autotune apply {outcome.run_dir}")
