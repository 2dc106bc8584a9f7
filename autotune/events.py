"""What a tuning run tells the person watching it.

:class:`Events` does nothing in every method: the tuner calls it unconditionally, a caller
overrides what it wants to show (the CLI's progress bars in ``autotune._console``; a test
that watches a run while it happens).
"""

from __future__ import annotations

from pathlib import Path

from autotune.hostlock import Holder
from autotune.points import Point
from autotune.results import TrialResult
from autotune.search_space import Candidate


class Events:
    def waiting(self, holder: Holder | None) -> None:
        """Another command holds the machine's measurement lock (``holder``: who, when it can be
        told); the run waits for it."""

    def run_started(self, run_dir: Path, total: int, budget_s: float | None, then: str = "") -> None:
        """The run directory exists; ``total`` trials at most, within ``budget_s`` (None: no
        limit); ``then``: what follows the search, outside that budget ("" nothing)."""

    def search_ended(
        self, elapsed_s: float, reserve_s: float, budget_s: float | None, most_s: float, what: str
    ) -> None:  # fmt: skip
        """The search ended after ``elapsed_s``; ``what`` follows ("": nothing), within ``budget_s``
        (None: no limit). By the run's own trials it takes ``reserve_s`` with the fewest rounds
        (what the budget keeps) and ``most_s`` with every round ``--repeats`` allows."""

    def said(self, text: str) -> None:
        """Something the run did that people should know of (a step skipped, an overrun)."""

    def trial_started(
        self, number: int, candidate: Candidate, baseline: bool, again_of: int | None = None
    ) -> None:
        """A trial was asked; its server is starting. ``again_of``: the interrupted trial whose
        config it measures again."""

    def point_measured(self, number: int, point: Point) -> None:
        """One operating point of the trial in flight was measured."""

    def trial_finished(self, result: TrialResult) -> None:
        """The trial was told to the study: measured, reused or failed."""

    def trial_retried(self, number: int, reason: str) -> None:
        """The trial's server died under load; the trial is measured again on a new server."""

    def verifying(self, trial: int, where: str, repeat: int, repeats: int) -> None:
        """A finalist is being measured again at its operating point (``concurrency 8``, ``420 req/s``)."""

    def checking_open_loop(self, trial: int, credited_rate: float) -> None:
        """A concurrency run's winner is being measured under arrivals at a rate, from ``credited_rate``."""

    def verification_failed(self, result: TrialResult, reason: str) -> None:
        """A finalist could not be verified (its server or a measurement failed); it is skipped."""
