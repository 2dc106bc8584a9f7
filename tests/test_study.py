"""The study (study.py) on a real Optuna storage (SQLite in a temporary folder): what a tell
returns, interrupted trials queued again, queued trials that are not results yet."""

from __future__ import annotations

import socket
from pathlib import Path

import optuna
from optuna.trial import FixedTrial, TrialState

from autotune.objective import Sla, scoring_for
from autotune.points import Measurement, Point
from autotune.results import PRUNED
from autotune.search_space import Candidate, params_of, parse_search_space
from autotune.study import INTERRUPTED, Study, _candidate_json, candidate_from_json

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


def test_a_pruned_trial_carries_its_reason_and_no_figures(tmp_path: Path) -> None:
    """The study is told only what was measured for a trial: one another trial stands in for is
    PRUNED, with no values (the sampler never takes that trial's figures for this config)."""
    study = _study(tmp_path)
    measured = study.tell_measured(study.ask(), _measurement(120.0), 3.5)
    why = "1 instance(s) lost without dynamic batching (trial 0 against 1)"
    stood = study.tell_pruned(study.ask(), why, measured.number)
    outside = study.tell_pruned(study.ask(), "outside your search space")
    twin = study.tell_pruned(study.ask(), "same as trial 0, measured now", 0, in_flight=True)
    assert study.results() == [measured, stood, outside, twin]
    assert twin.twin_in_flight and not stood.twin_in_flight
    assert (stood.state, stood.reused_from, stood.reason, measured.reason) == (PRUNED, 0, why, "")
    assert stood.measurement is None and not stood.feasible and outside.reused_from is None
    frozen = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'study.db'}").get_trials()
    assert [(t.state, t.values) for t in frozen[1:]] == [(TrialState.PRUNED, None)] * 3  # told no values


OTHER = {"instance_count": 2, "kind": "KIND_CPU", "max_batch_size": 8, "dynamic_batching": False}


def test_interrupted_trials_are_measured_again_first_once_with_their_baseline_flag(tmp_path: Path) -> None:
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
    study.enqueue(params_of(SPACE.suggest(FixedTrial(OTHER))))  # a seed still waiting
    resumed = _study(tmp_path)
    again = resumed.interrupted()
    assert again == [(stopped.params, True)]  # the crash is not queued again
    assert crashed.params not in [params for params, _ in again]
    assert _study(tmp_path).interrupted() == again  # not asked yet: still to measure again
    first = resumed.ask()  # before the seed queued ahead of it
    assert first.trial.params == stopped.params and first.baseline and first.number > stopped.number
    second = resumed.ask()
    assert second.trial.params == OTHER
    for asked in (first, second):
        resumed.tell_measured(asked, _measurement(10.0), 1.0)
    assert _study(tmp_path).interrupted() == []  # measured again once


def test_a_trial_failed_by_no_fault_of_its_config_is_measured_again_at_once_while_others_fly(
    tmp_path: Path,
) -> None:
    """A node that could not serve a trial (autotune.fleet): its config is asked again next, in
    this process, and the trials still in flight stay RUNNING (a resume would measure it once)."""
    study = _study(tmp_path)
    study.enqueue(params_of(SPACE.suggest(FixedTrial(OTHER))), baseline=True)
    lost, flying = study.ask(), study.ask()
    study.tell_failed(lost, "node a cannot serve the model", "", 1.0, interrupted=True)
    study.again(lost)
    again = study.ask()
    assert again.again_of == lost.number and again.baseline and again.candidate == lost.candidate
    assert [r.state for r in study.results() if r.number == flying.number] == ["RUNNING"]
    study.tell_measured(again, _measurement(10.0), 1.0)
    study.tell_measured(flying, _measurement(20.0), 1.0)
    assert _study(tmp_path).interrupted() == []  # measured again once: a resume does not again


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

    from autotune.search.walk import in_space

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


def test_your_config_outside_the_space_runs_as_it_is_without_params_and_again_after_a_stop(
    tmp_path: Path,
) -> None:
    """Your config with a max batch size the space lacks: its trial has no params (the sampler
    never takes its figures for a config of the space), and a stop measures it again as it is."""
    from dataclasses import replace

    yours = replace(SPACE.suggest(FixedTrial(OTHER)), max_batch_size=16)
    assert not SPACE.holds(yours)
    study = _study(tmp_path)
    study.enqueue(params_of(yours), baseline=True, as_is=yours)
    asked = study.ask()
    assert asked.baseline and asked.candidate == yours and asked.trial.params == {}
    study.tell_failed(asked, INTERRUPTED, "", 1.0, interrupted=True)
    resumed = _study(tmp_path)
    assert resumed.interrupted() == [({}, True)]
    again = resumed.ask()
    assert again.baseline and again.candidate == yours and again.trial.params == {}
    told = resumed.tell_measured(again, _measurement(50.0), 1.0)
    assert told.params == {} and told.goodput() == 50.0


def test_a_trial_another_worker_is_asking_is_not_taken_for_an_interrupted_one(tmp_path: Path) -> None:
    """Optuna starts a trial before its asker can write its owner: a second worker starting at
    that moment must not fail it (two workers sharing a study crashed on that race)."""
    study = _study(tmp_path)
    other = Study.open(f"sqlite:///{tmp_path / 'study.db'}", "s", SPACE, SLA, seed=2)
    trial = other._study.ask()  # asked, its owner not written yet
    assert study.interrupted() == []
    assert other._study.trials[trial.number].state.name == "RUNNING"


GPU_SPACE = parse_search_space(
    {
        "instance_group": {"count": [1, 2], "kind": ["KIND_GPU"], "gpus": ["all", [0, 1]]},
        "max_batch_size": [8],
        "dynamic_batching": {"enabled": [False]},
        "optimization": {"tensorrt_fp16": [False, True], "tensorrt_workspace_mb": [1024, 4096]},
    }
)


def test_a_gpu_candidate_with_its_tensorrt_workspace_is_read_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = Study.open(url, "gpu", GPU_SPACE, SLA, seed=1)
    fp16 = Candidate(2, "KIND_GPU", (0, 1), 8, False, (), 0, True, 4096)
    study.enqueue(params_of(fp16))
    asked = study.ask()
    assert asked.candidate == fp16
    told = study.tell_measured(asked, _measurement(300.0), 2.0)
    (again,) = Study.open(url, "gpu", GPU_SPACE, SLA).results()
    assert again == told and again.candidate == fp16 and again.params["trt_workspace_mb"] == 4096


def test_run_files_from_before_the_workspace_still_load() -> None:
    """A candidate recorded before ``trt_workspace_mb`` existed (FP16 then wrote no workspace:
    the backend's default, which 0 means), and its params queued again on --resume."""
    old = {
        "instance_count": 1, "kind": "KIND_GPU", "gpus": [0], "max_batch_size": 8, "dynamic_batching": False,
        "preferred_batch_sizes": [], "max_queue_delay_us": 0, "trt_fp16": True,
    }  # fmt: skip
    assert candidate_from_json(old) == Candidate(1, "KIND_GPU", (0,), 8, False, (), 0, True, 0)
    assert candidate_from_json(_candidate_json(candidate_from_json(old))) == candidate_from_json(old)


def test_params_of_a_trial_from_before_the_workspace_can_be_queued_again(tmp_path: Path) -> None:
    study = Study.open(f"sqlite:///{tmp_path / 'study.db'}", "gpu", GPU_SPACE, SLA, seed=1)
    old = {"instance_count": 1, "kind": "KIND_GPU", "gpus": "all", "max_batch_size": 8, "trt_fp16": True}
    study.enqueue(old, again=True)
    assert study.ask().candidate == Candidate(
        1, "KIND_GPU", (), 8, False, (), 0, True, 1024
    )  # the first choice


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
