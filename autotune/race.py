"""The finalists' race as a state: who is in it, at which level, with which rounds; each
transition a method, every verdict one of :mod:`autotune.rules`. Serving the rounds is not its
business: :func:`autotune.finals.race` asks it for the next round (:meth:`Race.next_round`),
serves that round, and tells it the points (:meth:`Race.take`).

The race goes in three phases:

1. ``rounds``: every racer a round, at most ``repeats`` times. After each round the outraced
   finalists leave. It ends early when one finalist is left with two rounds.
2. ``moved``: a racer sent down a level in the last round gets one round there.
3. ``leader``: the leader must meet the SLA where it stands, as a mean across servers. It gets
   rounds there (your config beside it) until it does, or it is sent down, or it leaves.

Your config races beside the finalists as the **control** when it is not one of them: it gets a
round on the same fresh servers every round, goes down a level like a contender, and never
leaves by being outraced nor wins. Its rounds are what the winner's gain is read against
(:func:`autotune.results.gain`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autotune import rules
from autotune.noise import Noise
from autotune.objective import Scoring, Sla
from autotune.points import Point
from autotune.results import TrialResult, Verification
from autotune.search_space import Candidate


@dataclass
class Race:
    """A race's state. ``levels``: each racer's levels in turn (:func:`rules.race_levels`);
    ``carries``: a closed loop's :func:`rules.to_limit` (None: an open loop's, as measured)."""

    sla: Sla
    percentile: int
    shares: dict[int, int]
    levels: dict[int, list[float]]
    carries: Mapping[int, rules.Carry] | None
    changes: dict[int, int]  # each racer's fields changed from your config (ties go to the fewest)
    control: int | None = None  # your config's trial, racing beside the finalists (not one of them)
    level: dict[int, float] = field(default_factory=dict)
    rounds: dict[int, list[Point]] = field(default_factory=dict)
    others: dict[int, list[tuple[float, tuple[Point, ...]]]] = field(default_factory=dict)
    count: dict[int, int] = field(default_factory=dict)
    repeats: int = 1  # the rounds of the first phase, and a leader's most where it stands
    phase: str = "rounds"  # then "moved", "leader", "done"
    alive: list[int] = field(default_factory=list)  # the racers still in the race, in order
    beside: list[int] = field(default_factory=list)  # the control, beside the leader's rounds
    played: int = 0  # rounds of the first phase played
    current: int | None = None  # the leader whose rounds where it stands go on
    asked: list[int] = field(default_factory=list)  # the racers of the round being served
    out_of_time: bool = False  # the race stopped for the run's time budget

    @classmethod
    def start(
        cls, ranked: Sequence[TrialResult], control: TrialResult | None, sla: Sla, percentile: int,
        scoring: Scoring, yours: Candidate | None, open_loop: bool, repeats: int = 1,
    ) -> Race:  # fmt: skip
        """The finalists ``ranked`` (and ``control``, your config's trial) at their first levels,
        for at most ``repeats`` rounds each (``--repeats``)."""
        racers = [*ranked, *([control] if control is not None else [])]
        levels = {r.number: rules.race_levels(r, sla) for r in racers}
        carry = {r.number: rules.to_limit(r, sla.limit_ms, percentile) for r in racers}
        return cls(
            sla, percentile, {r.number: scoring.share(r.candidate) for r in racers}, levels,
            None if open_loop else carry,
            rules.changes_from(racers, yours), control.number if control is not None else None,
            level={n: listed[0] for n, listed in levels.items()}, rounds={r.number: [] for r in racers},
            others={r.number: [] for r in racers}, count=dict.fromkeys(levels, 0), repeats=repeats,
            alive=list(levels),
        )  # fmt: skip

    def next_round(self, out_of_time: bool) -> list[int] | None:
        """The racers of the next round, to serve and then :meth:`take`; None: the race is over.
        ``out_of_time``: the run's budget is spent; once each racer has a round, no round starts."""
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
        """The round :meth:`next_round` asked for, served: each racer's point (None: it failed)."""
        kept = [n for n in self.asked if self.add(n, points.get(n))]
        if self.phase == "rounds":
            self.played += 1
            left = self.outraced(kept)
            self.alive = [n for n in kept if n not in left]
            if self.settled(self.alive):
                self.phase = "moved"
        elif self.phase == "moved":
            self._to_leader(self.asked, kept)
        elif self.phase == "leader":
            n = self.current
            assert n is not None
            self.beside = [c for c in self.beside if c in kept]
            if n in kept and not self.rounds[n]:
                return  # sent down a level by this round: one round there
            if n not in kept and self.rounds[n]:
                self.down(n)  # its server failed: it leaves, on its rounds there
            self.current = None

    def _ask(self, numbers: Sequence[int]) -> list[int]:
        self.asked = list(numbers)
        return list(numbers)

    def _cut(self, out_of_time: bool) -> bool:
        """Out of time, and each racer still in has a round: no round starts."""
        if out_of_time and all(self.count[n] for n in self.alive):
            self.out_of_time = True
        return self.out_of_time

    def _to_leader(self, moved: Sequence[int], there: Sequence[int]) -> None:
        """The ``moved`` racers that did not get a round ``there`` leave; the leader's phase."""
        self.alive = [n for n in self.alive if n not in moved or n in there]
        self.beside = [self.control] if self.control is not None and self.control in self.alive else []
        self.phase = "leader"

    def _next_leader(self, out_of_time: bool) -> bool:
        """The leader that must still show it meets the SLA where it stands (False: none). One at
        its most rounds there, undecided, goes a level down first (none left: it leaves)."""
        while True:
            n = self.leader()
            if n is None or self.meets(n) or self._cut(out_of_time):
                return False
            if len(self.rounds[n]) < self.repeats or self.down(n):
                self.current = n
                return True

    def spread(self) -> Noise:
        """:func:`rules.round_spread` over every finalist's rounds at each of its levels (the
        control's are left out: it watches the race, it does not move its verdicts)."""
        finalists = [n for n in self.rounds if n != self.control]
        past = (p for n in finalists for _, p in self.others[n])
        return rules.round_spread([*(self.rounds[n] for n in finalists), *past], self.percentile)

    def add(self, n: int, point: Point | None) -> bool:
        """Racer ``n``'s round (None: it failed); False: it is out (failed, or no level left)."""
        self.count[n] += 1
        if point is None:
            return False
        self.rounds[n].append(point)
        return not rules.rounds_break(self.rounds[n], self.sla) or self.down(n)

    def down(self, n: int) -> bool:
        """Racer ``n`` to :func:`rules.level_below`, its rounds here kept; False: none is left."""
        below = rules.level_below(self.level[n], self.rounds[n], self.sla, self.levels[n], self.spread())
        self.others[n].append((self.level[n], tuple(self.rounds[n])))
        self.rounds[n] = []
        if below is not None:
            self.level[n] = below
        return below is not None

    def outraced(self, alive: Sequence[int]) -> set[int]:
        """The finalists of ``alive`` :func:`rules.outraced` (the control is neither)."""
        racing: dict[int, Sequence[Point]] = {n: self.rounds[n] for n in alive if n != self.control}
        return rules.outraced(racing, self.shares, self.carries, self.changes)

    def settled(self, alive: Sequence[int]) -> bool:
        """One finalist is left (or none), each left with two rounds at least."""
        finalists = [n for n in alive if n != self.control]
        return len(finalists) <= 1 and all(len(self.rounds[n]) >= 2 for n in finalists)

    def leader(self) -> int | None:
        """:func:`rules.race_leader` of the finalists whose rounds where they stand do not break."""
        standing = {
            n: pts
            for n, pts in self.rounds.items()
            if n != self.control and pts and not rules.rounds_break(pts, self.sla)
        }
        return rules.race_leader(standing, self.shares, self.percentile, self.carries, self.changes)

    def meets(self, n: int) -> bool:
        """Racer ``n``'s rounds where it stands meet the SLA as a mean across servers."""
        return rules.rounds_meet(self.rounds[n], self.sla, self.spread())

    def verifications(self, order: Sequence[int]) -> list[Verification]:
        """Each racer's rounds at its last level (those it left, its ``others``); one that left
        the race at its last level stands on that level's rounds."""
        return [self._verification(n, self.spread()) for n in order]

    def _verification(self, n: int, spread: Noise) -> Verification:
        at, points, past = self.level[n], tuple(self.rounds[n]), list(self.others[n])
        if not points and past:
            at, points = past.pop()
        concurrency, rate = (0, at) if self.carries is None else (int(at), 0.0)
        met = (
            len(points) if rules.rounds_meet(points, self.sla, spread) else sum(map(self.sla.met_by, points))
        )
        limit = self.sla.limit_ms
        return Verification(n, concurrency, points, met, rate, tuple(past), (), limit, n == self.control)
