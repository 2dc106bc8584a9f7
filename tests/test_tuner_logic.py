"""The tuner's pure decisions: when the search has converged, which finalists are worth
verifying (no server)."""

from __future__ import annotations

from autotune.measure import Measurement, Point
from autotune.results import COMPLETE, FAIL, TrialResult, Verification
from autotune.tuner import converged, could_beat, incumbent


def measured(number: int, goodput: float, reused_from: int | None = None) -> TrialResult:
    p = Point(4, 0.0, goodput, 10.0, 9.0, 11.0, 12.0, 13.0, 100, 0, 1.0, 3, True)
    return TrialResult(
        number=number, state=COMPLETE, candidate=None, params={}, baseline=False,
        measurement=Measurement((p,), p if goodput else None), reused_from=reused_from,
    )  # fmt: skip


def failed(number: int, reason: str = "server exited") -> TrialResult:
    return TrialResult(
        number=number, state=FAIL, candidate=None, params={}, baseline=False, measurement=None, reason=reason
    )


def test_converged_after_patience_configs_without_progress() -> None:
    results = [measured(0, 100.0), measured(1, 150.0), measured(2, 157.0), failed(3), measured(4, 0.0)]
    assert not converged(results, 4)  # 3 since the best (157 is within 8% of 150: noise)
    assert converged([*results, measured(5, 149.0)], 4)
    assert not converged([*results, measured(5, 163.0)], 4)  # 8.7% above 150: progress resets the count
    assert not converged([*results, measured(5, 149.0)], 0)  # 0: never


def test_reused_and_interrupted_trials_do_not_count() -> None:
    results = [measured(0, 100.0), measured(1, 90.0, reused_from=0), failed(2, "interrupted: stop")]
    results += [measured(3, 90.0, reused_from=0), failed(4, "interrupted: stop"), measured(5, 95.0)]
    assert not converged(results, 2)  # only 0 and 5 were measured
    assert converged([*results, measured(6, 80.0)], 2)
    assert not converged([failed(0), failed(1), failed(2)], 2)  # nothing feasible yet: go on


def verified(throughputs: list[float], met: int) -> Verification:
    points = tuple(Point(4, 0.0, t, 10.0, 9.0, 11.0, 12.0, 13.0, 100, 0, 1.0, 3, True) for t in throughputs)
    return Verification(trial=0, concurrency=4, points=points, sla_met=met)


def test_a_finalist_is_verified_only_if_it_could_beat_a_verified_winner() -> None:
    assert could_beat(measured(1, 150.0), [])  # nothing verified yet
    passed = verified([140.0, 151.0, 148.0], met=3)  # median 148
    assert not could_beat(measured(1, 159.0), [passed])  # within 8% of 148: noise
    assert could_beat(measured(1, 161.0), [passed])  # 8.8% above: worth a look
    failed_one = verified([160.0, 170.0], met=1)  # broke the SLA in a repeat: proves nothing
    assert could_beat(measured(1, 100.0), [failed_one])
    assert not could_beat(measured(1, 100.0), [failed_one, passed])


def test_the_next_search_starts_at_the_best_feasible_config() -> None:
    assert incumbent([]) == (None, 0.0)
    assert incumbent([failed(0), measured(1, 0.0)]) == (None, 0.0)  # nothing met the SLA yet
    assert incumbent([measured(0, 100.0), failed(1), measured(2, 150.0), measured(3, 120.0)]) == (4, 150.0)
