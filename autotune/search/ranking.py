"""How trials compare and rank. :func:`trial_estimate` gives a trial's goodput with its error.
:func:`better_trial` compares two trials, and :func:`ranked` orders them. The best trial and the
finalists come from that order."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.objective import RAW, Scoring
from autotune.results import TrialResult
from autotune.search.noise import Estimate, better


def trial_estimate(result: TrialResult, scoring: Scoring = RAW) -> Estimate | None:
    """A trial's goodput as ``scoring`` counts it, with its error across servers. The error
    comes from the noise pooled over its search's points. None when it has no operating point."""
    return result.estimate(scoring.share(result.candidate))


def better_trial(a: TrialResult, b: TrialResult, scoring: Scoring = RAW) -> bool:
    """Whether ``a``'s :func:`trial_estimate` is better than ``b``'s. Any estimate is better than
    none."""
    mine, theirs = trial_estimate(a, scoring), trial_estimate(b, scoring)
    return mine is not None and (theirs is None or better(mine, theirs))


def score(result: TrialResult, scoring: Scoring = RAW) -> float:
    """A trial's goodput figure as ``scoring`` counts it. It is per GPU used when the run scores
    per GPU."""
    return scoring.score(result.goodput(), result.candidate)


def ranked(results: Sequence[TrialResult], scoring: Scoring = RAW) -> list[TrialResult]:
    """The measured trials that met the SLA, best :func:`score` first. Reused trials are left
    out. Equal scores keep the trials' order."""
    feasible = (r for r in results if r.feasible and r.reused_from is None)
    return sorted(feasible, key=lambda r: score(r, scoring), reverse=True)


def best_trial(results: Sequence[TrialResult], scoring: Scoring = RAW) -> TrialResult | None:
    """The first trial of :func:`ranked`. None when no trial has met the SLA yet."""
    return next(iter(ranked(results, scoring)), None)


def finalists(results: Sequence[TrialResult], count: int, scoring: Scoring = RAW) -> list[TrialResult]:
    """The first ``count`` :func:`ranked` trials that the top trial is not :func:`better_trial`
    than. These are the trials the top one is not shown to beat."""
    top = ranked(results, scoring)
    return [r for r in top if not better_trial(top[0], r, scoring)][:count]
