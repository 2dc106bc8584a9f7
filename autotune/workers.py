"""How many trials a run measures at once, and when their ends reach the study.

:class:`OneAtATime` measures each trial as it is asked: a run on one machine. The simulator's
:class:`autotune.sim.SimWorkers` measures several at once in simulated time. The search
(:func:`autotune.tuner.search`) and the race (:func:`autotune.finals.race`) see only
:class:`Workers`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from autotune.results import TrialResult
from autotune.study import Study
from autotune.trials import Trials

T = TypeVar("T")
J = TypeVar("J")


class Workers(Protocol):
    """Workers that measure trials and race rounds, up to :attr:`at_once` together."""

    at_once: int

    def free(self) -> int:
        """How many workers can start a trial now."""
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

    def begin(
        self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J],
        then: Callable[[list[T]], None],
    ) -> None:  # fmt: skip
        """``serve`` of each job on a free worker of its own, beside the trials in flight: when the
        last ends, :meth:`wait` calls ``then`` with their results in order. Until then they are
        in flight (:meth:`busy`), and a stop drops them."""
        ...

    def drop(self, jobs: Sequence[Any] | None = None) -> None:
        """The jobs begun and still in flight end now, without their results: the race needs them
        no more (``jobs``: those of them only, by identity). The trials in flight go on."""
        ...


class OneAtATime:
    """One trial at a time, told as soon as it ends: nothing is ever in flight between steps."""

    at_once = 1

    def free(self) -> int:
        return 1

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

    def begin(
        self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J],
        then: Callable[[list[T]], None],
    ) -> None:  # fmt: skip
        then(self.each(trials, serve, jobs))  # nothing is ever in flight

    def drop(self, jobs: Sequence[Any] | None = None) -> None:
        pass  # nothing is ever in flight


@dataclass(eq=False)
class Begun(Generic[T]):
    """Jobs begun at once beside the trials in flight (:meth:`Workers.begin`): the jobs, their
    results so far, how many have not ended, and what takes the results once the last has."""

    jobs: Sequence[Any]
    out: list[Any]
    left: int
    then: Callable[[list[T]], None]

    @classmethod
    def of(cls, jobs: Sequence[Any], then: Callable[[list[T]], None]) -> Begun[T]:
        return cls(jobs, [None] * len(jobs), len(jobs), then)

    def holds(self, i: int, jobs: Sequence[Any] | None) -> bool:
        """Whether job ``i`` is one of ``jobs`` (by identity; None: every job)."""
        return jobs is None or any(self.jobs[i] is job for job in jobs)

    def ended(self, i: int, result: T) -> None:
        """Job ``i`` ended with ``result``; once it is the last, ``then`` takes them all."""
        self.out[i], self.left = result, self.left - 1
        if not self.left:
            self.then(self.out)
