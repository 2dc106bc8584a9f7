"""The study (study.py) on a real Optuna storage (SQLite in a temporary folder): what a tell
returns, interrupted trials queued again, queued trials that are not results yet."""

from __future__ import annotations

import socket
from pathlib import Path

from optuna.trial import FixedTrial

from autotune.measure import Measurement, Point
from autotune.objective import Sla, scoring_for
from autotune.search_space import params_of, parse_search_space
from autotune.study import INTERRUPTED, Study

SPACE = parse_search_space(
    {
        "instance_group": {"count": [1, 2]},
        "max_batch_size": [8],
        "dynamic_batching": {"enabled": [True, False]},
    }
)
SLA = Sla(95, 50.0)


def _study(tmp_path: Path) -> Study:
    return Study.open(f"sqlite:///{tmp_path / 'study.db'}", "s", SPACE, SLA, seed=1)


def _measurement(throughput: float) -> Measurement:
    p = Point(4, 0.0, throughput, 10.0, 9.0, 11.0, 12.0, 13.0, 100, 0, 1.0, 3, True)
    return Measurement((p,), p)


def test_a_tell_returns_the_result_the_study_reads_back(tmp_path: Path) -> None:
    study = _study(tmp_path)
    first = SPACE.suggest(
        FixedTrial({"instance_count": 2, "kind": "KIND_CPU", "max_batch_size": 8, "dynamic_batching": False})
    )
    study.enqueue(params_of(first), baseline=True)
    measured = study.tell_measured(study.ask(), _measurement(120.0), 3.5)
    failed = study.tell_failed(study.ask(), "server exited", "E tail", 1.0)
    assert study.results() == [measured, failed]
    assert measured.baseline and measured.candidate == first and measured.goodput() == 120.0
    assert not failed.interrupted and failed.reason == "server exited"


def test_interrupted_trials_are_queued_again_once_with_their_baseline_flag(tmp_path: Path) -> None:
    study = _study(tmp_path)
    study.enqueue(
        {
            "instance_count": 1,
            "kind": "KIND_CPU",
            "max_batch_size": 8,
            "dynamic_batching": True,
            "preferred_batch_size": "none",
            "max_queue_delay_us": 0,
        },
        baseline=True,
    )
    stopped = study.tell_failed(study.ask(), INTERRUPTED, "", 1.0, interrupted=True)
    crashed = study.tell_failed(study.ask(), "internal error: OSError", "", 1.0)
    again = _study(tmp_path).interrupted()
    assert again == [(stopped.params, True)]  # the crash is not queued again
    assert crashed.params not in [params for params, _ in again]
    assert _study(tmp_path).interrupted() == []  # once


def test_a_trial_left_running_by_a_dead_worker_is_interrupted(tmp_path: Path) -> None:
    study = _study(tmp_path)
    asked = study.ask()
    dead = f"{socket.gethostname()}:999999999:"  # this host, a pid that does not exist
    study._study._storage.set_trial_user_attr(asked.trial._trial_id, "worker", dead)
    again = _study(tmp_path).interrupted()
    (result,) = _study(tmp_path).results()
    assert again == [(result.params, False)] and result.interrupted and result.reason == INTERRUPTED


def test_queued_trials_are_not_results_until_asked(tmp_path: Path) -> None:
    study = _study(tmp_path)
    study.enqueue({"instance_count": 1, "kind": "KIND_CPU", "max_batch_size": 8, "dynamic_batching": False})
    assert study.results() == []
    study.tell_measured(study.ask(), _measurement(10.0), 1.0)
    assert [r.state for r in study.results()] == ["COMPLETE"]


def test_a_gpu_baseline_on_a_machine_without_one_runs_as_is_while_the_space_holds_its_cpu_twin(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from autotune.decide import in_space

    study = _study(tmp_path)  # SPACE: CPU instances only, as on a machine without a GPU
    gpu = replace(
        SPACE.suggest(
            FixedTrial(
                {"instance_count": 1, "kind": "KIND_CPU", "max_batch_size": 8, "dynamic_batching": False}
            )
        ),
        kind="KIND_GPU",
        gpus=(0,),
    )
    twin = in_space(gpu, SPACE)
    assert twin.kind == "KIND_CPU" and twin.gpus == () and twin.instance_count == 1
    assert in_space(twin, SPACE) is twin
    study.enqueue(params_of(twin), baseline=True, as_is=gpu)
    asked = study.ask()
    assert asked.baseline and asked.candidate == gpu  # the user's config, as it is
    told = study.tell_failed(asked, "no GPU", "", 0.1)
    assert told.candidate == gpu and study.results()[0].candidate == gpu


def test_a_trial_another_worker_is_asking_is_not_taken_for_an_interrupted_one(tmp_path: Path) -> None:
    """Optuna starts a trial before its asker can write its owner: a second worker starting at
    that moment must not fail it (two workers sharing a study crashed on that race)."""
    study = _study(tmp_path)
    other = Study.open(f"sqlite:///{tmp_path / 'study.db'}", "s", SPACE, SLA, seed=2)
    trial = other._study.ask()  # asked, its owner not written yet
    assert study.interrupted() == []
    assert other._study.trials[trial.number].state.name == "RUNNING"


def test_per_gpu_the_study_is_told_the_goodput_per_gpu_and_the_throughput_stays(tmp_path: Path) -> None:
    gpus = parse_search_space(
        {"instance_group": {"kind": ["KIND_GPU"], "gpus": [[0], [0, 1]]}, "max_batch_size": [8]},
        gpu_available=True,
    )
    scoring = scoring_for(gpus, server_gpus=2)
    assert scoring.per_gpu
    study = Study.open(f"sqlite:///{tmp_path / 'study.db'}", "g", gpus, SLA, seed=1, scoring=scoring)
    two = {"instance_count": 1, "kind": "KIND_GPU", "gpus": "0,1", "trt_fp16": False, "max_batch_size": 8,
           "dynamic_batching": False}  # fmt: skip
    study.enqueue(two)
    told = study.tell_measured(study.ask(), _measurement(300.0), 1.0)
    assert told.goodput() == 300.0  # the figure: the throughput
    assert study._study.trials[0].values == [150.0, 12.0]  # the objective: per GPU, and the latency
