"""The finalists' race as a state: who is in it, at which level, and with which rounds.

Each transition is a method, and every verdict comes from :mod:`autotune.search`. The race does not
serve rounds. :func:`autotune.finals.race` asks it for the next round (:meth:`Race.next_round`),
serves that round, and gives it the points (:meth:`Race.take`).

The race goes in three phases:

1. ``rounds``: every racer gets a round, at most ``repeats`` times. After each round the outraced
   finalists leave. The phase ends early when one finalist is left with two rounds.
2. ``moved``: a racer sent down a level in the last round gets one round there (several at once,
   a finalist gets as many as a leader would: it may lead there next).
3. ``leader``: the leader must meet the SLA where it stands, as a mean across servers. It gets
   rounds there, with your config beside it, until it meets the SLA, is sent down, or leaves.

Several at once, a worker the race leaves free runs the leader's round a level down
(:meth:`Race.below`), held until the leader goes there; a round the race can never take ends
(:meth:`Race.stale`).

When your config is not a finalist, it races beside them as the **control**. It gets a round on
the same fresh servers every round, and it goes down a level like a contender. It is never
outraced and never wins. The winner's gain is read against its rounds
(:func:`autotune.results.gain`).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autotune.objective import RAW, Scoring, Sla
from autotune.points import Point, same_servers
from autotune.results import TrialResult, Verification
from autotune.search.noise import Estimate, Noise, better, not_ahead
from autotune.search.ranking import ranked
from autotune.search_space import Candidate

Carry = Callable[[Point], float]  # a round's throughput carried to the latency limit (see to_limit)
SETTLE_ROUNDS = 2  # the fewest rounds a finalist is judged on where it stands: two fresh servers


@dataclass
class Race:
    """A race's state. ``levels`` holds each racer's levels in turn (:func:`race_levels`).
    ``carries`` holds a closed loop's :func:`to_limit` for each racer. It is None in an open loop,
    where rounds count as measured."""

    sla: Sla
    percentile: int
    shares: dict[int, int]
    levels: dict[int, list[float]]
    carries: Mapping[int, Carry] | None
    changes: dict[int, int]  # how many fields each racer changes from your config; ties go to the fewest
    control: int | None = None  # your config's trial, racing beside the finalists but not one of them
    level: dict[int, float] = field(default_factory=dict)
    rounds: dict[int, list[Point]] = field(default_factory=dict)
    others: dict[int, list[tuple[float, tuple[Point, ...]]]] = field(default_factory=dict)
    count: dict[int, int] = field(default_factory=dict)
    repeats: int = 1  # the first phase's rounds, and the most rounds a leader gets where it stands
    phase: str = "rounds"  # then "moved", "leader" and "done"
    alive: list[int] = field(default_factory=list)  # the racers still in the race, in order
    beside: list[int] = field(default_factory=list)  # the control, when it races beside the leader
    played: int = 0  # rounds of the first phase played
    current: int | None = None  # the leader that is still getting rounds where it stands
    asked: list[int] = field(default_factory=list)  # the racers of the round being served
    out_of_time: bool = False  # the race stopped for the run's time budget
    ahead: dict[int, float] = field(default_factory=dict)  # the level a racer's held rounds wait at

    @classmethod
    def start(
        cls, ranked: Sequence[TrialResult], control: TrialResult | None, sla: Sla, percentile: int,
        scoring: Scoring, yours: Candidate | None, open_loop: bool, repeats: int = 1,
    ) -> Race:  # fmt: skip
        """A race of the finalists ``ranked``, and of ``control`` (your config's trial) when given.
        Each starts at its first level and gets at most ``repeats`` rounds (``--repeats``)."""
        racers = [*ranked, *([control] if control is not None else [])]
        levels = {r.number: race_levels(r, sla) for r in racers}
        carry = {r.number: to_limit(r, sla.limit_ms, percentile) for r in racers}
        return cls(
            sla, percentile, {r.number: scoring.share(r.candidate) for r in racers}, levels,
            None if open_loop else carry,
            changes_from(racers, yours), control.number if control is not None else None,
            level={n: listed[0] for n, listed in levels.items()}, rounds={r.number: [] for r in racers},
            others={r.number: [] for r in racers}, count=dict.fromkeys(levels, 0), repeats=repeats,
            alive=list(levels),
        )  # fmt: skip

    def next_round(self, out_of_time: bool) -> list[int] | None:
        """The racers of the next round, to serve and then pass to :meth:`take`. None when the
        race is over. ``out_of_time`` says the run's budget is spent. Then no round starts once
        each racer has had one."""
        while True:
            if self.phase == "rounds":
                if self.played < self.repeats and not self._cut(out_of_time):
                    return self._ask(self.alive)
                self.phase = "moved"
            elif self.phase == "moved":
                moved = [n for n in self.alive if not self.rounds[n]]  # down a level in the last round
                if moved and not self._cut(out_of_time):
                    return self._ask(moved)
                self._to_leader(moved, [])
            elif self.phase == "leader":
                if self.current is None and not self._next_leader(out_of_time):
                    self.phase = "done"
                    return None
                assert self.current is not None
                return self._ask([self.current, *self.beside])
            else:
                return None

    def take(self, points: Mapping[int, Point | None]) -> None:
        """Take the served round that :meth:`next_round` asked for. ``points`` holds each racer's
        point, or None where it failed."""
        kept = [n for n in self.asked if self.add(n, points.get(n))]
        gone = [n for n in self.asked if n not in kept]  # failed, or no level left
        if self.phase == "rounds":
            self.played += 1
            left = self.outraced(kept)
            self.alive = [n for n in self.alive if n not in gone and n not in left]
            if self.settled(self.alive):
                self.phase = "moved"
        elif self.phase == "moved":
            self._to_leader(self.asked, kept)
        elif self.phase == "leader":
            n = self.current
            assert n is not None
            self.beside = [c for c in self.beside if c not in gone]
            if n in kept and not self.rounds[n]:
                return  # this round sent it down a level, where it gets one round
            if n not in kept and self.rounds[n]:
                self.down(n)  # its server failed: it leaves, and its rounds there are kept
            self.current = None

    def another(self, flying: Sequence[Mapping[int, float]], out_of_time: bool) -> list[int] | None:
        """The racers of another round to begin beside the rounds in ``flying`` (each its racers'
        levels as it was served), then to take as it ends (:meth:`take_ended`). None: the race
        needs no round now; it waits for those in flight, or it is over. The first phase asks
        while its rounds and those in flight fall short; a leader, its rounds where it stands. A
        finalist that moved gets as many there, the rounds it needs if it leads there next; your
        config alone, one."""
        if self.phase == "rounds":
            if self.played + len(flying) < self.repeats and not self._cut(out_of_time):
                return self._ask(self.alive)
            if flying:
                return None
        numbers = self.next_round(out_of_time)
        if numbers is None:
            return None
        finalists = [n for n in numbers if n != self.control]
        asked = finalists or numbers  # your config alone, once it moved
        here = sum(all(at.get(n) == self.level[n] for n in asked) for at in flying)
        # a finalist that moved may lead there next: its round there and the leader's rounds after it
        need = self.repeats - len(self.rounds[asked[0]]) if self.phase == "leader" or finalists else 1
        return numbers if here < need else None

    def below(self, flying: Sequence[Mapping[int, float]], out_of_time: bool) -> dict[int, float] | None:
        """The levels of a round to begin where :meth:`another` asks none: the leader's (the first
        phase's leader so far) one level down (:func:`level_below` of its rounds so far), where it
        goes if its rounds where it stands leave it undecided; your config beside it where it stands.
        The round is held until the leader goes there (:meth:`held`). None: no such round."""
        if self.phase not in ("rounds", "leader") or self._cut(out_of_time):
            return None
        n = self.current if self.phase == "leader" else self.leader()
        if n is None or not self.rounds[n] or self.meets(n):
            return None
        there = level_below(self.level[n], self.rounds[n], self.sla, self.levels[n], self.spread())
        if there is not None:
            there = min(there, self.ahead.get(n, there))  # the level its held rounds wait at, if lower
        if there is None or sum(at.get(n) == there for at in flying) >= self.repeats:
            return None
        self.ahead[n] = there
        beside = self.beside if self.phase == "leader" else [c for c in [self.control] if c in self.alive]
        return {n: there, **{c: self.level[c] for c in beside}}

    def held(self, at: Mapping[int, float], above: Mapping[int, float]) -> bool:
        """Whether a round served at ``at`` for racers then at ``above`` (:meth:`below`) waits:
        a finalist of it still stands above the level it was served at."""
        return any(
            n != self.control and n in self.alive and at[n] < above[n] == self.level[n] for n in at
        )  # fmt: skip

    def stale(self, at: Mapping[int, float], above: Mapping[int, float] | None = None) -> bool:
        """Whether a round served at the levels ``at`` (for racers then at ``above``, :meth:`below`)
        can never be taken: each of its finalists (else your config) has left the race, or stands
        neither where it was served nor where it was then. Levels only go down."""
        above = above or at
        finalists = [n for n in at if n != self.control] or list(at)
        return not any(n in self.alive and self.level[n] in (at[n], above[n]) for n in finalists)

    def take_ended(
        self, at: Mapping[int, float], points: Mapping[int, Point | None], leader: int | None = None
    ) -> None:  # fmt: skip
        """A round that :meth:`another` asked, taken once it ended, as the round the race asks next
        (:meth:`next_round`): ``at`` holds its racers' levels as it was served; ``leader``, the
        leader it was served for. A racer that left, or moved a level since, sits it out. A
        leader's round stays its own while it stands there, though another took the lead."""
        again = self.next_round(False)  # a round served is taken, though the budget is spent since
        if again is None:
            return
        if self.phase == "leader" and self._took_over(leader, at):
            assert leader is not None
            self.current, again = leader, [leader, *self.beside]
        self._take_at(again, at, points)

    def _take_at(
        self, asked: Sequence[int], at: Mapping[int, float], points: Mapping[int, Point | None]
    ) -> bool:  # fmt: skip
        """Take a round served earlier as the round of ``asked``: its racers that still stand where
        ``at`` says it was served take their points. False, and nothing taken, where the leader the
        race asks for, or every finalist it asks for (else every racer), has left that level."""
        there = [n for n in asked if n in at and self.level[n] == at[n]]
        finalists = [n for n in asked if n != self.control]
        left = self.phase == "leader" and self.current not in there
        if left or not there or (finalists and not any(n in there for n in finalists)):
            return False
        self.asked = there
        self.take(points)
        return True

    def _took_over(self, served: int | None, levels: Mapping[int, float]) -> bool:
        """Whether another leader took the lead from ``served`` where both stand: ``served`` is
        still in at its level in ``levels`` with rounds to take, and the new leader kept its
        rounds (one sent down gets its round there first)."""
        n = self.current
        return (
            served is not None and n is not None and n != served and bool(self.rounds[n])
            and served in self.alive and self.level[served] == levels[served]
            and len(self.rounds[served]) < self.repeats
        )  # fmt: skip

    def _ask(self, numbers: Sequence[int]) -> list[int]:
        self.asked = list(numbers)
        return list(numbers)

    def _cut(self, out_of_time: bool) -> bool:
        """Whether no round may start: the run is out of time and each racer still in has had a
        round. Once true, it stays true."""
        if out_of_time and all(self.count[n] for n in self.alive):
            self.out_of_time = True
        return self.out_of_time

    def _to_leader(self, moved: Sequence[int], there: Sequence[int]) -> None:
        """Start the leader's phase. The ``moved`` racers that did not get a round ``there``
        leave."""
        self.alive = [n for n in self.alive if n not in moved or n in there]
        self.beside = [self.control] if self.control is not None and self.control in self.alive else []
        self.phase = "leader"

    def _next_leader(self, out_of_time: bool) -> bool:
        """Choose the leader that must still show it meets the SLA where it stands
        (:meth:`_shown`). False when there is none. A leader that has its most rounds there and is
        still undecided first goes a level down. With no level left, it leaves."""
        while True:
            n = self.leader()
            if n is None or self._cut(out_of_time) or self._shown(n):
                return False
            if len(self.rounds[n]) < self.repeats or self.down(n):
                self.current = n
                return True

    def _shown(self, n: int) -> bool:
        """Whether leader ``n`` meets the SLA where it stands on two rounds there at least (one
        where ``repeats`` allows one): a leader sent down a level gets a second round there before
        it wins, so that its throughput rests on two fresh servers."""
        return len(self.rounds[n]) >= min(SETTLE_ROUNDS, self.repeats) and self.meets(n)

    def spread(self) -> Noise:
        """:func:`round_spread` over every finalist's rounds at each of its levels. The control's
        rounds are left out: it watches the race and does not move its verdicts."""
        finalists = [n for n in self.rounds if n != self.control]
        past = (p for n in finalists for _, p in self.others[n])
        return round_spread([*(self.rounds[n] for n in finalists), *past], self.percentile)

    def add(self, n: int, point: Point | None) -> bool:
        """Add racer ``n``'s round. ``point`` is None when the round failed. False when the racer
        is out, because it failed or has no level left."""
        self.count[n] += 1
        if point is None:
            return False
        self.rounds[n].append(point)
        return not rounds_break(self.rounds[n], self.sla) or self.down(n)

    def down(self, n: int) -> bool:
        """Send racer ``n`` down to :func:`level_below`, keeping its rounds at this level: to the
        level its held rounds wait at (:meth:`below`) where that lies between the guess and the
        next level listed below. False when no level is left."""
        below = level_below(self.level[n], self.rounds[n], self.sla, self.levels[n], self.spread())
        ahead = self.ahead.pop(n, None)  # where its rounds held by Race.below wait
        listed = max((x for x in self.levels[n] if x < self.level[n]), default=0.0)
        if below is not None and ahead is not None and listed < ahead < below:
            below = ahead
        self.others[n].append((self.level[n], tuple(self.rounds[n])))
        self.rounds[n] = []
        if below is not None:
            self.level[n] = below
        return below is not None

    def outraced(self, alive: Sequence[int]) -> set[int]:
        """The finalists in ``alive`` that are :func:`outraced`. The control is never outraced."""
        racing: dict[int, Sequence[Point]] = {n: self.rounds[n] for n in alive if n != self.control}
        return outraced(racing, self.shares, self.carries, self.changes)

    def settled(self, alive: Sequence[int]) -> bool:
        """Whether at most one finalist is left, each one left with at least two rounds."""
        finalists = [n for n in alive if n != self.control]
        return len(finalists) <= 1 and all(len(self.rounds[n]) >= SETTLE_ROUNDS for n in finalists)

    def leader(self) -> int | None:
        """The :func:`race_leader` of the finalists still in the race whose rounds where they
        stand do not break the SLA. One outraced has left: it never leads."""
        standing = {
            n: pts
            for n, pts in self.rounds.items()
            if n != self.control and n in self.alive and pts and not rounds_break(pts, self.sla)
        }
        return race_leader(standing, self.shares, self.percentile, self.carries, self.changes)

    def meets(self, n: int) -> bool:
        """Whether racer ``n``'s rounds where it stands meet the SLA, as a mean across servers."""
        return rounds_meet(self.rounds[n], self.sla, self.spread())

    def verifications(self, order: Sequence[int]) -> list[Verification]:
        """A verification for each racer in ``order``: its rounds at its last level, with the
        levels it left as its ``others``. A racer that left the race at its last level stands on
        that level's rounds."""
        return [self._verification(n, self.spread()) for n in order]

    def _verification(self, n: int, spread: Noise) -> Verification:
        at, points, past = self.level[n], tuple(self.rounds[n]), list(self.others[n])
        if not points and past:
            at, points = past.pop()
        concurrency, rate = (0, at) if self.carries is None else (int(at), 0.0)
        met = rounds_met(points, self.sla, spread)
        limit = self.sla.limit_ms
        control, left = n == self.control, n != self.control and n not in self.alive
        return Verification(n, concurrency, points, met, rate, tuple(past), (), limit, control, left)


def to_limit(result: TrialResult, limit_ms: float, percentile: int) -> Carry:
    """A closed loop's race figure for a round of ``result``'s config.

    The figure is the round's throughput carried to the level where its latency would reach
    ``limit_ms``. The carry follows the least-squares slopes of log latency and log throughput
    against the level. The slopes are fit to the levels the trial's own search measured within a
    doubling of its operating point, on the side the round is carried to (:func:`_side`). The carry
    goes no further than those levels. Without slopes (one level, or a latency that does not
    grow), the figure is the throughput as measured."""
    best, measurement = result.best, result.measurement
    if best is None or measurement is None or not best.concurrency:
        return _measured
    top = best.level
    near = [p for p in measurement.points if top / 2 <= p.level <= top * 2 and p.throughput > 0]  # by level
    if len({p.level for p in near}) < 2 or any(p.latency_ms(percentile) <= 0 for p in near):
        return _measured
    levels = [p.level for p in near]
    latency = [math.log(p.latency_ms(percentile)) for p in near]
    throughput = [math.log(p.throughput) for p in near]

    def carried(point: Point) -> float:
        measured = point.latency_ms(percentile)
        if measured <= 0 or point.throughput <= 0:
            return point.throughput
        side = _side(levels, point.level, up=measured < limit_ms)
        grows = _slope(levels[side], latency[side])
        if grows <= 0:
            return point.throughput
        level = point.level + (math.log(limit_ms) - math.log(measured)) / grows
        level = min(max(level, levels[side][0]), levels[side][-1])
        return point.throughput * math.exp(_slope(levels[side], throughput[side]) * (level - point.level))

    return carried


def _side(levels: Sequence[float], here: float, up: bool) -> slice:
    """The part of the rising ``levels`` that a round at ``here`` is carried along. Going up, it
    starts at the last level at or below ``here``. Going down, it ends at the first level at or
    above it. A knee's growth below a round says nothing of the growth above it. Where this
    leaves fewer than two levels, the part is all of them."""
    if up:
        side = slice(max(bisect.bisect_right(levels, here) - 1, 0), None)
    else:
        side = slice(0, bisect.bisect_left(levels, here) + 1)
    return side if len(levels[side]) >= 2 else slice(None)


def _measured(point: Point) -> float:
    return point.throughput


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ``ys`` over ``xs`` (at least two distinct ``xs``)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def raced(points: Sequence[Point], share: int = 1, carry: Carry | None = None) -> Estimate:
    """A contender's throughput per ``share`` over its rounds: their mean and its error. Each
    round counts by ``carry``, or as measured without one. One round gives an infinite error. No
    rounds give a zero mean."""
    return Estimate.of([(carry or _measured)(p) for p in points]).scaled(1 / share)


NO_SPREAD = Noise()  # rounds judged on their windows alone, as on one server


def round_spread(samples: Iterable[Sequence[Point]], percentile: int) -> Noise:
    """How far a round's latency at ``percentile`` reads off the other rounds of its contender and
    level, from one fresh server to the next. It is a relative sd pooled over ``samples``. Each
    sample is one contender's rounds at one level. A sample of one round adds nothing."""
    return Noise.pooled([p.latency_ms(percentile) for p in points] for points in samples)


def rounds_latency(points: Sequence[Point], percentile: int, spread: Noise = NO_SPREAD) -> Estimate:
    """The latency at ``percentile`` of a contender's rounds at one level: their mean figure,
    with an error.

    Where a ``spread`` (:func:`round_spread`) is known, the error is that of a mean over this many
    fresh servers. A round's figure holds both its windows' noise and its server's, so that is all
    of it. Else the error is that of the rounds' windows, pooled. Without two windows at
    ``percentile``, there is no error."""
    mean = sum(p.latency_ms(percentile) for p in points) / len(points) if points else 0.0
    across = spread.cv * mean / math.sqrt(len(points)) if spread.df and points else 0.0
    if across:
        return Estimate(mean, across, len(points), spread.df)
    pooled = all(p.window_percentile == percentile for p in points)
    windows = [w for p in points for w in p.window_latencies_ms] if pooled else []
    own = Estimate.of(windows) if len(windows) >= 2 else Estimate(mean, 0.0, 0)  # none: the figure alone
    return Estimate(mean, own.se, own.n)


def rounds_meet(points: Sequence[Point], sla: Sla, spread: Noise = NO_SPREAD) -> bool:
    """Whether rounds at one level meet the SLA. There must be at least one round, and each must
    be admitted (:meth:`Sla.admits`). The upper bound of :func:`rounds_latency` must be within the
    limit. With ``spread``, that bound is for their mean across servers."""
    admitted = bool(points) and all(sla.admits(p) for p in points)
    return admitted and rounds_latency(points, sla.percentile, spread).high <= sla.limit_ms


def rounds_met(points: Sequence[Point], sla: Sla, spread: Noise = NO_SPREAD) -> int:
    """How many rounds a verification counts as meeting the SLA: all of them when
    :func:`rounds_meet` holds for their mean, else those that meet it one by one."""
    return len(points) if rounds_meet(points, sla, spread) else sum(map(sla.met_by, points))


def rounds_break(points: Sequence[Point], sla: Sla) -> bool:
    """Whether rounds at one level break the SLA. They do when one round is not admitted, or when
    the lower bound of :func:`rounds_latency` is over the limit. When neither this nor
    :func:`rounds_meet` holds, the rounds are undecided."""
    admitted = all(sla.admits(p) for p in points)
    return not admitted or rounds_latency(points, sla.percentile).low > sla.limit_ms


def outraced(
    rounds: dict[int, Sequence[Point]], shares: dict[int, int], carries: Mapping[int, Carry] | None = None,
    changes: Mapping[int, int] | None = None,
) -> set[int]:  # fmt: skip
    """The trial numbers of the contenders that leave the race. ``rounds`` holds each
    contender's rounds. A contender leaves when it is :func:`autotune.search.noise.not_ahead` of
    the :func:`_top` by :func:`raced` throughput, round by round where they shared servers
    (:func:`paired`)."""
    found = _raced(rounds, shares, carries)
    if not found:
        return set()
    pair = _pairs(rounds, shares, carries)
    top = _top(found, changes, pair=pair)
    return {n for n, e in found.items() if n != top and not_ahead(e, found[top], paired=pair(n, top))}


def paired(
    a: Sequence[Point], b: Sequence[Point], share_a: int = 1, share_b: int = 1,
    carry_a: Carry | None = None, carry_b: Carry | None = None,
) -> Estimate | None:  # fmt: skip
    """Contender ``a``'s :func:`raced` figure less ``b``'s, round by round over the rounds they
    shared a server in (:attr:`Point.stage`): the server moves both alike, and the difference
    leaves that out. None below two such rounds."""
    both = same_servers(a, b)
    if len(both) < 2:
        return None
    mine, other = carry_a or _measured, carry_b or _measured
    return Estimate.of([mine(p) / share_a - other(q) / share_b for p, q in both])


def _pairs(
    rounds: Mapping[int, Sequence[Point]], shares: Mapping[int, int], carries: Mapping[int, Carry] | None
) -> Callable[[int, int], Estimate | None]:
    """:func:`paired` for two contenders of ``rounds``, by their trial numbers."""
    carry = carries or {}

    def pair(a: int, b: int) -> Estimate | None:
        return paired(rounds[a], rounds[b], shares.get(a, 1), shares.get(b, 1), carry.get(a), carry.get(b))

    return pair


def _top(
    found: Mapping[int, Estimate],
    changes: Mapping[int, int] | None,
    tie: Callable[[int], float] | None = None,
    pair: Callable[[int, int], Estimate | None] | None = None,
) -> int:
    """The contender to beat. Among those that the one with the most throughput is not
    :func:`better` than (round by round where ``pair`` can), it takes the one with the fewest
    ``changes`` from your config. A winner written back then changes no more of your file than it
    must. Further ties go to the least ``tie``, or by default to the most throughput."""
    leader = max(found, key=lambda n: found[n].mean)
    tied = [n for n, e in found.items() if not better(found[leader], e, pair(leader, n) if pair else None)]
    near = changes or {}
    return min(tied, key=lambda n: (near.get(n, 0), tie(n) if tie else -found[n].mean))


def _raced(
    rounds: Mapping[int, Sequence[Point]], shares: Mapping[int, int], carries: Mapping[int, Carry] | None
) -> dict[int, Estimate]:
    carry = carries or {}
    return {n: raced(points, shares.get(n, 1), carry.get(n)) for n, points in rounds.items() if points}


def race_leader(
    rounds: Mapping[int, Sequence[Point]], shares: Mapping[int, int], percentile: int,
    carries: Mapping[int, Carry] | None = None, changes: Mapping[int, int] | None = None,
) -> int | None:  # fmt: skip
    """The trial number of the :func:`_top` contender by :func:`raced` throughput (round by round
    where they shared servers, :func:`paired`). None without contenders. Among ties it takes the
    fewest ``changes`` from your config. Then, unless every contender has a carry, it takes the
    lowest median latency at ``percentile``."""
    found = _raced(rounds, shares, carries)
    if not found:
        return None
    pair = _pairs(rounds, shares, carries)
    if carries is not None and all(n in carries for n in found):
        return _top(found, changes, pair=pair)
    latency = {n: statistics.median_high(p.latency_ms(percentile) for p in rounds[n]) for n in found}
    return _top(found, changes, latency.__getitem__, pair)


def race_winner(
    verifications: Sequence[Verification], results: Sequence[TrialResult], sla: Sla, scoring: Scoring = RAW,
    yours: Candidate | None = None,
) -> int | None:  # fmt: skip
    """The :func:`race_leader` of the contenders that passed and stayed in the race to its end
    (none stayed: of those that passed). In a closed loop, each one's rounds are carried to the
    limit it was raced at (:func:`to_limit`). Ties go to the one nearest to ``yours``. When none
    passed, it is the first :func:`ranked` trial that was not raced."""
    shares = {r.number: scoring.share(r.candidate) for r in results}
    contenders = [v for v in verifications if v.passed and not v.control]
    passed = {v.trial: v.points for v in [v for v in contenders if not v.left] or contenders}
    if passed:
        by_number = {r.number: r for r in results}
        carries = {
            v.trial: to_limit(by_number[v.trial], v.limit_ms, sla.percentile)
            for v in verifications
            if v.trial in passed and v.concurrency and v.limit_ms > 0 and v.trial in by_number
        }
        changes = changes_from(results, yours)
        complete = carries if len(carries) == len(passed) else None
        return race_leader(passed, shares, sla.percentile, complete, changes)
    raced_trials = {v.trial for v in verifications if not v.control}
    return next((r.number for r in ranked(results, scoring) if r.number not in raced_trials), None)


def changes_from(results: Iterable[TrialResult], yours: Candidate | None) -> dict[int, int]:
    """How many fields each trial's candidate changes from ``yours``. Empty without ``yours``."""
    if yours is None:
        return {}
    return {r.number: r.candidate.changes_from(yours) for r in results if r.candidate is not None}


def race_levels(result: TrialResult, sla: Sla) -> list[float]:
    """The levels a contender races at, in turn. The first is its operating point's. Then come
    the lower levels its search found meeting the SLA, highest first. Without any, and with an
    operating point above 1, the one lower level is half the operating point's."""
    assert result.best is not None and result.measurement is not None
    top = result.best.level
    met = {p.level for p in result.measurement.points if p.level < top and sla.met_by(p)}
    lower = sorted(met, reverse=True)
    if not lower and top > 1:
        lower = [float(max(1, int(top) // 2))] if result.best.concurrency else [top / 2]
    return [top, *lower]


def level_below(
    level: float, points: Sequence[Point], sla: Sla, listed: Sequence[float], spread: Noise = NO_SPREAD
) -> float | None:
    """The next level down after rounds at ``level`` did not meet the SLA.

    In a closed loop, it guesses the clients at which the latency's upper bound would reach the
    limit, taking the bound as proportional to the clients. The bound is :func:`rounds_latency`
    with ``spread``. The guess is used when it is below ``level`` and above the highest lower
    level in ``listed``. Else the result is that listed level, or None when there is none."""
    known = max((x for x in listed if x < level), default=None)
    if points and points[0].concurrency and level > 1:
        bound = rounds_latency(points, sla.percentile, spread).high
        guess = min(level - 1, math.floor(level * sla.limit_ms / bound)) if bound > 0 else 0
        if guess >= 1 and (known is None or guess > known):
            return float(guess)
    return known
