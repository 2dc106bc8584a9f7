"""The tuner's pure decisions (autotune.decide): seeds, convergence, the budget, finalists,
verification levels and the winner (no server)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.decide import (
    choose_winner,
    client_decided,
    climb,
    converged,
    could_beat,
    dominated,
    equivalent,
    finalists,
    finished,
    gentlest_batch,
    headroom,
    heuristic_seeds,
    incumbent,
    level_settled,
    losing_steps,
    measured_before,
    neighbours,
    out_of_ideas,
    out_of_reach,
    score,
    short_of_headroom,
    stand_in,
    time_left,
    unexplored,
    verified_level,
    verify_levels,
)
from autotune.objective import Scoring, Sla
from autotune.points import Measurement, Point
from autotune.results import COMPLETE, FAIL, PRUNED, RUNNING, TrialResult, Verification
from autotune.search_space import Candidate, params_of, parse_search_space


def point(concurrency: int, throughput: float, p95: float = 12.0) -> Point:
    return Point(concurrency, 0.0, throughput, 10.0, 9.0, 11.0, p95, 13.0, 100, 0, 1.0, 3, True)


def measured(
    number: int, goodput: float, reused_from: int | None = None, candidate: Candidate | None = None
) -> TrialResult:
    """A measured trial; with ``reused_from``, a pruned one (not measured: no figures of its own)."""
    p = point(4, goodput)
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


def test_converged_after_patience_configs_without_progress() -> None:
    results = [measured(0, 100.0), measured(1, 150.0), measured(2, 157.0), failed(3), measured(4, 0.0)]
    assert not converged(results, 4)  # 3 since the best (157 is within 8% of 150: noise)
    assert converged([*results, measured(5, 149.0)], 4)
    assert not converged([*results, measured(5, 163.0)], 4)  # 8.7% above 150: progress resets the count
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


def test_the_time_budget_keeps_half_a_trial_in_hand() -> None:
    assert time_left(None, 10_000.0, 3)  # no budget
    assert time_left(60.0, 0.0, 0)
    assert time_left(60.0, 40.0, 4)  # 10 s a trial: 40 + 5 < 60
    assert not time_left(60.0, 56.0, 4)  # 56 + 7 > 60


def verified(throughputs: list[float], met: int) -> Verification:
    points = tuple(Point(4, 0.0, t, 10.0, 9.0, 11.0, 12.0, 13.0, 100, 0, 1.0, 3, True) for t in throughputs)
    return Verification(trial=0, concurrency=4, points=points, sla_met=met)


def test_a_finalist_is_verified_only_if_it_could_beat_a_verified_winner() -> None:
    assert could_beat(measured(1, 150.0), [])  # nothing verified yet
    passed = verified([140.0, 151.0, 148.0], met=3)  # median 148
    assert not could_beat(measured(1, 159.0), [passed])  # within 8% of 148: noise
    assert could_beat(measured(1, 161.0), [passed])  # 8.8% above: worth a look
    failed_one = verified([160.0, 170.0], met=1)  # broke the SLA in a repeat: proves nothing
    assert could_beat(measured(1, 100.0), [failed_one])
    assert not could_beat(measured(1, 100.0), [failed_one, passed])


def test_a_finalist_out_of_reach_of_a_verified_winner_stops_its_repeats() -> None:
    """Of 3 repeats, the median is at most the higher of the first two: once that is below the
    verified winner's median by more than the tie (2%), the rest cannot make it win."""
    winner = verified([500.0, 520.0, 510.0], met=3)  # median 510; a tie down to 499.8
    second = measured(1, 560.0)
    assert not out_of_reach([point(4, 400.0)], 3, second, [winner])  # one repeat: the median unknown
    assert out_of_reach([point(4, 400.0), point(4, 495.0)], 3, second, [winner])
    assert not out_of_reach([point(4, 400.0), point(4, 505.0)], 3, second, [winner])  # a tie is possible
    assert not out_of_reach([point(4, 400.0), point(4, 450.0)], 3, second, [])  # nothing verified
    assert not out_of_reach(
        [point(4, 400.0), point(4, 450.0)], 3, second, [verified([520.0, 530.0], met=1)]
    )  # the verified one broke the SLA: it is not the one to beat
    assert not out_of_reach([point(4, 400.0), point(4, 450.0)], 5, second, [winner])  # of 5: 3 needed
    assert out_of_reach([point(4, 400.0), point(4, 450.0), point(4, 480.0)], 5, second, [winner])
    two_gpus = replace(second, candidate=on_gpus(0, 1))  # per GPU: 900 on two is 450 a GPU
    assert out_of_reach([point(4, 900.0), point(4, 900.0)], 3, two_gpus, [winner], PER_GPU)
    assert not out_of_reach([point(4, 900.0), point(4, 900.0)], 3, two_gpus, [winner])


def test_a_finalist_that_passed_only_below_its_operating_point_leaves_no_margin() -> None:
    screened_at_8 = replace(measured(0, 160.0), measurement=Measurement((point(8, 160.0),), point(8, 160.0)))
    fell_back = verified([140.0, 143.0, 146.0], met=3)  # at concurrency 4, median 143
    others = [screened_at_8, measured(1, 152.0)]
    assert could_beat(others[1], [fell_back], results=others)  # 152 > 143: verified
    assert not could_beat(measured(1, 142.0), [fell_back], results=others)  # not above it
    at_its_point = [replace(screened_at_8, measurement=Measurement((point(4, 160.0),), point(4, 160.0)))]
    assert not could_beat(
        measured(1, 152.0), [fell_back], results=[*at_its_point, measured(1, 152.0)]
    )  # 8% margin
    assert not could_beat(measured(1, 152.0), [fell_back])  # its trial unknown: the margin kept
    # an open loop's: verified at 300 req/s, screened at 400
    at_rate = Point(0, 400.0, 160.0, 10.0, 9.0, 11.0, 12.0, 13.0, 100, 0, 1.0, 3, True)
    screened_at_400 = replace(screened_at_8, measurement=Measurement((at_rate,), at_rate))
    rate_fell_back = replace(fell_back, concurrency=0, request_rate=300.0)
    assert could_beat(measured(1, 152.0), [rate_fell_back], results=[screened_at_400])


def test_the_next_search_starts_at_the_best_feasible_config() -> None:
    assert incumbent([]) == (None, 0.0)
    assert incumbent([failed(0), measured(1, 0.0)]) == (None, 0.0)  # nothing met the SLA yet
    assert incumbent([measured(0, 100.0), failed(1), measured(2, 150.0), measured(3, 120.0)]) == (4, 150.0)


def test_a_candidate_measured_before_is_reused_not_measured_again() -> None:
    a = Candidate(1, "KIND_CPU", (), 8, True, (), 0, False)
    b = replace(a, instance_count=2)
    results = [failed(0), measured(1, 100.0, candidate=a), measured(2, 100.0, reused_from=1, candidate=a)]
    assert measured_before(results, a) is results[1]  # the measured one, not its reuse
    assert measured_before(results, b) is None


def test_without_batching_the_max_batch_size_changes_nothing_and_is_not_measured_twice() -> None:
    off = Candidate(2, "KIND_CPU", (), 16, False, (), 0, False)
    on = replace(off, dynamic_batching=True)
    results = [measured(0, 100.0, candidate=off), measured(1, 120.0, candidate=on)]
    assert measured_before(results, replace(off, max_batch_size=4)) is results[0]
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
    first = climb(results, space)
    assert first is not None and first in neighbours(best, space) and first != other
    assert first == unexplored(results, space)[0]
    stepped = [*results, measured(2, 140.0, candidate=first)]  # no better: the next step from the best
    second = climb(stepped, space)
    assert second is not None and second in neighbours(best, space) and second not in (first, other)
    moved = [*results, measured(2, 180.0, candidate=first)]  # better: the walk goes on from there
    third = climb(moved, space)
    assert third is not None and third in neighbours(first, space) and third != best
    done = [*results, *(measured(2 + i, 90.0, candidate=c) for i, c in enumerate(neighbours(best, space)))]
    assert climb(done, space) is None  # the best's neighbours all measured: the sampler proposes
    assert climb([failed(0)], space) is None  # nothing met the SLA yet


def test_the_neighbours_of_a_config_tied_with_the_best_are_tried_too() -> None:
    """mobilenet (21:45): 2 instances with batching at max batch 16 measured 458 infer/s, and
    without batching 442, a tie by the search's own margin; the gentle batching of the second
    (max batch 2, the best known config) was never tried."""
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
    worse = [*results[:1], measured(1, 420.0, candidate=tie), results[2]]
    assert gentle not in unexplored(worse, space)  # 458 is 9% over 420: not a tie


def test_an_instance_step_that_lost_where_both_sides_were_measured_is_not_taken_again() -> None:
    """cnn (2026-11-26 03:49): the baseline, 1 instance without batching, served 546 infer/s
    and the seed, 2 instances, 878; then the 1-instance neighbour of the best config and of
    each tie was measured, 4 configs of 12, each breaking the SLA at its first point."""
    space = parse_search_space(DEFAULT_LIKE)
    seed = Candidate(2, "KIND_CPU", (), 16, False, (), 0, False)
    baseline = replace(seed, instance_count=1)
    best = replace(seed, dynamic_batching=True, max_batch_size=2)
    tie = replace(best, max_batch_size=4)
    results = [measured(0, 546.0, candidate=baseline), measured(1, 878.0, candidate=seed)]
    results += [measured(2, 1013.0, candidate=best), measured(3, 980.0, candidate=tie)]
    assert losing_steps(results) == {(2, 1)}
    untried = unexplored(results, space)
    assert untried and all(c.instance_count != 1 for c in untried)
    assert replace(best, instance_count=3) in untried  # one more: never measured on either side
    assert replace(best, instance_count=1) in unexplored(results[1:], space)  # no pair measured
    close = [measured(0, 820.0, candidate=baseline), *results[1:]]  # 878 is within 8% of 820
    assert losing_steps(close) == set() and replace(best, instance_count=1) in unexplored(close, space)
    infeasible = [measured(0, 0.0, candidate=replace(baseline, max_batch_size=4)), *results[1:]]
    assert losing_steps(infeasible) == {(2, 1)}  # no point met the SLA: lost (max batch alike off batching)
    assert losing_steps([*results[:1], measured(1, 878.0, candidate=seed, reused_from=0)]) == set()


def test_an_instance_step_that_lost_with_batching_is_that_batch_sizes_loss() -> None:
    """recommender (2026-11-26 06:59): 4 instances at max batch 4 with batching lost to 3, and
    the 4-instance neighbours of its ties, without batching among them, were never measured."""
    space = parse_search_space(DEFAULT_LIKE)
    three = Candidate(3, "KIND_CPU", (), 4, True, (), 0, False)
    plain = replace(three, dynamic_batching=False, max_batch_size=16)
    four, four_plain = replace(three, instance_count=4), replace(plain, instance_count=4)
    results = [measured(0, 582.0, candidate=three), measured(1, 0.0, candidate=four)]
    results.append(measured(2, 540.0, candidate=plain))
    assert losing_steps(results) == set()
    assert four_plain in unexplored(results, space)
    assert losing_steps([*results, measured(3, 300.0, candidate=four_plain)]) == {(3, 4)}  # without: lost


def test_an_instance_count_that_lost_clearly_with_and_without_batching_is_not_measured_again() -> None:
    """cnn (2026-11-26 17:37): one instance lost to two without batching (474 against 899 infer/s)
    and with it (no feasible point at the best's level), and the sampler went on proposing one
    instance at other max batch sizes, 4-6 s each."""
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
    close = [*results[:3], measured(3, 700.0, candidate=one_on)]  # 700 is not under 3/4 of 836
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


def test_finalists_are_the_top_feasible_by_screening_goodput() -> None:
    results = [measured(0, 100.0), measured(1, 95.0), measured(2, 80.0), measured(3, 120.0, reused_from=0)]
    assert [r.number for r in finalists(results, 3)] == [0, 1, 2]  # reuses never
    assert [r.number for r in finalists(results, 2)] == [0, 1]
    assert [r.number for r in finalists(results, 1)] == [0]
    assert finalists([failed(0), measured(1, 0.0)], 2) == []


def test_verification_falls_back_to_the_next_lower_level_measured() -> None:
    points = (point(2, 50.0), point(4, 90.0), point(8, 100.0), point(16, 101.0, p95=80.0))
    result = replace(measured(0, 100.0), measurement=Measurement(points, points[2]))
    assert verify_levels(result) == [8, 6, 4]  # halfway down first
    lowest = replace(measured(0, 50.0), measurement=Measurement(points[:1], points[0]))
    assert verify_levels(lowest) == [2, 1]
    alone = replace(measured(0, 100.0), measurement=Measurement(points[2:3], points[2]))
    assert verify_levels(alone) == [8, 7, 6, 4]  # measured at 8 only: 7/8, 3/4, then half
    at_32 = (point(32, 1300.0),)
    high = replace(measured(0, 1300.0), measurement=Measurement(at_32, at_32[0]))
    assert verify_levels(high) == [32, 28, 24, 16]  # one slow repeat at 32 costs 1/8, not 1/4
    at_2 = (point(2, 50.0),)
    low = replace(measured(0, 50.0), measurement=Measurement(at_2, at_2[0]))
    assert verify_levels(low) == [2, 1]  # the steps meet at 1: tried once
    one = replace(measured(0, 50.0), measurement=Measurement((point(1, 50.0),), point(1, 50.0)))
    assert verify_levels(one) == [1]
    adjacent = replace(measured(0, 90.0), measurement=Measurement(points[:2], points[1]))
    assert verify_levels(adjacent) == [4, 3, 2]
    rates = tuple(
        replace(p, concurrency=0, request_rate=r)
        for p, r in zip(points, (50.0, 90.0, 100.0, 101.0), strict=True)
    )
    by_rate = replace(measured(0, 100.0), measurement=Measurement(rates, rates[2]))
    assert verify_levels(by_rate) == [100.0, 94.9, 90.0]  # the geometric middle, 3 digits
    rate_alone = replace(measured(0, 100.0), measurement=Measurement(rates[2:3], rates[2]))
    assert verify_levels(rate_alone) == [100.0, 87.5, 75.0, 50.0]


def test_a_batching_finalist_keeps_twice_the_margin_at_verification() -> None:
    sla = Sla(99, 20.0)
    batching = Candidate(2, "KIND_CPU", (), 4, True, (), 0, False)
    assert headroom(sla, 0.10, batching).limit_ms == pytest.approx(16.0)  # the tails disagree most there
    assert headroom(sla, 0.10, replace(batching, dynamic_batching=False)).limit_ms == pytest.approx(18.0)
    assert headroom(sla, 0.10, None) == sla.tightened(0.10)
    assert headroom(sla, 0.0, batching) == sla  # no margin asked: none kept


def test_a_verified_level_needs_the_search_headroom_in_every_repeat() -> None:
    """3/3 at a median 93-97% of the limit met the SLA in only 8 of 10 re-measurements, and so
    did winners whose median had the headroom but one repeat did not (cnn at 15.2, 17.4, 18.5 ms
    under a 20 ms SLA: perf_analyzer 2/6): such a level is verified one level down too, and the
    verification stands on the lowest that passed."""
    sla, headroom = Sla(95, 20.0), Sla(95, 18.0)
    clear = [point(8, 100.0, p95=15.0), point(8, 99.0, p95=17.9), point(8, 98.0, p95=16.5)]
    assert level_settled(clear, 3, sla, headroom)  # every repeat within 18
    one_over = [point(8, 100.0, p95=15.2), point(8, 99.0, p95=17.4), point(8, 98.0, p95=18.5)]
    assert not level_settled(one_over, 3, sla, headroom)  # the median (17.4) has it, one repeat not
    close = [point(8, 100.0, p95=18.5), point(8, 99.0, p95=19.0), point(8, 98.0, p95=17.0)]
    assert not level_settled(close, 3, sla, headroom)  # every repeat met 20, but the median is 18.5
    assert not level_settled([point(8, 100.0, p95=21.0)], 3, sla, headroom)  # broke it, stopped early
    assert not level_settled(clear[:2], 3, sla, headroom)  # too few repeats
    assert level_settled(close, 3, sla, sla)  # --margin 0: met in every repeat is enough
    broke = [point(6, 90.0, p95=15.0), point(6, 90.0, p95=20.5)]
    assert verified_level([close], 3, sla) == 0  # nothing lower tried: it stands on what passed
    assert verified_level([close, clear], 3, sla) == 1
    assert verified_level([close, broke, clear], 3, sla) == 2
    assert verified_level([close, broke, broke], 3, sla) == 0  # the only level that passed
    assert verified_level([broke, broke], 3, sla) == 1  # none passed: the last tried
    # out of reach at the level below: it stands there, not on the one above that never settled
    assert verified_level([close, clear[:2]], 3, sla, out_of_reach=True) == 1
    assert short_of_headroom(one_over[2:], headroom)  # one repeat over 18: the level cannot settle
    assert not short_of_headroom(one_over[:2], headroom)
    assert not short_of_headroom(clear, headroom) and not short_of_headroom([], headroom)


def test_the_winner_is_the_best_verified_finalist_a_near_tie_going_to_the_lower_latency() -> None:
    results = [measured(0, 100.0), measured(1, 98.0), measured(2, 97.0)]

    def v(trial: int, throughputs: list[float], met: int, p95: float = 12.0) -> Verification:
        pts = tuple(point(4, t, p95) for t in throughputs)
        return Verification(trial=trial, concurrency=4, points=pts, sla_met=met)

    assert choose_winner(results, [v(0, [100.0] * 3, 3), v(1, [110.0] * 3, 3)]) == 1
    assert choose_winner(results, [v(0, [100.0] * 3, 3, p95=20.0), v(1, [99.0] * 3, 3, p95=10.0)]) == 1
    assert choose_winner(results, [v(0, [120.0] * 3, 2), v(1, [90.0] * 3, 3)]) == 1  # every repeat beats most
    assert choose_winner(results, [v(0, [120.0] * 3, 2), v(1, [130.0] * 3, 1)]) == 0  # else most
    assert choose_winner(results, [v(0, [120.0] * 3, 1)]) == 1  # none passed: best not verified
    assert choose_winner([failed(0), measured(1, 0.0)], []) is None


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
    one, two = measured(0, 150.0, candidate=on_gpus(0)), measured(1, 250.0, candidate=on_gpus(0, 1))
    assert score(two, PER_GPU) == 125.0 and score(two) == 250.0  # RAW: the throughput
    assert [r.number for r in finalists([one, two], 2)] == [1, 0]
    assert [r.number for r in finalists([one, two], 2, PER_GPU)] == [0, 1]  # 125 a GPU against 150
    assert choose_winner([one, two], [], scoring=PER_GPU) == 0 and choose_winner([one, two], []) == 1
    assert not converged([one, measured(2, 310.0, candidate=on_gpus(0, 1))], 1)  # 310 > 250 * 1.08
    assert converged([one, measured(2, 310.0, candidate=on_gpus(0, 1))], 1, PER_GPU)  # 155 < 150 * 1.08


def test_per_gpu_the_bound_to_beat_is_in_the_candidates_own_throughput() -> None:
    """A 2-GPU candidate whose throughput cannot reach twice the best per-GPU goodput is pruned;
    a 1-GPU one is held to the best per-GPU goodput itself (not to a 2-GPU trial's throughput)."""
    results = [measured(0, 150.0, candidate=on_gpus(0)), measured(1, 250.0, candidate=on_gpus(0, 1))]
    assert incumbent(results, PER_GPU, on_gpus(0, 1)) == (4, 300.0)
    assert incumbent(results, PER_GPU, on_gpus(1)) == (4, 150.0)
    assert incumbent(results) == (4, 250.0)


def test_per_gpu_verified_finalists_are_ranked_by_their_own_gpus() -> None:
    results = [measured(0, 150.0, candidate=on_gpus(0)), measured(1, 280.0, candidate=on_gpus(0, 1))]

    def v(trial: int, throughput: float) -> Verification:
        return Verification(trial=trial, concurrency=4, points=(point(4, throughput),) * 3, sla_met=3)

    verified_ = [v(0, 140.0), v(1, 260.0)]  # 140 per GPU against 130
    assert choose_winner(results, verified_, scoring=PER_GPU) == 0
    assert choose_winner(results, verified_) == 1
    assert not could_beat(results[1], [v(0, 140.0)], PER_GPU, results)  # 140 per GPU vs 140
    assert could_beat(results[1], [v(0, 140.0)])  # 280 vs 140


def test_a_repeat_over_the_headroom_is_measured_again_when_our_stalls_could_make_its_tail() -> None:
    """26 clients, 1100 requests/s for 3 s (3300, mean 24 ms: 26 in flight): the p99 is the
    slowest 33 answers, so two stalls (52 answers held at once) can make it, one (26) cannot."""
    headroom = Sla(99, 40.0)
    base = replace(point(26, 1100.0), avg_ms=23.6, p99_ms=48.0, requests=3300, duration_s=3.0)
    assert not client_decided(base, headroom)  # no stall: the server's tail
    assert client_decided(replace(base, client_stalls=2, client_stall_ms=60.0), headroom)
    assert not client_decided(replace(base, client_stalls=1, client_stall_ms=60.0), headroom)
    within = replace(base, p99_ms=39.0, client_stalls=9, client_stall_ms=300.0)
    assert not client_decided(within, headroom)  # within the headroom: nothing to explain
    # at the p95 the tail is 5% of the answers: the same two stalls hold too few
    assert not client_decided(replace(base, p95_ms=48.0, client_stalls=2), Sla(95, 40.0))
    assert not client_decided(replace(base, requests=0, client_stalls=2), headroom)
