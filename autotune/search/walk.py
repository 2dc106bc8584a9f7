"""The tuner's decisions, as pure functions of what was measured, with no I/O and no optuna.

They cover the seeds, the neighbours and the walk, convergence and the budget, what stands in for a
proposal, and where a search starts."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from autotune.objective import RAW, Scoring
from autotune.results import COMPLETE, FAIL, PRUNED, TrialResult
from autotune.search.noise import GPU_SEED_COUNTS, RAMP_S
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
    """The trial parameters of the first guesses. First comes the baseline with the most
    instances of :func:`seed_counts`, as its nearest config in ``space``. It is left out when the
    baseline has that count already, or a kind the space lacks. Then, where the space allows
    dynamic batching, come batching configs at the largest max batch size, one per seed count,
    most instances first."""
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
    """The instance counts the seeds try, fewest first. KIND_CPU tries 1 and one per core.
    KIND_GPU tries ``GPU_SEED_COUNTS`` per GPU. Each count is the space's closest choice."""
    targets = (1, cores) if kind == "KIND_CPU" else GPU_SEED_COUNTS
    return sorted({closest(space.instance_count, t) for t in targets})


def neighbours(candidate: Candidate, space: SearchSpace) -> list[Candidate]:
    """The one-step changes of ``candidate`` that the space holds.

    - One instance-count choice more or fewer.
    - Without batching: batching on, at its own max batch size and at :func:`gentlest_batch`'s,
      with no preferred size and the shortest delay.
    - With batching: batching off; max batch size or delay one choice up or down; each other
      preferred size.
    - For KIND_GPU: each other ``gpus`` choice, and FP16 toggled (on with the largest workspace).
    """
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
    """The gentlest max batch size to batch at. It is the space's second-smallest positive choice,
    or its only one."""
    sizes = sorted(m for m in space.max_batch_size if m > 0)
    return sizes[1] if len(sizes) > 1 else sizes[0]


def _steps(choices: Sequence[int], value: int) -> list[int]:
    """The choices next below and next above ``value``, where they exist."""
    below = [c for c in choices if c < value]
    above = [c for c in choices if c > value]
    return ([max(below)] if below else []) + ([min(above)] if above else [])


def unexplored(
    results: Sequence[TrialResult], space: SearchSpace, scoring: Scoring = RAW, n: int | None = None
) -> list[Candidate]:
    """The :func:`neighbours` of the first ``n`` :func:`~autotune.search.ranking.finalists`, in
    turn. Without ``n``, all the finalists count. A neighbour is left out when it is
    :func:`equivalent` to a config a trial has tried, or when it is a step of :func:`losing_steps`.
    With ``n`` 1, these are the walk's next steps from the best trial. With ``--finalists``, they
    are what a converged search measures before it ends."""
    tops = finalists([r for r in results if r.candidate is not None], n or len(results), scoring)
    origins = [r.candidate for r in tops if r.candidate is not None]
    return _untried_steps(origins, results, space, losing_steps(results, scoring))


def _untried_steps(
    origins: Sequence[Candidate], results: Sequence[TrialResult], space: SearchSpace,
    lost: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset(),
) -> list[Candidate]:  # fmt: skip
    """The :func:`neighbours` of ``origins``, in turn, less those :func:`equivalent` to a config
    a trial has tried or to one listed before, and the instance steps in ``lost``."""
    tried = [r.candidate for r in results if r.candidate is not None]
    out: list[Candidate] = []
    for origin in origins:
        for c in neighbours(origin, space):
            step = (origin.instance_count, c.instance_count)
            if step not in lost and not any(equivalent(c, t) for t in (*tried, *out)):
                out.append(c)
    return out


def steps_ahead(results: Sequence[TrialResult], space: SearchSpace) -> list[Candidate]:
    """Before any trial met the SLA, with workers free: the untried :func:`neighbours` of the
    trials in flight that batch, first asked first (the seeds, most instances first: their own
    bet on where the best is)."""
    origins = [c for r in flying(results) if (c := r.candidate) is not None and c.dynamic_batching]
    return _untried_steps(origins, results, space)


def steps_beyond(
    results: Sequence[TrialResult], space: SearchSpace, scoring: Scoring = RAW
) -> list[Candidate]:
    """Several at once, with no untried step left from the best: the untried :func:`neighbours` of
    the best's own steps in flight, first asked first. Each may be the next best; one at a time, the
    walk would wait for it and step from it."""
    best = best_trial(results, scoring)
    if best is None or best.candidate is None:
        return []
    near = neighbours(best.candidate, space)
    origins = [
        c for r in flying(results) if (c := r.candidate) is not None and any(equivalent(c, n) for n in near)
    ]
    return _untried_steps(origins, results, space, losing_steps(results, scoring))


def losing_steps(results: Sequence[TrialResult], scoring: Scoring = RAW) -> set[tuple[int, int]]:
    """The instance-count steps (from, to) that lost without dynamic batching. Each comes from a
    pair of :func:`instance_losses` whose loser, with ``to`` instances, has batching off."""
    return {
        (winner.instance_count, loser.instance_count)
        for (_, loser), (_, winner) in instance_losses(results, scoring)
        if not loser.dynamic_batching
    }


def instance_losses(
    results: Sequence[TrialResult], scoring: Scoring = RAW
) -> list[tuple[tuple[TrialResult, Candidate], tuple[TrialResult, Candidate]]]:
    """Every (loser, winner) pair of :func:`_measured` trials whose configs differ only in the
    instance count, where the winner is :func:`~autotune.search.ranking.better_trial`."""
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
    """The measured trials, each with its candidate. A measured trial is COMPLETE and not
    reused."""
    return [
        (r, r.candidate) for r in results
        if r.state == COMPLETE and r.reused_from is None and r.candidate is not None
    ]  # fmt: skip


def out_of_ideas(results: Sequence[TrialResult]) -> bool:
    """Whether the latest trial that ended uninterrupted was pruned. A pruned trial is a proposal
    not worth measuring."""
    told = [r for r in results if r.state in TOLD and not r.interrupted]
    return bool(told) and max(told, key=lambda r: r.number).state == PRUNED


def in_space(baseline: Candidate, space: SearchSpace) -> Candidate:
    """The baseline as the space can hold it. A baseline of a kind the space lacks becomes its
    twin of the space's first kind, with no GPUs and no TensorRT."""
    if baseline.kind in space.kind:
        return baseline
    return replace(baseline, kind=space.kind[0], gpus=(), trt_fp16=False, trt_workspace_mb=0)


def closest(choices: Sequence[int], target: int) -> int:
    """The choice nearest ``target``. On a tie, the smaller one."""
    return min(choices, key=lambda c: (abs(c - target), c))


def converged(results: Sequence[TrialResult], patience: int, scoring: Scoring = RAW) -> bool:
    """Whether the last ``patience`` configs brought none
    :func:`~autotune.search.ranking.better_trial` than the best before them. Only configs that
    were measured or failed count, not reused or interrupted ones. ``patience`` must be above 0,
    and some trial must have met the SLA."""
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
    """How many trials count against the budget: those that ended (:data:`TOLD`) and were not
    interrupted. A proposal pruned as the twin of a trial in flight (only several at once make
    one) costs no time: it counts only beyond one for each trial that counts."""
    ended = [r for r in results if r.state in TOLD and not r.interrupted]
    twins = sum(r.twin_in_flight for r in ended)
    return max(len(ended) - twins, twins)


def flying(results: Sequence[TrialResult]) -> list[TrialResult]:
    """The trials asked that have not ended: measured now, by this worker or another."""
    return [r for r in results if r.state not in TOLD]


def in_flight(results: Sequence[TrialResult]) -> int:
    """How many trials are :func:`flying`."""
    return len(flying(results))


def time_left(
    budget_s: float | None, elapsed_s: float, finished: int, reserve_s: float = 0.0, at_once: int = 1
) -> bool:
    """Whether another trial fits in ``budget_s``. It fits when the elapsed time, plus half an
    average trial, plus ``reserve_s`` is within budget. ``reserve_s`` is the time kept for what
    follows the search (:func:`after_search_s`). With ``at_once`` trials measured together, a
    trial takes that many times the elapsed time per trial ended. Without a budget, a trial
    always fits."""
    per_trial = elapsed_s * at_once / finished if finished else 0.0
    return budget_s is None or elapsed_s + per_trial * 0.5 + reserve_s < budget_s


def after_search_s(
    results: Sequence[TrialResult], racers: int, rounds: int, shared: bool, check_points: int,
    warmup_s: float = 0.0,
) -> float:  # fmt: skip
    """The seconds the race and the open-loop check will take, read off this run's own trials.

    The race has ``racers`` on at least ``rounds`` rounds. With ``shared``, a round's racers share
    one server. The open-loop check takes a server and ``check_points`` points; 0 means no check.
    A server costs the trials' median overhead (a trial's time less its points' windows and
    warm-ups and its output check). A point costs the mean of their points' windows (times add
    up, and a point near its limit takes more windows) and its warm-up: ``warmup_s`` first on its
    model (each racer's), :data:`RAMP_S` after. It is 0.0 before any trial was measured."""
    measured = [(r, m) for r in results if (m := r.measurement) and m.points and r.duration_s > 0]
    if not measured:
        return 0.0
    overheads: list[float] = []
    windows: list[float] = []
    for r, m in measured:
        windows.extend(p.duration_s for p in m.points)
        spent = sum(p.duration_s for p in m.points) + _warm_ups(len(m.points), warmup_s) + m.output_check_s
        overheads.append(r.duration_s - spent)
    start, point = max(statistics.median(overheads), 0.0), statistics.fmean(windows)
    first = point + warmup_s
    per_round = start + racers * first if shared else racers * (start + first)
    check = start + check_points * point + _warm_ups(check_points, warmup_s)
    return rounds * per_round + (check if check_points else 0.0)


def _warm_ups(points: int, warmup_s: float) -> float:
    """The warm-ups of ``points`` points in turn on one server: the first's, then a ramp each."""
    return warmup_s + RAMP_S * (points - 1) if points else 0.0


def stand_in(
    results: Sequence[TrialResult], candidate: Candidate, space: SearchSpace, scoring: Scoring = RAW,
    baseline: bool = False,
) -> tuple[int | None, str] | None:  # fmt: skip
    """What stands in for the proposal ``candidate``, or None to measure it.

    A stand-in is (trial, why), where trial is the number of the trial standing in, or None. A
    candidate outside ``space`` gets None as its trial. Else the stand-in is the first measured
    (COMPLETE, not reused) trial of an :func:`equivalent` candidate, or the trial
    :func:`dominated` finds; else a trial in flight (several at once) of an equivalent candidate.
    For the ``baseline``, only that equivalent measured trial stands in."""
    if not baseline and not space.holds(candidate):
        return None, "outside your search space (your config is measured there, nothing else)"
    earlier = next((r for r, c in _measured(results) if equivalent(c, candidate)), None)
    if earlier is not None:
        same = baseline or earlier.candidate == candidate
        why = "same as" if same else "without dynamic batching the server runs it as"
        return earlier.number, f"{why} trial {earlier.number}"
    twins = [r.number for r in flying(results) if r.candidate and equivalent(r.candidate, candidate)]
    if twins and not baseline:
        return twins[0], f"same as trial {twins[0]}, measured now"
    found = None if baseline else dominated(results, candidate, scoring)
    return None if found is None else (found[0].number, found[1])


def dominated(
    results: Sequence[TrialResult], candidate: Candidate, scoring: Scoring = RAW
) -> tuple[TrialResult, str] | None:
    """The loser that stands in for ``candidate`` when its instance count lost both without and
    with dynamic batching (:func:`instance_losses`), and why. That loser has the candidate's
    batching and the max batch size nearest its own. None when the count did not lose both ways."""
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
    """The candidate the server runs as ``candidate``. Without dynamic batching, a max batch size
    above 0 becomes 1. With dynamic batching at a max batch size of 1, the preferred sizes and the
    queue delay are dropped."""
    if not candidate.dynamic_batching and candidate.max_batch_size > 0:
        return replace(candidate, max_batch_size=1)
    if candidate.dynamic_batching and candidate.max_batch_size == 1:
        return replace(candidate, preferred_batch_sizes=(), max_queue_delay_us=0)
    return candidate


def start_level(results: Sequence[TrialResult], scoring: Scoring = RAW) -> float | None:
    """The level where the next goodput search starts: the concurrency or request rate of
    :func:`autotune.search.ranking.best_trial`'s operating point. None when no trial has met the
    SLA yet."""
    best = best_trial(results, scoring)
    return None if best is None or best.best is None else best.best.level
