"""The SLA and the scores (objective.py, pure): the GPU memory limit, and when goodputs are
compared per GPU used."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.errors import UsageError
from autotune.gpu import GpuFigures
from autotune.objective import RAW, Scoring, Sla, gpu_counts, scores, scoring_for
from autotune.points import Point
from autotune.search_space import Candidate, SearchSpace, parse_search_space

POINT = Point(4, 0.0, 200.0, 10.0, 9.0, 11.0, 12.0, 13.0, 100, 0, 1.0, 3, True)
TWO_GPUS = (GpuFigures("GPU-a", 0.8, 6000.0, 200.0), GpuFigures("GPU-b", 0.6, 9000.0, 150.0))


def gpu(count: int = 1, gpus: tuple[int, ...] = ()) -> Candidate:
    return Candidate(count, "KIND_GPU", gpus, 8, True, (), 0, False)


def cpu(count: int = 1) -> Candidate:
    return Candidate(count, "KIND_CPU", (), 8, True, (), 0, False)


# ---------------------------------------------------------------- the GPU memory limit


def test_a_point_over_the_gpu_memory_limit_does_not_meet_the_sla() -> None:
    sla = Sla(95, 50.0, max_gpu_memory_mb=8000.0)
    on_gpus = replace(POINT, gpus=TWO_GPUS)  # GPU-b peaked at 9000 MiB: the most any one GPU used
    assert not sla.met_by(on_gpus)
    assert sla.memory_over_mb(on_gpus) == 1000.0
    assert Sla(95, 50.0, 9000.0).met_by(on_gpus)  # at the limit is within it
    assert Sla(95, 50.0).met_by(on_gpus)  # no limit


def test_points_without_gpu_figures_are_not_held_to_the_memory_limit() -> None:
    sla = Sla(95, 50.0, max_gpu_memory_mb=1.0)
    assert sla.met_by(POINT) and sla.memory_over_mb(POINT) == 0.0 and sla.violation(POINT) < 0


def test_the_violation_counts_memory_over_the_limit_in_ms_of_the_latency_limit() -> None:
    sla = Sla(95, 50.0, max_gpu_memory_mb=8000.0)
    over = replace(POINT, gpus=TWO_GPUS)  # 12 ms (within), 1000 MiB = 12.5% over
    assert sla.violation(over) == pytest.approx(50.0 * 0.125)
    slow = replace(over, p95_ms=60.0)  # 10 ms over too
    assert sla.violation(slow) == pytest.approx(10.0 + 6.25)
    assert Sla(95, 50.0).violation(over) == pytest.approx(12.0 - 50.0)  # no limit: latency alone


def test_the_search_sla_is_the_limit_less_the_margin_and_keeps_the_rest() -> None:
    sla = Sla(99, 50.0, max_gpu_memory_mb=1000.0)
    search = sla.tightened(0.10)
    assert search == Sla(99, 45.0, max_gpu_memory_mb=1000.0)
    assert sla.tightened(0.0) == sla and sla.limit_ms == 50.0  # the SLA itself is not changed


def test_zero_means_no_limit_and_the_label_shows_a_limit() -> None:
    assert Sla(95, 50.0, 0.0) == Sla(95, 50.0) and Sla(95, 50.0, 0.0).max_gpu_memory_mb is None
    assert Sla(95, 50.0).label == "p95 <= 50 ms"
    assert Sla(99, 20.0, 8000).label == "p99 <= 20 ms, GPU memory <= 8000 MiB"
    with pytest.raises(UsageError, match="--max-gpu-memory-mb"):
        Sla(95, 50.0, -1.0)


def test_an_sla_is_read_back_as_written() -> None:
    for sla in (Sla(95, 50.0), Sla(99, 12.5, 16384.0)):
        assert Sla.from_json(sla.to_json()) == sla
    assert "max_gpu_memory_mb" not in Sla(95, 50.0).to_json()  # run.json of a run without a limit
    assert Sla.from_json({"percentile": 95, "limit_ms": 50}) == Sla(95, 50.0)  # a record of before


# ---------------------------------------------------------------- per GPU


def space(kinds: list[str], gpus: list[object]) -> SearchSpace:
    return parse_search_space({"instance_group": {"kind": kinds, "gpus": gpus}}, gpu_available=True)


@pytest.mark.parametrize(
    ("kinds", "gpus", "server_gpus", "per_gpu"),
    [
        (["KIND_CPU"], ["all"], 0, False),  # a CPU server
        (["KIND_GPU"], ["all"], 2, False),  # every candidate on both GPUs
        (["KIND_GPU"], [[0], [1]], 2, False),  # one GPU each
        (["KIND_GPU"], [[0], [0, 1]], 2, True),  # one or two
        (["KIND_GPU"], ["all", [0]], 4, True),  # all four, or one
        (["KIND_GPU"], ["all", [0]], 1, False),  # all is one GPU here
        (["KIND_CPU", "KIND_GPU"], ["all"], 1, False),  # a CPU candidate counts as one
        (["KIND_CPU", "KIND_GPU"], ["all"], 2, True),
    ],
)
def test_goodput_is_compared_per_gpu_when_candidates_use_different_numbers_of_gpus(
    kinds: list[str], gpus: list[object], server_gpus: int, per_gpu: bool
) -> None:
    scoring = scoring_for(space(kinds, gpus), server_gpus)
    assert scoring == Scoring(per_gpu, server_gpus)


def test_the_gpus_a_space_can_use() -> None:
    assert gpu_counts(space(["KIND_CPU", "KIND_GPU"], ["all", [0], [1, 2]]), 4) == {0, 4, 1, 2}


def test_two_gpus_must_do_twice_the_work_of_one() -> None:
    scoring = Scoring(per_gpu=True, server_gpus=4)
    assert [scoring.gpus_used(c) for c in (cpu(), gpu(2), gpu(1, (0, 1)), gpu(3, (2,)))] == [0, 4, 2, 1]
    assert scoring.score(400.0, gpu(1, (0, 1))) == scoring.score(200.0, gpu(1, (0,))) == 200.0
    assert scoring.score(300.0, cpu()) == 300.0  # a CPU candidate counts as one GPU
    assert scoring.score(400.0, gpu()) == 100.0  # all four
    assert scores(POINT, Sla(95, 50.0), scoring.share(gpu(1, (0, 1)))) == (100.0, 12.0)


def test_without_per_gpu_the_throughput_is_the_score() -> None:
    assert RAW.score(400.0, gpu(1, (0, 1))) == 400.0 and RAW.share(gpu()) == 1
    assert Scoring(False, 2).gpus_used(gpu()) == 2  # the figure is there all the same
    assert scores(POINT, Sla(95, 50.0)) == (200.0, 12.0)


def test_a_scoring_is_read_back_as_written() -> None:
    assert Scoring.from_json(Scoring(True, 8).to_json()) == Scoring(True, 8)
    assert Scoring.from_json(None) == RAW  # a run recorded before per-GPU scoring
