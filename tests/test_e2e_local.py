"""End to end on a real tritonserver (the nvidia-pytriton wheel): tune, report, write back."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.control import ServerControl
from autotune.objective import Sla
from autotune.reload import reload_outcome
from autotune.results import COMPLETE, FAIL, PRUNED
from autotune.rundir import RunDir
from autotune.search_space import parse_search_space
from autotune.study import Study
from autotune.traffic import at_the_limit
from tests.conftest import servers_of, servers_under, staged_servers, toy_run_args

pytestmark = pytest.mark.integration

FAST = ["--repeats", "2", "--time-budget", "5m"]
SLA_60 = Sla(95, 60.0)
SPACE_FOR_READING = parse_search_space({})  # reading a study's trials needs no space of its own


def _run(repo: Path, reports: Path, space: Path, *extra: str) -> int:
    return main(toy_run_args(repo, space, reports, "--seed", "1", *FAST, *extra))


def _run_dir(reports: Path) -> Path:
    (run_dir,) = list((reports / "toy").iterdir())
    return run_dir


def test_tune_write_back_and_undo(toy_repo: Path, tmp_path: Path, small_space: Path) -> None:
    config = toy_repo / "toy" / "config.pbtxt"
    original = config.read_bytes()
    reports = tmp_path / "reports"
    argv = toy_run_args(
        toy_repo, small_space, reports, "--seed", "1", *FAST, "--max-trials", "4", "--write-back"
    )
    assert main([a for a in argv if a != "--no-open-loop-check"]) == 0  # this one checks it
    run_dir = _run_dir(reports)
    assert (run_dir / "report.html").stat().st_size > 100_000  # plotly inline
    rows = list(csv.DictReader((run_dir / "trials.csv").open()))
    assert len(rows) == 4
    outcome = reload_outcome(run_dir)
    winner, baseline = outcome.winner, outcome.baseline
    assert winner is not None and baseline is not None and baseline.number == 0
    assert all(t.state == COMPLETE for t in outcome.trials)
    # The toy model sleeps 4 ms per execution: batching or instances beat the plain config.
    assert winner.goodput() > 1.3 * baseline.goodput()
    verified = {v.trial: v for v in outcome.info.verifications}
    assert verified[winner.number].sla_met * 2 > len(verified[winner.number].points)
    for v in verified.values():  # the levels it left, each with its rounds there, all below its search's
        trial = next(t for t in outcome.trials if t.number == v.trial)
        assert trial.best is not None and v.level <= trial.best.level
        assert all(points and all(p.concurrency == level for p in points) for level, points in v.others)
    # a concurrency run measures its winner under Poisson arrivals too, from the credited rate
    check = outcome.info.open_loop
    assert check is not None and check.trial == winner.number and check.distribution == "poisson"
    credited = verified[winner.number].median_throughput  # batch 1: requests per second
    assert check.credited_rate == pytest.approx(credited, rel=0.01)
    assert max(p.request_rate for p in check.points) == pytest.approx(credited, rel=0.01)
    assert all(p.concurrency == 0 for p in check.points) and 0 <= check.sustained_rate <= credited * 1.01
    undecided = [p.request_rate for p in check.points if at_the_limit(p, outcome.info.sla)]
    assert undecided == ([check.limit_rate] if check.limit_rate else [])  # the check ends at the first
    assert "The winner under arrivals at a rate" in (run_dir / "report.html").read_text()
    # written back, verified by a load, with a backup; then undone byte for byte
    assert config.read_bytes() != original
    assert (run_dir / "winner.pbtxt").read_text() == config.read_text()
    backups = list(config.parent.glob("config.pbtxt.autotune-*.bak"))
    assert len(backups) == 1 and backups[0].read_bytes() == original
    assert main(["apply", "--undo", str(run_dir)]) == 0
    assert config.read_bytes() == original
    assert servers_of(run_dir) == [] and staged_servers() == []


def test_the_noise_models_rules_tune_race_on_fresh_servers_and_tell_only_what_was_measured(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """End to end: every point's windows recorded and judged by their interval,
    the finalists raced round by round each on a fresh server, the winner among them, the study
    told no figures a trial did not measure, the report drawing the intervals."""
    reports = tmp_path / "reports"
    extra = ["--seed", "1", "--max-trials", "5", "--finalists", "2", "--repeats", "3"]
    argv = toy_run_args(toy_repo, small_space, reports, *extra, "--time-budget", "5m")
    assert main(argv) == 0
    run_dir = _run_dir(reports)
    outcome = reload_outcome(run_dir)
    measured = [t for t in outcome.trials if t.measurement is not None]
    points = [p for t in measured for p in t.measurement.points]  # type: ignore[union-attr]
    # every window recorded: those a warm-up still held apart from the kept ones the verdict reads
    assert points and all(len(p.window_throughputs) + len(p.warm_windows_ms) == p.windows for p in points)
    assert all(len(p.window_throughputs) == len(p.window_latencies_ms) >= 2 for p in points)
    assert all(t.state in (COMPLETE, PRUNED) for t in outcome.trials)
    winner = outcome.winner
    assert winner is not None and winner.number in {v.trial for v in outcome.info.verifications}
    raced = {v.trial: v for v in outcome.info.verifications}
    assert raced[winner.number].passed and len(raced[winner.number].points) >= 2
    # a fresh server each round, shared by its contenders (race-001+003-1.log), each under its own name
    races = sorted(p for p in (run_dir / "logs").glob("race-*.log"))
    served = sum(len(p.name.split("-")[1].split("+")) for p in races)
    assert served == sum(len(v.points) + sum(len(o) for _, o in v.others) for v in raced.values())
    shared = [p for p in races if "+" in p.name]
    assert len(raced) < 2 or shared
    for log in shared:
        numbers = log.name.split("-")[1].split("+")
        assert all(f"toy__race{n}" in log.read_text() for n in numbers)
    record = RunDir.load(run_dir)
    told = Study.open(record.study_url(), record.record.study_name, SPACE_FOR_READING, SLA_60).told_values()
    for t in outcome.trials:
        assert (told[t.number] is None) == (t.measurement is None)
    page = (run_dir / "report.html").read_text()
    assert '"error_y"' in page  # the intervals drawn as whiskers
    assert servers_of(run_dir) == [] and staged_servers() == []


def test_failing_candidates_are_recorded_and_the_search_goes_on(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    config = toy_repo / "toy" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "fail_with_batching" value { string_value: "1" } }\n'
    )
    reports = tmp_path / "reports"
    assert _run(toy_repo, reports, small_space, "--max-trials", "4") == 0
    outcome = reload_outcome(_run_dir(reports))
    failed = [t for t in outcome.trials if t.state == FAIL]
    assert failed, "the seeded batching candidates must fail to load"
    for trial in failed:
        assert trial.candidate is not None and trial.candidate.dynamic_batching
        assert "refuses dynamic batching" in trial.reason + trial.log_tail
    assert outcome.winner is not None and not outcome.winner.candidate.dynamic_batching  # type: ignore[union-attr]
    assert "refuses dynamic batching" in (outcome.run_dir / "report.html").read_text()


def test_a_run_whose_own_config_does_not_load_stops_at_once_with_exit_3(
    toy_repo: Path, tmp_path: Path, small_space: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every candidate is your config with other settings: when yours does not load, the run
    ends at its first trial with the server's line, the trial kept to measure again on --resume
    (not counted failed), nothing to apply."""
    config = toy_repo / "toy" / "config.pbtxt"
    crash = 'parameters { key: "crash_on_load" value { string_value: "1" } }\n'
    config.write_text(config.read_text() + crash)
    reports = tmp_path / "reports"
    assert _run(toy_repo, reports, small_space, "--max-trials", "2", "--write-back") == 3
    out, err = capsys.readouterr()
    assert "your config does not load here" in err and "crash_on_load=1" in err
    assert "autotune apply" not in out + err
    outcome = reload_outcome(_run_dir(reports))
    assert [(t.state, t.interrupted) for t in outcome.trials] == [(FAIL, True)]
    assert outcome.info.winner is None
    assert not list(config.parent.glob("config.pbtxt.autotune-*.bak")), "nothing was written back"


def test_write_back_refused_when_the_config_changed(
    toy_repo: Path, tmp_path: Path, small_space: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    assert _run(toy_repo, reports, small_space, "--max-trials", "2", "--repeats", "0") == 0
    config = toy_repo / "toy" / "config.pbtxt"
    config.write_text(config.read_text() + "\n# edited by hand\n")
    edited = config.read_bytes()
    assert main(["apply", str(_run_dir(reports))]) == 6
    assert "changed since the run started" in capsys.readouterr().err
    assert config.read_bytes() == edited


def test_pid_records_are_cleaned(tmp_path: Path, toy_repo: Path, small_space: Path) -> None:
    os.environ["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    try:
        assert _run(toy_repo, tmp_path / "reports", small_space, "--max-trials", "1", "--repeats", "0") == 0
        assert list((tmp_path / "cache" / "autotune" / "servers").glob("*.json")) == []
    finally:
        del os.environ["XDG_CACHE_HOME"]


def test_a_server_done_with_is_killed_at_once_with_its_stubs_and_their_shared_memory(
    toy_repo: Path, tmp_path: Path
) -> None:
    from autotune.launch.local import SHM_DIR, SHM_PREFIX, LocalLauncher

    launcher = LocalLauncher(kill_when_done=True)
    with launcher.serve(toy_repo, "toy", tmp_path / "server.log"):
        assert servers_under(toy_repo)  # tritonserver, its guard and the toy model's stub
        regions = list(SHM_DIR.glob(f"{SHM_PREFIX}{os.getpid()}_*"))
        assert regions  # the stub's shared memory, named with our prefix
        leaving = time.monotonic()
    while servers_under(toy_repo) and time.monotonic() - leaving < 1.0:
        time.sleep(0.01)  # killed: gone once the kernel has ended each process of the group
    assert servers_under(toy_repo) == []
    assert time.monotonic() - leaving < 1.0  # a graceful stop takes seconds: the stubs unload in turn
    assert not any(region.exists() for region in regions)


def test_remote_launcher_loads_candidates_through_the_repository_api(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    from autotune.launch.local import LocalLauncher

    launcher = LocalLauncher(extra_args=("--model-control-mode=explicit", "--load-model=toy"))
    before = (toy_repo / "toy" / "config.pbtxt").read_bytes()
    with launcher.serve(toy_repo, "toy", tmp_path / "server.log") as server:
        url = f"{server.host}:{server.http_port}"
        code = _run(
            toy_repo,
            tmp_path / "reports",
            small_space,
            "--max-trials",
            "3",
            "--repeats",
            "1",
            "--launcher",
            "remote",
            "--url",
            url,
            "--grpc-url",
            f"{server.host}:{server.grpc_port}",
        )
        assert code == 0
        outcome = reload_outcome(_run_dir(tmp_path / "reports"))
        assert outcome.winner is not None
        labels = {t.candidate.label() for t in outcome.trials if t.candidate}
        assert len(labels) >= 2  # the baseline and at least one other candidate were served
        for log in (outcome.run_dir / "logs").glob("trial-*.log"):
            text = log.read_text()
            assert "load toy with the candidate config: ok" in text
            assert "load toy from the server's repository: ok" in text
        # the server is back on its own config after the run
        with ServerControl(server.host, server.http_port) as control:
            config = control.config("toy")
        assert config["instance_group"][0]["count"] == 1 and "dynamic_batching" not in config
    assert (toy_repo / "toy" / "config.pbtxt").read_bytes() == before


def test_rate_mode_tunes_for_arrivals_and_writes_back(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """--load rate: every point is an open loop at a rate, the finalists are verified at rates,
    the run records its mode, the report draws latency against the rate; write-back as ever."""
    config = toy_repo / "toy" / "config.pbtxt"
    reports = tmp_path / "reports"
    code = _run(toy_repo, reports, small_space, "--max-trials", "3", "--load", "rate", "--write-back")
    assert code == 0
    run_dir = _run_dir(reports)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["traffic"] == {"load": "rate", "distribution": "poisson", "intervals": ""}
    assert record["open_loop"] is None  # the check is for concurrency runs
    outcome = reload_outcome(run_dir)
    winner, baseline = outcome.winner, outcome.baseline
    assert winner is not None and baseline is not None and winner.best is not None
    points = [p for t in outcome.trials if t.measurement for p in t.measurement.points]
    assert points and all(p.concurrency == 0 and p.request_rate > 0 for p in points)
    # the toy model sleeps 4 ms per execution: one instance without batching tops out near 250/s
    assert winner.goodput() > 1.3 * baseline.goodput()
    (verification,) = [v for v in outcome.info.verifications if v.trial == winner.number]
    assert verification.concurrency == 0 and verification.request_rate in {
        p.level for p in winner.measurement.points
    }
    html = (run_dir / "report.html").read_text()
    assert "Latency vs arrival rate" in html and "open loop, poisson arrivals" in html
    assert (run_dir / "winner.pbtxt").read_text() == config.read_text()
    assert servers_of(run_dir) == []


def test_a_recorded_arrival_pattern_is_replayed_at_each_rate(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """--request-intervals: bursts of four requests 100 us apart, then a pause, scaled to each
    rate the search tries; the run records the file, and a --resume without flags keeps it."""
    pattern = tmp_path / "arrivals.txt"
    pattern.write_text("100\n100\n100\n20000\n")
    reports = tmp_path / "reports"
    assert _run(toy_repo, reports, small_space, "--max-trials", "2", "--repeats", "0",
                "--request-intervals", str(pattern)) == 0  # fmt: skip
    run_dir = _run_dir(reports)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["traffic"] == {
        "load": "rate",
        "distribution": "intervals",
        "intervals": str(pattern.resolve()),
    }
    outcome = reload_outcome(run_dir)
    rates = {p.request_rate for t in outcome.trials if t.measurement for p in t.measurement.points}
    assert len(rates) >= 2 and all(r > 0 for r in rates)  # the one pattern at several rates
    assert "arrivals.txt" in (run_dir / "report.html").read_text()
