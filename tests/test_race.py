"""The race's transitions (autotune.search.racing.Race), one test each: which racers the next round asks
for, and what a served round does to the race. Pure logic: the points are made up."""

from __future__ import annotations

from dataclasses import replace

from autotune.objective import RAW, Sla
from autotune.points import Point
from autotune.search.racing import Race
from autotune.search_space import Candidate
from tests.test_noise import _trial, windowed

SLA = Sla(95, 20.0)
YOURS = Candidate(1, "KIND_CPU", (), 8, False, (), 0, False)
CONTROL = 0


def _race(finalists: int = 2, control: bool = True, repeats: int = 3) -> Race:
    """Finalists 1, 2, ... that each met the SLA at 4 and 8 clients; your config (trial 0) at 4."""
    met = [windowed(4, 500.0, 8.0), windowed(8, 1000.0, 12.0)]
    ranked = [_trial(i + 1, met, replace(YOURS, instance_count=i + 2)) for i in range(finalists)]
    yours = _trial(CONTROL, [windowed(4, 300.0, 10.0)], YOURS) if control else None
    return Race.start(ranked, yours, SLA, 95, RAW, YOURS, open_loop=False, repeats=repeats)


def meets(level: float, throughput: float = 1000.0) -> Point:
    return windowed(int(level), throughput, 12.0)


def near(level: float) -> Point:
    """A round whose latency is too near the limit to say."""
    return windowed(int(level), 1000.0, 19.6, spread=0.1)


def breaks(level: float) -> Point:
    return windowed(int(level), 500.0, 40.0)


def _play(race: Race, points: dict[int, Point | None]) -> list[int] | None:
    asked = race.next_round(False)
    assert asked is not None and set(asked) == set(points)
    race.take(points)
    return asked


def test_the_first_round_asks_every_racer_at_its_first_level() -> None:
    race = _race()
    assert race.next_round(False) == [1, 2, CONTROL] and race.phase == "rounds"
    assert race.level == {1: 8.0, 2: 8.0, CONTROL: 4.0}


def test_a_finalist_outraced_leaves_after_the_round_that_shows_it() -> None:
    race = _race()
    _play(race, {1: meets(8, 2000.0), 2: meets(8, 1000.0), CONTROL: meets(4, 300.0)})
    assert race.alive == [1, 2, CONTROL] and race.played == 1  # one round shows nothing
    _play(race, {1: meets(8, 2010.0), 2: meets(8, 1010.0), CONTROL: meets(4, 301.0)})
    assert race.alive == [1, CONTROL]  # the control stays: it is never outraced


def test_a_finalist_that_left_the_race_never_leads_it() -> None:
    """The leader is chosen among the finalists still in the race. One that left it (outraced)
    could still rank first among every finalist with rounds; as the leader, its rounds begun on
    free workers were stale on arrival and begun again, round after round."""
    race = _race(repeats=5)
    _play(race, {1: meets(8, 1000.0), 2: meets(8, 2000.0), CONTROL: meets(4, 300.0)})
    assert race.leader() == 2
    race.alive.remove(2)  # as outraced leaves it
    assert race.leader() == 1 and not race.stale({1: 8.0, CONTROL: 4.0})


def test_a_finalist_that_left_the_race_is_marked_so_in_its_verification() -> None:
    race = _race(repeats=5)
    _play(race, {1: meets(8, 1000.0), 2: meets(8, 2000.0), CONTROL: meets(4, 300.0)})
    race.alive.remove(1)  # as outraced leaves it
    made = {v.trial: v for v in race.verifications([1, 2, CONTROL])}
    assert made[1].left and not made[2].left and not made[CONTROL].left


def test_the_first_phase_ends_once_one_finalist_is_left_with_two_rounds() -> None:
    race = _race(finalists=1, repeats=6)
    _play(race, {1: meets(8), CONTROL: meets(4, 300.0)})
    assert race.phase == "rounds"
    _play(race, {1: meets(8), CONTROL: meets(4, 300.0)})
    assert race.phase == "moved" and race.played == 2


def test_the_first_phase_ends_after_its_repeats() -> None:
    race = _race(repeats=1)
    _play(race, {1: near(8), 2: near(8), CONTROL: meets(4, 300.0)})
    assert race.played == 1 and race.phase == "rounds"
    asked = race.next_round(False)
    assert race.phase == "leader" and asked == [race.current, CONTROL]


def test_a_racer_whose_server_failed_leaves() -> None:
    race = _race()
    _play(race, {1: meets(8), 2: None, CONTROL: meets(4, 300.0)})
    assert race.alive == [1, CONTROL] and race.count[2] == 1


def test_out_of_time_no_round_starts_once_each_racer_has_one() -> None:
    race = _race()
    assert race.next_round(True) == [1, 2, CONTROL]  # none has a round yet: this one is played
    race.take({1: meets(8), 2: meets(8), CONTROL: meets(4, 300.0)})
    assert race.next_round(True) is None and race.out_of_time and race.phase == "done"


def test_a_racer_sent_down_in_the_last_round_gets_one_round_there() -> None:
    race = _race(finalists=1, repeats=1)
    _play(race, {1: breaks(8), CONTROL: meets(4, 300.0)})
    below = race.level[1]
    assert below < 8 and not race.rounds[1] and race.alive == [1, CONTROL]
    assert race.next_round(False) == [1] and race.phase == "moved"
    race.take({1: meets(below)})
    assert race.phase == "leader" and race.alive == [1, CONTROL] and race.rounds[1]


def test_a_racer_sent_down_that_fails_there_leaves() -> None:
    race = _race(finalists=1, repeats=1)
    _play(race, {1: breaks(8), CONTROL: meets(4, 300.0)})
    assert race.next_round(False) == [1]
    race.take({1: None})
    assert race.alive == [CONTROL] and race.next_round(False) is None


def test_a_leader_that_meets_the_sla_ends_the_race() -> None:
    race = _race(finalists=1)
    _play(race, {1: meets(8), CONTROL: meets(4, 300.0)})
    _play(race, {1: meets(8), CONTROL: meets(4, 300.0)})
    assert race.meets(1) and race.next_round(False) is None and race.phase == "done"


def test_an_undecided_leader_gets_rounds_where_it_stands_the_control_beside() -> None:
    race = _race(finalists=1, repeats=3)
    for _ in range(2):
        _play(race, {1: near(8), CONTROL: meets(4, 300.0)})
    assert not race.meets(1)
    assert race.next_round(False) == [1, CONTROL] and race.phase == "leader" and race.current == 1
    race.take({1: near(8), CONTROL: meets(4, 300.0)})
    assert race.current is None and len(race.rounds[1]) == 3  # a round there; the leader chosen again


def test_a_leader_at_its_most_rounds_still_undecided_goes_down_first() -> None:
    race = _race(finalists=1, repeats=2)
    for _ in range(2):
        _play(race, {1: near(8), CONTROL: meets(4, 300.0)})
    assert race.next_round(False) == [1, CONTROL]
    assert race.level[1] < 8 and not race.rounds[1] and len(race.others[1]) == 1


def test_a_leader_whose_round_breaks_the_sla_gets_another_round_a_level_down() -> None:
    race = _race(finalists=1, repeats=3)
    for _ in range(2):
        _play(race, {1: near(8), CONTROL: meets(4, 300.0)})
    race.next_round(False)
    race.take({1: breaks(8), CONTROL: meets(4, 300.0)})
    assert race.current == 1 and race.level[1] < 8 and not race.rounds[1]
    assert race.next_round(False) == [1, CONTROL]


def test_a_leader_sent_down_that_meets_on_its_first_round_there_gets_a_second_before_it_wins() -> None:
    race = _race(finalists=1, repeats=2)
    for _ in range(2):
        _play(race, {1: near(8), CONTROL: meets(4, 300.0)})
    assert race.next_round(False) == [1, CONTROL]  # undecided at its most rounds: sent down
    below = race.level[1]
    race.take({1: meets(below), CONTROL: meets(4, 300.0)})
    assert race.meets(1) and len(race.rounds[1]) == 1
    assert race.next_round(False) == [1, CONTROL]  # one round there does not end the race
    race.take({1: meets(below), CONTROL: meets(4, 300.0)})
    assert race.next_round(False) is None and race.phase == "done" and len(race.rounds[1]) == 2


def test_with_one_round_allowed_a_leader_that_meets_on_it_ends_the_race() -> None:
    race = _race(finalists=1, repeats=1)
    _play(race, {1: meets(8), CONTROL: meets(4, 300.0)})
    assert race.next_round(False) is None and race.phase == "done"


def test_a_leader_whose_server_fails_leaves_on_its_rounds_there() -> None:
    race = _race(finalists=1, repeats=3)
    for _ in range(2):
        _play(race, {1: near(8), CONTROL: meets(4, 300.0)})
    race.next_round(False)
    race.take({1: None, CONTROL: None})
    assert race.current is None and not race.rounds[1] and len(race.others[1][-1][1]) == 2
    assert race.beside == []  # the control failed too: it leaves the leader's side
    assert race.next_round(False) is None  # no leader stands: the race is over
    (verification,) = race.verifications([1])
    assert len(verification.points) == 2  # it stands on its rounds there


def test_out_of_time_a_racer_sent_down_in_the_last_round_leaves_without_its_round_there() -> None:
    race = _race(finalists=2, repeats=1)
    _play(race, {1: breaks(8), 2: meets(8), CONTROL: meets(4, 300.0)})
    assert race.alive == [1, 2, CONTROL] and not race.rounds[1]
    assert race.next_round(True) is None and race.out_of_time
    assert race.alive == [2, CONTROL]  # sent down, no round there: out of the race


def test_rounds_taken_as_they_end_are_taken_as_one_at_a_time_would_take_them() -> None:
    rounds = [{1: meets(8, 2000.0 + i), 2: meets(8, 1000.0 + i), CONTROL: meets(4, 300.0)} for i in range(3)]
    alone = _race()
    for points in rounds:
        if alone.next_round(False) is not None:
            alone.take(points)
    together = _race()
    levels = dict(together.level)
    asked = [together.another([levels] * i, False) for i in range(4)]
    assert asked == [[1, 2, CONTROL]] * 3 + [None]  # three begun at once: the phase's rounds
    for points in rounds:
        together.take_ended(levels, points)
    assert (together.alive, together.rounds, together.phase) == (alone.alive, alone.rounds, alone.phase)


def test_rounds_in_flight_are_dropped_once_the_finalist_they_were_for_moved_a_level() -> None:
    race = _race(finalists=1, repeats=4)
    _play(race, {1: near(8), CONTROL: meets(4, 300.0)})
    levels = dict(race.level)
    assert [race.another([levels] * i, False) for i in range(4)] == [[1, CONTROL]] * 3 + [None]
    beside = meets(4, 300.0)
    race.take_ended(levels, {1: breaks(8), CONTROL: beside})
    for _ in range(2):
        race.take_ended(levels, {1: near(8), CONTROL: beside})
    assert race.level[1] < 8 and race.rounds[1] == []  # sent down by the first: the rest were for 8
    assert race.count[1] == 2 and len(race.rounds[CONTROL]) == 2  # the control's went with them


def test_a_leader_s_rounds_in_flight_stay_its_own_when_another_takes_the_lead() -> None:
    race = _race(repeats=4)
    beside = meets(4, 300.0)
    race.rounds = {1: [_near(8, 1500.0), _near(8, 1600.0)], 2: [_near(8, 1300.0), _near(8, 1400.0)]}
    race.rounds[CONTROL] = [beside, beside]
    race.phase, race.played, race.beside = "leader", 4, [CONTROL]
    levels = dict(race.level)
    assert race.another([], False) == [1, CONTROL] and race.current == 1
    assert race.another([levels], False) == [1, CONTROL]
    assert race.another([levels] * 2, False) is None  # its rounds there: two taken, two in flight
    for _ in range(2):
        race.take_ended(levels, {1: _near(8, 500.0), CONTROL: beside}, leader=1)  # the first puts 2 ahead
    assert len(race.rounds[1]) == 4 and len(race.rounds[CONTROL]) == 4  # both rounds taken for 1
    assert race.next_round(False) == [2, CONTROL]  # then the new leader gets its rounds


def test_a_finalist_that_moved_gets_a_leader_s_rounds_there_and_none_beside_it() -> None:
    race = _race(repeats=2)
    levels = dict(race.level)
    race.take_ended(levels, {1: breaks(8), 2: meets(8, 2000.0), CONTROL: meets(4, 300.0)})  # 1 goes down
    race.take_ended(levels, {1: meets(8), 2: meets(8, 2000.0), CONTROL: meets(4, 300.0)})
    assert race.another([], False) == [1] and race.phase == "moved"
    there = dict(race.level)
    assert race.another([there], False) == [1]  # it may lead there next: a leader's rounds
    assert race.another([there, there], False) is None  # its two rounds there are in flight
    assert race.another([levels, there], False) == [1]  # a round at its old level is not its round


def test_a_round_is_stale_once_each_of_its_finalists_left_its_level_or_the_race() -> None:
    race = _race(repeats=2)
    levels = dict(race.level)
    assert not race.stale(levels)
    race.take_ended(levels, {1: breaks(8), 2: meets(8, 2000.0), CONTROL: meets(4, 300.0)})  # 1 goes down
    assert not race.stale(levels)  # 2 still stands at 8
    assert race.stale({1: 8.0, CONTROL: 4.0})  # your config there does not keep it
    race.alive.remove(2)
    assert race.stale(levels) and not race.stale(dict(race.level))
    assert not race.stale({CONTROL: 4.0}) and race.stale({CONTROL: 2.0})  # your config alone: its level


def test_the_first_phase_waits_for_its_rounds_in_flight_before_a_later_round() -> None:
    race = _race(finalists=1, repeats=2)
    levels = dict(race.level)
    race.take_ended(levels, {1: near(8), CONTROL: meets(4, 300.0)})
    assert race.another([levels], False) is None and race.phase == "rounds"  # its last round flies
    race.take_ended(levels, {1: near(8), CONTROL: meets(4, 300.0)})
    assert race.another([], False) == [1, CONTROL] and race.phase == "leader"


def _near(level: float, throughput: float) -> Point:
    """A round too near the limit to say, at ``throughput``."""
    return windowed(int(level), throughput, 19.6, spread=0.1)


def test_the_first_phase_asks_a_round_a_free_worker_while_its_rounds_and_those_in_flight_fall_short() -> None:
    race = _race(repeats=3)
    assert race.another([], False) == [1, 2, CONTROL]
    assert race.another([race.level] * 2, False) == [1, 2, CONTROL]
    assert race.another([race.level] * 3, False) is None  # three in flight: the phase's rounds
    points = {1: meets(8, 2000.0), 2: meets(8, 1000.0), CONTROL: meets(4, 300.0)}
    race.take_ended(dict(race.level), points)
    assert race.played == 1 and race.another([race.level] * 2, False) is None
    assert race.another([race.level], False) is not None


def test_first_phase_rounds_taken_as_they_end_are_taken_as_one_at_a_time_and_a_moved_racer_sits_out() -> None:
    race = _race(repeats=3)
    levels = dict(race.level)  # each round served before any ended
    race.take_ended(levels, {1: breaks(8), 2: meets(8), CONTROL: meets(4, 300.0)})  # 1 goes down
    race.take_ended(levels, {1: meets(8), 2: meets(8), CONTROL: meets(4, 300.0)})
    assert race.level[1] < 8 and race.rounds[1] == []  # its round at 8 that ended later was not taken
    assert race.count[1] == 1 and race.count[2] == 2 and len(race.rounds[CONTROL]) == 2


def test_a_first_phase_round_that_ends_after_the_phase_counts_for_the_leader_where_it_stands() -> None:
    race = _race(finalists=1, repeats=4)
    levels = dict(race.level)  # four rounds begun at once
    race.take_ended(levels, {1: near(8), CONTROL: meets(4, 300.0)})
    race.take_ended(levels, {1: near(8), CONTROL: meets(4, 300.0)})
    assert race.phase == "moved"  # settled: one finalist with two rounds; two rounds are still in flight
    race.take_ended(levels, {1: near(8), CONTROL: meets(4, 300.0)})
    assert race.phase == "leader" and len(race.rounds[1]) == 3 and len(race.rounds[CONTROL]) == 3


def test_your_config_sent_down_in_the_last_round_has_its_round_there_taken() -> None:
    race = _race(finalists=1, repeats=2)
    levels = dict(race.level)
    race.take_ended(levels, {1: near(8), CONTROL: breaks(4)})  # your config goes down a level
    race.take_ended(levels, {1: near(8), CONTROL: meets(4, 300.0)})  # served where it stood
    assert race.another([], False) == [CONTROL] and race.phase == "moved"
    assert race.another([dict(race.level)], False) is None  # its round there is in flight
    race.take_ended(dict(race.level), {CONTROL: meets(int(race.level[CONTROL]), 250.0)})
    assert race.phase == "leader" and len(race.rounds[CONTROL]) == 1  # taken: the race goes on


def _undecided_leader(repeats: int = 4) -> Race:
    """A race whose one finalist leads at 8 on two rounds too near the limit to say."""
    race = _race(finalists=1, repeats=repeats)
    for _ in range(2):
        _play(race, {1: near(8), CONTROL: meets(4, 300.0)})
    assert race.next_round(False) == [1, CONTROL] and race.phase == "leader"
    return race


def test_a_worker_the_race_leaves_free_gets_the_leader_s_round_a_level_down() -> None:
    race = _undecided_leader()
    here = [dict(race.level)] * 2
    assert race.another(here, False) is None  # its four rounds at 8: two taken, two in flight
    at = race.below(here, False)
    assert at is not None and at[1] < 8 and at[CONTROL] == 4.0  # your config beside it where it stands
    assert race.held(at, dict(race.level)) and not race.stale(at, dict(race.level))
    assert race.below([*here, *[at] * 3], False) == at  # up to a leader's rounds there
    assert race.below([*here, *[at] * 4], False) is None


def test_no_round_a_level_down_for_a_leader_that_meets_or_once_the_race_is_over() -> None:
    race = _race(finalists=1)
    _play(race, {1: meets(8), CONTROL: meets(4, 300.0)})
    _play(race, {1: meets(8), CONTROL: meets(4, 300.0)})
    assert race.below([], False) is None  # it meets at 8
    race.next_round(False)
    assert race.phase == "done" and race.below([], False) is None


def test_a_held_round_is_taken_once_the_leader_goes_to_its_level() -> None:
    race = _undecided_leader(repeats=3)
    above = dict(race.level)
    at = race.below([above], False)
    assert at is not None
    race.take_ended(above, {1: near(8), CONTROL: meets(4, 300.0)})  # its third: still undecided
    assert race.next_round(False) == [1, CONTROL] and race.level[1] == at[1]  # down to where it waits
    assert not race.held(at, above) and not race.stale(at, above)
    race.take_ended(at, {1: meets(int(at[1])), CONTROL: meets(4, 300.0)}, leader=1)
    assert len(race.rounds[1]) == 1 and race.count[1] == 4  # taken there


def test_a_held_round_is_stale_once_the_leader_goes_elsewhere() -> None:
    race = _undecided_leader(repeats=3)
    above = dict(race.level)
    at = race.below([above], False)
    assert at is not None
    race.level[1] = at[1] - 1  # as if sent to another level than the one it waits at
    assert race.stale(at, above) and not race.held(at, above)


def test_a_leader_sent_down_goes_where_its_held_rounds_wait_only_below_its_guess() -> None:
    race = _undecided_leader(repeats=3)
    guess = race.below([], False)
    assert guess is not None and guess[1] > 5  # the next level listed below 8 is 4
    race.ahead[1] = guess[1] - 1  # rounds held under the guess, above the next level listed
    race.take_ended(dict(race.level), {1: near(8), CONTROL: meets(4, 300.0)})
    race.next_round(False)
    assert race.level[1] == guess[1] - 1
    race = _undecided_leader(repeats=3)
    race.ahead[1] = 7.5  # above the guess: not there
    race.take_ended(dict(race.level), {1: near(8), CONTROL: meets(4, 300.0)})
    race.next_round(False)
    assert race.level[1] == guess[1]
