"""What a person sees (_console.py): GPU figures and the goodput per GPU only where a run has them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autotune._console import _trial_line, print_summary
from autotune.gpu import GpuFigures
from autotune.objective import RAW, Scoring, Sla
from autotune.points import Measurement, Point
from autotune.results import COMPLETE, PRUNED, Outcome, RunInfo, TrialResult, Verification, gain
from autotune.search_space import Candidate, params_of

SLA = Sla(95, 20.0)
FIGURES = (GpuFigures("GPU-a", 0.9, 5000.0, 250.0), GpuFigures("GPU-b", 0.5, 7000.0, 150.0))


def point(c: int, throughput: float, p95: float, gpus: tuple[GpuFigures, ...] = ()) -> Point:
    return Point(c, 0.0, throughput, p95 * 0.6, p95 * 0.5, p95 * 0.9, p95, p95 * 1.2, 1000, 0, 5.0, 3, True,
                 gpus=gpus)  # fmt: skip


def trial(number: int, p: Point, ids: tuple[int, ...] = (), baseline: bool = False) -> TrialResult:
    kind = "KIND_GPU" if ids else "KIND_CPU"
    cand = Candidate(number + 1, kind, ids, 8, True, (), 0, False)
    best = p if SLA.met_by(p) else None
    return TrialResult(
        number, COMPLETE, cand, params_of(cand), baseline, Measurement((p,), best), duration_s=9.0
    )


def info(verifications: tuple[Verification, ...] = (), scoring: Scoring = RAW) -> RunInfo:
    return RunInfo(
        run_id="r", model="m", sla=SLA, launcher="local", original_config="", started="t", winner=1,
        verifications=verifications, scoring=scoring,
    )  # fmt: skip


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps the table's cells at the terminal's width


def rows(out: str) -> dict[str, list[str]]:
    """The summary table's header and rows, by their first cell."""
    lines = [line for line in out.splitlines() if line.startswith("|")]  # not a terminal: ASCII
    cells = {}
    for line in lines:
        parts = [c.strip() for c in line.split("|")][1:-1]
        if parts and parts[0] in ("", "winner", "baseline") and parts[0] not in cells:
            cells[parts[0]] = parts
    return cells


def test_a_cpu_run_shows_no_gpu_column(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    print_summary(
        Outcome(tmp_path, info(), (trial(0, point(2, 100, 5), baseline=True), trial(1, point(4, 300, 9))))
    )
    out = capsys.readouterr().out
    assert "GPU" not in out and "per GPU" not in out
    assert "3.00x throughput at the SLA" in out
    assert f"apply it: autotune apply {tmp_path}" in out


def test_a_round_names_no_apply_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A round of a run in rounds: the rounds' last line names the one command that applies them."""
    both = (trial(0, point(2, 100, 5), baseline=True), trial(1, point(4, 300, 9)))
    print_summary(Outcome(tmp_path, info(), both), apply_line=False)
    out = capsys.readouterr().out
    assert "3.00x throughput at the SLA" in out and "apply it" not in out


def test_gpu_columns_show_the_recommended_points_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = trial(0, point(2, 100, 5), baseline=True)  # measured without figures
    repeats = tuple(point(4, t, 9, FIGURES) for t in (290.0, 300.0, 310.0))
    verified = Verification(trial=1, concurrency=4, points=repeats, sla_met=3)
    outcome = Outcome(tmp_path, info(verifications=(verified,)), (base, trial(1, point(4, 320, 9, FIGURES))))
    print_summary(outcome)
    table = rows(capsys.readouterr().out)
    head = table[""]
    assert head[head.index("p95 ms") + 1 : head.index("raced")] == ["GPU util %", "GPU MiB peak", "GPU W"]
    at = head.index("GPU util %")
    assert table["winner"][at : at + 3] == ["70", "7000", "200"]  # average, peak, average over repeats
    assert table["baseline"][at : at + 3] == ["-", "-", "-"]


def test_a_per_gpu_run_shows_the_goodput_per_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    scoring = Scoring(per_gpu=True, server_gpus=2)
    base, two = trial(0, point(2, 100, 5), ids=(0,), baseline=True), trial(1, point(4, 300, 9), ids=(0, 1))
    print_summary(Outcome(tmp_path, info(scoring=scoring), (base, two)))
    out = capsys.readouterr().out
    table = rows(out)
    assert table["winner"][table[""].index("per GPU")] == "150"
    assert "1.50x throughput per GPU at the SLA (3.00x throughput" in out
    assert "300 infer/s (150 per GPU, 2 GPUs) at concurrency 4" in _trial_line(two, 95, scoring)
    assert "100 infer/s (100 per GPU, 1 GPU) at" in _trial_line(base, 95, scoring)
    assert "per GPU" not in _trial_line(two, 95)


def test_a_trial_that_broke_the_gpu_memory_limit_says_so() -> None:
    limited = Sla(95, 20.0, 6000.0)
    over = point(1, 100, 5, FIGURES)
    result = replace(trial(0, over), measurement=Measurement((over,), None))
    assert not limited.met_by(over)
    line = _trial_line(result, 95, memory_limit=6000.0)
    assert "misses the SLA even at concurrency 1 (p95 5.0 ms; GPU memory 7000 MiB > 6000 MiB)" in line
    assert "GPU memory" not in _trial_line(result, 95)  # without a limit nothing is said of it


def test_a_trial_another_stood_in_for_says_why() -> None:
    t = trial(0, point(4, 300, 9))
    reused = replace(t, number=2, state=PRUNED, measurement=None, reused_from=0, reason="same as trial 0")
    assert _trial_line(reused, 95).endswith(": not measured, same as trial 0")
    why = "1 instance(s) lost without dynamic batching (trial 0 against 1); trial 0 is the nearest measured"
    assert _trial_line(replace(reused, reason=why), 95).endswith(f": not measured, {why}")


def test_a_point_that_got_errors_says_how_many_and_the_first() -> None:
    erred = replace(point(1, 100, 2), errors=500, first_error='HTTP 400: {"error":"out of memory"}')
    result = replace(trial(0, erred), measurement=Measurement((erred,), None))
    assert not SLA.met_by(erred)  # however fast: errors are a verdict
    line = _trial_line(result, 95)
    assert "misses the SLA even at concurrency 1 (p95 2.0 ms; 33% of requests answered with errors " in line
    assert 'at concurrency 1 (first: HTTP 400: {"error":"out of memory"}))' in line
    clean, worse = point(1, 100, 2), replace(point(8, 400, 9), errors=40, first_error="HTTP 500: busy")
    feasible = replace(trial(0, clean), measurement=Measurement((clean, worse), clean))
    assert (
        "\n    4% of requests answered with errors at concurrency 8 (first: HTTP 500: busy)"
        in _trial_line(feasible, 95)
    )


def test_in_a_log_every_row_and_command_stays_on_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Written to a file or a pipe (not a terminal): no cell cut, no row wrapped, the apply
    command whole on one line even in a 245-character path."""
    deep = tmp_path / ("a-rather-long-folder-name-" * 9)[:240]
    repeats = tuple(point(4, t, 9) for t in (290.0, 300.0, 310.0))
    verified = Verification(trial=1, concurrency=4, points=repeats, sla_met=3)
    both = (trial(0, point(2, 100, 5), baseline=True), trial(1, point(4, 320, 9)))
    print_summary(Outcome(deep, info(verifications=(verified,)), both))
    lines = capsys.readouterr().out.splitlines()
    assert f"apply it: autotune apply {deep}" in lines  # one line, whole
    assert not any("…" in line for line in lines)
    table = [line for line in lines if line.startswith(("|", "+"))]
    assert len(table) == 6 and len({len(line) for line in table}) == 1  # rule, head, rule, 2 rows, rule
    winner = rows("\n".join(lines))["winner"]
    assert winner[1] == both[1].candidate.label() and winner[-1] == "3/3 race rounds met the SLA"


def test_a_winner_that_lowers_max_batch_size_names_the_batches_it_refuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = trial(0, point(2, 100, 5), baseline=True)
    yours = replace(base, candidate=replace(base.candidate, max_batch_size=16))  # type: ignore[type-var]
    print_summary(Outcome(tmp_path, info(), (yours, trial(1, point(4, 300, 9)))))
    out = capsys.readouterr().out
    said = "note: the winner's max_batch_size 8 is below your config's 16: it refuses requests of batch 9-16"
    assert said in out
    print_summary(Outcome(tmp_path, info(), (base, trial(1, point(4, 300, 9)))))  # 8 as yours: no note
    assert "refuses" not in capsys.readouterr().out


def test_raced_beside_the_winner_your_config_gives_the_gain_its_interval_or_says_keep_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Your config raced as the control: the headline is the table's two raced figures with an
    interval; a winner not shown ahead of yours by RESOLUTION says keep your config, and the
    apply line asks for --force."""
    base = trial(0, point(2, 100, 5), baseline=True)
    best = trial(1, point(4, 320, 9))
    winner = Verification(
        trial=1, concurrency=4, points=tuple(point(4, t, 9) for t in (295.0, 300.0, 305.0)), sla_met=3
    )
    yours = Verification(1 - 1, 2, tuple(point(2, t, 5) for t in (99.0, 100.0, 101.0)), 3, control=True)
    print_summary(Outcome(tmp_path, info(verifications=(winner, yours)), (base, best)))
    out = capsys.readouterr().out
    assert "winner vs your config: 3.00x throughput at the SLA (the table's figures: 2." in out
    assert "raced on the same fresh servers)" in out and f"apply it: autotune apply {tmp_path}" in out
    assert rows(out)["baseline"][-1] == "3/3 race rounds met the SLA"
    close = replace(yours, points=tuple(point(2, t, 5) for t in (296.0, 301.0, 306.0)))
    print_summary(Outcome(tmp_path, info(verifications=(winner, close)), (base, best)))
    out = capsys.readouterr().out
    assert "keep your config: no candidate was shown better (the winner 1.00x your config's throughput" in out
    assert f"apply it anyway: autotune apply --force {tmp_path}" in out


def searched(number: int, throughput: float, baseline: bool = False) -> TrialResult:
    """A trial whose search read ``throughput`` at 4 clients, its windows 1% apart."""
    windows = (throughput * 0.99, throughput, throughput * 1.01)
    p = replace(point(4, throughput, 9), window_throughputs=windows)
    return trial(number, p, baseline=baseline)


def test_a_race_round_each_leaves_the_verdict_to_the_search_s_figures(tmp_path: Path) -> None:
    """One round each (--repeats 1) shows no spread: the interval and the verdict come from the
    search's estimates (their windows' noise, and a fresh server's spread)."""
    base, best = searched(0, 100.0, baseline=True), searched(1, 300.0)
    once = (
        Verification(trial=1, concurrency=4, points=(point(4, 290.0, 9),), sla_met=1),
        Verification(trial=0, concurrency=4, points=(point(4, 101.0, 9),), sla_met=1, control=True),
    )
    found = gain(best, base, once, 95, RAW)
    assert found is not None and found.searched and found.shown and found.low < 2.87 < found.high
    assert "both raced, too few rounds to compare" in found.figures
    close = gain(searched(1, 102.0), base, once, 95, RAW)
    assert close is not None and close.shown is False  # 2% apart in the search: not shown ahead
    control = replace(once[1], points=(point(4, 101.0, 9),) * 3)  # your config raced thrice, the winner once
    uneven = gain(best, base, (once[0], control), 95, RAW)
    assert uneven is not None and uneven.searched and "both raced, too few rounds" in uneven.figures


def test_rounds_on_the_same_servers_compare_the_racers_round_by_round() -> None:
    """A server moves both racers of a round alike: the ratio's interval comes from each round's
    ratio, so a winner 5% ahead on every server is shown better, where the rounds' spread alone
    (servers of their own, or points that name none) does not show it."""
    base, best = searched(0, 100.0, baseline=True), searched(1, 105.0)
    moves, off = (0.92, 1.00, 1.08), (1.002, 0.997, 1.001)

    def raced(
        trial: int, throughputs: tuple[float, ...], stages: tuple[str, ...], control: bool = False
    ) -> Verification:
        points = tuple(replace(point(4, t, 9), stage=s) for t, s in zip(throughputs, stages, strict=True))
        return Verification(trial, 4, points, 3, control=control)

    shared = ("race-001+000-1", "race-000+001-2", "race-001+000-3")
    winner = raced(1, tuple(105.0 * m for m in moves), shared)
    yours = raced(0, tuple(100.0 * m * o for m, o in zip(moves, off, strict=True)), shared, control=True)
    found = gain(best, base, (winner, yours), 95, RAW)
    assert found is not None and found.shown and 1.04 < found.low < found.high < 1.06
    theirs = tuple(p.throughput for p in yours.points)
    apart = gain(best, base, (winner, raced(0, theirs, ("a", "b", "c"), control=True)), 95, RAW)
    assert apart is not None and not apart.shown and apart.low < 1.0 and apart.high > 1.1
    unnamed = (
        raced(1, tuple(105.0 * m for m in moves), ("",) * 3),
        raced(0, theirs, ("",) * 3, control=True),
    )
    assert gain(best, base, unnamed, 95, RAW) == apart


def test_a_winner_the_race_never_served_is_judged_on_the_search_s_figures_and_said_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A race the budget cut before any finalist passed leaves an unraced winner beside your
    config raced: the headline names which figure is which, and the search's estimates give the
    verdict (2m budget on bertQA said "the winner raced, your config as searched", the reverse)."""
    base = searched(0, 100.0, baseline=True)
    yours = Verification(0, 4, tuple(point(4, t, 9) for t in (99.0, 101.0)), 2, control=True)
    print_summary(Outcome(tmp_path, info(verifications=(yours,)), (base, searched(1, 300.0))))
    out = capsys.readouterr().out
    assert "(the table's figures: the winner as searched, your config raced; 2." in out
    assert "by the search's figures)" in out and f"apply it: autotune apply {tmp_path}" in out
    print_summary(Outcome(tmp_path, info(verifications=(yours,)), (base, searched(1, 102.0))))
    out = capsys.readouterr().out
    assert "keep your config: no candidate was shown better (the winner 1.01x" in out
    assert f"apply it anyway: autotune apply --force {tmp_path}" in out


def test_the_search_s_end_gives_the_race_s_time_from_its_fewest_rounds_to_its_most(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A budget keeps the fewest rounds' time; the race may take every round --repeats allows."""
    from autotune._console import RichEvents

    events = RichEvents()
    both = "the race and the open-loop check"
    events.search_ended(87.0, 22.4, 720.0, 50.2, both)
    events.search_ended(87.0, 22.4, 720.0, 22.3, both)  # --repeats 2 or fewer: one figure
    out = capsys.readouterr().err  # not a terminal: a line each, on stderr
    assert "the race and the open-loop check take 22-50 s by this run's trials, 633 s are left" in out
    assert "take 22 s by this run's trials" in out
    events.search_ended(87.0, 9.6, 720.0, 9.6, "the race")  # --no-open-loop-check
    events.search_ended(87.0, 0.0, 720.0, 0.0, "")  # --repeats 0: nothing follows
    out = capsys.readouterr().err
    assert "search done at 1:27; the race takes 10 s by this run's trials, 633 s are left" in out
    assert "search done at 1:27; 633 s are left of the budget" in out and "open-loop" not in out


def test_a_race_round_past_repeats_shows_its_number_alone() -> None:
    """Your config beside the leader, or a racer sent down, may get more rounds than --repeats."""
    from autotune._console import RichEvents

    events = RichEvents()
    events.trial_started(4, Candidate(1, "KIND_CPU", (), 8, False, (), 0, False), False)
    shown = []
    for repeat in (6, 7):
        events.verifying(0, "concurrency 2", repeat, 6)
        shown.append(events._progress.tasks[-1].fields["status"])
    assert shown == ["concurrency 2, round 6/6", "concurrency 2, round 7"]
