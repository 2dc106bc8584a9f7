"""What a person sees: progress bars while tuning, a summary table at the end (rich)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune import hostlock
from autotune.events import Events
from autotune.gpu import GpuFigures, peak_memory_mb
from autotune.hostlock import Holder
from autotune.objective import RAW, Scoring
from autotune.points import Point, bottleneck_line, errors_line
from autotune.report import gpu_summary
from autotune.results import (
    COMPLETE,
    PRUNED,
    Gain,
    Outcome,
    Recommendation,
    TrialResult,
    gain,
    recommendation,
)
from autotune.search_space import Candidate

LOG_WIDTH = 10_000  # a file or a pipe: lines as long as they are, never wrapped


def for_people(stderr: bool = False) -> Console:
    """A console that never breaks a line of its own in a file or a pipe (a log: a table's row,
    a command or a path stays on one line, its boxes in ASCII); on a terminal, the terminal's
    width, with long text left to the terminal to wrap (a command copied from it stays whole)."""
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return Console(stderr=stderr, highlight=False, soft_wrap=True)
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=LOG_WIDTH, safe_box=True)


console = for_people(stderr=True)


class RichEvents(Events):
    """Two bars: trials done of the budget, and the trial in flight with its latest point."""

    def __init__(
        self, percentile: int = 95, scoring: Scoring = RAW, memory_limit_mb: float | None = None
    ) -> None:
        self.run_dir: Path | None = None
        self._pct = percentile  # the SLA's: the latency shown
        self._scoring = scoring  # per GPU: each trial's goodput per GPU is shown too
        self._memory_limit = memory_limit_mb  # the SLA's GPU memory limit: named when it is what broke
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

    def waiting(self, holder: Holder | None) -> None:
        self._log(hostlock.waiting(holder))

    def run_started(self, run_dir: Path, total: int, budget_s: float | None, then: str = "") -> None:
        self.run_dir = run_dir
        plan = f"; the search, then {then}" if then else ""
        if budget_s:
            plan = (
                f"; budget {_clock(budget_s)} for the whole run: the search stops in time for {then}"
                if then
                else f"; budget {_clock(budget_s)} for the search"
            )
        self._log(f"run directory: {run_dir}{plan}")
        self._trials = self._progress.add_task("trials", total=total, status="")

    def search_ended(
        self, elapsed_s: float, reserve_s: float, budget_s: float | None, most_s: float, what: str
    ) -> None:  # fmt: skip
        if budget_s is None:
            return
        left = max(budget_s - elapsed_s, 0.0)
        took = f"{reserve_s:.0f}-{most_s:.0f} s" if round(most_s) > round(reserve_s) else f"{reserve_s:.0f} s"
        verb = "take" if " and " in what else "takes"
        follows = f"{what} {verb} {took} by this run's trials, " if what else ""
        self._log(f"search done at {_clock(elapsed_s)}; {follows}{left:.0f} s are left of the budget")

    def said(self, text: str) -> None:
        self._log(text)

    def trial_started(
        self, number: int, candidate: Candidate, baseline: bool, again_of: int | None = None
    ) -> None:
        tag = " (baseline: your config)" if baseline else ""
        if again_of is not None:  # it comes before trials queued after the one it repeats
            self._log(f"trial {number:>3}: trial {again_of}'s config again, first (it was interrupted)")
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
        self._log(_trial_line(result, self._pct, self._scoring, self._memory_limit))

    def trial_retried(self, number: int, reason: str) -> None:
        self._log(f"trial {number:>3}: {reason}; measuring it again on a new server")

    def verification_failed(self, result: TrialResult, reason: str) -> None:
        label = result.candidate.label() if result.candidate else "?"
        self._log(f"race {result.number:>3} {label}: FAILED {reason} (not a finalist any more)")

    def verifying(self, trial: int, where: str, repeat: int, repeats: int) -> None:
        if self._current is not None:
            # past --repeats (a racer sent down, your config beside the leader): no "7/6"
            of = f"/{repeats}" if repeat <= repeats else ""
            status = f"{where}, round {repeat}{of}"
            self._progress.update(self._current, description=f"race {trial}", status=status)

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


def _clock(seconds: float) -> str:
    """``1:40`` (minutes and seconds), ``1:02:05`` past an hour."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _trial_line(
    result: TrialResult, pct: int, scoring: Scoring = RAW, memory_limit: float | None = None
) -> str:
    label = result.candidate.label() if result.candidate else "?"
    head = f"trial {result.number:>3} {label}"
    if result.wrong_outputs:
        return f"{head}: infeasible, {result.reason}"
    if result.state == PRUNED:
        return f"{head}: not measured, {result.reason}"
    if result.state != COMPLETE:
        return f"{head}: FAILED {result.reason}"
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
        memory = _memory_over(point, memory_limit)
        errors = f"; {errors_line([point])}" if point.errors else ""
        return f"{head}: misses the SLA even at {point.where} (p{pct} {latency:.1f} ms{memory}{errors}){note}"
    pruned = ", not refined: cannot beat the best" if result.measurement.pruned else ""
    notes = [result.measurement.note, errors_line(result.measurement.points), bottleneck_line(best),
             beside_line(best, pct)]  # fmt: skip
    note = "".join(f"\n    {n}" for n in notes if n)
    return (
        f"{head}: {best.throughput:.0f} infer/s{_per_gpu(best.throughput, result, scoring)} at {best.where}, "
        f"p{pct} {best.latency_ms(pct):.1f} ms ({result.duration_s:.0f} s{pruned}){note}"
    )


def beside_line(point: Point, percentile: int) -> str:
    """Several models on one server: each model's own figures at the point (its throughput is
    their weighted sum): ``each model: toy 210 infer/s p95 31.0 ms, twin 190 infer/s p95 35.2 ms``;
    "" otherwise."""
    if not point.others:
        return ""
    parts = [f"{name} {p.throughput:.0f} infer/s p{percentile} {p.latency_ms(percentile):.1f} ms"
             for name, p in point.others]  # fmt: skip
    return "each model: " + ", ".join(parts)


def _per_gpu(throughput: float, result: TrialResult, scoring: Scoring) -> str:
    """`` (120 per GPU, 2 GPUs)`` where the run compares goodputs per GPU; else nothing."""
    if not scoring.per_gpu:
        return ""
    share = scoring.share(result.candidate)
    return f" ({throughput / share:.0f} per GPU, {share} GPU{'s' if share > 1 else ''})"


def _memory_over(point: Point, limit: float | None) -> str:
    """``; GPU memory 9000 MiB > 8000 MiB`` when the point broke the SLA's GPU memory limit."""
    peak = peak_memory_mb(point.gpus)
    if limit is None or not point.gpus or peak <= limit:
        return ""
    return f"; GPU memory {peak:.0f} MiB > {limit:g} MiB"


def print_summary(outcome: Outcome, apply_line: bool = True) -> None:
    """The run's end on the console: the winner against your config, what changed, where the
    report is and (``apply_line``) the command that applies it; a round of a run in rounds gets
    none, as the rounds' last line names the command that applies them all."""
    out = for_people()
    info, winner, base = outcome.info, outcome.winner, outcome.baseline
    table = _summary_table(outcome)
    found = gain(winner, base, info.verifications, info.sla.percentile, info.scoring)
    if not out.is_terminal:
        table.box = box.ASCII2
    if table.row_count:
        out.print(table)
    if outcome.all_failed:
        out.print("[bold red]every trial failed[/]: see the report for each one's reason and server log")
    elif winner is None:
        out.print("[bold red]no config met the SLA[/]: see the report for the closest ones")
    elif found is not None:
        out.print(gain_line(found, info.scoring.per_gpu))
    refused = _refused(winner, base)
    if refused:
        out.print(f"note: {refused}")
    if info.open_loop is not None:
        out.print(info.open_loop.summary())
    if info.winner_diff:
        out.print("changes against your config.pbtxt:")
        out.print(info.winner_diff, markup=False, highlight=False)
    out.print(f"report: {outcome.run_dir / 'report.html'}")
    if winner is not None and apply_line:
        keep = found is not None and found.shown is False
        out.print(
            f"apply it anyway: autotune apply --force {outcome.run_dir}"
            if keep
            else f"apply it: autotune apply {outcome.run_dir}"
        )


def gain_line(found: Gain, per_gpu: bool) -> str:
    """The headline: the winner against your config on the table's figures, or, where the race
    did not show it ahead of yours, that you keep your config."""
    what = "throughput per GPU" if per_gpu else "throughput"
    also = f"{found.throughput:.2f}x throughput; " if per_gpu else ""
    if found.shown is False:
        return (
            f"keep your config: no candidate was shown better (the winner {found.ratio:.2f}x your "
            f"config's {what}; {also}{found.figures})"
        )
    figures = f"{also}the table's figures: {found.figures}"
    return f"winner vs your config: {found.ratio:.2f}x {what} at the SLA ({figures})"


def _refused(winner: TrialResult | None, yours: TrialResult | None) -> str:
    """What a winner that lowers max_batch_size refuses that your config took ("" nothing)."""
    if winner is None or yours is None or winner.candidate is None or yours.candidate is None:
        return ""
    sizes = winner.candidate.refuses(yours.candidate)
    if not sizes:
        return ""
    w, y = winner.candidate.max_batch_size, yours.candidate.max_batch_size
    return f"the winner's max_batch_size {w} is below your config's {y}: it refuses requests of batch {sizes}"


def _summary_table(outcome: Outcome) -> Table:
    """The winner and the baseline at their recommended points; a per-GPU column where the run
    compared goodputs per GPU, GPU columns where a shown point has GPU figures."""
    info = outcome.info
    rows = [
        (name, result, rec)
        for name, result in (("winner", outcome.winner), ("baseline", outcome.baseline))
        if result is not None
        and (rec := recommendation(result, info.verifications, info.sla.percentile)) is not None
    ]
    gpus = any(_figures(result, rec) for _, result, rec in rows)
    table = Table(title=f"{info.model}: best config under {info.sla.label}")
    load = "request rate" if info.open_loop_run else "concurrency"
    columns = ["", "config", load, "infer/s", *(["per GPU"] if info.scoring.per_gpu else [])]
    columns += ["p50 ms", f"p{info.sla.percentile} ms", *(GPU_COLUMNS if gpus else ()), "raced"]
    for col in columns:
        table.add_column(col)
    for name, result, rec in rows:
        v = rec.verification
        per_gpu = f"{info.scoring.score(rec.throughput, result.candidate):.0f}"
        table.add_row(
            name,
            result.candidate.label() if result.candidate else "?",
            rec.where.removeprefix("concurrency "),
            f"{rec.throughput:.0f}",
            *([per_gpu] if info.scoring.per_gpu else []),
            f"{rec.p50_ms:.1f}",
            f"{rec.latency_ms:.1f}",
            *(_gpu_cells(_figures(result, rec)) if gpus else ()),
            f"{v.sla_met}/{len(v.points)} race rounds met the SLA" if v else "-",
        )
    return table


GPU_COLUMNS = ("GPU util %", "GPU MiB peak", "GPU W")


def _figures(result: TrialResult, rec: Recommendation) -> list[GpuFigures]:
    """The GPU figures behind a recommended point: its verification repeats', else its search point's."""
    points = rec.verification.points if rec.verification is not None else (result.best,)
    return [g for p in points if p is not None for g in p.gpus]


def _gpu_cells(figures: list[GpuFigures]) -> list[str]:
    """Average utilisation and power, peak memory (dashes without figures)."""
    s = gpu_summary(figures)
    cells = (s["gpu_util_pct"], s["gpu_memory_mb"], s["gpu_power_w"])
    return ["-" if value is None else f"{value:.0f}" for value in cells]
