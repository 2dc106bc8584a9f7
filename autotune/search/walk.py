"""The tuner's decisions, as pure functions of what was measured (no I/O, no optuna): seeds,
neighbours and the walk, convergence and the budget, what stands in for a proposal, where a
search starts and the SLA it is held to."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from autotune.objective import RAW, Scoring
from autotune.results import COMPLETE, FAIL, PRUNED, TrialResult
from autotune.search.noise import GPU_SEED_COUNTS
from autotune.search.ranking import best_trial, better_trial, finalists
from autotune.search_space import (
    Candidate,
    SearchSpace,
    decode_gpus,
    decode_preferred,
    encode_preferred,
    params_of,
)

TOLD = (COMPLETE, FAIL, PRUNED)  # the states of a trial that has ended


def heuristic_seeds(
    space: SearchSpace, cores: int, baseline: Candidate | None = None
) -> list[dict[str, Any]]:
    """The trial parameters of the first guesses: the baseline with :func:`seed_counts`' most
    instances (nearest in ``space``), then batching at the largest batch size with each count, most first."""
    seeds: list[dict[str, Any]] = []
    if baseline is not None and baseline.kind in space.kind:
        many = seed_counts(space, baseline.kind, cores)[-1]
        if baseline.instance_count != many:
            seeds.append(params_of(space.nearest(replace(baseline, instance_count=many))))
    mbs = max(space.max_batch_size)
    if mbs == 0 or True not in space.dynamic_batching:
        return seeds
    kind = space.kind[0]
    pref = "none" if "none" in space.preferred_batch_size else space.preferred_batch_size[0]
    batching = dict(kind=kind, max_batch_size=mbs, dynamic_batching=True, preferred_batch_size=pref)
    rest = dict(max_queue_delay_us=min(space.max_queue_delay_us), gpus=space.gpus[0], trt_fp16=False)
    counts = reversed(seed_counts(space, kind, cores))
    return seeds + [{"instance_count": count, **batching, **rest} for count in counts]


def seed_counts(space: SearchSpace, kind: str, cores: int) -> list[int]:
    """The instance counts the seeds try, fewest first: 1 and one per core for KIND_CPU,
    ``GPU_SEED_COUNTS`` per GPU for KIND_GPU, each the space's closest choice."""
    targets = (1, cores) if kind == "KIND_CPU" else GPU_SEED_COUNTS
    return sorted({closest(space.instance_count, t) for t in targets})


def neighbours(candidate: Candidate, space: SearchSpace) -> list[Candidate]:
    """The one-step changes of ``candidate`` the space holds: one instance choice more or fewer;
    batching off, or on (no preferred size, the shortest delay) at its max batch size and
    :func:`gentlest_batch`'s; with batching, max batch size and delay one choice up or down and
    each other preferred size; for KIND_GPU, each other gpus choice, FP16 toggled (largest workspace)."""
    out: list[Candidate] = [
        replace(candidate, instance_count=n) for n in _steps(space.instance_count, candidate.instance_count)
    ]
    out += _batching_steps(candidate, space)
    if candidate.kind == "KIND_GPU":
        gpus = [decode_gpus(g) for g in space.gpus]
        out += [replace(candidate, gpus=g) for g in gpus if g != candidate.gpus]
        fp16 = not candidate.trt_fp16
        workspace = max(space.trt_workspace_mb) if fp16 else 0
        out.append(replace(candidate, trt_fp16=fp16, trt_workspace_mb=workspace))
    return [c for c in dict.fromkeys(out) if c != candidate and space.holds(c)]


def _batching_steps(candidate: Candidate, space: SearchSpace) -> list[Candidate]:
    if not candidate.dynamic_batching:
        if candidate.max_batch_size <= 0 or True not in space.dynamic_batching:
            return []
        pref = "none" if "none" in space.preferred_batch_size else space.preferred_batch_size[0]
        on = replace(candidate, dynamic_batching=True, max_queue_delay_us=min(space.max_queue_delay_us))
        sizes = dict.fromkeys((candidate.max_batch_size, gentlest_batch(space)))
        return [replace(on, max_batch_size=m, preferred_batch_sizes=decode_preferred(pref, m)) for m in sizes]
    out: list[Candidate] = []
    if False in space.dynamic_batching:
        out.append(replace(candidate, dynamic_batching=False, preferred_batch_sizes=(), max_queue_delay_us=0))
    pref = encode_preferred(candidate.preferred_batch_sizes, candidate.max_batch_size)
    for mbs in _steps(tuple(m for m in space.max_batch_size if m > 0), candidate.max_batch_size):
        preferred = decode_preferred(pref, mbs) if pref in space.preferred_batch_size else ()
        out.append(replace(candidate, max_batch_size=mbs, preferred_batch_sizes=preferred))
    delays = _steps(space.max_queue_delay_us, candidate.max_queue_delay_us)
    out += [replace(candidate, max_queue_delay_us=d) for d in delays]
    return out + [
        replace(candidate, preferred_batch_sizes=decode_preferred(p, candidate.max_batch_size))
        for p in space.preferred_batch_size
        if p != pref
    ]


def gentlest_batch(space: SearchSpace) -> int:
    """The gentlest max batch size to batch at: the space's second-smallest positive choice, else its only."""
    sizes = sorted(m for m in space.max_batch_size if m > 0)
    return sizes[1] if len(sizes) > 1 else sizes[0]


def _steps(choices: Sequence[int], value: int) -> list[int]:
    """The choices next below and next above ``value`` (those that exist)."""
    below = [c for c in choices if c < value]
    above = [c for c in choices if c > value]
    return ([max(below)] if below else []) + ([min(above)] if above else [])


def unexplored(
    results: Sequence[TrialResult], space: SearchSpace, scoring: Scoring = RAW, n: int | None = None
) -> list[Candidate]:
    """The :func:`neighbours` of the first ``n`` (default all) :func:`~autotune.search.ranking.finalists`, in
    turn, :func:`equivalent` to no config any trial has tried, nor a step of :func:`losing_steps`:
    with ``n`` 1 the walk's next steps from the best trial; with ``--finalists``, what a converged
    search measures before it ends."""
    tried = [r.candidate for r in results if r.candidate is not None]
    lost = losing_steps(results, scoring)
    out: list[Candidate] = []
    for result in finalists([r for r in results if r.candidate is not None], n or len(results), scoring):
        assert result.candidate is not None
        here = result.candidate.instance_count
        for c in neighbours(result.candidate, space):
            if (here, c.instance_count) not in lost and not any(equivalent(c, t) for t in (*tried, *out)):
                out.append(c)
    return out


def losing_steps(results: Sequence[TrialResult], scoring: Scoring = RAW) -> set[tuple[int, int]]:
    """The instance-count steps (from, to) that lost without dynamic batching: a pair of
    :func:`instance_losses` whose loser (with ``to`` instances) has batching off."""
    return {
        (winner.instance_count, loser.instance_count)
        for (_, loser), (_, winner) in instance_losses(results, scoring)
        if not loser.dynamic_batching
    }


def instance_losses(
    results: Sequence[TrialResult], scoring: Scoring = RAW
) -> list[tuple[tuple[TrialResult, Candidate], tuple[TrialResult, Candidate]]]:
    """Every (loser, winner) pair of :func:`_measured` trials whose configs differ in the
    instance count alone and where the winner is :func:`~autotune.search.ranking.better_trial`."""
    done = _measured(results)
    return [
        ((loser, mine), (winner, theirs))
        for loser, mine in done
        for winner, theirs in done
        if mine.instance_count != theirs.instance_count
        and equivalent(replace(theirs, instance_count=mine.instance_count), mine)
        and better_trial(winner, loser, scoring)
    ]


def _measured(results: Sequence[TrialResult]) -> list[tuple[TrialResult, Candidate]]:
    """The measured (COMPLETE, not reused) trials, each with its candidate."""
    return [
        (r, r.candidate) for r in results
        if r.state == COMPLETE and r.reused_from is None and r.candidate is not None
    ]  # fmt: skip


def out_of_ideas(results: Sequence[TrialResult]) -> bool:
    """Whether the latest ended, uninterrupted trial was pruned (a proposal not worth measuring)."""
    told = [r for r in results if r.state in TOLD and not r.interrupted]
    return bool(told) and max(told, key=lambda r: r.number).state == PRUNED


def in_space(baseline: Candidate, space: SearchSpace) -> Candidate:
    """The baseline as the space can hold it: of a kind the space lacks, its twin of the space's
    first kind (no GPUs, no TensorRT)."""
    if baseline.kind in space.kind:
        return baseline
    return replace(baseline, kind=space.kind[0], gpus=(), trt_fp16=False, trt_workspace_mb=0)


def closest(choices: Sequence[int], target: int) -> int:
    """The choice nearest ``target``; the smaller one on a tie."""
    return min(choices, key=lambda c: (abs(c - target), c))


def converged(results: Sequence[TrialResult], patience: int, scoring: Scoring = RAW) -> bool:
    """Whether the last ``patience`` (> 0) configs measured or failed, not reused nor interrupted,
    brought none :func:`~autotune.search.ranking.better_trial` than the best before them."""
    best: TrialResult | None = None
    since = 0
    for result in sorted(results, key=lambda r: r.number):
        if result.reused_from is not None or result.interrupted or result.state not in (COMPLETE, FAIL):
            continue
        if result.feasible and (best is None or better_trial(result, best, scoring)):
            best, since = result, 0
        else:
            since += 1
    return patience >= 1 and best is not None and since >= patience


def finished(results: Sequence[TrialResult]) -> int:
    """The trials that count against the budget: ended (:data:`TOLD`), not interrupted."""
    return sum(r.state in TOLD and not r.interrupted for r in results)


def time_left(budget_s: float | None, elapsed_s: float, finished: int, reserve_s: float = 0.0) -> bool:
    """Whether another trial fits: the elapsed time plus half an average trial, and the time kept
    for what follows the search (``reserve_s``: :func:`after_search_s`), is within budget."""
    per_trial = elapsed_s / finished if finished else 0.0
    return budget_s is None or elapsed_s + per_trial * 0.5 + reserve_s < budget_s


def after_search_s(
    results: Sequence[TrialResult], racers: int, rounds: int, shared: bool, check_points: int
) -> float:
    """The time the race (``racers`` on ``rounds`` rounds at least; ``shared``: a round's racers
    on one server) and the open-loop check (a server and ``check_points`` points; 0: none) will
    take, read off this run's own trials: a fresh server's overhead (a trial's time less its
    points' windows) and a point's windows, each their median; 0.0 before a trial was measured."""
    measured = [(r.duration_s, r.measurement.points) for r in results if r.measurement and r.duration_s > 0]
    measured = [(duration, points) for duration, points in measured if points]
    if not measured:
        return 0.0
    start = max(
        statistics.median(duration - sum(p.duration_s for p in points) for duration, points in measured), 0.0
    )
    point = float(statistics.median(p.duration_s for _, points in measured for p in points))
    per_round = start + racers * point if shared else racers * (start + point)
    return rounds * per_round + (start + check_points * point if check_points else 0.0)


def stand_in(
    results: Sequence[TrialResult], candidate: Candidate, space: SearchSpace, scoring: Scoring = RAW,
    baseline: bool = False,
) -> tuple[int | None, str] | None:  # fmt: skip
    """None to measure the proposal; else (the trial standing in or None, why): outside ``space``,
    the first measured (COMPLETE, not reused) trial of an :func:`equivalent` candidate, or
    :func:`dominated`; for the ``baseline``, only that trial."""
    if not baseline and not space.holds(candidate):
        return None, "outside your search space (your config is measured there, nothing else)"
    earlier = next((r for r, c in _measured(results) if equivalent(c, candidate)), None)
    if earlier is not None:
        same = baseline or earlier.candidate == candidate
        why = "same as" if same else "without dynamic batching the server runs it as"
        return earlier.number, f"{why} trial {earlier.number}"
    found = None if baseline else dominated(results, candidate, scoring)
    return None if found is None else (found[0].number, found[1])


def dominated(
    results: Sequence[TrialResult], candidate: Candidate, scoring: Scoring = RAW
) -> tuple[TrialResult, str] | None:
    """When ``candidate``'s instance count lost (:func:`instance_losses`) both without and
    with dynamic batching: the loser with the candidate's batching and the max batch size
    nearest its own, and why; else None."""
    n = candidate.instance_count
    lost: dict[bool, list[tuple[TrialResult, Candidate, TrialResult]]] = {False: [], True: []}
    for (loser, mine), (winner, _) in instance_losses(results, scoring):
        if mine.instance_count == n:
            lost[mine.dynamic_batching].append((loser, mine, winner))
    if not lost[False] or not lost[True]:
        return None
    mbs = candidate.max_batch_size
    nearest = min(lost[candidate.dynamic_batching], key=lambda x: abs(x[1].max_batch_size - mbs))[0]
    (off, _, off_by), (on, _, on_by) = lost[False][0], lost[True][0]
    why = (
        f"{n} instance(s) lost without dynamic batching (trial {off.number} against "
        f"{off_by.number}) and with it (trial {on.number} against {on_by.number}); trial "
        f"{nearest.number} is the nearest measured"
    )
    return nearest, why


def equivalent(a: Candidate, b: Candidate) -> bool:
    """Whether two candidates have the same :func:`canonical` form."""
    return canonical(a) == canonical(b)


def canonical(candidate: Candidate) -> Candidate:
    """The candidate the server runs as ``candidate``: without dynamic batching a max batch size
    > 0 becomes 1; with it, at a max batch size of 1, no preferred sizes and no queue delay."""
    if not candidate.dynamic_batching and candidate.max_batch_size > 0:
        return replace(candidate, max_batch_size=1)
    if candidate.dynamic_batching and candidate.max_batch_size == 1:
        return replace(candidate, preferred_batch_sizes=(), max_queue_delay_us=0)
    return candidate


def start_level(results: Sequence[TrialResult], scoring: Scoring = RAW) -> float | None:
    """The level (concurrency or request rate) of :func:`autotune.search.ranking.best_trial`'s operating
    point, where the next goodput search starts; None before any trial met the SLA."""
    best = best_trial(results, scoring)
    return None if best is None or best.best is None else best.best.level
