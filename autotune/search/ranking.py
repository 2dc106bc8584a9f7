"""How trials compare and rank: each trial's goodput with its error (:func:`trial_estimate`),
:func:`better_trial`, the ranking (:func:`ranked`), the best trial and the finalists."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.objective import RAW, Scoring
from autotune.results import TrialResult
from autotune.search.noise import Estimate, better


def trial_estimate(result: TrialResult, scoring: Scoring = RAW) -> Estimate | None:
    """A trial's goodput as ``scoring`` counts it, with its error (the noise pooled over its
    search's points) across servers; None without an operating point."""
    return result.estimate(scoring.share(result.candidate))


def better_trial(a: TrialResult, b: TrialResult, scoring: Scoring = RAW) -> bool:
    """Whether ``a``'s :func:`trial_estimate` is better than ``b``'s (any is better than none)."""
    mine, theirs = trial_estimate(a, scoring), trial_estimate(b, scoring)
    return mine is not None and (theirs is None or better(mine, theirs))


def score(result: TrialResult, scoring: Scoring = RAW) -> float:
    """A trial's goodput figure as ``scoring`` counts it (per GPU used, where the run does)."""
    return scoring.score(result.goodput(), result.candidate)


def ranked(results: Sequence[TrialResult], scoring: Scoring = RAW) -> list[TrialResult]:
    """The measured (not reused) trials that met the SLA, by :func:`score`, best (then first) first."""
    feasible = (r for r in results if r.feasible and r.reused_from is None)
    return sorted(feasible, key=lambda r: score(r, scoring), reverse=True)


def best_trial(results: Sequence[TrialResult], scoring: Scoring = RAW) -> TrialResult | None:
    """The first of :func:`ranked`; None before any trial met the SLA."""
    return next(iter(ranked(results, scoring)), None)


def finalists(results: Sequence[TrialResult], count: int, scoring: Scoring = RAW) -> list[TrialResult]:
    """The first ``count`` :func:`ranked` trials the first one is not :func:`better_trial` than."""
    top = ranked(results, scoring)
    return [r for r in top if not better_trial(top[0], r, scoring)][:count]
