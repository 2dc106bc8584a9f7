"""The report's data: one table of trials and one of operating points (pure, but for :func:`write_csv`).

:func:`report_data` reads :class:`~autotune.results.RunInfo` and the trials and returns a
:class:`ReportData` that tests assert on and ``_figures``/``_render`` draw. Nothing here draws.

The trials table is the one shape of a trial in the report: the figures, the HTML table and
``trials.csv`` all read it. A row is a trial at its reported point (the best point within the
SLA, else the closest one, as :meth:`~autotune.points.Measurement.closest` picks it); the
point's columns are its fields as :meth:`~autotune.points.Point.to_dict` names them, so a field
added to :class:`~autotune.points.Point` becomes a column without a change here.

GPU figures: each point's are summarised in :data:`GPU_COLUMNS` (:func:`gpu_summary`: average
utilisation and power, peak memory, across its GPUs), and :func:`gpu_table` has one row per GPU
of each trial's reported point, for the GPU panel. A run where no point has GPU figures (a CPU
server) gets an empty GPU table, and neither trials.csv nor the page shows any GPU column.
Where the run compared goodputs per GPU (:class:`~autotune.objective.Scoring`), the trials
table's ``goodput_per_gpu`` and ``throughput_per_gpu`` are what the front and the winner are
ranked by (:attr:`ReportData.goodput_column`); the throughput stays beside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autotune.files import write_text_atomic
from autotune.gpu import GpuFigures, peak_memory_mb
from autotune.objective import RAW, Scoring, Sla
from autotune.points import Point, ServerBreakdown
from autotune.results import (
    COMPLETE,
    Recommendation,
    RunInfo,
    TrialResult,
    Verification,
    gain,
    recommendation,
)
from autotune.search.noise import node_spread

# A trial's own columns; its point's columns follow (see point_columns).
TRIAL_COLUMNS = (
    "trial", "label", "params", "state", "baseline", "feasible", "reused_from", "reason", "log_tail",
    "duration_s", "output_check", "ready_s", "node",
)  # fmt: skip
# A point's GPU figures across its GPUs (gpu_summary): average utilisation (%), peak memory
# (MiB, the most any one GPU used), average power (W); None without figures.
GPU_COLUMNS = ("gpu_util_pct", "gpu_memory_mb", "gpu_power_w")
# Columns derived from a point: the latency at the SLA percentile, the server's average batch,
# the share of its requests answered with errors, its GPU figures.
# latency_high, throughput_low/high: the point's one-sided 95% bounds (autotune.search.noise), where its
# windows were recorded; none in runs recorded by the stability rules
# each_model: several models on one server, each model's own figures at the point, as text
# warm_windows: its first windows a warm-up still held, dropped from its figures
# (search.sampling.warm_windows)
DERIVED_COLUMNS = (
    "latency_ms",
    "latency_high",
    "throughput_low",
    "throughput_high",
    "warm_windows",
    "avg_batch",
    "error_rate",
    *GPU_COLUMNS,
    "each_model",
)
WINDOW_FIELDS = (
    "window_throughputs",
    "window_latencies_ms",
    "window_percentile",
    "warm_windows_ms",
)  # not columns: the bounds are, and the count of warm windows
NOT_COLUMNS = (*WINDOW_FIELDS, "others")  # nor the models beside: each_model is
# A trial's columns from the run's scoring: the GPUs its candidate uses, and its throughput and
# goodput per GPU (the throughput and goodput themselves where the run does not compare per GPU).
SCORING_COLUMNS = ("gpus_used", "throughput_per_gpu", "goodput_per_gpu")
# Columns of whole numbers that pandas stores as floats once a row lacks them (see records).
INTEGER_COLUMNS = ("trial", "concurrency", "reused_from", "gpus_used", "gpu", "warm_windows")
# The GPU panel's table: one row per GPU of each trial's reported point (gpu_table).
GPU_TABLE_COLUMNS = ("trial", "gpu", "uuid", "utilization_pct", "memory_mb", "power_w")

Row = dict[str, Any]  # one row of a table, as plain Python values (see records)


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
    where: str = ""  # the level: "concurrency 8" or "420 req/s"
    level: float = 0.0  # the concurrency or the request rate (sorting)
    nodes: str = ""  # on a Ray cluster: the node of each round, in order ("" on one machine)


@dataclass(frozen=True, eq=False)  # eq=False: DataFrames have no truth value to compare by
class ReportData:
    """What the report shows. ``trials`` is indexed by trial number (see :func:`trials_table`)."""

    run: RunInfo
    trials: pd.DataFrame  # one row per trial, by number; + goodput, scoring, pareto, winner columns
    points: pd.DataFrame  # every point measured: trial, point columns, latency_ms, meets_sla, best
    front: pd.DataFrame  # the rows of ``trials`` on the Pareto front, sorted by latency
    winner: int | None  # trial number
    winner_chosen: bool  # True: RunInfo.winner; False: the best feasible trial so far
    baseline: int | None  # trial number
    gain: float | None  # the winner's figure over your config's (autotune.results.gain); None: no ratio
    verifications: tuple[VerificationRow, ...]
    recommended: Recommendation | None = None  # the winner's operating point (verified if it was)
    gpus: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(GPU_TABLE_COLUMNS)))
    gain_per_gpu: float | None = None  # the winner's goodput per GPU over the baseline's (per-GPU runs)
    baseline_goodput: float = 0.0  # your config's figure beside the gain, as the objective counts it
    gain_figures: str = ""  # which figures the gain compares (autotune.results.Gain.figures)
    keep_yours: bool = False  # raced beside it, the winner was not shown ahead of your config
    node_spread: str = ""  # on a Ray cluster: how far the nodes read apart (:func:`node_spread_text`)

    @property
    def sla(self) -> Sla:
        return self.run.sla

    @property
    def scoring(self) -> Scoring:
        return self.run.scoring

    @property
    def per_gpu(self) -> bool:
        """Goodputs were compared per GPU used."""
        return self.run.scoring.per_gpu

    @property
    def has_gpus(self) -> bool:
        """Some trial's reported point has GPU figures (else no GPU column or panel is shown)."""
        return not self.gpus.empty

    @property
    def has_errors(self) -> bool:
        """Some trial's reported point got errors (else no error column is shown)."""
        return bool(self.trials["errors"].fillna(0).astype(float).gt(0).any())

    @property
    def goodput_column(self) -> str:
        """The trials table's column the run ranked by: ``goodput_per_gpu`` or ``goodput``."""
        return "goodput_per_gpu" if self.per_gpu else "goodput"

    @property
    def throughput_column(self) -> str:
        """The throughput as the objective counts it: ``throughput_per_gpu`` or ``throughput``."""
        return "throughput_per_gpu" if self.per_gpu else "throughput"

    def count(self, state: str) -> int:
        return int((self.trials["state"] == state).sum())

    @property
    def feasible_count(self) -> int:
        return int(self.trials["feasible"].sum())

    def row(self, number: int) -> Row:
        """One trial's row as plain Python values (see :func:`records`)."""
        return records(self.trials.loc[[number]])[0]


# ---------------------------------------------------------------- building the tables


def report_data(run: RunInfo, trials: Sequence[TrialResult]) -> ReportData:
    """The report's tables and choices from a run's trials, in any order (sorted by number here)."""
    ordered = sorted(trials, key=lambda t: t.number)
    table = trials_table(ordered, run.sla, run.scoring)
    per_gpu = run.scoring.per_gpu
    front = pareto_front(table, "throughput_per_gpu" if per_gpu else "throughput")
    winner, chosen = _winner(run, table)
    baseline = _baseline(ordered)
    by_number = {t.number: t for t in ordered}
    chosen_trial = by_number.get(winner) if winner is not None else None
    base_trial = by_number.get(baseline) if baseline is not None else None
    found = gain(chosen_trial, base_trial, run.verifications, run.sla.percentile, run.scoring)
    table = table.assign(pareto=table["trial"].isin(front["trial"]), winner=table["trial"].eq(winner))
    return ReportData(
        run=run,
        trials=table,
        points=operating_points(ordered, run.sla, run.scoring),
        front=table.loc[front["trial"].tolist()],
        winner=winner,
        winner_chosen=chosen,
        baseline=baseline,
        gain=found.throughput if found else None,
        verifications=tuple(_verification_row(v, table, run.sla) for v in run.verifications),
        recommended=_recommended(ordered, winner, run),
        gpus=gpu_table(ordered, run.sla),
        gain_per_gpu=found.ratio if found and per_gpu else None,
        baseline_goodput=found.baseline if found else 0.0,
        gain_figures=found.figures if found else "",
        keep_yours=found is not None and found.shown is False,
        node_spread=node_spread_text(run.verifications),
    )


def node_spread_text(verifications: Sequence[Verification]) -> str:
    """How far one config read apart between the nodes of a Ray cluster, beyond fresh servers on
    one node, from the race's rounds (:func:`autotune.search.noise.node_spread`); "" where the
    rounds do not tell (one machine, or no two rounds of a racer on one node and on two)."""
    found = node_spread([(p.node, p.throughput) for p in v.points] for v in verifications)
    if found is None:
        return ""
    return (
        f"The nodes read {found.cv:.1%} apart beyond fresh servers on one node "
        f"({found.across} pairs of a racer's rounds on two nodes, {found.within} on one)."
    )


def _baseline(trials: Sequence[TrialResult]) -> int | None:
    """The baseline trial: the measured one, when an interrupted baseline was queued again."""
    flagged = [t for t in trials if t.baseline]
    measured = [t for t in flagged if t.state == COMPLETE]
    return (measured or flagged)[0].number if flagged else None


def _recommended(trials: Sequence[TrialResult], winner: int | None, run: RunInfo) -> Recommendation | None:
    chosen = next((t for t in trials if t.number == winner), None)
    return None if chosen is None else recommendation(chosen, run.verifications, run.sla.percentile)


def trials_table(trials: Sequence[TrialResult], sla: Sla, scoring: Scoring = RAW) -> pd.DataFrame:
    """One row per trial (index: its number): :data:`TRIAL_COLUMNS`, its point's columns,
    ``goodput`` (throughput within the SLA; 0 for a trial with no feasible point) and
    :data:`SCORING_COLUMNS` (per GPU as ``scoring`` counts them). A trial with no point measured
    has empty point columns."""
    columns = [*TRIAL_COLUMNS, *POINT_COLUMNS, *DERIVED_COLUMNS]
    rows = [{**_trial_columns(t), **_reported(t, sla)} for t in trials]
    frame = pd.DataFrame.from_records(rows, columns=columns).set_axis([t.number for t in trials])
    goodput = frame["throughput"].where(frame["feasible"].astype(bool), 0.0).fillna(0.0).astype(float)
    share = pd.Series([scoring.share(t.candidate) for t in trials], index=frame.index, dtype=float)
    return frame.assign(
        goodput=goodput,
        gpus_used=[scoring.gpus_used(t.candidate) for t in trials],
        throughput_per_gpu=frame["throughput"].astype(float) / share,
        goodput_per_gpu=goodput / share,
    )


def _trial_columns(trial: TrialResult) -> dict[str, Any]:
    return {
        "trial": trial.number, "label": trial.candidate.label() if trial.candidate else "",
        "params": dict(trial.params), "state": trial.state, "baseline": trial.baseline,
        "feasible": trial.feasible, "reused_from": trial.reused_from, "reason": trial.reason,
        "log_tail": trial.log_tail, "duration_s": trial.duration_s, "output_check": trial.output_check,
        "ready_s": trial.measurement.ready_s if trial.measurement else None, "node": trial.node,
    }  # fmt: skip


def _reported(trial: TrialResult, sla: Sla) -> dict[str, Any]:
    """The trial's reported point's columns; none when it measured nothing."""
    m = trial.measurement
    return measured_columns(m.closest(sla), sla) if m is not None and m.points else {}


def measured_columns(point: Point, sla: Sla) -> dict[str, Any]:
    """A point's columns and :data:`DERIVED_COLUMNS`."""
    windows = bool(point.window_throughputs)
    throughput = point.throughput_estimate()
    derived = {
        "latency_ms": point.latency_ms(sla.percentile),
        "latency_high": point.latency_bound(sla.percentile) if windows else None,
        "throughput_low": throughput.low if windows and throughput.n > 1 else None,
        "throughput_high": throughput.high if windows and throughput.n > 1 else None,
        "warm_windows": len(point.warm_windows_ms),
        "avg_batch": point.server.avg_batch,
        "error_rate": point.error_rate,
        **gpu_summary(point.gpus),
        "each_model": each_model(point, sla.percentile),
    }
    own = {k: v for k, v in asdict(point).items() if k not in NOT_COLUMNS}  # batch sizes keep int keys
    return {**point_columns(own, own.pop("server")), **derived}


def each_model(point: Point, percentile: int) -> str:
    """Several models on one server: ``toy 210/s p95 31.0 ms; twin 190/s p95 35.2 ms``; "" otherwise."""
    return "; ".join(
        f"{name} {p.throughput:.0f}/s p{percentile} {p.latency_ms(percentile):.1f} ms"
        for name, p in point.others
    )


def point_columns(own: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """A point's fields, then its server breakdown's, as columns.

    A field named like a trial column gets a ``point_`` prefix (``point_duration_s``: the
    measurement's, beside the trial's), a server field named like a point one ``server_``
    (``server_requests``: Triton's count, beside the load generator's)."""
    out = {(f"point_{k}" if k in TRIAL_COLUMNS else k): v for k, v in own.items()}
    return {**out, **{(f"server_{k}" if k in out else k): v for k, v in server.items()}}


POINT_COLUMNS = tuple(
    point_columns(
        dict.fromkeys(f.name for f in fields(Point) if f.name != "server" and f.name not in NOT_COLUMNS),
        dict.fromkeys(f.name for f in fields(ServerBreakdown)),
    )
)


def operating_points(trials: Iterable[TrialResult], sla: Sla, scoring: Scoring = RAW) -> pd.DataFrame:
    """Every point measured, one row each: ``trial``, the point's columns, ``meets_sla``,
    ``best`` (the trial's reported point) and ``throughput_per_gpu`` (as ``scoring`` counts it).
    A reused trial's points are its source's, so they are not repeated."""
    rows = [
        {
            "trial": t.number,
            **measured_columns(p, sla),
            "meets_sla": sla.met_by(p),
            "best": p == shown,
            "throughput_per_gpu": scoring.score(p.throughput, t.candidate),
        }
        for t in trials
        if t.measurement is not None and t.reused_from is None and t.measurement.points
        for shown in (t.measurement.closest(sla),)
        for p in t.measurement.points
    ]
    columns = ["trial", *POINT_COLUMNS, *DERIVED_COLUMNS, "meets_sla", "best", "throughput_per_gpu"]
    return pd.DataFrame.from_records(rows, columns=columns)


def gpu_summary(figures: Sequence[GpuFigures]) -> dict[str, float | None]:
    """:data:`GPU_COLUMNS` of some GPU figures (one point's GPUs, or several points' pooled):
    average utilisation in %, the peak memory any one GPU used, average power; None each
    without figures."""
    if not figures:
        return dict.fromkeys(GPU_COLUMNS)
    return {
        "gpu_util_pct": 100.0 * sum(f.utilization for f in figures) / len(figures),
        "gpu_memory_mb": peak_memory_mb(figures),
        "gpu_power_w": sum(f.power_w for f in figures) / len(figures),
    }


def gpu_detail(figures: Sequence[GpuFigures]) -> str:
    """Each GPU's figures in one line: ``GPU-1a2b: 85% 1234 MiB 250 W; GPU-3c4d: ...``."""
    return "; ".join(
        f"{f.uuid}: {100 * f.utilization:.0f}% {f.memory_mb:.0f} MiB {f.power_w:.0f} W" for f in figures
    )


def gpu_table(trials: Iterable[TrialResult], sla: Sla) -> pd.DataFrame:
    """The GPU panel's rows (:data:`GPU_TABLE_COLUMNS`): each GPU of each trial's reported point
    (``gpu``: its place in the point's figures, 0 first), for the trials the report draws
    (measured, not a repeat). Empty when no such point has GPU figures."""
    rows = [
        {
            "trial": t.number,
            "gpu": i,
            "uuid": g.uuid,
            "utilization_pct": 100.0 * g.utilization,
            "memory_mb": g.memory_mb,
            "power_w": g.power_w,
        }
        for t in trials
        if t.measurement is not None and t.reused_from is None and t.measurement.points
        for i, g in enumerate(t.measurement.closest(sla).gpus)
    ]
    return pd.DataFrame.from_records(rows, columns=list(GPU_TABLE_COLUMNS))


def records(frame: pd.DataFrame) -> list[Row]:
    """A table's rows as plain Python values, for drawing: None for a gap (not NaN), and ints in
    :data:`INTEGER_COLUMNS` (pandas keeps a column of ints that has a gap as floats)."""
    plain: list[Row] = frame.astype(object).where(frame.notna(), None).to_dict("records")
    for row in plain:
        for name in INTEGER_COLUMNS:
            if row.get(name) is not None:
                row[name] = int(row[name])
    return plain


# ---------------------------------------------------------------- front, winner, gain


def pareto_front(trials: pd.DataFrame, throughput: str = "throughput") -> pd.DataFrame:
    """The trials no other trial beats on both throughput (up; the ``throughput`` column:
    ``throughput_per_gpu`` where the run compared per GPU) and latency (down).

    Only COMPLETE, measured trials that are not repeats (``reused_from``) take part;
    infeasible ones too (their closest point), marked by ``feasible``. Trials with exactly
    the same throughput and latency do not dominate each other: all of them are on the front.
    Sorted by latency, then throughput (highest first), then trial number.
    """
    pool = trials[
        trials["state"].eq(COMPLETE)
        & trials[throughput].notna()
        & trials["latency_ms"].notna()
        & trials["reused_from"].isna()
    ]
    beaten = _dominated(pool[throughput].to_numpy(dtype=float), pool["latency_ms"].to_numpy(dtype=float))
    front = pool[~beaten]
    return front.sort_values(["latency_ms", throughput, "trial"], ascending=[True, False, True])


def _dominated(throughput: np.ndarray[Any, Any], latency: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """For each trial j: is there a trial i with no less throughput, no more latency, and better
    on one of them? (rows i, columns j)"""
    t_i, t_j = throughput[:, None], throughput[None, :]
    l_i, l_j = latency[:, None], latency[None, :]
    beats = (t_i >= t_j) & (l_i <= l_j) & ((t_i > t_j) | (l_i < l_j))
    return np.asarray(beats.any(axis=0), dtype=bool)


def _winner(run: RunInfo, trials: pd.DataFrame) -> tuple[int | None, bool]:
    if run.winner is not None and run.winner in trials.index:
        return run.winner, True
    return best_so_far(trials, "goodput_per_gpu" if run.scoring.per_gpu else "goodput"), False


def best_so_far(trials: pd.DataFrame, goodput: str = "goodput") -> int | None:
    """The feasible trial with the highest ``goodput`` (the column the run ranks by); ties go to
    lower latency, then the earlier trial."""
    feasible = trials[trials["feasible"].astype(bool) & trials["state"].eq(COMPLETE)]
    if feasible.empty:
        return None
    ranked = feasible.sort_values([goodput, "latency_ms", "trial"], ascending=[False, True, True])
    return int(ranked["trial"].iloc[0])


def _verification_row(v: Verification, trials: pd.DataFrame, sla: Sla) -> VerificationRow:
    throughputs = [p.throughput for p in v.points] or [0.0]
    return VerificationRow(
        trial=v.trial,
        label=("your config, the control: " if v.control else "left the race: " if v.left else "")
        + (str(trials.loc[v.trial, "label"]) if v.trial in trials.index else ""),
        concurrency=v.concurrency,
        repeats=len(v.points),
        sla_met=v.sla_met,
        median_throughput=v.median_throughput,
        min_throughput=min(throughputs),
        max_throughput=max(throughputs),
        max_latency_ms=max((p.latency_ms(sla.percentile) for p in v.points), default=0.0),
        median_latency_ms=v.median_latency_ms(sla.percentile),
        where=v.where,
        level=float(v.concurrency or v.request_rate),
        nodes=", ".join(p.node for p in v.points) if any(p.node for p in v.points) else "",
    )


# ---------------------------------------------------------------- trials.csv

# trials.csv's fixed columns; the trial parameters come between "error_rate" and "label".
CSV_HEAD = (
    "trial", "state", "baseline", "winner", "feasible", "pareto", "goodput",
    "concurrency", "request_rate", "throughput", "latency_ms", "p50_ms", "p90_ms", "p95_ms",
    "p99_ms", "avg_ms", "queue_us", "compute_infer_us", "avg_batch", "errors", "error_rate",
)  # fmt: skip
CSV_TAIL = (
    "label", "reused_from", "duration_s", "ready_s", "warm_windows", "output_check", "first_error", "reason",
)  # fmt: skip
# Only where the run compared goodputs per GPU: after "goodput".
CSV_PER_GPU = ("gpus_used", "goodput_per_gpu")
# Only where some trial's point has GPU figures: after "error_rate" (gpu_detail: each GPU's figures).
CSV_GPU = (*GPU_COLUMNS, "gpu_detail")


def csv_head(data: ReportData) -> tuple[str, ...]:
    """trials.csv's columns before the parameters: :data:`CSV_HEAD`, with :data:`CSV_PER_GPU`
    in a per-GPU run, :data:`CSV_GPU` in a run with GPU figures, ``each_model`` in a run of
    several models on one server and ``node`` in a run on a Ray cluster (the node that measured
    each trial)."""
    at = CSV_HEAD.index("goodput") + 1
    head = (*CSV_HEAD[:at], *(CSV_PER_GPU if data.per_gpu else ()), *CSV_HEAD[at:])
    beside = data.trials["each_model"].fillna("").astype(bool).any()
    nodes = data.trials["node"].fillna("").astype(bool).any()
    extra = (*(("each_model",) if beside else ()), *(("node",) if nodes else ()))
    return (*head, *(CSV_GPU if data.has_gpus else ()), *extra)


def trials_frame(data: ReportData) -> pd.DataFrame:
    """trials.csv's table: the trials table's CSV columns (:func:`csv_head`), the parameters
    between them (a parameter a trial lacks is empty; one named like a fixed column gets a
    ``param_`` prefix)."""
    head = csv_head(data)
    trials = data.trials.assign(gpu_detail=[gpu_detail(_figures(g)) for g in data.trials["gpus"]])
    names = list(dict.fromkeys(k for params in trials["params"] for k in params))
    fixed = set(head) | set(CSV_TAIL)
    params = pd.DataFrame.from_records(list(trials["params"]), columns=names, index=trials.index)
    params.columns = [f"param_{n}" if n in fixed else n for n in names]
    frame = pd.concat([trials[list(head)], params, trials[list(CSV_TAIL)]], axis=1)
    return frame.reset_index(drop=True)


def _figures(value: Any) -> list[GpuFigures]:
    """A trials-table ``gpus`` cell (the point's figures as dicts; empty for no point) as figures."""
    if not isinstance(value, list | tuple):
        return []
    return [GpuFigures(**g) if isinstance(g, dict) else g for g in value]


def write_csv(data: ReportData, path: Path) -> Path:
    """Write trials.csv atomically (the server log tails stay in the HTML report)."""
    write_text_atomic(path, trials_frame(data).to_csv(index=False))
    return path
