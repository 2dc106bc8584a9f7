"""The tuner's decisions, as pure functions of what was measured (no I/O, no optuna).

- which configs to try first (:func:`heuristic_seeds`), and which obvious changes of the best
  one must be tried before the search may end (:func:`unexplored`);
- where a candidate's goodput search starts (:func:`start_level`; what it must beat is
  :func:`autotune.rules.incumbent`);
- whether a candidate, or an :func:`equivalent` one, was measured already (:func:`measured_before`),
  or its instance count lost with and without batching (:func:`dominated`): :func:`stand_in`;
- when the search has converged (:func:`converged`) or the time budget is spent (:func:`time_left`);
- the SLA a candidate's points and race rounds are held to (:func:`headroom`).

Whether one trial is better than another is :func:`autotune.rules.better_trial`'s verdict on
intervals; every ranking by figure goes through the run's :class:`~autotune.objective.Scoring`
(:func:`score`): the throughput, or the throughput per GPU used when the space's candidates
use different numbers of GPUs. The default, ``RAW``, compares throughputs.

``autotune.tuner`` runs the loop and does the I/O; the rules on intervals are
:mod:`autotune.rules`', the search's policy here, with its unit tests in ``tests/test_decide.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from autotune.objective import RAW, Scoring, Sla
from autotune.results import COMPLETE, FAIL, PRUNED, TrialResult
from autotune.rules import best_trial, better_trial
from autotune.search_space import (
    Candidate,
    SearchSpace,
    decode_gpus,
    decode_preferred,
    encode_preferred,
    params_of,
)

GPU_SEED_COUNTS = (1, 2)  # instances per GPU the seeds of a KIND_GPU space try


def score(result: TrialResult, scoring: Scoring = RAW) -> float:
    """A trial's goodput as the objective counts it (per GPU used, where the run compares so)."""
    return scoring.score(result.goodput(), result.candidate)


def heuristic_seeds(
    space: SearchSpace, cores: int, baseline: Candidate | None = None
) -> list[dict[str, Any]]:
    """Sound first guesses after the baseline, each changing one thing at a time: the baseline
    with "many" instances (its batching kept where ``space`` holds it: a model where batching
    buys nothing is then measured with more instances and without batching, early; every seed
    lies in ``space``, the user's: :meth:`SearchSpace.nearest`), then dynamic batching at the
    largest batch size, with many instances and with one (capped by the space). Many is one
    per core for KIND_CPU, and ``GPU_SEED_COUNTS``' largest per GPU for KIND_GPU (a GPU is
    not a core: a second instance lets one copy its data while the other computes; the
    cores of the machine say nothing about it). Trial parameters (:meth:`SearchSpace.suggest`
    takes the ones that apply).

    Many before one with batching: a candidate is measured from the best one's level, and one
    that cannot win there stops (:func:`autotune.rules.find_goodput`), so the one instance
    measured after the many is settled at one level."""
    seeds: list[dict[str, Any]] = []
    if baseline is not None and baseline.kind in space.kind:
        many = seed_counts(space, baseline.kind, cores)[-1]
        if baseline.instance_count != many:  # in the space: your batching, where the space has it
            seeds.append(params_of(space.nearest(replace(baseline, instance_count=many))))
    mbs = max(space.max_batch_size)
    if mbs == 0 or True not in space.dynamic_batching:
        return seeds
    kind = space.kind[0]
    pref = "none" if "none" in space.preferred_batch_size else space.preferred_batch_size[0]
    return seeds + [
        {
            "instance_count": count,
            "kind": kind,
            "max_batch_size": mbs,
            "dynamic_batching": True,
            "preferred_batch_size": pref,
            "max_queue_delay_us": min(space.max_queue_delay_us),
            "gpus": space.gpus[0],
            "trt_fp16": False,
        }
        for count in reversed(seed_counts(space, kind, cores))
    ]


def seed_counts(space: SearchSpace, kind: str, cores: int) -> list[int]:
    """The instance counts the seeds try, fewest first: 1 and one per core for KIND_CPU, 1 and
    2 per GPU for KIND_GPU, each the space's closest choice."""
    targets = (1, cores) if kind == "KIND_CPU" else GPU_SEED_COUNTS
    return sorted({closest(space.instance_count, t) for t in targets})


def neighbours(candidate: Candidate, space: SearchSpace) -> list[Candidate]:
    """The one-step changes of ``candidate`` that the space holds: one instance more or fewer
    (per GPU for KIND_GPU), dynamic batching off (or on, with no preferred size and the
    shortest queue delay, at its max batch size and at :func:`gentlest_batch`'s), and with
    batching on, the max batch size one choice up or down (x2 or /2 in the default space), the
    queue delay one choice up or down, and each other preferred-size choice; for KIND_GPU, each
    other gpus choice and TensorRT FP16 off (or on, with the largest workspace choice). The max
    batch size of a config without dynamic batching is left alone: with requests of one batch
    it changes nothing the server does."""
    out: list[Candidate] = [
        replace(candidate, instance_count=n) for n in _steps(space.instance_count, candidate.instance_count)
    ]
    out += _batching_steps(candidate, space)
    if candidate.kind == "KIND_GPU":
        out += _gpu_steps(candidate, space)
    return [c for c in dict.fromkeys(out) if c != candidate and space.holds(c)]


def _batching_steps(candidate: Candidate, space: SearchSpace) -> list[Candidate]:
    out: list[Candidate] = []
    batching = candidate.dynamic_batching
    if batching and False in space.dynamic_batching:
        out.append(replace(candidate, dynamic_batching=False, preferred_batch_sizes=(), max_queue_delay_us=0))
    elif not batching and candidate.max_batch_size > 0 and True in space.dynamic_batching:
        pref = "none" if "none" in space.preferred_batch_size else space.preferred_batch_size[0]
        out += [
            replace(
                candidate,
                max_batch_size=mbs,
                dynamic_batching=True,
                preferred_batch_sizes=decode_preferred(pref, mbs),
                max_queue_delay_us=min(space.max_queue_delay_us),
            )
            for mbs in dict.fromkeys((candidate.max_batch_size, gentlest_batch(space)))
        ]
    if batching:
        pref = encode_preferred(candidate.preferred_batch_sizes, candidate.max_batch_size)
        for mbs in _steps(tuple(m for m in space.max_batch_size if m > 0), candidate.max_batch_size):
            sizes = decode_preferred(pref, mbs) if pref in space.preferred_batch_size else ()
            out.append(replace(candidate, max_batch_size=mbs, preferred_batch_sizes=sizes))
        out += [
            replace(candidate, max_queue_delay_us=d)
            for d in _steps(space.max_queue_delay_us, candidate.max_queue_delay_us)
        ]
        out += [
            replace(candidate, preferred_batch_sizes=decode_preferred(p, candidate.max_batch_size))
            for p in space.preferred_batch_size
            if p != pref
        ]
    return out


def gentlest_batch(space: SearchSpace) -> int:
    """The max batch size that turns batching on most gently: the space's choice next above its
    least (the least holds one request of the workload's batch at least; the next, in the
    default space's doublings, two). A config without batching keeps whatever max batch size
    it came with (the examples' 16), and batching at 16 is not batching at 2."""
    sizes = sorted(m for m in space.max_batch_size if m > 0)
    return sizes[1] if len(sizes) > 1 else sizes[0]


def _gpu_steps(candidate: Candidate, space: SearchSpace) -> list[Candidate]:
    out = [replace(candidate, gpus=decode_gpus(g)) for g in space.gpus if decode_gpus(g) != candidate.gpus]
    if candidate.trt_fp16:
        out.append(replace(candidate, trt_fp16=False, trt_workspace_mb=0))
    else:
        out.append(replace(candidate, trt_fp16=True, trt_workspace_mb=max(space.trt_workspace_mb)))
    return out


def _steps(choices: Sequence[int], value: int) -> list[int]:
    """The choices next below and next above ``value`` (those that exist)."""
    below = [c for c in choices if c < value]
    above = [c for c in choices if c > value]
    return ([max(below)] if below else []) + ([min(above)] if above else [])


def unexplored(results: Sequence[TrialResult], space: SearchSpace, scoring: Scoring = RAW) -> list[Candidate]:
    """The one-step :func:`neighbours` that no trial has tried (measured, failed or under way)
    of the incumbent, then of each config the incumbent is not better than
    (:func:`autotune.rules.better_trial`: which of a tie leads is the noise's): the search does
    not call itself converged while one is left, so that an obvious change of the best config
    (one instance more, batching off) is never missed because the sampler wandered elsewhere.
    An instance step that lost where both sides were measured (:func:`losing_steps`) is not
    taken again."""
    ranked = sorted(
        (r for r in results if r.feasible and r.candidate is not None and r.reused_from is None),
        key=lambda r: score(r, scoring),
        reverse=True,
    )
    if not ranked:
        return []
    tied = [r for r in ranked if not better_trial(ranked[0], r, scoring)]
    tried = [r.candidate for r in results if r.candidate is not None]
    lost = losing_steps(results, scoring)
    out: list[Candidate] = []
    for result in tied:
        out += _untried(result, space, [*tried, *out], lost)
    return out


def _untried(
    result: TrialResult, space: SearchSpace, tried: Sequence[Candidate], lost: set[tuple[int, int]]
) -> list[Candidate]:
    """``result``'s one-step :func:`neighbours` that no config of ``tried`` is, nor a ``lost``
    instance step (:func:`losing_steps`)."""
    assert result.candidate is not None
    here = result.candidate.instance_count
    out: list[Candidate] = []
    for c in neighbours(result.candidate, space):
        if (here, c.instance_count) not in lost and not any(equivalent(c, t) for t in (*tried, *out)):
            out.append(c)
    return out


def climb(results: Sequence[TrialResult], space: SearchSpace, scoring: Scoring = RAW) -> Candidate | None:
    """The search's next step while nothing is queued: the first untried one-step neighbour of
    the best trial (by its figure, :func:`score`; as :func:`unexplored` takes them), else None
    (the sampler proposes). A walk from the best point so far, one step at a time: each step
    measured may become the best, and the next step is taken from there."""
    best = max(
        (r for r in results if r.feasible and r.candidate is not None and r.reused_from is None),
        key=lambda r: score(r, scoring),
        default=None,
    )
    if best is None:
        return None
    tried = [r.candidate for r in results if r.candidate is not None]
    steps = _untried(best, space, tried, losing_steps(results, scoring))
    return steps[0] if steps else None


def losing_steps(results: Sequence[TrialResult], scoring: Scoring = RAW) -> set[tuple[int, int]]:
    """The instance-count steps (from, to) that lost where the search measured both sides
    without dynamic batching: the same config with ``from`` instances was better than with
    ``to`` (:func:`autotune.rules.better_trial`; or ``to`` had no feasible point).
    :func:`unexplored` does not take such a step again from another config: without batching
    what an instance more or fewer does is the model's and the machine's trade alone. With
    batching the instances share the batches out, and a loss is that batch size's."""
    return {
        (winner.instance_count, loser.instance_count)
        for (_, loser), (_, winner) in instance_losses(results, scoring)
        if not loser.dynamic_batching
    }


def instance_losses(
    results: Sequence[TrialResult], scoring: Scoring = RAW
) -> list[tuple[tuple[TrialResult, Candidate], tuple[TrialResult, Candidate]]]:
    """Every (loser, winner) pair of measured trials (each with its candidate) whose configs
    differ in their instance count alone (:func:`equivalent`) and where the winner is better
    (:func:`autotune.rules.better_trial`: :func:`losing_steps`, :func:`dominated`)."""
    done = [
        (r, r.candidate) for r in results
        if r.state == COMPLETE and r.reused_from is None and r.candidate is not None
    ]  # fmt: skip
    return [
        ((loser, mine), (winner, theirs))
        for loser, mine in done
        for winner, theirs in done
        if mine.instance_count != theirs.instance_count
        and equivalent(replace(theirs, instance_count=mine.instance_count), mine)
        and better_trial(winner, loser, scoring)
    ]


def out_of_ideas(results: Sequence[TrialResult]) -> bool:
    """Whether the sampler's latest proposal was not worth measuring (pruned: a config measured
    before, or one outside the space): in a small space it goes on proposing them, and each
    uses a trial of the budget, so the incumbent's :func:`unexplored` neighbours are measured
    next, before the budget runs out."""

    told = [r for r in results if r.state in TOLD and not r.interrupted]
    return bool(told) and max(told, key=lambda r: r.number).state == PRUNED


def in_space(baseline: Candidate, space: SearchSpace) -> Candidate:
    """The baseline as the search space can hold it: a config asking for a GPU this machine
    lacks (the space then has CPU instances only) becomes its CPU twin. The baseline trial
    still runs the config as it is (and fails, with its reason); the search tunes the twin."""
    if baseline.kind in space.kind:
        return baseline
    return replace(baseline, kind=space.kind[0], gpus=(), trt_fp16=False, trt_workspace_mb=0)


def closest(choices: Sequence[int], target: int) -> int:
    """The choice nearest ``target``; the smaller one on a tie."""
    return min(choices, key=lambda c: (abs(c - target), c))


def converged(results: Sequence[TrialResult], patience: int, scoring: Scoring = RAW) -> bool:
    """Whether the last ``patience`` configs measured (pruned ones are free and do not count,
    nor do interrupted ones) brought no goodput better than the best before them
    (:func:`autotune.rules.better_trial`: across servers)."""
    if patience < 1:
        return False
    best: TrialResult | None = None
    since = 0
    for result in sorted(results, key=lambda r: r.number):
        if result.reused_from is not None or result.interrupted or result.state not in (COMPLETE, FAIL):
            continue
        if result.feasible and (best is None or better_trial(result, best, scoring)):
            best, since = result, 0
        else:
            since += 1
    return best is not None and since >= patience


TOLD = (COMPLETE, FAIL, PRUNED)  # the states of a trial that has ended


def finished(results: Sequence[TrialResult]) -> int:
    """Trials that count against the budget: measured, pruned or failed; not interrupted ones
    (they are measured again). Reused ones count: a sampler that keeps proposing configs
    measured before has run out of ideas."""
    return sum(r.state in TOLD and not r.interrupted for r in results)


def time_left(budget_s: float | None, elapsed_s: float, finished: int) -> bool:
    """Whether another trial fits: stop when the next one would likely overrun the budget (half
    an average trial is kept for the race and the report)."""
    if budget_s is None:
        return True
    per_trial = elapsed_s / finished if finished else 0.0
    return elapsed_s + per_trial * 0.5 < budget_s


def measured_before(results: Sequence[TrialResult], candidate: Candidate) -> TrialResult | None:
    """An earlier COMPLETE trial of the same candidate, or of an :func:`equivalent` one, if any
    (not measured twice)."""
    for result in results:
        if (
            result.state == COMPLETE
            and result.candidate is not None
            and equivalent(result.candidate, candidate)
            and result.reused_from is None
        ):
            return result
    return None


def stand_in(
    results: Sequence[TrialResult],
    candidate: Candidate,
    space: SearchSpace,
    scoring: Scoring = RAW,
    baseline: bool = False,
) -> tuple[int | None, str] | None:
    """Why a proposal is not measured, and the trial that stands in for it (None: none does),
    or None when it is to be measured: it lies outside the user's ``space`` (but for
    ``baseline``: your config, or its twin on this machine, measured wherever they lie), an
    earlier trial measured it or an :func:`equivalent` config (:func:`measured_before`), or, but
    for the baseline, its instance count lost clearly (:func:`dominated`). The study is told it
    was pruned, for that reason, never that trial's figures as its own
    (:meth:`autotune.study.Study.tell_pruned`)."""
    if baseline:
        earlier = measured_before(results, candidate)
        return None if earlier is None else (earlier.number, f"same as trial {earlier.number}")
    if not space.holds(candidate):
        return None, "outside your search space (your config is measured there, nothing else)"
    earlier = measured_before(results, candidate)
    if earlier is not None:
        same = earlier.candidate == candidate
        why = "same as" if same else "without dynamic batching the server runs it as"
        return earlier.number, f"{why} trial {earlier.number}"
    found = dominated(results, candidate, scoring)
    return None if found is None else (found[0].number, found[1])


def dominated(
    results: Sequence[TrialResult], candidate: Candidate, scoring: Scoring = RAW
) -> tuple[TrialResult, str] | None:
    """A trial to stand in for ``candidate``, and why, when its instance count lost (:func:`instance_losses`)
    to another count both without dynamic batching and with it, each time against the same
    config but for the count: the loser measured with the candidate's batching (its max batch
    size first). The proposal is pruned with that reason, a free trial (the study is told no
    figures for it: :meth:`autotune.study.Study.tell_pruned`). One loss is not enough: with
    batching the instances share the batches out, and a loss is that batch size's
    (:func:`losing_steps`)."""
    n = candidate.instance_count
    lost: dict[bool, list[tuple[tuple[TrialResult, Candidate], TrialResult]]] = {False: [], True: []}
    for (loser, mine), (winner, _) in instance_losses(results, scoring):
        if mine.instance_count == n:
            lost[mine.dynamic_batching].append(((loser, mine), winner))
    if not lost[False] or not lost[True]:
        return None
    mbs = candidate.max_batch_size  # the loser nearest the candidate's max batch size stands in
    nearest = min(lost[candidate.dynamic_batching], key=lambda x: abs(x[0][1].max_batch_size - mbs))[0][0]
    ((off, _), off_by), ((on, _), on_by) = lost[False][0], lost[True][0]
    why = (
        f"{n} instance(s) lost without dynamic batching (trial {off.number} against "
        f"{off_by.number}) and with it (trial {on.number} against {on_by.number}); trial "
        f"{nearest.number} is the nearest measured"
    )
    return nearest, why


def equivalent(a: Candidate, b: Candidate) -> bool:
    """Whether two candidates make the server do the same: their :func:`canonical` forms are
    equal."""
    return canonical(a) == canonical(b)


def canonical(candidate: Candidate) -> Candidate:
    """One candidate for each class of candidates that make the server do the same:

    - without dynamic batching, a max batch size > 0 is left out (1): each request runs alone
      whatever batch the config allows (the space keeps it at least the requests' own batch);
      one mobilenet run spent 6 of its 20 trials on such twins;
    - with dynamic batching and a max batch size of 1, the preferred sizes and the queue delay
      are left out (none, 0): a batch of one request is full when it arrives, and Triton's
      batcher does not wait to fill a full batch."""
    if not candidate.dynamic_batching and candidate.max_batch_size > 0:
        return replace(candidate, max_batch_size=1)
    if candidate.dynamic_batching and candidate.max_batch_size == 1:
        return replace(candidate, preferred_batch_sizes=(), max_queue_delay_us=0)
    return candidate


def start_level(results: Sequence[TrialResult], scoring: Scoring = RAW) -> float | None:
    """Where the next goodput search starts: the best trial's level (its concurrency, or its
    request rate in an open loop), by :func:`score`; None before any trial met the SLA. What
    the search must beat is :func:`autotune.rules.incumbent`."""
    best = best_trial(results, scoring)
    return None if best is None or best.best is None else best.best.level


def headroom(sla: Sla, margin: float, candidate: Candidate | None, batching: float = 2.0) -> Sla:
    """The SLA a candidate's points and race rounds are held to: the limit less ``margin``, and
    for a config with dynamic batching less ``batching`` times it
    (:attr:`autotune.settings.RunSettings.batching_headroom`: our load generator reads a
    batching server's tail lower than perf_analyzer does; the simulator's surfaces have no
    such bias, and 1)."""
    share = batching if candidate is not None and candidate.dynamic_batching else 1.0
    return sla.tightened(margin * share)
