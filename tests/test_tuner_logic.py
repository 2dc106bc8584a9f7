"""The tuner's pure decisions: when the search has converged (no server)."""

from __future__ import annotations

from autotune.measure import Measurement, Point
from autotune.results import COMPLETE, FAIL, TrialResult
from autotune.tuner import converged


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
    results = [measured(0, 100.0), measured(1, 150.0), measured(2, 155.0), failed(3), measured(4, 0.0)]
    assert not converged(results, 4)  # 3 since the best (155 is within 5% of 150: noise)
    assert converged([*results, measured(5, 149.0)], 4)
    assert not converged([*results, measured(5, 160.0)], 4)  # progress resets the count
    assert not converged([*results, measured(5, 149.0)], 0)  # 0: never


def test_reused_and_interrupted_trials_do_not_count() -> None:
    results = [measured(0, 100.0), measured(1, 90.0, reused_from=0), failed(2, "interrupted: stop")]
    results += [measured(3, 90.0, reused_from=0), failed(4, "interrupted: stop"), measured(5, 95.0)]
    assert not converged(results, 2)  # only 0 and 5 were measured
    assert converged([*results, measured(6, 80.0)], 2)
    assert not converged([failed(0), failed(1), failed(2)], 2)  # nothing feasible yet: go on
