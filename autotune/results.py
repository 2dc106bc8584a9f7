"""Plain records of a finished (or running) tuning run, as the report and write-back read them.

``study.py`` turns Optuna's trials into :class:`TrialResult`; nothing here imports optuna.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autotune.objective import Scoring, Sla
from autotune.points import Measurement, Point, same_servers
from autotune.search.noise import RESOLUTION, Estimate, ahead, relative_bound, t95
from autotune.search_space import Candidate

COMPLETE = "COMPLETE"
FAIL = "FAIL"
PRUNED = (
    "PRUNED"  # not measured: another trial stands in for it (its reused_from), or it lies outside the space
)
RUNNING = "RUNNING"


@dataclass(frozen=True)
class TrialResult:
    number: int
    state: str  # COMPLETE, FAIL, PRUNED or RUNNING
    candidate: Candidate | None
    params: dict[str, object]
    baseline: bool
    measurement: Measurement | None  # None for failed and pruned trials: only what was measured for it
    reason: str = ""  # one line, for failed and pruned trials
    log_tail: str = ""  # the server log's last lines, for failed trials
    duration_s: float = 0.0
    # PRUNED, not measured: a repeat of an earlier trial's candidate, or a config that trial
    # stands in for (autotune.search.walk.dominated); its figures are that trial's, never its own
    reused_from: int | None = None
    # FAIL because the tuner was stopped (Ctrl-C, SIGTERM, kill -9) while it ran: it is measured
    # again on --resume and does not count against the budget. A crash is a FAIL with its reason.
    interrupted: bool = False
    # FAIL because its answers differed from your config's (autotune.outputs): infeasible, however fast
    wrong_outputs: bool = False
    node: str = ""  # the Ray node that measured it ("": this machine; autotune.fleet)
    # PRUNED as the twin of a trial still in flight (several at once): not a proposal of its own
    twin_in_flight: bool = False

    @property
    def output_check(self) -> str:
        """What the check of its answers found: "passed", "reference" (your config's, the ones the
        others are held to), "differs", or "" (not checked)."""
        if self.wrong_outputs:
            return "differs"
        return self.measurement.output_check if self.measurement is not None else ""

    @property
    def best(self) -> Point | None:
        return self.measurement.best if self.measurement else None

    @property
    def feasible(self) -> bool:
        return self.best is not None

    def goodput(self) -> float:
        return self.best.throughput if self.best else 0.0

    def estimate(self, share: int = 1) -> Estimate | None:
        """Its goodput per ``share`` GPUs with its error across servers (the window noise pooled
        over its search's points, and a fresh server's spread); None without an operating point."""
        if self.best is None or self.measurement is None:
            return None
        return self.best.throughput_estimate(self.measurement.noise).across_servers().scaled(1 / share)


@dataclass(frozen=True)
class Verification:
    """Repeated measurements of a finalist at its chosen operating point: a concurrency
    (closed loop) or a request rate (open loop, ``concurrency`` 0)."""

    trial: int
    concurrency: int
    points: tuple[Point, ...]
    sla_met: int  # how many repeats met the SLA
    request_rate: float = 0.0
    # the levels a race left (autotune.search.racing.level_below), each with its rounds there; the one it
    # stands on left out
    others: tuple[tuple[float, tuple[Point, ...]], ...] = ()
    # repeats set aside and measured again, with their levels (runs recorded by the stability
    # rules: our client's stalls may have decided their tails)
    redone: tuple[tuple[float, Point], ...] = ()
    # the latency limit a race held its rounds to (the search's headroom; 0.0: not raced, or
    # recorded before races kept it): what autotune.search.racing.to_limit carries them to
    limit_ms: float = 0.0
    control: bool = False  # your config, raced beside the finalists (autotune.search.racing): it never wins
    # a finalist that left the race before its end (outraced, failed, or no level left): it wins only if
    # none stayed (autotune.search.racing.race_winner)
    left: bool = False

    @property
    def where(self) -> str:
        """``concurrency 8`` or ``420 req/s``."""
        return f"concurrency {self.concurrency}" if self.concurrency else f"{self.request_rate:.4g} req/s"

    @property
    def level(self) -> float:
        """The load it was verified at, as :attr:`Point.level` counts it."""
        return float(self.concurrency) if self.concurrency else self.request_rate

    @property
    def median_throughput(self) -> float:
        values = sorted(p.throughput for p in self.points)
        return values[len(values) // 2] if values else 0.0

    @property
    def passed(self) -> bool:
        """Every repeat met the SLA."""
        return bool(self.points) and self.sla_met == len(self.points)

    def median_latency_ms(self, percentile: int) -> float:
        values = sorted(p.latency_ms(percentile) for p in self.points)
        return values[len(values) // 2] if values else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "sla_met": self.sla_met,
            "points": [p.to_dict() for p in self.points],
            "others": [
                {"level": level, "points": [p.to_dict() for p in points]} for level, points in self.others
            ],
            "redone": [{"level": level, "point": p.to_dict()} for level, p in self.redone],
            "limit_ms": self.limit_ms,
            "control": self.control,
            "left": self.left,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verification:
        points = tuple(Point.from_dict(p) for p in data["points"])
        rate = float(data.get("request_rate", 0.0))
        others = tuple(
            (float(o["level"]), tuple(Point.from_dict(p) for p in o["points"]))
            for o in data.get("others", ())
        )
        redone = tuple((float(r["level"]), Point.from_dict(r["point"])) for r in data.get("redone", ()))
        trial, concurrency, met = int(data["trial"]), int(data["concurrency"]), int(data["sla_met"])
        limit, control = float(data.get("limit_ms", 0.0)), bool(data.get("control", False))
        left = bool(data.get("left", False))
        return cls(trial, concurrency, points, met, rate, others, redone, limit, control, left)


@dataclass(frozen=True)
class OpenLoopCheck:
    """A concurrency run's winner under arrivals at a rate: from the rate its closed loop was
    credited with (its verified throughput, in requests per second), down to the highest rate
    whose latency, counted from each request's scheduled send, met the SLA, or the first whose
    latency's interval still held the limit (the check stops there: noise hides a finer answer)."""

    trial: int
    credited_rate: float  # requests/s the closed loop sustained
    distribution: str  # the arrivals: poisson or constant
    points: tuple[Point, ...]  # in the order measured
    sustained_rate: float  # the highest rate measured that met the SLA; 0.0: none did
    limit_rate: float = 0.0  # the rate left undecided, where the check stopped; 0.0: none was

    def summary(self) -> str:
        """The check in a sentence, for the console and the report."""
        head = f"Under {self.distribution} arrivals (open loop) the winner"
        closed = f"the {self.credited_rate:.4g} req/s its closed loop was credited with"
        if self.sustained_rate >= self.credited_rate * 0.999:
            return f"{head} met the SLA at {closed}."
        tail = "production traffic arrives at a rate, --load rate tunes for it."
        if self.limit_rate > 0:
            met = f"; it met it at {self.sustained_rate:.4g} req/s" if self.sustained_rate > 0 else ""
            return (
                f"{head} reached the SLA's limit at about {self.limit_rate:.4g} req/s, "
                f"{self.limit_rate / self.credited_rate:.0%} of {closed} (its interval there held "
                f"the limit{met}): {tail}"
            )
        if self.sustained_rate <= 0:
            low = min((p.request_rate for p in self.points), default=0.0)
            return (
                f"{head} broke the SLA even at {low:.4g} req/s, against {closed}: "
                "size for arrivals with --load rate."
            )
        share = self.sustained_rate / self.credited_rate
        return f"{head} met the SLA up to {self.sustained_rate:.4g} req/s, {share:.0%} of {closed}: {tail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "trial": self.trial, "credited_rate": self.credited_rate, "distribution": self.distribution,
            "sustained_rate": self.sustained_rate, "points": [p.to_dict() for p in self.points],
            "limit_rate": self.limit_rate,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpenLoopCheck:
        points = tuple(Point.from_dict(p) for p in data["points"])
        return cls(
            int(data["trial"]), float(data["credited_rate"]), str(data["distribution"]), points,
            float(data["sustained_rate"]), float(data.get("limit_rate", 0.0)),
        )  # fmt: skip


@dataclass(frozen=True)
class Recommendation:
    """The operating point to recommend for a trial: the medians of its race rounds where it
    was raced, else the best point of its search."""

    concurrency: int  # 0: an open loop, at request_rate
    throughput: float
    p50_ms: float
    latency_ms: float  # at the SLA percentile
    verification: Verification | None = None
    request_rate: float = 0.0

    @property
    def where(self) -> str:
        """``concurrency 8`` or ``420 req/s``."""
        return f"concurrency {self.concurrency}" if self.concurrency else f"{self.request_rate:.4g} req/s"


def recommendation(
    result: TrialResult, verifications: Sequence[Verification], percentile: int
) -> Recommendation | None:
    """One answer for the console, the report and the benchmarks; None without a feasible point."""
    v = next((v for v in verifications if v.trial == result.number and v.points), None)
    if v is not None:
        return Recommendation(
            v.concurrency, v.median_throughput, v.median_latency_ms(50), v.median_latency_ms(percentile), v,
            v.request_rate,
        )  # fmt: skip
    best = result.best
    if best is None:
        return None
    return Recommendation(
        best.concurrency, best.throughput, best.p50_ms, best.latency_ms(percentile), None, best.request_rate
    )


@dataclass(frozen=True)
class Gain:
    """The winner against your config, on the figures the summary shows for each
    (:func:`recommendation`): the objective's ratio (goodput, or goodput per GPU), the
    throughput's, whose figure is the search's (:attr:`as_searched`), the ratio's interval and whether the
    winner was shown ahead of your config by :data:`autotune.search.noise.RESOLUTION`
    (:func:`autotune.search.noise.ahead`): on their rounds where both raced twice or more, else
    on the search's estimates. No verdict where neither raced or the figures have no spread."""

    ratio: float
    throughput: float
    baseline: float  # your config's figure, as the objective counts it
    low: float = 0.0  # the ratio's one-sided bounds at the noise model's confidence
    high: float = 0.0
    shown: bool | None = None  # None: neither raced, no verdict
    searched: bool = False  # the interval and verdict are the search's estimates'
    as_searched: str = ""  # whose figure is the search's: "", "the winner", "your config" or "both"

    @property
    def figures(self) -> str:
        """Which figures the ratio compares, for people."""
        if self.as_searched == "both":
            return "both as searched"
        sides = {
            "the winner": "the winner as searched, your config raced",
            "your config": "the winner raced, your config as searched",
        }.get(self.as_searched, "both raced, too few rounds to compare")
        if not math.isfinite(self.high):
            return f"{sides}; too few figures for an interval"
        if self.searched:
            return f"{sides}; {self.low:.2f}-{self.high:.2f}x by the search's figures"
        return f"{self.low:.2f}-{self.high:.2f}x, raced on the same fresh servers"


def gain(
    winner: TrialResult | None, baseline: TrialResult | None, verifications: Sequence[Verification],
    percentile: int, scoring: Scoring,
) -> Gain | None:  # fmt: skip
    """The winner's recommended figure over your config's (None where either has none), with its
    interval and verdict where either raced."""
    if winner is None or baseline is None:
        return None
    w, b = (recommendation(r, verifications, percentile) for r in (winner, baseline))
    if w is None or b is None or b.throughput <= 0:
        return None
    ratio = w.throughput / b.throughput
    shares = scoring.share(baseline.candidate) / scoring.share(winner.candidate)
    base = scoring.score(b.throughput, baseline.candidate)
    unraced = [who for who, r in (("the winner", w), ("your config", b)) if r.verification is None]
    side = "both" if len(unraced) == 2 else "".join(unraced)
    found = Gain(ratio * shares, ratio, base, as_searched=side)  # shares: 1 unless the run counts per GPU
    if side == "both":  # no race (--repeats 0): no verdict
        return found
    if winner.number == baseline.number:  # your config won the race
        return replace(found, low=1.0, high=1.0, shown=False)
    share_w, share_b = scoring.share(winner.candidate), scoring.share(baseline.candidate)
    paired = _paired(w.verification, b.verification, share_w, share_b)
    if paired is not None:  # rounds on the same servers: what moved both is taken out
        spread = t95(paired.df) * paired.se
        low, high = found.ratio * math.exp(-spread), found.ratio * math.exp(spread)
        return replace(found, low=low, high=high, shown=paired.mean - spread > math.log1p(RESOLUTION))
    pair = (
        (_raced(w.verification, share_w), _raced(b.verification, share_b))
        if w.verification is not None and b.verification is not None
        else None
    )
    if pair is None or pair[0].n < 2 or pair[1].n < 2:  # no spread of rounds: the search's estimates judge
        searched = (winner.estimate(share_w), baseline.estimate(share_b))
        if searched[0] is None or searched[1] is None:
            return replace(found, low=0.0, high=math.inf)
        pair = (searched[0], searched[1])
        found = replace(found, searched=True)
    mine, yours = pair
    spread = relative_bound(mine, yours)
    if not math.isfinite(spread):  # figures without a spread: no verdict
        return replace(found, low=0.0, high=math.inf)
    low, high = found.ratio * math.exp(-spread), found.ratio * math.exp(spread)
    return replace(found, low=low, high=high, shown=ahead(mine, yours))


def _paired(
    mine: Verification | None, yours: Verification | None, share_mine: int, share_yours: int
) -> Estimate | None:  # fmt: skip
    """The log of the winner's throughput over your config's (each per its share of GPUs), one
    figure a race round they shared a server in (:attr:`Point.stage`); None below two such rounds.
    A round's server moves both racers alike: half their rounds' spread (benchmarks/README.md)."""
    if mine is None or yours is None:
        return None
    ratios = [
        math.log(p.throughput / share_mine / (q.throughput / share_yours))
        for p, q in same_servers(mine.points, yours.points)
        if p.throughput > 0 and q.throughput > 0
    ]
    return Estimate.of(ratios) if len(ratios) >= 2 else None


def _raced(v: Verification, share: int) -> Estimate:
    """A racer's throughput over its rounds as measured (per ``share`` GPUs), with their spread."""
    return Estimate.of([p.throughput for p in v.points]).scaled(1 / share)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    model: str
    sla: Sla
    launcher: str
    original_config: str  # config.pbtxt text before tuning
    started: str  # ISO time
    finished: str = ""
    winner: int | None = None  # trial number
    winner_config: str = ""  # config.pbtxt text of the winner
    winner_diff: str = ""
    verifications: tuple[Verification, ...] = ()
    workload: str = ""  # what each request carried, one line (settings.Workload.label)
    traffic: str = ""  # how candidates were loaded, one line (settings.Traffic.label)
    open_loop_run: bool = False  # arrivals at a rate (--load rate): operating points are rates
    open_loop: OpenLoopCheck | None = None  # a concurrency run: its winner under arrivals at a rate
    scoring: Scoring = field(default_factory=Scoring)  # what goodputs were compared by (per GPU or not)
    docker_gpus: str = ""  # the docker launcher's --gpus ("all", "0,1"); "" for none or another launcher
    made: tuple[tuple[str, str], ...] = ()  # how the run was made (autotune.rundir.RunRecord.made)


@dataclass(frozen=True)
class Outcome:
    """A run as its outputs see it: where it lives, its summary and every trial."""

    run_dir: Path
    info: RunInfo
    trials: tuple[TrialResult, ...]

    @property
    def winner(self) -> TrialResult | None:
        return next((t for t in self.trials if t.number == self.info.winner), None)

    @property
    def baseline(self) -> TrialResult | None:
        return next((t for t in self.trials if t.baseline and t.state == COMPLETE), None)

    def closest(self, percentile: int) -> tuple[TrialResult, Point] | None:
        """The measured point with the lowest latency at ``percentile``, and its trial (None:
        nothing was measured): how near the SLA a run without a winner came."""
        found = [(t, p) for t in self.trials if t.measurement for p in t.measurement.points]
        return min(found, key=lambda tp: tp[1].latency_ms(percentile), default=None)

    @property
    def all_failed(self) -> bool:
        """No trial was measured (each failed or was interrupted): the run found nothing."""
        return not any(t.state == COMPLETE for t in self.trials)
