"""The tuner's decisions, as pure functions of what was measured (no I/O, no optuna).

- which configs to try first (:func:`heuristic_seeds`), and which obvious changes of the best
  one must be tried before the search may end (:func:`unexplored`);
- where a candidate's goodput search starts and what it must beat (:func:`incumbent`);
- whether a candidate, or an :func:`equivalent` one, was measured already (:func:`measured_before`),
  or its instance count lost with and without batching (:func:`dominated`): :func:`stand_in`;
- when the search has converged (:func:`converged`) or the time budget is spent (:func:`time_left`);
- which finalists to verify (:func:`finalists`, :func:`could_beat`), at which levels
  (:func:`verify_levels`), when a level is verified (:func:`level_settled`, :func:`verified_level`)
  and which repeat is measured again (:func:`client_decided`);
- the winner (:func:`choose_winner`).

Every comparison of goodputs goes through the run's :class:`~autotune.objective.Scoring`
(:func:`score`): the throughput, or the throughput per GPU used when the space's candidates
use different numbers of GPUs. The default, ``RAW``, compares throughputs.

``autotune.tuner`` runs the loop and does the I/O; every rule it follows is here, with its
unit tests in ``tests/test_decide.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from autotune.objective import RAW, Scoring, Sla
from autotune.points import RULES_INTERVALS, RULES_STABILITY, Point
from autotune.results import COMPLETE, FAIL, PRUNED, TrialResult, Verification
from autotune.rules import better_trial, race_winner
from autotune.search_space import (
    Candidate,
    SearchSpace,
    decode_gpus,
    decode_preferred,
    encode_preferred,
    params_of,
)

# A goodput this much better than the best so far counts as progress, not noise: short screening
# windows differ by 5-10% on a busy two-core machine (cnn: 0.5 s windows). At 5%, one cnn run
# went on for 20 trials on gains of 5.3% and 7.7% that re-measurement could not tell apart.
IMPROVEMENT = 0.08
TIE = 0.02  # verified throughputs this close are a tie: the lower latency wins
CLEAR_LOSS = 0.25  # an instance count this far below another's, with and without batching: dominated()
GPU_SEED_COUNTS = (1, 2)  # instances per GPU the seeds of a KIND_GPU space try


def score(result: TrialResult, scoring: Scoring = RAW) -> float:
    """A trial's goodput as the objective counts it (per GPU used, where the run compares so)."""
    return scoring.score(result.goodput(), result.candidate)


def ahead(
    a: TrialResult, b: TrialResult, ratio: float, scoring: Scoring = RAW, rules: str = RULES_STABILITY
) -> bool:
    """Whether ``a``'s goodput is ahead of ``b``'s: by more than ``ratio`` times it, or under
    :data:`RULES_INTERVALS` better across servers (:func:`autotune.rules.better_trial`)."""
    if rules == RULES_INTERVALS:
        return better_trial(a, b, scoring)
    return score(a, scoring) > score(b, scoring) * ratio


def verified_score(v: Verification, results: Sequence[TrialResult], scoring: Scoring = RAW) -> float:
    """A verification's median throughput as the objective counts it (its trial's GPUs)."""
    trial = _trial_of(v, results)
    return scoring.score(v.median_throughput, trial.candidate if trial is not None else None)


def _trial_of(v: Verification, results: Sequence[TrialResult]) -> TrialResult | None:
    return next((r for r in results if r.number == v.trial), None)


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
    that breaks the SLA there below the best's goodput stops (:func:`autotune.measure.find_goodput`).
    One instance first became the best so far on the embedder and had its knee searched, in
    14-25 s of each run's 75-93 s of trials, for half the goodput the two instances measured
    next (benchmarks/experiments/run_timeline.py on the runs of
    benchmarks/results/vs_model_analyzer-20261126-1424.txt); after them it is settled at one level."""
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
    it came with (the examples' 16), and batching at 16 is not batching at 2: mobilenet's 2
    instances served 525 infer/s without batching, 585 with max batch 2, and under the SLA not
    569 with max batch 16; 3 of 5 runs stopped on 2 instances without batching, having tried
    batching at 16 only (benchmarks/README.md, 2026-11-25 18:34)."""
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


def unexplored(
    results: Sequence[TrialResult], space: SearchSpace, scoring: Scoring = RAW, rules: str = RULES_STABILITY
) -> list[Candidate]:
    """The one-step :func:`neighbours` that no trial has tried (measured, failed or under way)
    of the incumbent, then of each config that measured within ``IMPROVEMENT`` of it: the
    search does not call itself converged while one is left, so that an obvious change of the
    best config (one instance more, batching off) is never missed because the sampler wandered
    elsewhere. The search counts a config within ``IMPROVEMENT`` as no better, so which of
    such a tie is the incumbent is the screening's noise: a mobilenet run stopped on 2
    instances with max batch 16 and batching (458 infer/s) without trying max batch 2, the
    gentle batching of 2 instances without batching (442), where the best known config is
    (benchmarks/README.md, 2026-11-25 21:45). An instance step that lost where both sides were
    measured (:func:`losing_steps`) is not taken again."""
    ranked = sorted(
        (r for r in results if r.feasible and r.candidate is not None and r.reused_from is None),
        key=lambda r: score(r, scoring),
        reverse=True,
    )
    if not ranked:
        return []
    tied = [r for r in ranked if not ahead(ranked[0], r, 1 + IMPROVEMENT, scoring, rules)]
    tried = [r.candidate for r in results if r.candidate is not None]
    lost = losing_steps(results, scoring, rules)
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


def climb(
    results: Sequence[TrialResult], space: SearchSpace, scoring: Scoring = RAW, rules: str = RULES_STABILITY
) -> Candidate | None:
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
    steps = _untried(best, space, tried, losing_steps(results, scoring, rules))
    return steps[0] if steps else None


def losing_steps(
    results: Sequence[TrialResult], scoring: Scoring = RAW, rules: str = RULES_STABILITY
) -> set[tuple[int, int]]:
    """The instance-count steps (from, to) that lost where the search measured both sides
    without dynamic batching: a config with ``to`` instances scored below the same config with
    ``from`` by more than ``IMPROVEMENT`` (or had no feasible point). :func:`unexplored` does
    not take such a step again from another config: the seeds measure the baseline with one
    instance per core, and without batching what an instance more or fewer does is the model's
    and the machine's trade alone. On these two cores every winner of every run had 2 instances,
    and the 1-instance neighbours of the best config and of its ties took 4 of cnn's 12 configs
    in one run (4.4 s each, each broke the SLA at its first point: 2026-11-26 03:49). With
    batching the instances share the batches out, and a loss is that batch size's: recommender
    (which waits 4 ms a request of a batch) pruned 4 instances at max batch 16 against 3 (583
    infer/s), where 4 at max batch 2 was its best config (809); a run whose 4 instances at max
    batch 4 lost (to a disturbed pass) never measured 4 instances without batching, nor its
    best config, and scored 0.66 of it (benchmarks/results/vs_model_analyzer-20261126-0659.txt)."""
    return {
        (winner.instance_count, loser.instance_count)
        for (_, loser), (_, winner) in instance_losses(results, 1 + IMPROVEMENT, scoring, rules)
        if not loser.dynamic_batching
    }


def instance_losses(
    results: Sequence[TrialResult], by: float, scoring: Scoring = RAW, rules: str = RULES_STABILITY
) -> list[tuple[tuple[TrialResult, Candidate], tuple[TrialResult, Candidate]]]:
    """Every (loser, winner) pair of measured trials (each with its candidate) whose configs
    differ in their instance count alone (:func:`equivalent`) and where the winner is
    :func:`ahead` of the loser by ``by`` (:func:`losing_steps`, :func:`dominated`)."""
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
        and ahead(winner, loser, by, scoring, rules)
    ]


def out_of_ideas(results: Sequence[TrialResult]) -> bool:
    """Whether the sampler's latest proposal was not worth measuring (pruned: a config measured
    before, or one outside the space): in
    a small space it goes on proposing them, and each uses a trial of the budget, so the
    incumbent's :func:`unexplored` neighbours are measured next, before the budget runs out
    (mobilenet runs spent 11 and 14 of their 20 trials on repeats and never tried 2 instances
    with max batch 4: benchmarks/results/vs_model_analyzer-20261124-2244.txt)."""
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


def converged(
    results: Sequence[TrialResult], patience: int, scoring: Scoring = RAW, rules: str = RULES_STABILITY
) -> bool:
    """Whether the last ``patience`` configs measured (pruned ones are free and do not count,
    nor do interrupted ones) brought no goodput :func:`ahead` of the best before them (by
    ``IMPROVEMENT``, or under :data:`RULES_INTERVALS` better across servers)."""
    if patience < 1:
        return False
    best: TrialResult | None = None
    since = 0
    for result in sorted(results, key=lambda r: r.number):
        if result.reused_from is not None or result.interrupted or result.state not in (COMPLETE, FAIL):
            continue
        if result.feasible and (best is None or ahead(result, best, 1 + IMPROVEMENT, scoring, rules)):
            best, since = result, 0
        else:
            since += 1
    return best is not None and since >= patience


TOLD = (COMPLETE, FAIL, PRUNED)  # the states of a trial that has ended


def finished(results: Sequence[TrialResult]) -> int:
    """Trials that count against the budget: measured, pruned or failed; not interrupted ones
    (they are measured again). Reused ones count: a sampler that keeps proposing configs
    measured before has run out of ideas. Not counting them was tried: runs went on to measure
    up to every config of a 12-config space, 0.36-0.69 of Model Analyzer brute's wall time on
    embedder and bertQA (benchmarks/results/vs_model_analyzer-20261124-1843.txt)."""
    return sum(r.state in TOLD and not r.interrupted for r in results)


def time_left(budget_s: float | None, elapsed_s: float, finished: int) -> bool:
    """Whether another trial fits: stop when the next one would likely overrun the budget (half
    an average trial is kept for verification and the report)."""
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
    rules: str = RULES_STABILITY,
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
    found = dominated(results, candidate, scoring, rules)
    return None if found is None else (found[0].number, found[1])


def dominated(
    results: Sequence[TrialResult], candidate: Candidate, scoring: Scoring = RAW, rules: str = RULES_STABILITY
) -> tuple[TrialResult, str] | None:
    """A trial to stand in for ``candidate``, and why, when its instance count lost clearly (a
    goodput under ``1 - CLEAR_LOSS`` of the other's, or no feasible point) to another count both
    without dynamic batching and with it, each time against the same config but for the count:
    the loser measured with the candidate's batching (its max batch size first). Such a
    proposal is told that trial's figures instead of a server's: a free trial, as a reused one
    is. On these two cores the sampler went on proposing 1-instance configs after both seeds of
    one instance had lost to two: in 16 of 25 runs of 2026-11-26 16:38-17:37, 4-11 s each, none
    within a third of the best (benchmarks/README.md). One loss is not enough: with batching
    the instances share the batches out, and a loss is that batch size's (:func:`losing_steps`)."""
    n = candidate.instance_count
    lost: dict[bool, list[tuple[tuple[TrialResult, Candidate], TrialResult]]] = {False: [], True: []}
    for (loser, mine), (winner, _) in instance_losses(results, 1 / (1 - CLEAR_LOSS), scoring, rules):
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


def incumbent(
    results: Sequence[TrialResult], scoring: Scoring = RAW, candidate: Candidate | None = None
) -> tuple[float | None, float]:
    """Where the next goodput search starts (the best candidate's level: its concurrency, or
    its request rate in an open loop) and the throughput ``candidate`` must beat to be worth
    refining (see :func:`autotune.measure.find_goodput`): the best :func:`score`, in the
    candidate's own throughput (per GPU: times the GPUs it uses)."""
    best = max((r for r in results if r.feasible), key=lambda r: score(r, scoring), default=None)
    if best is None or best.best is None:
        return None, 0.0
    return best.best.level, score(best, scoring) * scoring.share(candidate)


def finalists(results: Sequence[TrialResult], count: int, scoring: Scoring = RAW) -> list[TrialResult]:
    """The contenders, best first: the top ``count`` feasible, measured trials by screening
    goodput (:func:`score`). Whether one after the first is verified is :func:`could_beat`'s
    call, against what the verifications before it found, not against the first's screening
    figure: a mobilenet run screened 2 instances without batching at 621 infer/s, verified it
    at 498, and never verified max batch 2 with batching, screened at 550 (under 90% of 621, the
    cut there was then), the best config known (benchmarks/README.md, 2026-11-25 21:45)."""
    ranked = sorted(
        (r for r in results if r.feasible and r.reused_from is None),
        key=lambda r: score(r, scoring),
        reverse=True,
    )
    return ranked[:count]


def could_beat(
    result: TrialResult,
    verified: Sequence[Verification],
    scoring: Scoring = RAW,
    results: Sequence[TrialResult] = (),
) -> bool:
    """Whether a finalist is worth verifying: yes unless a verified one met the SLA in every
    repeat at a median throughput that this finalist's screening goodput does not clearly
    (by ``IMPROVEMENT``) exceed. Screening figures are the noisy maxima of short windows, so
    a finalist within that margin would be chosen by noise, at the price of a server and
    several windows. Per GPU (``scoring``), each side counts its own GPUs (``results``: the
    verified trials', to know their candidates). A verified one that passed only at a level
    below its search's operating point (:func:`verify_levels`' fallback) has no margin: its
    screening figure proved optimistic, so any finalist above its verified median is worth a
    look (a bertQA finalist screened at 160 infer/s passed at 143 one level down; the other
    finalist, screened at 152, was not verified, and re-measured 6% above the winner)."""
    passed = [v for v in verified if v.passed]
    return all(
        score(result, scoring)
        > verified_score(v, results, scoring) * (1 if fell_back(v, results) else 1 + IMPROVEMENT)
        for v in passed
    )


def out_of_reach(
    points: Sequence[Point],
    repeats: int,
    result: TrialResult,
    verified: Sequence[Verification],
    scoring: Scoring = RAW,
    results: Sequence[TrialResult] = (),
) -> bool:
    """Whether a finalist's verification can stop: whatever its repeats still to come measure,
    its median throughput (:attr:`Verification.median_throughput`, the middle of ``repeats``)
    stays below a passed verification's by more than ``TIE``, so it cannot win
    (:func:`choose_winner`), nor can its levels below. Known once more than half the repeats
    are in: the median is then at most the lowest of the upper ones measured (of 3 repeats, the
    higher of the first two). A second finalist verified only to lose so cost a whole level of
    repeats, or two with its fallback (cnn, 2026-11-25 21:45: 15 s for a 1-instance config
    verified far below the 2-instance winner)."""
    passed = [v for v in verified if v.passed]
    middle = repeats // 2
    if not passed or len(points) <= middle:
        return False
    bound = sorted(p.throughput for p in points)[middle]
    top = max(verified_score(v, results, scoring) for v in passed)
    return scoring.score(bound, result.candidate) < top * (1 - TIE)


def fell_back(v: Verification, results: Sequence[TrialResult]) -> bool:
    """Whether ``v`` was measured below its trial's operating point (unknown trial: no)."""
    trial = _trial_of(v, results)
    return trial is not None and trial.best is not None and v.level < trial.best.level


def verify_levels(result: TrialResult) -> list[float]:
    """The levels (concurrencies, or request rates) to verify a finalist at: its operating
    point, then (should a repeat break the SLA there) the level halfway down to the next lower
    level it measured, then that one (none measured: :func:`_steps_down`). Halfway first: a
    mobilenet finalist that broke the SLA at concurrency 10 fell back to the 7 its search had
    measured, 30% less throughput, where 8 or 9 were never tried."""
    assert result.best is not None and result.measurement is not None
    top = result.best.level
    lower = [p.level for p in result.measurement.points if p.level < top]
    if not lower:
        return [top, *_steps_down(top, bool(result.best.concurrency))]
    below = max(lower)
    if result.best.concurrency:
        mid = float((int(top) + int(below)) // 2)
    else:  # a rate: the geometric middle, to three significant digits as the rate search has them
        mid = float(f"{(top * below) ** 0.5:.3g}")
    return [top, *([mid] if below < mid < top else []), below]


def headroom(sla: Sla, margin: float, candidate: Candidate | None, batching: float = 2.0) -> Sla:
    """The SLA a finalist's every verification repeat must keep (:func:`level_settled`): the
    search's (the limit less ``margin``), and for a config with dynamic batching, ``batching``
    times the margin (twice: :attr:`autotune.settings.RunSettings.batching_headroom`; the
    simulator's surfaces have no such bias, and 1). There the two load generators disagree most
    on the tail: perf_analyzer's median p99 of a batching winner was 0.90-1.22x ours (0.78-1.13x
    without batching), and of the 14 batching winners whose slowest verification repeat lay over
    80% of the limit, 5 met the SLA in fewer than 9 of 10 of perf_analyzer's repeats; of the 14
    without batching, none did (nor of the 14 batching ones at or under 80%, but for 2). (Every
    vs_model_analyzer result of 2026-11-25 that kept its verifications, 16:28 to 21:45.) The
    search keeps the same headroom (:meth:`autotune.tuner.Trials.search_sla`): searched at the
    single margin, mobilenet's batching finalists were ranked at concurrency 6 and verified at 4
    (2026-11-25 23:30), a verification level spent in vain and a ranking its verification
    overturned."""
    share = batching if candidate is not None and candidate.dynamic_batching else 1.0
    return sla.tightened(margin * share)


def level_settled(points: Sequence[Point], repeats: int, sla: Sla, headroom: Sla) -> bool:
    """Whether a finalist's verification may stop at this level: all ``repeats`` met the SLA and
    each one's latency (at the SLA's percentile) is within ``headroom`` (:func:`headroom`: the
    SLA tightened by ``--margin``, twice with dynamic batching). Winners whose median p99
    perf_analyzer re-measured at 90-97% of the limit met the SLA in 9 or 10 of 10 repeats only
    half the time (11 of 22, in every benchmarks/results/vs_model_analyzer-*.json of 2026-11-22
    to 25), at 90% or below 133 of 140 times. Asking the headroom of the median only still let
    7 of 28 winners through that failed perf_analyzer's 9 in 10 (2026-11-25 14:49 and 15:43);
    asked of every repeat it would have sent 5 of them one level down, and 1 of the other 21
    (benchmarks/results/headroom_replay-20261125.txt). One that lacks it is verified one level
    down too."""
    return _met_every(points, repeats, sla) and not short_of_headroom(points, headroom)


def short_of_headroom(points: Sequence[Point], headroom: Sla) -> bool:
    """Whether any of a level's repeats so far is over ``headroom`` (at its percentile): the
    level cannot settle (:func:`level_settled`), so its verification may go one level down
    without the rest (a repeat is 3 or more windows of twice the search's length)."""
    return any(p.latency_ms(headroom.percentile) > headroom.limit_ms for p in points)


def client_decided(point: Point, headroom: Sla) -> bool:
    """Whether a verification repeat over ``headroom`` (at its percentile) may owe its tail to
    the load generator rather than the server: its loop stalled (:attr:`Point.client_stalls`:
    woken over 15 ms late, its thread waiting for a core) often enough that the answers in
    flight at those moments, each stall delaying all of them at once, make up the percentile's
    tail (1% of its requests for a p99). In flight: Little's law, requests per second times the
    mean latency. Such a repeat is measured once more (:func:`autotune.finals.verify`):
    perf_analyzer reads each answer on a thread of its own, and does not see them. At 26
    embedder clients our p99 followed our stalls (15 in 6.4 s: 56 ms; 2: 33 ms), where
    perf_analyzer read 33-41 ms on the same server (benchmarks/results/client_stalls-20261126.txt);
    embedder verifications fell back from 21 to 14 clients, and 32 to 26, on such readings."""
    over = point.latency_ms(headroom.percentile) > headroom.limit_ms
    return over and stalls_could_make_tail(point, headroom.percentile)


def stalls_could_make_tail(point: Point, percentile: int) -> bool:
    """Whether the answers held at once by the point's client stalls (stalls x answers in
    flight) reach ``percentile``'s tail share of its requests (see :func:`client_decided`)."""
    if not point.client_stalls or point.requests <= 0 or point.duration_s <= 0:
        return False
    in_flight = point.requests / point.duration_s * point.avg_ms / 1000
    return point.client_stalls * in_flight >= point.requests * (100 - percentile) / 100


def verified_level(
    tried: Sequence[Sequence[Point]], repeats: int, sla: Sla, out_of_reach: bool = False
) -> int:
    """Which of the levels verified (in :func:`verify_levels`' order, highest first) the
    verification stands on: the lowest that met the SLA in every repeat (the last, when it
    settled: :func:`level_settled`), else the last one tried. One stopped ``out_of_reach``
    (:func:`out_of_reach`) stands on the last one tried, where it stopped: not on a level above
    that met the SLA without the headroom and so never settled (a mobilenet finalist out of
    reach at concurrency 7 stood on 9 so, won, and met perf_analyzer's SLA 8 times in 10)."""
    if out_of_reach:
        return len(tried) - 1
    passed = [i for i, points in enumerate(tried) if _met_every(points, repeats, sla)]
    return passed[-1] if passed else len(tried) - 1


def _met_every(points: Sequence[Point], repeats: int, sla: Sla) -> bool:
    """All ``repeats`` were measured and each met the SLA."""
    return len(points) >= repeats and all(sla.met_by(p) for p in points)


def _steps_down(top: float, concurrency: bool) -> list[float]:
    """Where to fall back to when the search measured nothing below its operating point (it
    started there, from the incumbent's level): seven eighths of it, then three quarters, then
    half. An embedder finalist measured only at concurrency 32 broke the SLA there and had
    nowhere to go, while another config won at 24; with three quarters first, two embedder
    finalists whose repeats at 32 and 25 had lacked the headroom by a few milliseconds settled at
    24 and 18, where perf_analyzer re-measured 0.77 and 0.74 of the best known goodput
    (2026-11-25 18:34): one slow repeat cost a quarter of the throughput."""
    if concurrency:
        steps = {int(top) * 7 // 8, int(top) * 3 // 4, int(top) // 2}
        return [float(c) for c in sorted(steps, reverse=True) if 1 <= c < top]
    return [float(f"{top * f:.3g}") for f in (0.875, 0.75, 0.5)]


def choose_winner(
    results: Sequence[TrialResult],
    verifications: Sequence[Verification],
    percentile: int = 95,
    scoring: Scoring = RAW,
    sla: Sla | None = None,
    rules: str = RULES_STABILITY,
) -> int | None:
    """Verified finalists that met the SLA in every repeat (else in most), by median
    throughput (per GPU where ``scoring`` says so: :func:`verified_score`), a tie going to the
    lower latency (more headroom under the SLA); else the best feasible trial not verified, by
    its search measurement (:func:`score`). A finalist that could not
    beat a passed one by ``IMPROVEMENT`` is not verified (:func:`could_beat`), so such
    near-ties are settled by the search ranking."""
    if rules == RULES_INTERVALS and sla is not None:
        return race_winner(verifications, results, sla, scoring)
    every = [v for v in verifications if v.passed]
    most = [v for v in verifications if v.sla_met * 2 > len(v.points)]
    for passing in (every, most):
        if passing:
            top = max(verified_score(v, results, scoring) for v in passing)
            tied = [v for v in passing if verified_score(v, results, scoring) >= top * (1 - TIE)]
            return min(tied, key=lambda v: v.median_latency_ms(percentile)).trial
    verified = {v.trial for v in verifications}
    feasible = [r for r in results if r.feasible and r.reused_from is None and r.number not in verified]
    if feasible:
        return max(feasible, key=lambda r: score(r, scoring)).number
    return None
