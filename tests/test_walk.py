"""The tuner's pure decisions (autotune.search.walk): seeds, neighbours, the walk, convergence, the
budget, what stands in for a proposal, where a search starts and the SLA it is held to (no server).

Whether one trial is better than another is :func:`autotune.search.ranking.better_trial`'s verdict on
intervals. The helpers' points have 3 windows 2% apart, so each goodput's error across servers
is known: one is better than another when it is about 14.3% higher or more. The figures below
are either clearly tied (within 8%) or clearly apart (20% or more)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.objective import Scoring, Sla
from autotune.points import Measurement, Point
from autotune.results import COMPLETE, FAIL, PRUNED, RUNNING, TrialResult
from autotune.search import level_search, racing, ranking
from autotune.search.walk import (
    converged,
    dominated,
    equivalent,
    finished,
    gentlest_batch,
    heuristic_seeds,
    in_flight,
    losing_steps,
    neighbours,
    out_of_ideas,
    stand_in,
    start_level,
    steps_ahead,
    steps_beyond,
    time_left,
    unexplored,
)
from autotune.search_space import Candidate, params_of, parse_search_space

SPREAD = 0.02  # the windows' spread about a point's figures (relative)


def point(concurrency: int, throughput: float, p95: float = 12.0) -> Point:
    """A point measured in 3 windows, ``SPREAD`` apart about its throughput and its p95."""
    steps = (-SPREAD, 0.0, SPREAD)
    return Point(
        concurrency, 0.0, throughput, 10.0, 9.0, 11.0, p95, 13.0, 100, 0, 1.0, 3, True,
        window_throughputs=tuple(throughput * (1 + s) for s in steps),
        window_latencies_ms=tuple(p95 * (1 + s) for s in steps), window_percentile=95,
    )  # fmt: skip


def measured(
    number: int,
    goodput: float,
    reused_from: int | None = None,
    candidate: Candidate | None = None,
    level: int = 4,
) -> TrialResult:
    """A measured trial, its operating point at ``level`` (a goodput of 0: none met the SLA);
    with ``reused_from``, a pruned one (not measured: no figures of its own)."""
    p = point(level, goodput)
    if reused_from is not None:
        return TrialResult(
            number=number, state=PRUNED, candidate=candidate, params={}, baseline=False,
            measurement=None, reused_from=reused_from, reason=f"same as trial {reused_from}",
        )  # fmt: skip
    return TrialResult(
        number=number, state=COMPLETE, candidate=candidate, params={}, baseline=False,
        measurement=Measurement((p,), p if goodput else None),
    )  # fmt: skip


def failed(number: int, reason: str = "server exited", interrupted: bool = False) -> TrialResult:
    return TrialResult(
        number=number, state=FAIL, candidate=None, params={}, baseline=False, measurement=None, reason=reason,
        interrupted=interrupted,
    )  # fmt: skip


def test_the_helpers_figures_are_tied_within_8_percent_and_apart_from_20() -> None:
    """The verdicts the tests below rely on (RAW and per GPU alike: a share scales both)."""
    assert not ranking.better_trial(measured(0, 108.0), measured(1, 100.0))
    assert not ranking.better_trial(measured(0, 100.0), measured(1, 108.0))
    assert ranking.better_trial(measured(0, 120.0), measured(1, 100.0))
    assert not ranking.better_trial(measured(0, 100.0), measured(1, 120.0))
    assert ranking.better_trial(measured(0, 1.0), measured(1, 0.0))  # none met the SLA: any is better


def test_converged_after_patience_configs_without_progress() -> None:
    """Converged: the last ``patience`` configs measured (failed ones too) brought none better
    than the best before them (ranking.better_trial); a tie with the best is no progress."""
    results = [measured(0, 100.0), measured(1, 150.0), measured(2, 157.0), failed(3), measured(4, 0.0)]
    assert not converged(results, 4)  # 3 since the best (157 is tied with 150)
    assert converged([*results, measured(5, 149.0)], 4)
    assert not converged([*results, measured(5, 180.0)], 4)  # better than 150: progress resets the count
    assert not converged([*results, measured(5, 149.0)], 0)  # 0: never


def test_reused_and_interrupted_trials_do_not_count() -> None:
    stop = "the tuner was stopped during this trial"
    results = [measured(0, 100.0), measured(1, 90.0, reused_from=0), failed(2, stop, interrupted=True)]
    results += [measured(3, 90.0, reused_from=0), failed(4, stop, interrupted=True), measured(5, 95.0)]
    assert not converged(results, 2)  # only 0 and 5 were measured
    assert converged([*results, measured(6, 80.0)], 2)
    assert not converged([failed(0), failed(1), failed(2)], 2)  # nothing feasible yet: go on


def test_a_crash_counts_as_a_failed_config_not_an_interruption() -> None:
    """Interruption is the field, never the reason's text: a crash whose message happens to
    start with "interrupted" is a failed config like any other."""
    crash = failed(1, "interrupted system call (EINTR) in the load generator")
    results = [measured(0, 100.0), crash, measured(2, 90.0)]
    assert converged(results, 2)  # the crash is the first of two configs without progress
    assert finished(results) == 3


def test_only_finished_trials_that_were_not_interrupted_use_the_budget() -> None:
    running = replace(failed(3), state=RUNNING)
    results = [measured(0, 1.0), failed(1), failed(2, interrupted=True), running]
    results.append(measured(4, 2.0, reused_from=0))
    assert finished(results) == 3
    assert in_flight(results) == 1  # the running one: it counts against --max-trials as asked


def test_the_time_budget_keeps_half_a_trial_in_hand() -> None:
    assert time_left(None, 10_000.0, 3)  # no budget
    assert time_left(60.0, 0.0, 0)
    assert time_left(60.0, 40.0, 4)  # 10 s a trial: 40 + 5 < 60
    assert not time_left(60.0, 56.0, 4)  # 56 + 7 > 60
    assert not time_left(60.0, 40.0, 4, reserve_s=16.0)  # the race's time is kept too: 40 + 5 + 16
    assert not time_left(60.0, 40.0, 8, reserve_s=12.0, at_once=4)  # four at once: 20 s a trial, 40 + 10 + 12
    assert time_left(60.0, 40.0, 8, reserve_s=12.0)  # one at a time: 5 s a trial, 40 + 2.5 + 12


def test_the_race_and_the_check_are_given_the_time_this_runs_trials_took() -> None:
    """A server costs the trials' median overhead (beyond their points' windows and warm-ups and the
    output check); a point the mean of their windows (times add up) and its warm-up, each racer's
    the first on its model. A round of three racers on one server or each on its own."""
    from autotune.search.walk import after_search_s

    def timed(number: int, duration: float, windows: tuple[float, ...], check: float = 0.0) -> TrialResult:
        t = measured(number, 100.0)
        assert t.measurement is not None
        points = tuple(replace(t.measurement.points[0], duration_s=w) for w in windows)
        m = replace(t.measurement, points=points, output_check_s=check)
        return replace(t, duration_s=duration, measurement=m)

    # warm-ups 0.5 first and 0.3 each after: overheads 3, 3 and 5 (median 3); windows' mean 19 / 8
    trials = [
        timed(0, 10.6, (2.0, 2.0, 2.0), check=0.5),
        timed(1, 7.8, (2.0, 2.0)),
        timed(2, 15.1, (1.0, 1.0, 7.0)),
    ]
    start, point = 3.0, 19 / 8
    first = point + 0.5
    assert after_search_s(trials, 3, 2, True, 0, 0.5) == pytest.approx(2 * (start + 3 * first))
    assert after_search_s(trials, 3, 2, False, 0, 0.5) == pytest.approx(2 * 3 * (start + first))
    check = start + 4 * point + 0.5 + 3 * 0.3  # a server and four points
    assert after_search_s(trials, 3, 2, True, 4, 0.5) == pytest.approx(2 * (start + 3 * first) + check)
    assert after_search_s([], 3, 2, True, 4) == 0.0  # nothing measured yet: nothing known


def test_the_next_search_starts_at_the_best_feasible_configs_level() -> None:
    """The next goodput search starts at the level of the trial with the best goodput (its
    figure); before any trial met the SLA, nowhere in particular (None)."""
    assert start_level([]) is None
    assert start_level([failed(0), measured(1, 0.0)]) is None  # nothing met the SLA yet
    results = [measured(0, 100.0, level=2), failed(1), measured(2, 150.0, level=8), measured(3, 145.0)]
    assert start_level(results) == 8  # the best figure's, tied or not


def measured_before(results: list[TrialResult], candidate: Candidate) -> int | None:
    """The trial ``stand_in`` reuses for the baseline (only a trial measured before stands in)."""
    found = stand_in(results, candidate, parse_search_space(DEFAULT_LIKE), baseline=True)
    return None if found is None else found[0]


def test_a_candidate_measured_before_is_reused_not_measured_again() -> None:
    a = Candidate(1, "KIND_CPU", (), 8, True, (), 0, False)
    b = replace(a, instance_count=2)
    results = [failed(0), measured(1, 100.0, candidate=a), measured(2, 100.0, reused_from=1, candidate=a)]
    assert measured_before(results, a) == 1  # the measured one, not its reuse
    assert measured_before(results, b) is None


def test_a_twin_of_a_trial_in_flight_costs_the_budget_nothing_up_to_one_per_trial_that_counts() -> None:
    """Several at once: a proposal pruned as the twin of a trial still in flight is not a
    proposal of its own. It counts only beyond one for each trial that counts, so a sampler that
    proposes nothing but twins still ends the search."""
    twin = replace(measured(2, 90.0, reused_from=0), twin_in_flight=True)
    results = [measured(0, 100.0), measured(1, 90.0), twin]
    assert finished(results) == 2
    twins = [replace(twin, number=n) for n in range(2, 6)]
    assert finished([measured(0, 100.0), measured(1, 90.0), *twins]) == 4


def test_a_candidate_in_flight_stands_in_for_its_twin_but_not_for_your_config() -> None:
    """Several trials at once: a proposal of a config another trial measures now is not measured
    twice; your own config is measured wherever it lies."""
    a = Candidate(1, "KIND_CPU", (), 8, True, (), 0, False)
    flying = replace(measured(1, 0.0, candidate=a), state=RUNNING, measurement=None)
    space = parse_search_space(DEFAULT_LIKE)
    assert stand_in([failed(0), flying], a, space) == (1, "same as trial 1, measured now")
    assert stand_in([failed(0), flying], replace(a, instance_count=2), space) is None
    assert measured_before([failed(0), flying], a) is None


def test_without_batching_the_max_batch_size_changes_nothing_and_is_not_measured_twice() -> None:
    off = Candidate(2, "KIND_CPU", (), 16, False, (), 0, False)
    on = replace(off, dynamic_batching=True)
    results = [measured(0, 100.0, candidate=off), measured(1, 120.0, candidate=on)]
    assert measured_before(results, replace(off, max_batch_size=4)) == 0
    assert measured_before(results, replace(on, max_batch_size=4)) is None  # the batcher's limit matters
    assert measured_before(results, replace(off, instance_count=3)) is None
    assert equivalent(off, replace(off, max_batch_size=1)) and not equivalent(
        off, replace(off, max_batch_size=0)
    )
    one = replace(on, max_batch_size=1)  # a batch of one is full at once: no delay, no preference
    assert equivalent(one, replace(one, preferred_batch_sizes=(1,), max_queue_delay_us=5000))
    assert not equivalent(one, replace(one, dynamic_batching=False))  # the batcher's queue remains
    two = replace(on, max_batch_size=2)
    assert not equivalent(two, replace(two, max_queue_delay_us=100))
    space = parse_search_space(DEFAULT_LIKE)
    best_on = [measured(0, 100.0, candidate=off), measured(1, 150.0, candidate=replace(on, max_batch_size=4))]
    assert replace(on, max_batch_size=4, dynamic_batching=False) not in unexplored(
        best_on, space
    )  # off: tried


def test_seeds_turn_batching_on_at_the_largest_batch_with_one_instance_per_core_then_one() -> None:
    space = parse_search_space(
        {
            "instance_group": {"count": {"min": 1, "max": 4}},
            "max_batch_size": [1, 8, 16],
            "dynamic_batching": {"enabled": [True, False]},
        }
    )
    seeds = heuristic_seeds(space, cores=2)
    assert [s["instance_count"] for s in seeds] == [2, 1]  # many first: one is then measured from their level
    assert all(s["dynamic_batching"] and s["max_batch_size"] == 16 for s in seeds)
    assert [s["instance_count"] for s in heuristic_seeds(space, cores=1)] == [1]  # one core: one seed
    assert [s["instance_count"] for s in heuristic_seeds(space, cores=16)] == [4, 1]  # capped by the space
    no_batching = parse_search_space({"max_batch_size": [0]})
    assert heuristic_seeds(no_batching, cores=2) == []


def test_the_first_seed_changes_only_the_baselines_instance_count() -> None:
    space = parse_search_space(
        {
            "instance_group": {"count": {"min": 1, "max": 4}},
            "max_batch_size": [1, 8, 16],
            "dynamic_batching": {"enabled": [True, False]},
        }
    )
    baseline = Candidate(1, "KIND_CPU", (), 16, False, (), 0, False)  # the examples' committed config
    seeds = heuristic_seeds(space, cores=2, baseline=baseline)
    assert seeds[0] == params_of(replace(baseline, instance_count=2))  # batching still off
    assert [(s["instance_count"], s["dynamic_batching"]) for s in seeds[1:]] == [(2, True), (1, True)]
    per_core = replace(baseline, instance_count=2)  # a baseline with one instance per core already
    assert [s["dynamic_batching"] for s in heuristic_seeds(space, cores=2, baseline=per_core)] == [True, True]
    gpu = replace(baseline, kind="KIND_GPU", gpus=(0,))  # not in a CPU-only space: no seed from it
    assert len(heuristic_seeds(space, cores=2, baseline=gpu)) == 2


def test_every_seed_lies_in_the_users_space() -> None:
    """A space allowing only dynamic batching, and a baseline without it: the first seed (your
    config with one instance per core) batches too, at your max batch size where the space has it."""
    space = parse_search_space(
        {"instance_group": {"count": {"min": 1, "max": 4}}, "max_batch_size": [4, 16],
         "dynamic_batching": {"enabled": [True]}}
    )  # fmt: skip
    baseline = Candidate(1, "KIND_CPU", (), 16, False, (), 0, False)
    seeds = heuristic_seeds(space, cores=2, baseline=baseline)
    assert len(seeds) == 3 and all(s["dynamic_batching"] for s in seeds)
    assert seeds[0] == params_of(replace(baseline, instance_count=2, dynamic_batching=True))
    odd = replace(baseline, max_batch_size=12, instance_count=3)  # 12: none; 16 is the nearest choice
    assert space.nearest(odd) == replace(odd, max_batch_size=16, dynamic_batching=True)


DEFAULT_LIKE = {
    "instance_group": {"count": {"min": 1, "max": 4}},
    "max_batch_size": [1, 2, 4, 8, 16],
    "dynamic_batching": {
        "enabled": [True, False],
        "preferred_batch_size": ["none", "max"],
        "max_queue_delay_microseconds": [0, 100, 1000, 5000],
    },
}


def test_neighbours_change_one_thing_each() -> None:
    space = parse_search_space(DEFAULT_LIKE)
    on = Candidate(2, "KIND_CPU", (), 8, True, (), 100, False)
    found = set(neighbours(on, space))
    assert found == {
        replace(on, instance_count=1),
        replace(on, instance_count=3),  # one instance fewer, more
        replace(on, dynamic_batching=False, max_queue_delay_us=0),  # batching off
        replace(on, max_batch_size=4),
        replace(on, max_batch_size=16),  # max batch /2, x2
        replace(on, max_queue_delay_us=0),
        replace(on, max_queue_delay_us=1000),  # delay down, up
        replace(on, preferred_batch_sizes=(8,)),  # the other preferred-size choice ("max")
    }
    assert all(space.holds(c) for c in found)
    pref_max = replace(on, max_batch_size=16, preferred_batch_sizes=(16,))
    assert replace(pref_max, max_batch_size=8, preferred_batch_sizes=(8,)) in neighbours(pref_max, space)
    off = Candidate(4, "KIND_CPU", (), 16, False, (), 0, False)  # max batch size alone changes nothing
    assert set(neighbours(off, space)) == {
        replace(off, instance_count=3),
        replace(off, dynamic_batching=True),  # no preferred size, the shortest delay
        replace(off, dynamic_batching=True, max_batch_size=2),  # and the gentlest batching
    }
    assert gentlest_batch(space) == 2
    assert gentlest_batch(parse_search_space({**DEFAULT_LIKE, "max_batch_size": [4, 8, 16]})) == 8
    assert gentlest_batch(parse_search_space({**DEFAULT_LIKE, "max_batch_size": [8]})) == 8
    at_two = replace(off, max_batch_size=2)  # batching on at its own size is the gentlest already
    batching_on = [c for c in neighbours(at_two, space) if c.dynamic_batching]
    assert batching_on == [replace(at_two, dynamic_batching=True)]


def test_the_search_does_not_end_while_a_neighbour_of_the_best_is_untried() -> None:
    space = parse_search_space(DEFAULT_LIKE)
    best = Candidate(2, "KIND_CPU", (), 16, False, (), 0, False)
    other = Candidate(1, "KIND_CPU", (), 16, True, (), 0, False)
    results = [measured(0, 100.0, candidate=other), measured(1, 150.0, candidate=best)]
    assert set(unexplored(results, space)) == set(neighbours(best, space))
    tried = [*results, failed(2), measured(3, 120.0, candidate=replace(best, instance_count=3))]
    tried[2] = replace(tried[2], candidate=replace(best, instance_count=1))  # failed: tried all the same
    gentle = replace(best, dynamic_batching=True, max_batch_size=2)
    assert unexplored(tried, space) == [replace(best, dynamic_batching=True), gentle]
    assert unexplored([failed(0), measured(1, 0.0, candidate=best)], space) == []  # nothing feasible yet


def test_the_walk_steps_from_the_best_trial_one_untried_neighbour_at_a_time() -> None:
    space = parse_search_space(DEFAULT_LIKE)
    best = Candidate(2, "KIND_CPU", (), 16, True, (), 0, False)
    other = replace(best, instance_count=1)
    results = [measured(0, 100.0, candidate=other), measured(1, 150.0, candidate=best)]
    first = next(iter(unexplored(results, space, n=1)), None)
    assert first is not None and first in neighbours(best, space) and first != other
    assert first == unexplored(results, space)[0]
    stepped = [*results, measured(2, 140.0, candidate=first)]  # no better: the next step from the best
    second = next(iter(unexplored(stepped, space, n=1)), None)
    assert second is not None and second in neighbours(best, space) and second not in (first, other)
    moved = [*results, measured(2, 180.0, candidate=first)]  # better: the walk goes on from there
    third = next(iter(unexplored(moved, space, n=1)), None)
    assert third is not None and third in neighbours(first, space) and third != best
    done = [*results, *(measured(2 + i, 90.0, candidate=c) for i, c in enumerate(neighbours(best, space)))]
    assert unexplored(done, space, n=1) == []  # the best's neighbours all measured: the sampler proposes
    assert unexplored([failed(0)], space, n=1) == []  # nothing met the SLA yet


def test_before_any_trial_met_the_sla_free_workers_step_from_the_batching_trials_in_flight() -> None:
    """Several at once, nothing ended yet: a free worker takes an untried step from the trials in
    flight that batch (the seeds), the first asked first, never two to one config; without such a
    trial it takes none (the sampler proposes)."""
    space = parse_search_space(DEFAULT_LIKE)
    yours = Candidate(1, "KIND_CPU", (), 16, False, (), 0, False)
    seed = Candidate(2, "KIND_CPU", (), 16, True, (), 0, False)
    later = replace(seed, instance_count=1)

    def running(number: int, c: Candidate) -> TrialResult:
        return replace(measured(number, 0.0, candidate=c), state=RUNNING, measurement=None)

    flying = [running(0, yours), running(1, seed), running(2, later)]
    steps = steps_ahead(flying, space)
    first = [c for c in neighbours(seed, space) if not equivalent(c, later) and not equivalent(c, yours)]
    assert first and steps[: len(first)] == first  # the first seed's steps first
    assert all(not equivalent(a, b) for i, a in enumerate(steps) for b in steps[i + 1 :])
    assert steps_ahead([*flying, running(3, steps[0])], space)[0] == steps[1]  # asked: not offered again
    assert steps_ahead([running(0, yours)], space) == []


def test_with_no_step_left_from_the_best_free_workers_step_from_its_steps_in_flight() -> None:
    """Several at once: once the best's untried steps are all asked, a free worker steps from the
    best's steps in flight (each may be the next best), the first asked first; a trial in flight
    that is no step of the best adds none, and without a best there is none."""
    space = parse_search_space(DEFAULT_LIKE)
    best = Candidate(2, "KIND_CPU", (), 16, True, (), 0, False)
    step, other = replace(best, instance_count=3), Candidate(1, "KIND_CPU", (), 1, False, (), 0, False)
    assert any(equivalent(step, n) for n in neighbours(best, space))
    assert not any(equivalent(other, n) for n in neighbours(best, space))

    def running(number: int, c: Candidate) -> TrialResult:
        return replace(measured(number, 0.0, candidate=c), state=RUNNING, measurement=None)

    results = [measured(0, 450.0, candidate=best), running(1, other), running(2, step)]
    found = steps_beyond(results, space)
    tried = (best, other, step)
    # the step's untried neighbours, none of the stray trial's
    assert found == [c for c in neighbours(step, space) if not any(equivalent(c, t) for t in tried)]
    assert steps_beyond([*results, running(3, found[0])], space)[0] == found[1]  # asked: not offered again
    assert steps_beyond([running(1, other), running(2, step)], space) == []  # no best yet


def test_the_neighbours_of_a_config_tied_with_the_best_are_tried_too() -> None:
    """The search does not end while a one-step neighbour of a config the best is not better
    than (ranking.better_trial: a tie) is untried; the best's own steps come first, and a
    config the best is better than adds none."""
    space = parse_search_space(DEFAULT_LIKE)
    best = Candidate(2, "KIND_CPU", (), 16, True, (), 0, False)
    tie = replace(best, dynamic_batching=False)
    far = replace(best, instance_count=1, dynamic_batching=False)
    results = [measured(0, 300.0, candidate=far), measured(1, 442.0, candidate=tie)]
    results.append(measured(2, 458.0, candidate=best))
    untried = unexplored(results, space)
    gentle = replace(best, max_batch_size=2)
    assert gentle in untried and replace(tie, instance_count=3) in untried  # the tie's own steps
    own = [c for c in unexplored(results[2:], space) if not any(equivalent(c, t) for t in (tie, far))]
    own = [c for c in own if c.instance_count != 1]  # one instance fewer lost: far (300) against tie
    assert own and untried[: len(own)] == own  # the best's own steps first
    assert replace(far, dynamic_batching=True, max_batch_size=2) not in untried  # 300 is no tie
    assert len(untried) == len(set(untried))
    worse = [*results[:1], measured(1, 380.0, candidate=tie), results[2]]
    assert gentle not in unexplored(worse, space)  # 458 is better than 380: not a tie


def test_an_instance_step_that_lost_where_both_sides_were_measured_is_not_taken_again() -> None:
    """An instance step (from, to) lost where, without dynamic batching, the same config with
    ``from`` instances was better than with ``to`` (or ``to`` met the SLA nowhere): no
    neighbour of the best or of a tie takes it again. A tie is no loss."""
    space = parse_search_space(DEFAULT_LIKE)
    seed = Candidate(2, "KIND_CPU", (), 16, False, (), 0, False)
    baseline = replace(seed, instance_count=1)
    best = replace(seed, dynamic_batching=True, max_batch_size=2)
    tie = replace(best, max_batch_size=4)
    results = [measured(0, 546.0, candidate=baseline), measured(1, 800.0, candidate=seed)]
    results += [measured(2, 1013.0, candidate=best), measured(3, 980.0, candidate=tie)]
    assert losing_steps(results) == {(2, 1)}
    untried = unexplored(results, space)
    assert untried and all(c.instance_count != 1 for c in untried)
    assert replace(best, instance_count=3) in untried  # one more: never measured on either side
    assert replace(best, instance_count=1) in unexplored(results[1:], space)  # no pair measured
    close = [measured(0, 760.0, candidate=baseline), *results[1:]]  # 800 is tied with 760
    assert losing_steps(close) == set() and replace(best, instance_count=1) in unexplored(close, space)
    infeasible = [measured(0, 0.0, candidate=replace(baseline, max_batch_size=4)), *results[1:]]
    assert losing_steps(infeasible) == {(2, 1)}  # no point met the SLA: lost (max batch alike off batching)
    assert losing_steps([*results[:1], measured(1, 800.0, candidate=seed, reused_from=0)]) == set()


def test_an_instance_step_that_lost_with_batching_is_that_batch_sizes_loss() -> None:
    """With dynamic batching the instances share the batches out: a step that lost there is
    not lost for other configs, and the tie's own step (without batching) is still tried."""
    space = parse_search_space(DEFAULT_LIKE)
    three = Candidate(3, "KIND_CPU", (), 4, True, (), 0, False)
    plain = replace(three, dynamic_batching=False, max_batch_size=16)
    four, four_plain = replace(three, instance_count=4), replace(plain, instance_count=4)
    results = [measured(0, 582.0, candidate=three), measured(1, 0.0, candidate=four)]
    results.append(measured(2, 540.0, candidate=plain))
    assert losing_steps(results) == set()
    assert four_plain in unexplored(results, space)
    assert losing_steps([*results, measured(3, 300.0, candidate=four_plain)]) == {(3, 4)}  # without: lost


def test_an_instance_count_that_lost_with_and_without_batching_is_not_measured_again() -> None:
    """A proposal whose instance count lost (ranking.better_trial: the other count was better, or
    it met the SLA nowhere) both without dynamic batching and with it, each time against the
    same config but for the count, is pruned: the loser nearest its max batch size stands in.
    One loss is not enough, nor is a tie."""
    two = Candidate(2, "KIND_CPU", (), 16, False, (), 0, False)
    one, two_on = replace(two, instance_count=1), replace(two, dynamic_batching=True)
    one_on = replace(two_on, instance_count=1)
    results = [measured(0, 474.0, candidate=one), measured(1, 899.0, candidate=two)]
    results += [measured(2, 836.0, candidate=two_on), measured(3, 0.0, candidate=one_on)]
    proposal = replace(one_on, max_batch_size=4)
    found = dominated(results, proposal)
    assert found is not None and found[0] is results[3]  # one instance with batching stands in
    assert "trial 0 against 1" in found[1] and "trial 3 against 2" in found[1] and "trial 3" in found[1]
    assert dominated(results, replace(two_on, max_batch_size=4)) is None  # two instances: no loss
    assert dominated(results[:3], proposal) is None  # with batching, one instance was never measured
    close = [*results[:3], measured(3, 780.0, candidate=one_on)]  # 780 is tied with 836: no loss
    assert dominated(close, proposal) is None
    space = parse_search_space({"instance_group": {"count": {"min": 1, "max": 2}}, "max_batch_size": [4, 16]})
    assert stand_in(results, proposal, space) == (3, found[1])  # pruned, trial 3 the nearest measured
    assert found[1].startswith("1 instance(s) lost without dynamic batching")
    assert stand_in(results, proposal, space, baseline=True) is None  # the baseline is always measured
    assert stand_in(results, one, space) == (0, "same as trial 0")  # measured before: pruned
    twin = replace(one, max_batch_size=4)  # without batching the max batch size changes nothing
    assert stand_in(results, twin, space) == (0, "without dynamic batching the server runs it as trial 0")


def test_a_proposal_outside_the_users_space_is_pruned_but_the_baseline_is_measured() -> None:
    """A space allowing only dynamic batching holds your config without it for the sampler (the
    baseline is a trial), never for the search: the sampler's proposal of it is not measured."""
    space = parse_search_space(
        {"instance_group": {"count": {"min": 1, "max": 2}}, "dynamic_batching": {"enabled": [True]}}
    )
    off = Candidate(2, "KIND_CPU", (), 16, False, (), 0, False)
    assert not space.holds(off)
    source, why = stand_in([], off, space) or (None, "")
    assert source is None and why.startswith("outside your search space")
    assert stand_in([], off, space, baseline=True) is None
    assert stand_in([], replace(off, dynamic_batching=True, max_batch_size=8), space) is None


def test_a_repeat_proposal_means_the_sampler_is_out_of_ideas() -> None:
    stop = "the tuner was stopped during this trial"
    assert not out_of_ideas([])
    assert not out_of_ideas([measured(0, 100.0), measured(1, 90.0)])
    assert out_of_ideas([measured(0, 100.0), measured(1, 100.0, reused_from=0)])
    assert out_of_ideas([measured(1, 100.0, reused_from=0), measured(0, 100.0)])  # by number, not order
    assert not out_of_ideas([measured(0, 100.0), measured(1, 100.0, reused_from=0), failed(2)])
    repeat = measured(1, 100.0, reused_from=0)
    assert out_of_ideas([measured(0, 100.0), repeat, failed(2, stop, interrupted=True)])
    assert not out_of_ideas([measured(0, 100.0), replace(measured(1, 100.0, reused_from=0), state=RUNNING)])


GPU_SPACE = {
    "instance_group": {"count": {"min": 1, "max": 4}, "kind": ["KIND_GPU"], "gpus": [[0], [0, 1]]},
    "max_batch_size": [8, 16],
    "dynamic_batching": {"enabled": [True, False]},
    "optimization": {"tensorrt_fp16": [False, True], "tensorrt_workspace_mb": [512, 2048]},
}


def test_gpu_seeds_try_one_and_two_instances_per_gpu_whatever_the_cores() -> None:
    space = parse_search_space(GPU_SPACE)
    for cores in (1, 2, 64):
        seeds = heuristic_seeds(space, cores=cores)
        assert [(s["instance_count"], s["kind"], s["gpus"]) for s in seeds] == [
            (2, "KIND_GPU", "0"),
            (1, "KIND_GPU", "0"),
        ]
        assert all(s["dynamic_batching"] and not s["trt_fp16"] for s in seeds)
    baseline = Candidate(1, "KIND_GPU", (0, 1), 16, False, (), 0, False)
    first = heuristic_seeds(space, cores=64, baseline=baseline)[0]
    assert first == params_of(replace(baseline, instance_count=2))  # 2 per GPU, not 64 (the cores)
    assert space.suggest(_Given(first)) == replace(baseline, instance_count=2)


def test_gpu_neighbours_step_the_gpus_and_tensorrt_fp16() -> None:
    space = parse_search_space(GPU_SPACE)
    off = Candidate(2, "KIND_GPU", (0,), 16, False, (), 0, False)
    assert set(neighbours(off, space)) == {
        replace(off, instance_count=1),
        replace(off, instance_count=3),  # per GPU
        replace(off, dynamic_batching=True),
        replace(off, gpus=(0, 1)),  # the other gpus choice
        replace(off, trt_fp16=True, trt_workspace_mb=2048),  # FP16 on, with the largest workspace
    }
    fp16 = replace(off, gpus=(0, 1), trt_fp16=True, trt_workspace_mb=512)
    found = neighbours(fp16, space)
    assert replace(fp16, trt_fp16=False, trt_workspace_mb=0) in found and replace(fp16, gpus=(0,)) in found
    no_trt = space.restricted(batching=True, gpu=True, tensorrt=False)  # a python-backend model
    assert not any(c.trt_fp16 for c in neighbours(off, no_trt))


class _Given:
    """A trial answering from fixed params (pure-logic fake)."""

    def __init__(self, params: dict[str, object]) -> None:
        self.params = params

    def suggest_categorical(self, name: str, choices: object) -> object:
        return self.params[name]


# ---------------------------------------------------------------- goodput per GPU

PER_GPU = Scoring(per_gpu=True, server_gpus=2)


def on_gpus(*ids: int) -> Candidate:
    return Candidate(1, "KIND_GPU", ids, 8, True, (), 0, False)


def test_per_gpu_two_gpus_must_do_twice_the_work_of_one_to_lead() -> None:
    """Scored per GPU, a trial's goodput is divided by the GPUs it uses, in every verdict:
    which trial is better, the finalists, the winner of no race, convergence and where the
    next search starts."""
    one = measured(0, 150.0, candidate=on_gpus(0), level=4)
    two = measured(1, 200.0, candidate=on_gpus(0, 1), level=8)
    assert ranking.score(two, PER_GPU) == 100.0 and ranking.score(two) == 200.0  # RAW: the throughput
    assert ranking.better_trial(two, one) and ranking.better_trial(one, two, PER_GPU)  # 100 a GPU against 150
    assert [r.number for r in ranking.finalists([one, two], 2)] == [1]
    assert [r.number for r in ranking.finalists([one, two], 2, PER_GPU)] == [0]
    sla = Sla(95, 20.0)
    assert (
        racing.race_winner([], [one, two], sla, PER_GPU) == 0 and racing.race_winner([], [one, two], sla) == 1
    )
    assert start_level([one, two], PER_GPU) == 4 and start_level([one, two]) == 8
    more = measured(2, 310.0, candidate=on_gpus(0, 1))
    assert not converged([one, more], 1)  # 310 is better than 150
    assert converged([one, more], 1, PER_GPU)  # 155 a GPU is tied with 150


def test_per_gpu_the_bound_to_beat_is_in_the_candidates_own_throughput() -> None:
    """What a candidate's search must beat (level_search.incumbent) is the best per-GPU goodput times
    the GPUs the candidate uses: a 2-GPU candidate must reach twice it, a 1-GPU one the best
    per-GPU goodput itself (not a 2-GPU trial's throughput); its error scales with it."""
    results = [measured(0, 150.0, candidate=on_gpus(0)), measured(1, 250.0, candidate=on_gpus(0, 1))]
    on_two, on_one = (
        level_search.incumbent(results, PER_GPU, on_gpus(0, 1)),
        level_search.incumbent(results, PER_GPU, on_gpus(1)),
    )
    assert on_two is not None and on_one is not None
    assert on_two.mean == pytest.approx(300.0) and on_one.mean == pytest.approx(150.0)
    assert on_two.se == pytest.approx(2 * on_one.se) and on_one.se > 0
    raw = level_search.incumbent(results)
    assert raw is not None and raw.mean == pytest.approx(250.0)
    assert (
        level_search.incumbent([failed(0), measured(1, 0.0)], PER_GPU, on_gpus(0)) is None
    )  # nothing to beat yet


@pytest.mark.parametrize("window_s", [0.25, 0.5, 2.0])
def test_a_servers_first_point_discards_one_window_of_warm_up(window_s: float) -> None:
    """The search's plan: windows of --window after one window's warm-up (a fresh server's first
    half-second reads slow, the next ones as the rest: benchmarks/results/warmup-20261129.txt)."""
    plan = level_search.search_plan(Sla(99, 50.0), window_s)
    assert (plan.window_s, plan.warmup_s, plan.percentile, plan.limit_ms) == (window_s, window_s, 99, 0.0)
