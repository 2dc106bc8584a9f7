"""Faults on the real server: the tuner killed mid-run and resumed, hung and crashing candidates."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from autotune import stopping
from autotune.cli import build_parser, main, settings_from
from autotune.events import Events
from autotune.prepare import prepare
from autotune.reload import reload_outcome
from autotune.results import COMPLETE, FAIL
from autotune.study import INTERRUPTED
from autotune.tuner import tune
from tests.conftest import CLI, servers_of, staged_servers, toy_run_args

pytestmark = pytest.mark.integration


def _argv(repo: Path, reports: Path, space: Path, trials: int) -> list[str]:
    extra = ["--max-trials", str(trials), "--repeats", "1", "--seed", "3"]
    return [*CLI, *toy_run_args(repo, space, reports, *extra)]


def _wait_for(predicate, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def _trial_logs(reports: Path) -> list[Path]:
    return sorted(reports.glob("toy/*/logs/trial-*.log"))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_tuner_stopped_mid_trial_then_resumed(
    sig: signal.Signals, toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    reports = tmp_path / "reports"
    argv = _argv(toy_repo, reports, small_space, 4)
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        _wait_for(lambda: len(_trial_logs(reports)) >= 2, 300)  # trial 1 started, trial 0 done
        time.sleep(1.5)  # into trial 1's measurement
        proc.send_signal(sig)
        # past the watchdog's grace: a stop that hangs prints every thread's stack, and says so
        out = proc.communicate(timeout=stopping.GRACE_S + 60)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    run_dir = _trial_logs(reports)[0].parent.parent
    if sig == signal.SIGKILL:
        # no handler runs on kill -9: the server dies with the tuner (it must not hold its port,
        # CPU and memory until the next autotune start reaps it)
        _wait_for(lambda: servers_of(run_dir) == [], 5)
    else:
        assert proc.returncode == 130 and "stopping took over" not in out, out
        assert "--resume" in out
        assert servers_of(run_dir) == []
    before = {t.number: t for t in reload_outcome(run_dir).trials if t.state == COMPLETE}
    assert 0 in before  # the baseline finished before the stop

    again = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert "resuming the unfinished run" in again.stderr
    assert servers_of(run_dir) == []
    after = reload_outcome(run_dir)
    for number, trial in before.items():  # nothing finished was lost or measured again
        assert after.trials[number].measurement == trial.measurement
    interrupted = [t for t in after.trials if t.state == FAIL and t.interrupted]
    assert len(interrupted) == 1 and (sig != signal.SIGKILL or interrupted[0].reason == INTERRUPTED)
    rerun = [t for t in after.trials if t.params == interrupted[0].params and t.state == COMPLETE]
    assert rerun, "the interrupted candidate is measured again"
    counted = [t for t in after.trials if not t.interrupted]
    assert len(counted) == 4 and after.info.winner is not None
    assert (run_dir / "report.html").is_file()


def _complete(run_dir: Path) -> dict[int, object]:
    return {t.number: t.measurement for t in reload_outcome(run_dir).trials if t.state == COMPLETE}


# (trial logs to wait for beyond those present at the start, seconds to wait after)
KILL_POINTS = [
    (1, 0.1),
    (1, 1.2),
    (1, 2.5),
    (2, 0.0),
    (1, 0.6),
    (1, 3.5),
    (1, 1.8),
    ("race", 0.4),
    ("race", 2.0),
]


def test_killed_at_many_points_then_resumed_loses_nothing(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """kill -9 at server start, mid-measurement, between trials and during the race; every
    restart resumes, reaps the orphaned server, and keeps every finished trial."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    reports = tmp_path / "reports"
    argv = _argv(toy_repo, reports, small_space, 5)
    seen: dict[int, object] = {}
    kills = 0
    for marker, delay in KILL_POINTS:
        logs_before = len(_trial_logs(reports))
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            if marker == "race":
                racing = "toy/*/logs/race-*.log"
                _wait_for(lambda p=proc, v=racing: p.poll() is not None or any(reports.glob(v)), 600)
            else:
                goal = logs_before + int(marker)
                _wait_for(lambda p=proc, g=goal: p.poll() is not None or len(_trial_logs(reports)) >= g, 300)
            time.sleep(delay)
            if proc.poll() is None:
                proc.kill()
                kills += 1
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        run_dir = _trial_logs(reports)[0].parent.parent
        now = _complete(run_dir)
        assert all(now.get(n) == m for n, m in seen.items()), "a finished trial was lost or changed"
        seen = now
    assert kills >= 8
    final = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
    )
    assert final.returncode == 0, final.stderr
    outcome = reload_outcome(run_dir)
    assert all(_complete(run_dir).get(n) == m for n, m in seen.items())
    assert len([t for t in outcome.trials if not t.interrupted]) == 5
    assert outcome.info.winner is not None and servers_of(run_dir) == []


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8, 1.5])
def test_write_back_killed_midway_leaves_original_or_winner(
    delay: float, toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    reports = tmp_path / "reports"
    done = subprocess.run(
        [*_argv(toy_repo, reports, small_space, 2), "--repeats", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    run_dir = next(reports.glob("toy/*"))
    config = toy_repo / "toy" / "config.pbtxt"
    original, winner = config.read_bytes(), (run_dir / "winner.pbtxt").read_bytes()
    apply = [*CLI, "apply", str(run_dir)]
    proc = subprocess.Popen(apply, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    proc.kill()
    proc.wait(30)
    assert config.read_bytes() in (original, winner)  # never a torn file
    # applying again finishes the job (or finds it done) and verifies it by a load
    again = subprocess.run(apply, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert config.read_bytes() == winner
    assert subprocess.run([*apply, "--undo"], env=env, timeout=60).returncode == 0
    assert config.read_bytes() == original
    assert staged_servers() == []


@pytest.mark.parametrize(
    ("fault", "when", "reason"),
    [
        ("crash", "instances>1", "exited"),
        ("hang", "batching", "no request completed"),
    ],
)
def test_crashing_or_hanging_candidates_fail_and_the_search_goes_on(
    fault: str, when: str, reason: str, toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    config = toy_repo / "toy" / "config.pbtxt"
    extra = "".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n'
        for k, v in (("fault", fault), ("fault_when", when), ("fault_after", "20"))
    )
    config.write_text(config.read_text() + extra)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    reports = tmp_path / "reports"
    done = subprocess.run(
        _argv(toy_repo, reports, small_space, 4), env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    run_dir = next(reports.glob("toy/*"))
    outcome = reload_outcome(run_dir)
    failed = [t for t in outcome.trials if t.state == FAIL]
    assert failed, "the faulty candidates must fail"
    assert all(reason in t.reason for t in failed), [t.reason for t in failed]
    assert outcome.winner is not None and outcome.winner.state == COMPLETE
    assert servers_of(run_dir) == []


def test_a_server_that_dies_under_load_once_is_measured_again_not_failed(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """tritonserver crashes now and then (python backend, dynamic batching): the config whose
    server died is measured on a new one, and the crash's log is kept beside the trial's."""
    marker = tmp_path / "crashed-once"
    config = toy_repo / "toy" / "config.pbtxt"
    extra = "".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n'
        for k, v in (("fault", "crash_once"), ("fault_when", "instances>1"), ("fault_after", "20"),
                     ("fault_marker", str(marker)))
    )  # fmt: skip
    config.write_text(config.read_text() + extra)
    reports = tmp_path / "reports"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        _argv(toy_repo, reports, small_space, 4), env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    assert marker.exists(), "no server crashed: the test proves nothing"
    run_dir = next(reports.glob("toy/*"))
    outcome = reload_outcome(run_dir)
    assert [t.number for t in outcome.trials if t.state == FAIL] == []
    (crashed,) = sorted((run_dir / "logs").glob("trial-*.1.log"))
    number = int(crashed.name.split("-")[1].split(".")[0])
    trial = next(t for t in outcome.trials if t.number == number)
    assert trial.state == COMPLETE and trial.candidate is not None and trial.candidate.instance_count > 1
    assert (run_dir / "logs" / f"trial-{number:03d}.log").exists()
    assert "measuring it again on a new server" in done.stdout + done.stderr
    assert servers_of(run_dir) == []


def _stages_of(run_dir: Path) -> Path:
    """Where this process stages the run's candidates (autotune.staging.Stages.for_run)."""
    from autotune.processes import Owner
    from autotune.staging import stage_root

    me = Owner.current()
    return stage_root() / f"{run_dir.name}.{me.pid}.{me.started or 0}"


class _BreakStaging(Events):
    """Makes the run's staging folder a file once the run directory exists: staging the first
    trial then fails with an OSError nobody expects (as a permission or a broken disk would)."""

    def run_started(self, run_dir: Path, total: int, budget_s: float | None, then: str = "") -> None:
        _stages_of(run_dir).parent.mkdir(parents=True, exist_ok=True)
        _stages_of(run_dir).write_text("not a folder")


def test_a_crash_in_a_trial_is_a_failure_with_its_reason_not_an_interruption(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    argv = toy_run_args(toy_repo, small_space, tmp_path / "reports", "--max-trials", "3", "--repeats", "0")
    settings = settings_from(build_parser().parse_args(argv))
    with pytest.raises(OSError):
        tune(prepare(settings), _BreakStaging())
    (run_dir,) = list((tmp_path / "reports" / "toy").iterdir())
    crashed = reload_outcome(run_dir).trials[0]
    assert crashed.state == FAIL and not crashed.interrupted
    assert crashed.reason.startswith("internal error: ") and "Error" in crashed.reason, crashed.reason
    # resumed, it is not measured again (it would crash again): only a stop request re-queues
    _stages_of(run_dir).unlink()
    assert main([*argv, "--resume", str(run_dir)]) == 0
    after = reload_outcome(run_dir)
    assert after.trials[0].reason == crashed.reason
    again = [t.number for t in after.trials[1:] if t.params == crashed.params]
    assert again == [], "the crashed candidate was queued again"
    assert servers_of(run_dir) == []
