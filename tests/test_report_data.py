"""The report's tables: trial rows, operating points, Pareto front, winner/baseline/gain, CSV."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import autotune.report as report
from autotune.gpu import GpuFigures
from autotune.objective import Scoring, Sla
from autotune.points import Measurement, Point, ServerBreakdown
from autotune.report import gpu_summary, pareto_front, render_html, report_data, trials_frame, write_csv
from autotune.report._data import CSV_HEAD, CSV_TAIL, NOT_COLUMNS, POINT_COLUMNS, records
from autotune.results import COMPLETE, FAIL, PRUNED, RUNNING, Outcome, RunInfo, TrialResult, Verification
from autotune.search_space import Candidate, params_of

SLA = Sla(percentile=95, limit_ms=20.0)


def point(
    c: int, throughput: float, p95: float, *, errors: int = 0, batches: dict[int, int] | None = None
) -> Point:
    return Point(
        concurrency=c, request_rate=0.0, throughput=throughput, avg_ms=p95 * 0.6, p50_ms=p95 * 0.5,
        p90_ms=p95 * 0.9, p95_ms=p95, p99_ms=p95 * 1.2, requests=1000, errors=errors, duration_s=5.0,
        windows=3, stable=True,
        server=ServerBreakdown(queue_us=100.0 * c, compute_infer_us=900.0, batch_sizes=batches or {1: 10}),
    )  # fmt: skip


def candidate(count: int = 1, mbs: int = 8, batching: bool = True) -> Candidate:
    return Candidate(
        instance_count=count, kind="KIND_CPU", gpus=(), max_batch_size=mbs, dynamic_batching=batching,
        preferred_batch_sizes=(), max_queue_delay_us=0, trt_fp16=False,
    )  # fmt: skip


def trial(number: int, *points: Point, baseline: bool = False, cand: Candidate | None = None) -> TrialResult:
    cand = cand or candidate(count=number + 1)
    best = max((p for p in points if SLA.met_by(p)), key=lambda p: p.throughput, default=None)
    return TrialResult(
        number=number, state=COMPLETE, candidate=cand, params=params_of(cand), baseline=baseline,
        measurement=Measurement(points=tuple(points), best=best), duration_s=12.0,
    )  # fmt: skip


def failed(number: int) -> TrialResult:
    cand = candidate(count=4)
    return TrialResult(
        number=number, state=FAIL, candidate=cand, params=params_of(cand), baseline=False,
        measurement=None, reason="model never became ready", log_tail="E1122 out of memory\n", duration_s=3.0,
    )  # fmt: skip


def run(winner: int | None = None, verifications: tuple[Verification, ...] = ()) -> RunInfo:
    return RunInfo(
        run_id="r1", model="resnet", sla=SLA, launcher="local", original_config="name: 'resnet'\n",
        started="2025-01-01T00:00:00", winner=winner, verifications=verifications,
    )  # fmt: skip


def row(
    number: int,
    throughput: float | None,
    latency: float | None,
    *,
    feasible: bool = True,
    state: str = COMPLETE,
    reused_from: int | None = None,
) -> dict[str, Any]:
    """The columns of a trials-table row that the Pareto front reads."""
    return {
        "trial": number, "label": f"t{number}", "state": state, "feasible": feasible,
        "throughput": throughput, "latency_ms": latency, "reused_from": reused_from,
    }  # fmt: skip


def table(*rows: dict[str, Any]) -> pd.DataFrame:
    columns = ["trial", "label", "state", "feasible", "throughput", "latency_ms", "reused_from"]
    return pd.DataFrame.from_records(list(rows), columns=columns).set_axis([r["trial"] for r in rows])


def numbers(frame: pd.DataFrame) -> list[int]:
    return [int(n) for n in frame["trial"]]


# ---------------------------------------------------------------- Pareto front (pure)


def test_front_keeps_only_undominated_sorted_by_latency() -> None:
    rows = table(row(0, 100, 10), row(1, 200, 15), row(2, 150, 16), row(3, 300, 30), row(4, 50, 5))
    assert numbers(pareto_front(rows)) == [4, 0, 1, 3]  # 2 is beaten by 1 on both


def test_front_ties_exact_duplicates_both_stay() -> None:
    rows = table(row(0, 100, 10), row(1, 100, 10), row(2, 90, 10))
    assert numbers(pareto_front(rows)) == [0, 1]  # equal points do not dominate each other


def test_front_tie_on_one_axis_is_dominated() -> None:
    # same throughput, more latency -> dominated; same latency, less throughput -> dominated
    rows = table(row(0, 100, 10), row(1, 100, 12), row(2, 80, 10))
    assert numbers(pareto_front(rows)) == [0]


def test_front_considers_infeasible_rows_and_keeps_their_flag() -> None:
    rows = table(row(0, 100, 10), row(1, 400, 40, feasible=False), row(2, 90, 50, feasible=False))
    front = pareto_front(rows)
    assert numbers(front) == [0, 1]
    assert list(front["feasible"]) == [True, False]


def test_front_skips_failed_running_unmeasured_and_reused() -> None:
    rows = table(
        row(0, 100, 10),
        row(1, 999, 1, state=FAIL),
        row(2, 999, 1, state=RUNNING),
        row(3, None, None, feasible=False),
        row(4, 999, 1, reused_from=0),
    )
    assert numbers(pareto_front(rows)) == [0]


def test_front_of_nothing_is_empty() -> None:
    assert pareto_front(table()).empty


# ---------------------------------------------------------------- rows and points


def test_rows_report_best_point_and_server_side() -> None:
    t = trial(0, point(1, 100, 5), point(2, 180, 9, batches={1: 2, 2: 6}), point(4, 220, 25))
    data = report_data(run(), [t])
    r = data.row(0)
    assert (r["concurrency"], r["throughput"], r["latency_ms"], r["feasible"]) == (2, 180, 9, True)
    assert (r["p50_ms"], r["p95_ms"], r["p99_ms"], r["avg_ms"]) == pytest.approx((4.5, 9, 10.8, 5.4))
    assert (r["queue_us"], r["compute_infer_us"]) == (200.0, 900.0)
    assert r["avg_batch"] == pytest.approx(14 / 8) and r["batch_sizes"] == {1: 2, 2: 6}
    assert r["label"] == t.candidate.label() if t.candidate else False
    assert r["params"] == t.params and r["goodput"] == 180


def test_row_point_columns_are_the_points_fields() -> None:
    t = trial(0, point(1, 100, 5))
    r = report_data(run(), [t]).row(0)
    assert t.best is not None
    fields = t.best.to_dict()
    server = fields.pop("server")
    assert {k: r[k] for k in ("requests", "errors", "windows", "stable", "send_rate")} == {
        k: fields[k] for k in ("requests", "errors", "windows", "stable", "send_rate")
    }
    assert r["point_duration_s"] == fields["duration_s"] and r["duration_s"] == t.duration_s  # the trial's
    assert r["server_requests"] == server["requests"] and r["executions"] == server["executions"]
    assert set(fields) - {"duration_s", *NOT_COLUMNS} <= set(POINT_COLUMNS) and "server" not in POINT_COLUMNS
    assert r["latency_high"] is None and r["throughput_low"] is None  # no windows recorded: no bounds


def test_a_point_with_its_windows_has_its_bounds_as_columns() -> None:
    p = replace(point(8, 500, 12), window_throughputs=(490.0, 500.0, 510.0),
                window_latencies_ms=(11.5, 12.0, 12.5), window_percentile=95)  # fmt: skip
    r = report_data(run(), [trial(0, p)]).row(0)
    assert r["throughput_low"] < 500 < r["throughput_high"] and r["latency_high"] > r["latency_ms"]
    assert r["latency_high"] == pytest.approx(p.latency_bound(95))


def test_infeasible_trial_reports_its_closest_point_with_zero_goodput() -> None:
    t = trial(0, point(1, 100, 30), point(2, 150, 45))
    r = report_data(run(), [t]).row(0)
    assert not r["feasible"] and r["concurrency"] == 1 and r["latency_ms"] == 30
    assert r["goodput"] == 0.0


def test_failed_trial_row_keeps_reason_and_log_tail() -> None:
    data = report_data(run(), [trial(0, point(1, 100, 5)), failed(1)])
    r = data.row(1)
    assert (r["state"], r["feasible"], r["reason"], r["log_tail"]) == (
        FAIL,
        False,
        "model never became ready",
        "E1122 out of memory\n",
    )
    assert r["throughput"] is None and r["concurrency"] is None
    assert r["goodput"] == 0.0 and not r["pareto"]
    assert data.count(FAIL) == 1 and data.count(COMPLETE) == 1


def test_operating_points_cover_every_measured_point_once() -> None:
    t0 = trial(0, point(1, 100, 5), point(2, 180, 9), point(4, 220, 25))
    t1 = trial(1, point(1, 90, 4))
    reused = TrialResult(number=2, state=PRUNED, candidate=t1.candidate, params=t1.params, baseline=False,
                         measurement=None, reused_from=1, reason="same as trial 1")  # fmt: skip
    data = report_data(run(), [reused, t1, failed(3), t0])  # order does not matter
    assert list(data.trials["trial"]) == [0, 1, 2, 3] == list(data.trials.index)
    assert [(p["trial"], p["concurrency"], p["meets_sla"], p["best"]) for p in records(data.points)] == [
        (0, 1, True, False), (0, 2, True, True), (0, 4, False, False), (1, 1, True, True),
    ]  # fmt: skip
    assert data.points["latency_ms"].iloc[2] == 25
    assert data.row(2)["reused_from"] == 1 and not data.row(2)["pareto"]


def test_points_with_errors_do_not_meet_the_sla() -> None:
    data = report_data(run(), [trial(0, point(1, 100, 5, errors=3))])
    assert not data.points["meets_sla"].iloc[0] and not data.row(0)["feasible"]


def test_rows_on_the_front_are_marked() -> None:
    data = report_data(
        run(), [trial(0, point(1, 100, 5)), trial(1, point(1, 80, 6)), trial(2, point(1, 300, 40))]
    )
    assert numbers(data.front) == [0, 2]
    assert list(data.trials["pareto"]) == [True, False, True]
    assert not data.front["feasible"].iloc[1]


# ---------------------------------------------------------------- winner, baseline, gain


def test_winner_baseline_and_gain_from_the_run() -> None:
    trials = [
        trial(0, point(1, 100, 5), baseline=True),
        trial(1, point(1, 250, 8)),
        trial(2, point(1, 300, 9)),
    ]
    data = report_data(run(winner=1), trials)  # the run chose 1 (say, after verification)
    assert data.winner == 1 and data.winner_chosen
    assert data.baseline == 0
    assert data.gain == pytest.approx(2.5)
    assert list(data.trials["winner"]) == [False, True, False]


def test_winner_falls_back_to_best_feasible_so_far() -> None:
    trials = [
        trial(0, point(1, 100, 5), baseline=True),
        trial(1, point(1, 300, 9)),
        trial(2, point(1, 900, 99)),
    ]
    data = report_data(run(winner=None), trials)
    assert data.winner == 1 and not data.winner_chosen


def test_best_so_far_ties_go_to_lower_latency_then_earlier_trial() -> None:
    trials = [trial(0, point(1, 300, 9)), trial(1, point(1, 300, 7)), trial(2, point(1, 300, 7))]
    data = report_data(run(), trials)
    assert data.winner == 1


def test_no_gain_without_a_feasible_baseline() -> None:
    infeasible_base = [trial(0, point(1, 100, 50), baseline=True), trial(1, point(1, 300, 9))]
    assert report_data(run(winner=1), infeasible_base).gain is None
    no_base = [trial(1, point(1, 300, 9))]
    data = report_data(run(winner=1), no_base)
    assert data.baseline is None and data.gain is None


def test_no_winner_when_nothing_is_feasible() -> None:
    data = report_data(run(), [trial(0, point(1, 100, 50), baseline=True), failed(1)])
    assert data.winner is None and data.gain is None and not data.winner_chosen


def test_verifications_are_summarised() -> None:
    v = Verification(
        trial=1, concurrency=4, points=(point(4, 240, 8), point(4, 260, 9), point(4, 250, 21)), sla_met=2
    )
    data = report_data(run(winner=1, verifications=(v,)), [trial(1, point(4, 250, 8))])
    (row_,) = data.verifications
    assert (row_.trial, row_.concurrency, row_.repeats, row_.sla_met) == (1, 4, 3, 2)
    assert (row_.median_throughput, row_.min_throughput, row_.max_throughput) == (250, 240, 260)
    assert row_.max_latency_ms == 21 and row_.label == data.row(1)["label"]
    assert row_.median_latency_ms == 9


def test_a_finalist_that_left_the_race_is_labelled_so() -> None:
    winner = Verification(1, 4, (point(4, 250, 8), point(4, 252, 8)), sla_met=2)
    out = Verification(2, 4, (point(4, 260, 8),), sla_met=1, left=True)
    data = report_data(run(winner=1, verifications=(winner, out)), [trial(1, point(4, 250, 8))])
    assert [v.label.startswith("left the race: ") for v in data.verifications] == [False, True]


def test_on_a_ray_cluster_the_race_names_each_rounds_node_and_how_far_the_nodes_read_apart() -> None:
    def on(node: str, throughput: float) -> Point:
        return replace(point(4, throughput, 8), node=node)

    winner = Verification(1, 4, (on("a/1", 250), on("b/2", 230), on("a/1", 252)), sla_met=3)
    yours = Verification(0, 2, (on("b/2", 100), on("a/1", 110), on("b/2", 99)), sla_met=3, control=True)
    data = report_data(run(winner=1, verifications=(winner, yours)), [trial(1, point(4, 250, 8))])
    assert [v.nodes for v in data.verifications] == ["a/1, b/2, a/1", "b/2, a/1, b/2"]
    assert data.node_spread.startswith("The nodes read 6.")  # ln(250/230), ln(110/100): a node's 8-10%
    assert "(4 pairs of a racer's rounds on two nodes, 2 on one)" in data.node_spread
    html = render_html(data)
    assert '<th class="l">nodes</th>' in html and "a/1, b/2, a/1" in html
    assert data.node_spread.split(" (")[0] in html
    alone = report_data(run(winner=1, verifications=(replace(winner, points=(point(4, 250, 8),)),)), [])
    assert alone.node_spread == "" and ">nodes<" not in render_html(alone)  # one machine: as before


def test_the_winner_is_shown_at_its_verified_operating_point() -> None:
    # the search found 16 best; its verification broke the SLA there and passed at 8
    repeats = (point(8, 240, 12), point(8, 250, 13), point(8, 245, 14))
    v = Verification(trial=1, concurrency=8, points=repeats, sla_met=3)
    found = trial(1, point(8, 260, 11), point(16, 300, 19))
    data = report_data(run(winner=1, verifications=(v,)), [found])
    assert data.winner == 1 and data.row(1)["concurrency"] == 16  # the trial's row: the search
    chosen = data.recommended
    assert chosen is not None and chosen.verification is v
    assert (chosen.concurrency, chosen.throughput, chosen.latency_ms) == (8, 245, 13)
    html = render_html(data)
    assert "at concurrency 8 · 3/3 race rounds met the SLA" in html
    searched = report_data(run(winner=1), [found]).recommended  # not verified: the search's best
    assert searched is not None and searched.verification is None
    assert (searched.concurrency, searched.throughput) == (16, 300)


# ---------------------------------------------------------------- CSV


def test_csv_has_one_row_per_trial_and_params_as_columns(tmp_path: Path) -> None:
    plain = candidate(count=1, mbs=0, batching=False)  # lacks the batching parameters
    trials = [trial(0, point(1, 100, 5), baseline=True, cand=plain), trial(1, point(2, 300, 9)), failed(2)]
    data = report_data(run(winner=1), trials)
    path = write_csv(data, tmp_path / "out" / "trials.csv")
    with path.open(newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    assert [r["trial"] for r in records] == ["0", "1", "2"]
    header = list(records[0])
    assert header[:4] == ["trial", "state", "baseline", "winner"]
    params = list(dict.fromkeys(k for t in trials for k in t.params))
    assert header == [*CSV_HEAD, *params, *CSV_TAIL]  # fixed columns, the parameters between them
    for name in (
        "instance_count",
        "kind",
        "max_batch_size",
        "dynamic_batching",
        "throughput",
        "p95_ms",
        "label",
    ):
        assert name in header
    assert records[0]["dynamic_batching"] == "" and records[1]["dynamic_batching"] == "True"  # absent: empty
    assert records[1]["winner"] == "True" and records[0]["baseline"] == "True"
    assert records[2]["state"] == FAIL and records[2]["reason"] == "model never became ready"
    assert records[2]["throughput"] == ""
    assert not list(path.parent.glob(".*.tmp"))  # the temporary file was renamed away


def test_frame_renames_a_parameter_that_clashes_with_a_fixed_column() -> None:
    t = trial(0, point(1, 100, 5))
    clash = TrialResult(**{**t.__dict__, "params": {"state": "x", "kind": "KIND_CPU"}})
    frame = trials_frame(report_data(run(), [clash]))
    assert frame.loc[0, "param_state"] == "x" and frame.loc[0, "state"] == COMPLETE
    assert frame.loc[0, "kind"] == "KIND_CPU"


def test_exported_names() -> None:
    assert set(report.__all__) == {
        "CSV_NAME", "REPORT_NAME", "ReportData", "VerificationRow", "gpu_summary",
        "pareto_front", "render_html", "report_data", "trials_frame", "write_csv", "write_report",
    }  # fmt: skip


def test_console_summary_shows_the_recommended_points_and_a_gain_from_one_source(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from autotune._console import print_summary

    repeats = (point(8, 240, 12), point(8, 250, 13), point(8, 245, 14))
    v = Verification(trial=1, concurrency=8, points=repeats, sla_met=3)
    base = trial(0, point(2, 100, 5), baseline=True)
    found = trial(1, point(8, 260, 11), point(16, 300, 19))
    print_summary(Outcome(tmp_path, run(winner=1, verifications=(v,)), (base, found)))
    out = capsys.readouterr().out  # not a terminal: plain ASCII rows, one line each
    winner_row = next(line for line in out.splitlines() if "winner" in line and "|" in line)
    cells = [c.strip() for c in winner_row.split("|")]
    assert cells[3:7] == ["8", "245", "6.5", "13.0"] and cells[7].startswith("3/3")  # the raced medians
    base_row = next(line for line in out.splitlines() if "baseline" in line and "|" in line)
    assert [c.strip() for c in base_row.split("|")][3:8] == ["2", "100", "2.5", "5.0", "-"]  # search
    # the ratio of the table's two figures, 245 / 100, as the report's card reads it
    said = "2.45x throughput at the SLA (the table's figures: the winner raced, your config as searched; too"
    assert said in out
    data = report_data(run(winner=1, verifications=(v,)), (base, found))
    assert data.gain == pytest.approx(2.45) and data.baseline_goodput == pytest.approx(100)


def test_the_baseline_is_the_measured_one_when_an_interrupted_baseline_ran_again() -> None:
    stopped = replace(trial(0, baseline=True), state=FAIL, measurement=None, interrupted=True)
    again = trial(2, point(4, 110, 9), baseline=True)
    data = report_data(run(), [stopped, trial(1, point(4, 200, 9)), again])
    assert data.baseline == 2 and data.gain == pytest.approx(200 / 110)
    assert report_data(run(), [stopped, trial(1, point(4, 200, 9))]).baseline == 0  # only the stopped one


# ---------------------------------------------------------------- GPU figures and goodput per GPU

GPU_A, GPU_B = GpuFigures("GPU-a", 0.9, 5000.0, 250.0), GpuFigures("GPU-b", 0.5, 7000.0, 150.0)


def on_gpus(number: int, *ids: int) -> Candidate:
    return replace(candidate(count=number + 1), kind="KIND_GPU", gpus=ids)


def gpu_trial(number: int, p: Point, *figures: GpuFigures, ids: tuple[int, ...] = (0,)) -> TrialResult:
    return trial(number, replace(p, gpus=figures), cand=on_gpus(number, *ids))


def test_a_run_without_gpu_figures_shows_no_gpu_column_nor_panel(tmp_path: Path) -> None:
    data = report_data(run(winner=1), [trial(0, point(1, 100, 5), baseline=True), trial(1, point(2, 300, 9))])
    assert not data.has_gpus and data.gpus.empty and not data.per_gpu
    assert list(data.trials["gpu_util_pct"]) == [None, None]  # the frame's columns stay, empty
    header = list(trials_frame(data).columns)
    assert not any(name.startswith("gpu") or "per_gpu" in name for name in header)
    page = render_html(data)
    assert 'id="fig-gpu"' not in page and "GPU util" not in page and "per GPU" not in page


def test_gpu_figures_are_summarised_per_trial_and_listed_per_gpu() -> None:
    trials = [
        gpu_trial(0, point(1, 100, 5), GPU_A, GPU_B, ids=(0, 1)),
        gpu_trial(1, point(2, 300, 9), GPU_A),
        trial(2, point(2, 50, 9)),  # no figures (a CPU trial)
        failed(3),
    ]
    data = report_data(run(winner=1), trials)
    assert data.has_gpus
    row = data.row(0)  # two GPUs: average utilisation and power, the peak memory
    assert (row["gpu_util_pct"], row["gpu_memory_mb"], row["gpu_power_w"]) == pytest.approx(
        (70.0, 7000.0, 200.0)
    )
    assert data.row(2)["gpu_memory_mb"] is None
    assert list(data.gpus.columns) == ["trial", "gpu", "uuid", "utilization_pct", "memory_mb", "power_w"]
    assert [tuple(r.values()) for r in records(data.gpus)] == [
        (0, 0, "GPU-a", 90.0, 5000.0, 250.0), (0, 1, "GPU-b", 50.0, 7000.0, 150.0),
        (1, 0, "GPU-a", 90.0, 5000.0, 250.0),
    ]  # fmt: skip
    assert gpu_summary([]) == dict.fromkeys(("gpu_util_pct", "gpu_memory_mb", "gpu_power_w"))


def test_the_csv_has_gpu_columns_when_some_point_has_figures(tmp_path: Path) -> None:
    trials = [gpu_trial(0, point(1, 100, 5), GPU_A, GPU_B, ids=(0, 1)), trial(1, point(2, 300, 9))]
    path = write_csv(report_data(run(winner=1), trials), tmp_path / "trials.csv")
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    header = list(rows[0])
    at = header.index("error_rate")
    assert header[at + 1 : at + 5] == ["gpu_util_pct", "gpu_memory_mb", "gpu_power_w", "gpu_detail"]
    assert header[: len(CSV_HEAD)] == list(CSV_HEAD) and header[-len(CSV_TAIL) :] == list(CSV_TAIL)
    assert (rows[0]["gpu_util_pct"], rows[0]["gpu_memory_mb"], rows[0]["gpu_power_w"]) == (
        "70.0",
        "7000.0",
        "200.0",
    )
    assert rows[0]["gpu_detail"] == "GPU-a: 90% 5000 MiB 250 W; GPU-b: 50% 7000 MiB 150 W"
    assert rows[1]["gpu_memory_mb"] == "" and rows[1]["gpu_detail"] == ""


def test_a_per_gpu_run_ranks_and_draws_by_goodput_per_gpu() -> None:
    """Two GPUs doing 1.5x the work of one lose to it: the front, the best so far, the gain and the
    CSV all count per GPU, and the throughput stays beside it."""
    trials = [
        replace(gpu_trial(0, point(1, 100, 5), ids=(0,)), baseline=True),
        gpu_trial(1, point(2, 200, 9), ids=(0,)),
        gpu_trial(2, point(2, 300, 9), ids=(0, 1)),  # 150 per GPU, at the same latency as #1
    ]
    info = replace(run(), scoring=Scoring(per_gpu=True, server_gpus=2))
    data = report_data(info, trials)
    assert data.per_gpu and data.goodput_column == "goodput_per_gpu"
    assert list(data.trials["gpus_used"]) == [1, 1, 2]
    assert list(data.trials["throughput"]) == [100, 200, 300]  # the figure stays
    assert list(data.trials["goodput_per_gpu"]) == [100, 200, 150]
    assert data.winner == 1 and not data.winner_chosen  # not #2, the higher throughput
    assert 2 not in numbers(data.front)  # beaten per GPU by #1 at the same latency
    assert data.gain == pytest.approx(2.0) and data.gain_per_gpu == pytest.approx(2.0)
    assert list(data.points["throughput_per_gpu"]) == [100, 200, 150]
    header = list(trials_frame(data).columns)
    assert header[header.index("goodput") + 1 : header.index("goodput") + 3] == [
        "gpus_used",
        "goodput_per_gpu",
    ]
    raw = report_data(run(), trials)
    assert raw.winner == 2 and "gpus_used" not in trials_frame(raw).columns


def test_errors_are_in_the_csv_and_the_page(tmp_path: Path) -> None:
    """A point with errors does not meet the SLA whatever its latency; trials.csv gives its
    error count, share and the server's first error, and the page an "errors %" column."""
    erred = replace(point(1, 100, 5, errors=250), first_error='HTTP 400: {"error":"boom"}')
    trials = [trial(0, point(1, 100, 5)), trial(1, erred)]
    data = report_data(run(winner=0), trials)
    assert data.has_errors and not data.row(1)["feasible"]
    path = write_csv(data, tmp_path / "trials.csv")
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["errors"], r["error_rate"], r["first_error"]) for r in rows] == [
        ("0", "0.0", ""), ("250", "0.2", 'HTTP 400: {"error":"boom"}'),
    ]  # fmt: skip
    page = render_html(data)
    assert "errors %" in page and "20.0" in page and "the server answered errors: HTTP 400" in page
    assert "errors %" not in render_html(report_data(run(winner=0), trials[:1]))


def test_the_header_says_how_the_run_was_made() -> None:
    made = (("autotune", "0.1.0"), ("triton", "2.51.0"), ("rules", "intervals"),
            ("command", "autotune run --model toy --sla-p95-ms 60 <b>"))  # fmt: skip
    page = render_html(report_data(replace(run(), made=made), [trial(0, point(1, 100, 5))]))
    assert "triton <b>2.51.0</b>" in page and "rules <b>intervals</b>" in page
    assert "made by <code>autotune run --model toy --sla-p95-ms 60 &lt;b&gt;</code>" in page
    assert "made by" not in render_html(report_data(run(), [trial(0, point(1, 100, 5))]))


def test_several_models_on_one_server_show_each_models_figures_in_trials_csv(tmp_path: Path) -> None:
    """A point with models beside the tuned one: each model's figures in ``each_model`` (the
    table and trials.csv, after the fixed columns); a run without them has no such column."""
    mine, theirs = point(4, 200, 10), point(4, 100, 15)
    both = replace(mine, throughput=300.0, others=(("resnet", mine), ("twin", theirs)))
    data = report_data(run(winner=0), [trial(0, both, baseline=True)])
    assert data.row(0)["each_model"] == "resnet 200/s p95 10.0 ms; twin 100/s p95 15.0 ms"
    with write_csv(data, tmp_path / "trials.csv").open(newline="", encoding="utf-8") as handle:
        (record,) = list(csv.DictReader(handle))
    assert record["each_model"] == "resnet 200/s p95 10.0 ms; twin 100/s p95 15.0 ms"
    alone = report_data(run(winner=0), [trial(0, mine, baseline=True)])
    assert "each_model" not in trials_frame(alone).columns
