"""How many trials a run measures at once, and when their ends reach the study.

:class:`OneAtATime` measures each trial as it is asked: a run on one machine. The simulator's
:class:`autotune.sim.SimWorkers` measures several at once in simulated time. The search
(:func:`autotune.tuner.search`) and the race (:func:`autotune.finals.race`) see only
:class:`Workers`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from autotune.results import TrialResult
from autotune.study import Study
from autotune.trials import Trials

T = TypeVar("T")
J = TypeVar("J")


class Workers(Protocol):
    """Workers that measure trials and race rounds, up to :attr:`at_once` together."""

    at_once: int

    def free(self) -> bool:
        """Whether a worker can start a trial now."""
        ...

    def busy(self) -> bool:
        """Whether a trial is in flight (its end not yet told)."""
        ...

    def start(self, trials: Trials, study: Study, results: list[TrialResult]) -> None:
        """Ask the next trial and start it on a free worker (``results``: every trial so far)."""
        ...

    def wait(self, trials: Trials, study: Study) -> None:
        """Tell the study of the next trial in flight to end."""
        ...

    def stop(self, trials: Trials, study: Study) -> None:
        """The run stops: the trials in flight end, told as interrupted (--resume measures them
        again)."""
        ...

    def each(self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J]) -> list[T]:
        """``serve`` of each job on a worker of its own, all at once (the race's rounds); their
        results in order. ``serve`` is a module's function: a worker elsewhere runs it with trials
        of its own."""
        ...


class OneAtATime:
    """One trial at a time, told as soon as it ends: nothing is ever in flight between steps."""

    at_once = 1

    def free(self) -> bool:
        return True

    def busy(self) -> bool:
        return False

    def start(self, trials: Trials, study: Study, results: list[TrialResult]) -> None:
        trials.run(study, results)

    def wait(self, trials: Trials, study: Study) -> None:
        raise AssertionError("nothing is in flight one trial at a time")

    def stop(self, trials: Trials, study: Study) -> None:
        pass  # the trial that was running told its own end (Trials.measure_trial)

    def each(self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J]) -> list[T]:
        return [serve(trials, job) for job in jobs]
