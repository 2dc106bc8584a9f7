"""The finalists' race as a state: who is in it, at which level, with which rounds; each
transition a method, every verdict one of :mod:`autotune.rules`. Serving the rounds is not its
business (:func:`autotune.finals.race` serves them and tells it each round).

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

    @classmethod
    def start(
        cls, ranked: Sequence[TrialResult], control: TrialResult | None, sla: Sla, percentile: int,
        scoring: Scoring, yours: Candidate | None, open_loop: bool,
    ) -> Race:  # fmt: skip
        """The finalists ``ranked`` (and ``control``, your config's trial) at their first levels."""
        racers = [*ranked, *([control] if control is not None else [])]
        levels = {r.number: rules.race_levels(r, sla) for r in racers}
        carry = {r.number: rules.to_limit(r, sla.limit_ms, percentile) for r in racers}
        return cls(
            sla, percentile, {r.number: scoring.share(r.candidate) for r in racers}, levels,
            None if open_loop else carry,
            rules.changes_from(racers, yours), control.number if control is not None else None,
            level={n: listed[0] for n, listed in levels.items()}, rounds={r.number: [] for r in racers},
            others={r.number: [] for r in racers}, count=dict.fromkeys(levels, 0),
        )  # fmt: skip

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
