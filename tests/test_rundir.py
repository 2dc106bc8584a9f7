"""The run directory's typed record (rundir.py): written and read back whole, records of older
versions still read, and which stopped run a command would continue."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.errors import UsageError
from autotune.objective import RAW, Scoring, Sla
from autotune.pipeline import TunedStep
from autotune.points import Point
from autotune.processes import Owner
from autotune.results import OpenLoopCheck, Verification
from autotune.rundir import RUN_FILE, RunDir, RunRecord, find_unfinished
from autotune.settings import DockerOptions, Launch, RunSettings, Traffic

SLA = Sla(95, 50.0)


def record(repo: Path, run_id: str = "20261123-120000", **changes: object) -> RunRecord:
    base = RunRecord(
        run_id=run_id, model="toy", repository=repo.resolve(), sla=SLA, launch=Launch(), protocol="http",
        study_name=f"toy-{run_id}", storage=None, original_config="name: \"toy\"\n", original_digest="ab",
        started="2026-11-23T12:00:00+00:00",
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_record_is_read_back_as_written(tmp_path: Path) -> None:
    point = Point(4, 0.0, 100.0, 10.0, 9.0, 11.0, 12.0, 13.0, 100, 0, 1.0, 3, True)
    slow = replace(point, concurrency=6, p99_ms=60.0, client_stalls=3, client_stall_ms=95.5)  # a level above
    full = record(
        tmp_path, launch=Launch("docker", docker=DockerOptions(image="img:1", gpus="0,1")),
        owner=Owner("h", 12, "345"), finished="2026-11-23T12:05:00+00:00", winner=3,
        verifications=(
            Verification(
                3, 4, (point, point), 2, others=((6.0, (slow, point)), (5.0, (slow,))), redone=((6.0, slow),)
            ),
        ),
        storage="postgresql://***@db/x",
    )  # fmt: skip
    run = RunDir.create(tmp_path / "reports" / "toy" / full.run_id, full)
    assert RunDir.load(run.path).record == full
    open_point = replace(point, concurrency=0, request_rate=80.0, warnings=("late-sends",))
    check = OpenLoopCheck(3, 100.0, "poisson", (open_point,), 80.0, 95.0)
    rated = replace(
        full, traffic=Traffic("rate", "intervals", "/data/arrivals.txt"), open_loop=check,
        verifications=(Verification(3, 0, (open_point,), 1, 80.0),),
    )  # fmt: skip
    assert RunDir.create(tmp_path / "rated", rated).record == RunDir.load(tmp_path / "rated").record == rated


def test_a_record_of_before_0_2_is_still_read(tmp_path: Path) -> None:
    old = {
        "run_id": "r1", "model": "toy", "repository": str(tmp_path),
        "sla": {"percentile": 95, "limit_ms": 50}, "launcher": "docker", "storage": None,
        "study_name": "toy-r1", "original_config": "", "original_digest": "ab", "started": "2026",
        "owner_pid": 4321, "finished": "2026", "winner": 2,
    }  # fmt: skip
    (tmp_path / RUN_FILE).write_text(json.dumps(old))
    loaded = RunDir.load(tmp_path).record
    assert loaded.launch == Launch("docker") and loaded.owner == Owner(socket.gethostname(), 4321)
    assert loaded.winner == 2 and loaded.verifications == () and loaded.protocol == "http"
    assert loaded.traffic == Traffic() and loaded.open_loop is None  # before rate mode: concurrency
    assert loaded.scoring == RAW and loaded.sla.max_gpu_memory_mb is None  # before GPU figures


def test_the_gpu_memory_limit_and_the_scoring_are_kept_with_the_run(tmp_path: Path) -> None:
    """The SLA's GPU memory limit lives where the SLA does, the per-GPU decision beside it; the
    docker launcher's GPUs reach the report's summary."""
    limited = record(
        tmp_path, sla=Sla(95, 50.0, 8000.0), scoring=Scoring(True, 2),
        launch=Launch("docker", docker=DockerOptions(gpus="0,1")),
    )  # fmt: skip
    run = RunDir.create(tmp_path / "run", limited)
    assert RunDir.load(run.path).record == limited
    data = json.loads((run.path / RUN_FILE).read_text())
    assert data["sla"] == {"percentile": 95, "limit_ms": 50.0, "max_gpu_memory_mb": 8000.0}
    assert data["scoring"] == {"per_gpu": True, "server_gpus": 2}
    info = run.info()
    assert info.sla.max_gpu_memory_mb == 8000.0 and info.scoring.per_gpu and info.docker_gpus == "0,1"
    assert RunDir.create(tmp_path / "local", record(tmp_path)).info().docker_gpus == ""
    changed = limited.differences(RunSettings("toy", tmp_path, SLA, launch=limited.launch))
    assert changed == ["SLA: p95 <= 50 ms, GPU memory <= 8000 MiB -> p95 <= 50 ms"]


@pytest.mark.parametrize("text", ["", "{", "[]", '{"run_id": "x"}', '{"launcher": 3}'])
def test_anything_else_is_not_a_run_directory(tmp_path: Path, text: str) -> None:
    (tmp_path / RUN_FILE).write_text(text)
    with pytest.raises(UsageError, match="not a run directory"):
        RunDir.load(tmp_path)


def test_a_hidden_password_must_be_given_again(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "r", record(tmp_path, storage="postgresql://***@db/x"))
    with pytest.raises(UsageError, match="--storage"):
        run.study_url()
    assert run.study_url("postgresql://u:p@db/x") == "postgresql://u:p@db/x"
    assert RunDir.create(tmp_path / "s", record(tmp_path)).study_url().endswith("/s/study.db")


def test_the_newest_stopped_run_with_the_same_settings_is_continued(tmp_path: Path) -> None:
    repo, reports = tmp_path / "repo", tmp_path / "reports"
    repo.mkdir()
    here, gone = Owner.current(), Owner(socket.gethostname(), 999_999_999)

    def make(run_id: str, **changes: object) -> None:
        RunDir.create(reports / "toy" / run_id, record(repo, run_id, **changes))

    make("20261123-100000", owner=gone)  # stopped, older
    make("20261123-110000", owner=gone)  # stopped: the one to continue
    make("20261123-120000", owner=gone, finished="2026")  # finished
    make("20261123-130000", owner=gone, protocol="grpc")  # another protocol
    make("20261123-140000", owner=gone, launch=Launch("docker"))  # another launcher
    make("20261123-150000", owner=Owner(here.host, 1, ""))  # pid 1 runs it (alive on this host)
    (reports / "toy" / "20261123-160000").mkdir()
    (reports / "toy" / "20261123-160000" / RUN_FILE).write_text("{")  # unreadable: skipped
    found = find_unfinished(RunSettings("toy", repo, SLA, reports_dir=reports))
    assert found == reports / "toy" / "20261123-110000"
    assert find_unfinished(RunSettings("toy", repo, Sla(99, 50.0), reports_dir=reports)) is None


def test_a_run_last_owned_on_another_host_counts_as_stopped(tmp_path: Path) -> None:
    elsewhere = record(tmp_path, owner=Owner("another-host", 1, ""))
    assert not elsewhere.running_elsewhere()
    assert record(tmp_path, owner=Owner(socket.gethostname(), 1, "")).running_elsewhere()  # init lives
    assert not record(tmp_path, owner=Owner.current()).running_elsewhere()  # this process


def test_what_a_resume_would_change_is_named(tmp_path: Path) -> None:
    rec = record(tmp_path)
    assert rec.differences(RunSettings("toy", tmp_path, SLA)) == []
    changed = rec.differences(
        RunSettings("toy", tmp_path, Sla(99, 50.0), launch=Launch("docker"), protocol="grpc")
    )
    assert [c.split(":")[0] for c in changed] == ["SLA", "launcher", "protocol"]
    rate = rec.differences(RunSettings("toy", tmp_path, SLA, traffic=Traffic("rate")))
    assert len(rate) == 1 and rate[0].startswith("traffic:") and "'rate'" in rate[0]


def test_the_open_loop_check_says_what_the_winner_sustains() -> None:
    point = Point(0, 100.0, 100.0, 10.0, 9.0, 11.0, 12.0, 13.0, 100, 0, 1.0, 3, True)
    kept = OpenLoopCheck(1, 100.0, "poisson", (point,), 100.0).summary()
    assert "met the SLA at the 100 req/s its closed loop was credited with" in kept
    part = OpenLoopCheck(1, 140.0, "poisson", (point,), 84.0).summary()
    assert "up to 84 req/s, 60% of the 140 req/s" in part and "--load rate" in part
    none = OpenLoopCheck(1, 140.0, "poisson", (replace(point, request_rate=17.5),), 0.0).summary()
    assert "broke the SLA even at 17.5 req/s" in none
    limit = OpenLoopCheck(1, 140.0, "poisson", (point,), 84.0, 98.0).summary()
    assert "reached the SLA's limit at about 98 req/s, 70% of the 140" in limit and "met it at 84" in limit
    only = OpenLoopCheck(1, 140.0, "poisson", (point,), 0.0, 70.0).summary()
    assert "limit at about 70 req/s, 50%" in only and "met it" not in only


def test_how_a_run_was_made_is_recorded_and_read_back(tmp_path: Path) -> None:
    made = {"command": "autotune run --model toy", "autotune": "0.1.0", "cpu": "x (2 cores)"}
    created = RunDir.create(tmp_path / "run", record(tmp_path, made=made))
    loaded = RunDir.load(created.path)
    assert loaded.record.made == made and dict(loaded.info().made) == made


def test_a_round_of_an_ensemble_keeps_the_steps_tuned_before_and_is_continued_as_it_chose(
    tmp_path: Path,
) -> None:
    """A round's record keeps the steps earlier rounds tuned (read back whole); the same command
    without --step continues that round, its step and tuned steps as the round has them; a
    command with other tuned steps would change it, and says so."""
    repo, reports = tmp_path / "repo", tmp_path / "reports"
    repo.mkdir()
    slow = TunedStep("slow", 'name: "slow"\n', "cd", str(reports / "pipe" / "20261127-100000"))
    rec = record(repo, model="pipe", step="toy", rounds=True, tuned_steps=(slow,),
                 owner=Owner(socket.gethostname(), 999_999_999))  # fmt: skip
    run = RunDir.create(reports / "pipe" / "20261127-110000", rec)
    assert RunDir.load(run.path).record == rec
    assert find_unfinished(RunSettings("pipe", repo, SLA, reports_dir=reports)) == run.path
    assert rec.differences(RunSettings("pipe", repo, SLA, step="toy")) == [
        "steps tuned before: slow (20261127-100000) -> none"
    ]


def test_undo_restores_a_write_back_made_before_rounds(tmp_path: Path) -> None:
    """A write-back recorded before a run could write several configs (one target, one backup)
    is still undone."""
    from autotune.writeback import undo

    config, backup = tmp_path / "config.pbtxt", tmp_path / "config.pbtxt.autotune-x.bak"
    backup.write_text('name: "toy"\nmax_batch_size: 8\n')
    config.write_text('name: "toy"\nmax_batch_size: 16\n')
    run = tmp_path / "run"
    run.mkdir()
    (run / "winner.pbtxt").write_text('name: "toy"\nmax_batch_size: 16\n')
    (run / "writeback.json").write_text(json.dumps({"target": str(config), "backup": str(backup)}))
    assert undo(run) == ([config], True)
    assert config.read_bytes() == backup.read_bytes()
    assert undo(run) == ([config], False)  # done before: nothing to restore


def test_answers_kept_by_several_processes_at_once_are_each_kept_whole(tmp_path: Path) -> None:
    """Two Ray nodes on one machine may keep your config's answers in one run directory at once:
    each writes a file of its own, then renames it, so no writer loses its file to another's."""
    import multiprocessing

    import numpy as np

    run = RunDir.create(tmp_path / "run", record(tmp_path))
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_keep_answers, args=(run, 40)) for _ in range(3)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert [w.exitcode for w in writers] == [0, 0, 0]
    kept = run.reference()
    assert kept is not None and kept.datatypes == {"out": "INT64"}
    assert np.array_equal(kept.answers[0]["out"], np.arange(3))
    assert [p.name for p in run.path.iterdir() if p.name.startswith(".")] == []  # no file left behind


def _keep_answers(run: RunDir, times: int) -> None:
    import numpy as np

    from autotune.outputs import Reference

    for _ in range(times):
        run.save_reference(Reference(({"out": np.arange(3)},), {"out": "INT64"}))
