"""The simulator: the tuner's whole decision logic run against response surfaces, without a server.

A :class:`Surface` maps a candidate at a level (a concurrency) to the distribution of one
window's readings; its noise-free figures are the ground truth. :func:`simulate` runs the real
search (:func:`autotune.tuner.search`: seeds, the sampler, stand-ins, every goodput search,
convergence, the finalists' race) and the real winner's choice against it, on a
:class:`SimServers`: servers that start in :attr:`Surface.start_s` and load generators whose
windows are drawn from the surface and stopped by the load generator's own rule
(:func:`autotune.search.sampling.windows_done`). Time is the simulated
time those windows and starts take. :func:`judge` says how good the run's answer truly was:
the winner's true goodput against the surface's best, and whether its operating point truly
meets the SLA.

:class:`Synthetic` is a family of surfaces: instances that share a machine's cores, batches
that cost less per inference the larger they are, a batcher that waits for its queue delay
at low load, a knee, window noise with a coefficient of variation, a server that reads a
little off each time it starts, and rare stalls that fatten a window's tail.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar, cast

from autotune import finals, prepare, tuner
from autotune import model_config as mcfg
from autotune.events import Events
from autotune.objective import Sla, scores
from autotune.points import UNSTABLE, Point, WindowPlan
from autotune.results import OpenLoopCheck, TrialResult, Verification, recommendation
from autotune.rundir import RunDir, RunRecord
from autotune.search import walk
from autotune.search.level_search import search_plan
from autotune.search.noise import RESOLUTION
from autotune.search.racing import race_winner, round_spread, rounds_met
from autotune.search.sampling import warm_windows, windows_done
from autotune.search_space import Candidate, SearchSpace, bundled, load_search_space, parse_search_space
from autotune.settings import Launch, RunSettings, Traffic
from autotune.study import Asked, Study
from autotune.traffic import Loader
from autotune.trials import Ended, Trials
from autotune.workers import Begun

T = TypeVar("T")
J = TypeVar("J")

QUIET_WINDOW_S = 0.5  # a surface's noise (cv) is that of a window this long; longer ones are quieter
# a server started with several models takes this share of a start longer for each model after the first
# (measured: a local tritonserver with two copies of cnn or bertQA gets ready in 1.00x one's time,
# three in 1.10x)
SHARED_START = 0.05


@dataclass(frozen=True)
class Reading:
    """One window's figures (or a surface's noise-free ones)."""

    throughput: float  # inferences per second
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float

    def latency_ms(self, percentile: int) -> float:
        return {50: self.p50_ms, 90: self.p90_ms, 95: self.p95_ms, 99: self.p99_ms}[percentile]


class Bias(NamedTuple):
    """A freshly started server's offset from the truth: its throughput's factor, and its tail's
    beyond what the slower throughput brings (a stalled server's: above 1)."""

    speed: float
    tail: float = 1.0


class Share(NamedTuple):
    """A part of a fresh server's spread, as shares of its variances: throughput's and tail's."""

    speed: float
    tail: float


WHOLE = Share(1.0, 1.0)
# of a fresh server's spread, the part the models it serves share: real race rounds of three
# racers on one server, 10 runs of bertQA, cnn and embedder (benchmarks/results/race_time-20261207.txt):
# throughput 0.50, p95 0.40 (the sim's tail takes the p95's)
SHARED_SERVER = Share(0.50, 0.40)


class Surface(Protocol):
    """What a simulated server serves: the truth of a candidate at a concurrency, and a window."""

    @property
    def name(self) -> str: ...

    @property
    def sla(self) -> Sla:
        """The SLA the surface is tuned for."""
        ...

    @property
    def cores(self) -> int:
        """The machine's cores (the seeds' "many instances")."""
        ...

    @property
    def start_s(self) -> float:
        """A server's start, in simulated seconds."""
        ...

    @property
    def space(self) -> SearchSpace | None:
        """The space it is tuned in (None: :func:`default_space`)."""
        ...

    @property
    def baseline(self) -> Candidate | None:
        """The config its tuning starts from (None: :data:`BASELINE`)."""
        ...

    @property
    def gpus(self) -> int:
        """The server's GPUs."""
        ...

    def truth(self, candidate: Candidate, level: int) -> Reading: ...

    def window(
        self, candidate: Candidate, level: int, rng: random.Random, window_s: float, bias: Bias,
        block: tuple[int, int] | None = None,
    ) -> Reading:  # fmt: skip
        """One window's readings; ``bias``: the server's own offset (:meth:`server_bias`);
        ``block``: the point's start (:meth:`block_start`) and this window's place in the point."""
        ...

    def block_start(self, rng: random.Random) -> int | None:
        """Where a point's windows start in a surface's recorded ones, drawn once a point (None:
        each window is drawn on its own)."""
        ...

    def server_bias(self, rng: random.Random, share: Share = WHOLE, stalls: bool = True) -> Bias:
        """How much a freshly started server reads off the truth; ``share``: that part of its
        spread (the variance's), ``stalls``: whether it may be a stalled one."""
        ...

    def truth_sd(self, candidate: Candidate) -> float:
        """How far :meth:`truth` of ``candidate`` may lie off the model's own, as a server's factor
        would move it (a relative sd; 0.0: the truth is the surface's own)."""
        ...


@dataclass(frozen=True)
class Synthetic:
    """A closed loop on ``cores`` cores: an instance serves a batch of B in
    ``(1 + alpha (B - 1)) / mu`` seconds; instances beyond the cores slow every one by
    ``contention``; with dynamic batching, a queue of ``c / n`` requests per instance forms
    batches of up to the max batch size, and at low load the batcher waits for its queue delay.
    Throughput bends from the clients' own pace (``c / R0``) to the capacity with sharpness
    ``knee``; latency follows by Little's law, with a tail that grows with utilisation. Each
    window's throughput varies by ``cv`` (for a :data:`QUIET_WINDOW_S` window), its tail by
    ``1.5 cv``; with probability ``stall``, a window's tail is 1.5-3x (a stall of the machine)
    and a fresh server a stalled one (:meth:`server_bias`). A fresh server's throughput reads
    off the truth by ``server_sd`` and its latency beyond that by ``tail_sd`` (the measured
    world: :func:`synthetic_family`); ``server_sd`` None is the rules' own world, ``cv / 2``."""

    name: str
    sla: Sla
    mu: float = 400.0
    cores: int = 2
    alpha: float = 0.5
    contention: float = 0.06
    client_ms: float = 0.3
    knee: float = 3.0
    cv: float = 0.05
    stall: float = 0.0
    start_s: float = 3.0
    space: SearchSpace | None = None
    baseline: Candidate | None = None
    gpus: int = 0
    server_sd: float | None = None  # a fresh server's throughput off the truth (None: cv / 2)
    tail_sd: float = 0.0  # a fresh server's latency off what its throughput explains

    def truth(self, candidate: Candidate, level: int) -> Reading:
        c = float(level)
        n = candidate.instance_count
        share = min(n, self.cores) * max(0.2, 1 - self.contention * max(0, n - self.cores))
        batch = 1.0
        wait_ms = 0.0
        if candidate.dynamic_batching and candidate.max_batch_size > 1:
            batch = min(float(candidate.max_batch_size), max(1.0, c / n))
            full = min(1.0, batch / candidate.max_batch_size)
            wait_ms = candidate.max_queue_delay_us / 1000 * (1 - full)
            if candidate.preferred_batch_sizes:  # waits for a full batch: longer at low load
                wait_ms *= 1.5
        single_ms = 1000 / self.mu
        capacity = share * batch / ((1 + self.alpha * (batch - 1)) * single_ms / 1000)
        r0_ms = single_ms + self.client_ms + wait_ms
        throughput = 1 / ((r0_ms / 1000 / c) ** self.knee + (1 / capacity) ** self.knee) ** (1 / self.knee)
        mean_ms = c / throughput * 1000
        rho = min(1.0, throughput / capacity)
        spread = 0.3 if batch > 1 else 0.0
        return Reading(
            throughput,
            mean_ms * (0.95 + 0.05 * rho),
            mean_ms * (1.10 + 0.30 * rho + spread / 2),
            mean_ms * (1.15 + 0.50 * rho + spread),
            mean_ms * (1.30 + 0.90 * rho + spread * 1.5),
        )

    def window(
        self, candidate: Candidate, level: int, rng: random.Random, window_s: float, bias: Bias,
        block: tuple[int, int] | None = None,
    ) -> Reading:  # fmt: skip
        true = self.truth(candidate, level)
        cv = self.cv * math.sqrt(QUIET_WINDOW_S / window_s)
        throughput = true.throughput * bias.speed * max(0.3, 1 + rng.gauss(0, cv))
        tail = max(0.3, 1 + rng.gauss(0, 1.5 * cv)) * bias.tail * true.throughput / throughput
        if rng.random() < self.stall:
            tail *= rng.uniform(1.5, 3.0)
            throughput *= rng.uniform(0.85, 0.98)
        body = true.throughput / throughput
        return Reading(
            throughput, true.p50_ms * body, true.p90_ms * tail, true.p95_ms * tail, true.p99_ms * tail
        )

    def block_start(self, rng: random.Random) -> int | None:
        """None: a synthetic window is drawn on its own (independent, as the noise model assumes)."""
        return None

    def server_bias(self, rng: random.Random, share: Share = WHOLE, stalls: bool = True) -> Bias:
        """A fresh server reads ``server_sd`` off the truth (``cv / 2`` in the rules' world), its
        latency ``tail_sd`` beyond that (``share`` of each variance); with probability ``stall``
        (where ``stalls``) it is a stalled one (another tenant's load for its whole life):
        0.65-0.85x as fast, its tail 1.2-1.5x more."""
        sd = self.cv / 2 if self.server_sd is None else self.server_sd
        speed = max(0.5, 1 + rng.gauss(0, sd * math.sqrt(share.speed)))
        tail = max(0.5, 1 + rng.gauss(0, self.tail_sd * math.sqrt(share.tail))) if self.tail_sd else 1.0
        if stalls and self.stall and rng.random() < self.stall:
            return Bias(speed * rng.uniform(0.65, 0.85), tail * rng.uniform(1.2, 1.5))
        return Bias(speed, tail)

    def truth_sd(self, candidate: Candidate) -> float:
        return 0.0  # a model's own truth


# the config a synthetic surface's SLA is drawn around: two instances batching up to 8
REFERENCE = Candidate(2, "KIND_CPU", (), 8, True, (), 100, False)


# Fresh servers' spreads as measured back to back (relative sds): throughput 0.7-4.2% over 5
# servers of each of four configs (benchmarks/results/warmup-20261129.txt), 2.7-5.0% between two
# surveys' servers (server-spreads-20261205.txt); latency beyond what the throughput explains
# 0-5.9% and 0.8-1.2%. A measured-world surface draws its own from these ranges.
MEASURED_SERVER_SD = (0.007, 0.05)
MEASURED_TAIL_SD = (0.0, 0.06)
WORLDS = ("measured", "rules")


def measured_spreads(surface: Surveyed) -> Surveyed:
    """A survey of one server (no spread of its own between servers) with fresh-server spreads
    drawn as a measured-world synthetic surface draws its own (:data:`MEASURED_SERVER_SD`,
    :data:`MEASURED_TAIL_SD`), from a stream of its own; the others as they are. Half the
    windows' spread and no latency part read a fresh server 1.5-3x closer to the truth than real
    race rounds do (benchmarks/README.md, sim_vs_real.py)."""
    if surface.server_spread is not None or surface.server_cv is not None:
        return surface
    own = random.Random(f"spreads-{surface.name}")
    return replace(
        surface, server_cv=own.uniform(*MEASURED_SERVER_SD), tail_cv=own.uniform(*MEASURED_TAIL_SD)
    )


def synthetic_family(
    count: int, cv: float, seed: int = 0, stall: float = 0.0, world: str = "rules"
) -> list[Synthetic]:
    """``count`` synthetic surfaces of window noise ``cv`` (and ``stall``): models from fast to
    slow, batching from worthless (alpha near 1) to strong, 2 to 8 cores, instances that
    contend for them, and an SLA at the latency :data:`REFERENCE` has at 3 to 24 clients (so it
    bites inside the search's concurrency range). ``world``: "rules", a fresh server off by
    ``cv / 2``, the noise model's own assumption; "measured", by a spread drawn for each surface
    from :data:`MEASURED_SERVER_SD` and :data:`MEASURED_TAIL_SD`, whatever its ``cv`` (the same
    surfaces otherwise: the spreads come from a stream of their own)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        surface = Synthetic(
            name=f"synthetic-cv{cv:.0%}{'-stalls' if stall else ''}-{i}",
            sla=Sla(rng.choice((95, 99)), 1.0),
            mu=math.exp(rng.uniform(math.log(50), math.log(2000))),
            cores=rng.choice((2, 2, 4, 8)),
            alpha=rng.uniform(0.1, 0.95),
            contention=rng.uniform(0.0, 0.15),
            client_ms=rng.uniform(0.1, 1.0),
            knee=rng.uniform(2.0, 5.0),
            cv=cv,
            stall=stall,
        )
        at = surface.truth(REFERENCE, rng.randint(3, 24)).latency_ms(surface.sla.percentile)
        surface = replace(surface, sla=Sla(surface.sla.percentile, float(f"{at:.3g}")))
        if world == "measured":
            own = random.Random(f"{seed}-{cv}-{stall}-{i}")
            spreads = own.uniform(*MEASURED_SERVER_SD), own.uniform(*MEASURED_TAIL_SD)
            surface = replace(surface, server_sd=spreads[0], tail_sd=spreads[1])
        out.append(surface)
    return out


# ---------------------------------------------------------------- the truth


def true_goodput(
    surface: Surface, candidate: Candidate, space: SearchSpace, limit_ms: float | None = None
) -> tuple[float, int]:
    """A candidate's true goodput under the surface's SLA (or ``limit_ms``), and its level (0, 0:
    none meets it)."""
    limit = surface.sla.limit_ms if limit_ms is None else limit_ms
    return _goodput(_curve(surface, candidate, space), surface.sla.percentile, limit)


def _curve(surface: Surface, candidate: Candidate, space: SearchSpace) -> dict[int, Reading]:
    """``candidate``'s truth at each level of ``space``."""
    levels = range(space.concurrency_min, space.concurrency_max + 1)
    return {lv: surface.truth(candidate, lv) for lv in levels}


def _goodput(
    curve: Mapping[int, Reading], percentile: int, limit_ms: float, factor: float = 1.0
) -> tuple[float, int]:
    """The most throughput of ``curve`` within ``limit_ms``, and its level (0, 0: none), each
    reading moved by a server's ``factor`` (throughput times it, latency over it)."""
    best = (0.0, 0)
    for level, true in curve.items():
        if true.latency_ms(percentile) / factor <= limit_ms and true.throughput * factor > best[0]:
            best = (true.throughput * factor, level)
    return best


def truth_tables(
    surface: Surface, space: SearchSpace, draws: int, rng: random.Random
) -> list[dict[str, float]]:
    """Each config's true goodput under the SLA (by :func:`survey_label`) as far as ``surface``
    knows it, ``draws`` times: each config's truth moved as a server's factor moves a reading
    (:func:`_goodput`), one factor per config and table, drawn with :meth:`Surface.truth_sd`
    (none: the one table of the surface's own truth)."""
    percentile, limit = surface.sla.percentile, surface.sla.limit_ms
    curves = {survey_label(c): (surface.truth_sd(c), _curve(surface, c, space)) for c in candidates(space)}

    def factor(sd: float) -> float:
        return max(0.5, 1 + rng.gauss(0, sd)) if sd else 1.0

    exact = all(sd == 0 for sd, _ in curves.values())
    return [{label: _goodput(curve, percentile, limit, factor(sd))[0]
             for label, (sd, curve) in curves.items()}
            for _ in range(1 if exact else draws)]  # fmt: skip


def candidates(space: SearchSpace) -> list[Candidate]:
    """Every candidate the space holds, one of each :func:`autotune.search.walk.equivalent` class."""
    out: list[Candidate] = []
    pending: list[dict[str, Any]] = [{}]
    names = ("instance_count", "kind", "gpus", "max_batch_size", "dynamic_batching",
             "preferred_batch_size", "max_queue_delay_us", "trt_fp16", "trt_workspace_mb")  # fmt: skip
    for name in names:
        choices = getattr(space, name)
        pending = [{**p, name: c} for p in pending for c in choices]
    for params in pending:
        made = space.suggest(_Params(params))
        if not any(walk.equivalent(made, c) for c in out):
            out.append(made)
    return out


class _Params:
    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self.params[name]


@dataclass(frozen=True)
class Judged:
    """How good one simulated run's answer truly was."""

    surface: str
    seed: int
    winner: Candidate | None
    level: int  # the operating point recommended (0: no winner)
    ratio: float  # the winner's true goodput over the surface's best (0.0: none)
    # the operating point's true latency at the SLA's percentile over the SLA's limit (inf: no
    # operating point): it truly meets the SLA at 1 or less (:attr:`meets`), and as a client that
    # reads latency B times ours would find it at 1/B or less (:meth:`Tally.meets_read_by`)
    latency_share: float
    sim_s: float  # the simulated tuning time
    trials: int  # trials measured (not pruned, not failed)
    honest: bool  # every trial the study was told of carries only what was measured for it
    # the same as ratio at the search's limit (the SLA less the margin, where the run compares
    # configs) against the surface's best there (0.0: not asked for)
    ratio_at_limit: float = 0.0
    # the best true goodput among the configs the search measured, over the surface's best: the
    # most its decisions could have won (below 0.95: the search never measured a good config)
    seen: float = 0.0
    # the winner's true throughput at its recommended operating point over the best true goodput
    # at the search's limit (0.0: not asked for, or no winner): what the user is told to run
    at_point: float = 0.0
    turned: int = 0  # race rounds a fresh server's warm-up turned (SimOutcome.turned)
    decided: bool = False  # the warm-up decided the race (SimOutcome.decided)
    # the warm-up decided the race and cost it: the winner without it is truly better by more
    # than noise.RESOLUTION
    lost: bool = False
    # the winner's true throughput at its recommended operating point over the surface's best
    # true goodput under the SLA itself: what a user gets of what was there to get
    users: float = 0.0
    # the warm-up changed the winner: the same run without it (its draws apart) chose another
    # (None: not run without it)
    changed: bool | None = None
    # where the time went (SimOutcome): the trials' own time summed, the search's end, the check
    trial_s: float = 0.0
    searched_s: float = 0.0
    checked_s: float = 0.0

    @property
    def meets(self) -> bool:
        """The operating point truly meets the SLA."""
        return self.latency_share <= 1


def judge(
    surface: Surface,
    space: SearchSpace,
    outcome: SimOutcome,
    best: float,
    at_limit: tuple[float, float] = (0, 0),
) -> Judged:
    """``outcome`` against the surface's truth (``best``: its best true goodput in ``space``;
    ``at_limit``: a limit and the best true goodput under it, for :attr:`Judged.ratio_at_limit`)."""
    winner = next((r for r in outcome.results if r.number == outcome.winner), None)
    measured = {
        survey_label(r.candidate): r.candidate for r in outcome.results if r.candidate and r.measurement
    }
    seen = max((true_goodput(surface, c, space)[0] for c in measured.values()), default=0.0)
    seen = seen / best if best > 0 else 0.0
    if winner is None or winner.candidate is None:
        return Judged(
            surface.name, outcome.seed, None, 0, 0.0, math.inf, outcome.sim_s, outcome.measured,
            outcome.honest, seen=seen, turned=outcome.turned, decided=outcome.decided,
            trial_s=outcome.trial_s, searched_s=outcome.searched_s, checked_s=outcome.checked_s,
        )  # fmt: skip
    goodput, _ = true_goodput(surface, winner.candidate, space)
    steady = next((r.candidate for r in outcome.results if r.number == outcome.steady_winner), None)
    lost = False
    if outcome.decided and steady is not None:
        lost = true_goodput(surface, steady, space)[0] > (1 + RESOLUTION) * goodput
    rec = recommendation(winner, outcome.verifications, surface.sla.percentile)
    level = rec.concurrency if rec is not None else 0
    true = surface.truth(winner.candidate, level) if level else None
    ratio = goodput / best if best > 0 else 0.0
    limit, best_there = at_limit
    there = true_goodput(surface, winner.candidate, space, limit)[0] / best_there if best_there > 0 else 0.0
    point = true.throughput / best_there if true is not None and best_there > 0 else 0.0
    users = true.throughput / best if true is not None and best > 0 else 0.0
    share = true.latency_ms(surface.sla.percentile) / surface.sla.limit_ms if true is not None else math.inf
    return Judged(surface.name, outcome.seed, winner.candidate, level, ratio, share, outcome.sim_s,
                  outcome.measured, outcome.honest, there, seen, point, outcome.turned, outcome.decided,
                  lost, users, trial_s=outcome.trial_s, searched_s=outcome.searched_s,
                  checked_s=outcome.checked_s)  # fmt: skip


# ---------------------------------------------------------------- simulated servers and load


@dataclass(frozen=True)
class WarmUp:
    """How a fresh server warms up: its latency is ``1 + size e^(-t / length)`` times the steady
    one's, its throughput that excess times ``share`` less, ``t`` the time it has served load;
    each server draws its size and length uniformly from the ranges. From measurements:

    - :data:`CPU_WARMUP`: ``benchmarks/results/warmup-20261129.txt`` (local tritonserver, two
      cores): a fresh server's first 0.5 s window read p99 1.06-1.78x the steady windows and
      throughput 0.83-1.00x, its second window steady; a length of 0.1-0.2 s and a size of
      0.2-2.5 give that first window's mean excess, the second's none.
    - :data:`GPU_WARMUP`: ``../shared/field/h200-20261204`` (an H200, a torch CNN): a fresh
      server's first race windows read 23.7, 17.8 and 15.7 ms against a steady 5.5-5.9 ms (4.0,
      3.0 and 2.7x), the next point steady; a length of 2.5-5 s and a size of 3-6.
    """

    size: tuple[float, float]
    length_s: tuple[float, float]
    share: float = 0.2  # of the latency's excess, the throughput's (0.17/0.78 and 0.06/0.46 on the CPU)

    def draw(self, rng: random.Random) -> Transient:
        return Transient(rng.uniform(*self.size), rng.uniform(*self.length_s), self.share)

    def warmed(self) -> WarmUp:
        """What Triton's ``model_warmup`` (:mod:`autotune.warmup`) leaves of it: its size times
        :data:`WARMED`, the share measured on the CPU. On the H200 a trial's first points read
        steady after the output check's burst (every batch size at once), a race round's did not:
        that the GPU's share is alike is an assumption a GPU run has to check."""
        return WarmUp((self.size[0] * WARMED[0], self.size[1] * WARMED[1]), self.length_s, self.share)


CPU_WARMUP = WarmUp((0.2, 2.5), (0.1, 0.2))
GPU_WARMUP = WarmUp((3.0, 6.0), (2.5, 5.0))
# the share of a fresh server's first-window excess that model_warmup leaves: warmed over cold,
# 20 fresh servers each way (benchmarks/results/first-window-20261204.txt): bertQA p99 1.051 against
# 1.729 (0.07), cnn 1.038 against 1.280 (0.14)
WARMED = (0.07, 0.14)


@dataclass(frozen=True)
class Transient:
    """One fresh server's warm-up (:class:`WarmUp`); the default: none."""

    size: float = 0.0
    length_s: float = 1.0
    share: float = 0.0

    def excess(self, t: float) -> float:
        """The latency's relative excess at ``t`` seconds of load."""
        return self.size * math.exp(-t / self.length_s) if self.size else 0.0

    def apply(self, reading: Reading, t: float) -> Reading:
        """``reading`` (a steady window's) as the server reads it ``t`` seconds into its load."""
        excess = self.excess(t)
        if not excess:
            return reading
        slow, late = 1 + self.share * excess, 1 + excess
        return Reading(
            reading.throughput / slow, reading.p50_ms * slow, reading.p90_ms * late,
            reading.p95_ms * late, reading.p99_ms * late,
        )  # fmt: skip


@dataclass(frozen=True)
class Drift:
    """The machine's own speed wandering within a run, alike for every server on it: the log of
    its speed an Ornstein-Uhlenbeck path of sd ``sd`` that holds for about ``hold_s`` seconds
    (speeds L seconds apart differ by ``sd * sqrt(2 (1 - e^(-L / hold_s)))``). A window's
    throughput is times the speed, its latency over it. The default: none. Measured here, one
    server read for 300-900 s (``benchmarks/first_window.py --drift``,
    ``results/server-spreads-20261205.txt``): sd 5-16%, hold 6-378 s."""

    sd: float = 0.0
    hold_s: float = 20.0

    def path(self, rng: random.Random) -> DriftPath:
        return DriftPath(self, rng)


class DriftPath:
    """One run's drift (:class:`Drift`), drawn a second at a time as the simulated clock reaches
    it, from a speed drawn at the run's start. Workers at once that go back in simulated time
    read the same path: one machine's."""

    def __init__(self, drift: Drift, rng: random.Random) -> None:
        self.drift, self.rng = drift, rng
        self.logs = [rng.gauss(0, drift.sd)] if drift.sd else [0.0]

    def speed(self, t: float) -> float:
        """The machine's speed at ``t`` seconds into the run, relative to its long-run mean."""
        if not self.drift.sd:
            return 1.0
        keep = math.exp(-1 / self.drift.hold_s)
        step = self.drift.sd * math.sqrt(1 - keep * keep)
        while len(self.logs) <= t:
            self.logs.append(keep * self.logs[-1] + self.rng.gauss(0, step))
        return math.exp(self.logs[int(max(0.0, t))])


def drifted(reading: Reading, speed: float) -> Reading:
    """``reading`` on a machine ``speed`` times as fast: throughput times it, latency over it."""
    if speed == 1.0:
        return reading
    return Reading(
        reading.throughput * speed, reading.p50_ms / speed, reading.p90_ms / speed,
        reading.p95_ms / speed, reading.p99_ms / speed,
    )  # fmt: skip


def open_loop_truth(
    surface: Surface, candidate: Candidate, rate: float, percentile: int, horizon_s: float
) -> tuple[Reading, float]:
    """A closed-loop surface's truth under Poisson arrivals at ``rate`` (inferences a second), and
    the mean requests in the server. The server is a queue whose completions, with n requests
    in it, run at the closed loop's throughput at n clients (a load-dependent server). An
    arrival that finds n waits as one of n + 1 clients: its mean by Little's law, its spread
    fit to the surface's latency at the ``percentile`` (log-normal). An overloaded queue grows
    for ``horizon_s`` (a window) at most."""
    throughputs: dict[int, float] = {}

    def served(n: int) -> float:
        if n not in throughputs:
            throughputs[n] = surface.truth(candidate, n).throughput
        return throughputs[n]

    logs, peak = [0.0], 0.0  # each state's weight, in logs (an overloaded queue's grow past floats)
    for n in range(1, max(2, math.ceil(rate * horizon_s)) + 1):
        logs.append(logs[-1] + math.log(rate / max(served(n), 1e-9)))
        peak = max(peak, logs[-1])
        if logs[-1] < peak - 30:  # a share under 1e-13 of the likeliest state's: the rest is less
            break
    total = sum(math.exp(x - peak) for x in logs)
    states = [(n, share) for n, x in enumerate(logs) if (share := math.exp(x - peak) / total) > 1e-9]
    z = statistics.NormalDist().inv_cdf(percentile / 100)
    parts = []  # (share, log-normal mu, sigma) of an arrival's latency, by the requests it found
    for n, share in states:
        mean_ms = (n + 1) / served(n + 1) * 1000
        tail = math.log(max(surface.truth(candidate, n + 1).latency_ms(percentile), mean_ms) / mean_ms)
        sigma = z - math.sqrt(max(z * z - 2 * tail, 0.0))
        parts.append((share, math.log(mean_ms) - sigma * sigma / 2, sigma))

    def quantile(q: float) -> float:
        def below(x: float) -> float:  # the share of arrivals whose log latency is under x
            return sum(
                s * (0.5 * math.erfc((mu - x) / (sigma * math.sqrt(2))) if sigma > 1e-9 else float(x >= mu))
                for s, mu, sigma in parts
            )

        low, high = (
            min(mu - 4 * sigma for _, mu, sigma in parts),
            max(mu + 4 * sigma for _, mu, sigma in parts),
        )
        while high - low > 1e-4:  # a hundredth of a percent
            mid = (low + high) / 2
            low, high = (mid, high) if below(mid) < q else (low, mid)
        return math.exp(high)

    throughput = sum(share * served(n) for n, share in states if n)
    clients = sum(n * share for n, share in states)
    return Reading(throughput, *(quantile(q / 100) for q in (50, 90, 95, 99))), clients


def _scaled(truth: Reading, window: Reading, closed: Reading) -> Reading:
    """``window`` (a closed loop's, whose truth is ``closed``) carried onto ``truth``: each of its
    figures off ``truth`` by the factor the window reads off ``closed``."""
    return Reading(
        truth.throughput * window.throughput / closed.throughput,
        truth.p50_ms * window.p50_ms / closed.p50_ms, truth.p90_ms * window.p90_ms / closed.p90_ms,
        truth.p95_ms * window.p95_ms / closed.p95_ms, truth.p99_ms * window.p99_ms / closed.p99_ms,
    )  # fmt: skip


@dataclass(frozen=True)
class Overheads:
    """What a real run spends beyond its servers' starts and its points' warm-ups and windows:
    each server's own (its stop, the config's staging) and each point's (the client's set-up,
    the server's statistics read). The defaults are fit to real runs here: 33 trials of
    recommender and 54 of embedder over HTTP, pooled, each trial's cycle from its Triton log to
    the next one's (``benchmarks/sim_vs_real.py``, ``results/sim_vs_real-20261205.txt``)."""

    server_s: float = 0.10
    point_s: float = 0.11


@dataclass
class SimServer:
    """A simulated server serving one candidate, its readings carrying its own bias and warm-up,
    or several (``models``: each name's candidate with a bias and a warm-up drawn for it)."""

    candidate: Candidate | None
    bias: Bias
    description: str = "simulated server"
    metrics_url: str = ""
    models: dict[str, SimServer] = field(default_factory=dict)
    transient: Transient = field(default_factory=Transient)
    loaded_s: float = 0.0  # how long it has served load (its warm-up decays with it)
    stage: str = ""  # the stage it serves (``trial-007``): whose readings it gives
    race: bool = False  # a race round's (where a warm-up that turns a verdict is counted)

    def alive(self) -> bool:
        return True


@dataclass(frozen=True)
class SimGenerator:
    """A load generator over a surface: windows until the plan's rule stops them."""

    servers: SimServers
    server: SimServer
    plan: WindowPlan
    seed: int = 0

    def with_plan(self, plan: WindowPlan) -> SimGenerator:
        return replace(self, plan=plan)

    def with_seed(self, seed: int) -> SimGenerator:
        return replace(self, seed=seed)

    def at_concurrency(self, concurrency: int) -> Point:
        return self.servers.point(self.server, concurrency, self.plan)

    def at_rate(self, rate: float, distribution: str = "constant") -> Point:
        """Poisson arrivals at ``rate`` (:func:`open_loop_truth`; any ``distribution`` reads so)."""
        return self.servers.rate_point(self.server, rate, self.plan)

    def at_intervals(self, intervals_us: Sequence[int], rate: float | None = None) -> Point:
        raise NotImplementedError("the simulator has no recorded arrivals")

    def check_sample(self, workload: Any, seed: int, count: int) -> list[tuple[Any, str]]:
        raise NotImplementedError("the simulator's runs have no output check")

    def answers(self, payloads: Sequence[Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        raise NotImplementedError("the simulator's runs have no output check")


class SimServers:
    """:class:`autotune.serving.Servers` on a surface: a server start and a window cost their
    simulated time, read by :meth:`clock`."""

    def __init__(
        self, surface: Surface, rng: random.Random, warmup: WarmUp | None = None,
        warm_rng: random.Random | None = None, overheads: Overheads | None = None,
        drift: DriftPath | None = None,
    ) -> None:  # fmt: skip
        self.surface, self.rng, self.now = surface, rng, 0.0
        self.overheads = overheads or Overheads()
        self.drift = drift or Drift().path(random.Random(0))  # the machine's (none by default)
        self.warm, self.version = True, ""
        self.warmup = warmup  # each fresh server's (None: none)
        # the warm-ups' own draws: a run with a warm-up and one without draw the rest alike
        self.warm_rng = warm_rng or random.Random(0)
        self.turned = 0  # race rounds a warm-up turned: over the limit, under it without the warm-up
        self.readings: dict[str, list[Point]] = {}  # every point handed out, by its server's stage
        # each race round's point read without its server's warm-up (the same windows), by the
        # id of the point as served: ``readings`` keeps that point alive, so no id is reused
        self.steady: dict[int, Point] = {}

    def clock(self) -> float:
        return self.now

    def _fresh(self, candidate: Candidate | None, race: bool, server: Bias | None = None) -> SimServer:
        """A fresh server's model: its bias, then (with a warm-up) its transient, each drawn. On a
        server it shares (``server``: the part its models share), its own part times that."""
        if server is None:
            bias = self.surface.server_bias(self.rng)
        else:
            own = self.surface.server_bias(self.rng, Share(*(1 - s for s in SHARED_SERVER)), stalls=False)
            bias = Bias(server.speed * own.speed, server.tail * own.tail)
        transient = self.warmup.draw(self.warm_rng) if self.warmup is not None else Transient()
        return SimServer(candidate, bias, transient=transient, race=race)

    @contextmanager
    def serve(self, candidate: Candidate, log: Path, stage_name: str) -> Iterator[SimServer]:
        self.now += self.surface.start_s
        server = self._fresh(candidate, stage_name.startswith("race-"))
        server.stage = stage_name
        yield server
        self.now += self.overheads.server_s

    def can_share(self) -> bool:
        return True

    @contextmanager
    def serve_all(
        self, candidates: Mapping[str, Candidate], log: Path, stage_name: str
    ) -> Iterator[SimServer]:
        """One start for all (the models load side by side: :data:`SHARED_START`); each model's
        readings carry the server's bias (:data:`SHARED_SERVER` of a fresh server's spread, and a
        stall) times one of its own."""
        self.now += self.surface.start_s * (1 + SHARED_START * (len(candidates) - 1))
        server = self.surface.server_bias(self.rng, SHARED_SERVER)
        models = {
            name: self._fresh(c, True, server) for name, c in candidates.items()
        }  # only the race shares
        yield SimServer(None, Bias(1.0), models=models)
        self.now += self.overheads.server_s

    def generator(self, server: SimServer, plan: WindowPlan, model: str = "") -> SimGenerator:
        return SimGenerator(self, server.models[model] if model else server, plan)

    def warmed(self, config: mcfg.ModelConfig) -> tuple[mcfg.ModelConfig, dict[str, bytes]]:
        return config, {}  # a fresh server's warm-up is the surface's (:class:`WarmUp`)

    def close(self) -> None:
        pass

    def point(self, server: SimServer, level: int, plan: WindowPlan) -> Point:
        """One point, as :func:`autotune.loadgen._windows.run_windows` measures it: windows until
        :func:`autotune.search.sampling.windows_done`, at most ``max_windows``; its figures the kept
        windows' means."""
        candidate = cast(Candidate, server.candidate)

        def read(block: tuple[int, int] | None) -> Reading:
            return self.surface.window(candidate, level, self.rng, plan.window_s, server.bias, block)

        return self._windows(server, plan, read, level)

    def rate_point(self, server: SimServer, rate: float, plan: WindowPlan) -> Point:
        """A point under Poisson arrivals at ``rate`` (:func:`open_loop_truth`), its windows' noise
        a closed loop's at the clients the open loop holds on average."""
        candidate = cast(Candidate, server.candidate)
        truth, clients = open_loop_truth(self.surface, candidate, rate, plan.percentile, plan.window_s)
        level = max(1, round(clients))
        closed = self.surface.truth(candidate, level)

        def read(block: tuple[int, int] | None) -> Reading:
            window = self.surface.window(candidate, level, self.rng, plan.window_s, server.bias, block)
            return _scaled(truth, window, closed)

        return self._windows(server, plan, read, level, rate)

    def _windows(
        self, server: SimServer, plan: WindowPlan, read: Callable[[tuple[int, int] | None], Reading],
        level: int, rate: float = 0.0,
    ) -> Point:  # fmt: skip
        """Windows ``read`` one by one (given the point's block and the window's place in it) until
        the plan's rule stops them, with the server's warm-up and the machine's drift."""
        self.now += plan.warmup_s + self.overheads.point_s
        server.loaded_s += plan.warmup_s
        readings: list[Reading] = []
        steady: list[Reading] = []  # the same windows without the warm-up (what it turned)
        stable = False
        start = self.surface.block_start(self.rng)  # a surveyed point's windows: one block of them
        while len(readings) < plan.max_windows:
            block = None if start is None else (start, len(readings))
            window = drifted(read(block), self.drift.speed(self.now))
            steady.append(window)
            readings.append(server.transient.apply(window, server.loaded_s + plan.window_s / 2))
            lasted = window_length(plan, window.throughput)
            self.now += lasted
            server.loaded_s += lasted
            latencies = [r.latency_ms(plan.percentile) for r in readings]
            warm = warm_windows(latencies, plan.latency_noise) if plan.limit_ms > 0 else 0
            figure = sum(latencies[warm:]) / len(
                latencies[warm:]
            )  # a simulated point's figure: its windows' mean
            throughputs = [r.throughput for r in readings[warm:]]
            done, stable = windows_done(throughputs, latencies[warm:], plan, plan.tolerance, figure)
            if done:
                stable = True
                break
        kept = readings[warm:] if plan.limit_ms > 0 else readings[-plan.stable_windows :]
        point = _point_of(level, kept, plan, len(readings), stable, tuple(latencies[:warm]), rate)
        if server.race and plan.limit_ms > 0:
            self.turned += _turned(kept, steady[warm:], plan)
            if server.transient.size:  # the same windows read without it
                self.steady[id(point)] = _point_of(level, steady[warm:], plan, len(readings), stable, ())
        self.readings.setdefault(server.stage, []).append(point)
        return point


def _point_of(
    level: int, kept: Sequence[Reading], plan: WindowPlan, windows: int, stable: bool,
    warm_ms: tuple[float, ...], rate: float = 0.0,
) -> Point:  # fmt: skip
    """A simulated point: the means of its ``kept`` windows, of ``windows`` read in all; with a
    ``rate``, an open loop's."""

    def mean(name: str) -> float:
        return sum(float(getattr(r, name)) for r in kept) / len(kept)

    duration = plan.window_s * len(kept)
    throughput = mean("throughput")
    requests = max(1, int(throughput * duration))
    return Point(
        concurrency=0 if rate else level, request_rate=rate, throughput=throughput, avg_ms=mean("p50_ms"),
        p50_ms=mean("p50_ms"), p90_ms=mean("p90_ms"), p95_ms=mean("p95_ms"), p99_ms=mean("p99_ms"),
        requests=requests, errors=0, duration_s=duration, windows=windows, stable=stable,
        warnings=() if stable else (UNSTABLE,),
        window_throughputs=tuple(r.throughput for r in kept),
        window_latencies_ms=tuple(r.latency_ms(plan.percentile) for r in kept),
        window_percentile=plan.percentile, warm_windows_ms=warm_ms,
    )  # fmt: skip


_InFlight = tuple[Asked, Ended] | tuple[Begun[Any], int, Any]  # a trial; a round: its wave, place, result


class SimWorkers:
    """:class:`autotune.workers.Workers` in simulated time: ``at_once`` workers, each a machine of
    the surface's own. A trial or a race round is measured when it starts, on its worker's clock,
    and its end reaches the run once the simulated time gets there (until then it is in flight, as
    on a cluster). Race rounds served at once (:meth:`each`) start together; the race goes on
    when the last ends."""

    def __init__(self, servers: SimServers, at_once: int) -> None:
        self.servers, self.at_once = servers, at_once
        # (end, (0, trial number) or (1, round), its trial or its round's place): a heap
        self.flying: list[tuple[float, tuple[int, int], _InFlight]] = []
        self.begun = 0  # rounds begun beside the trials (:meth:`begin`), for their order in the heap

    def free(self) -> int:
        return max(self.at_once - len(self.flying), 0)

    def busy(self) -> bool:
        return bool(self.flying)

    def start(self, trials: Trials, study: Study, results: list[TrialResult]) -> None:
        now = self.servers.now
        asked = trials.ask(study)
        ended = trials.measure_trial(study, asked, results)
        heapq.heappush(self.flying, (self.servers.now, (0, asked.number), (asked, ended)))
        self.servers.now = now  # the search decides again now, not when this trial ends

    def wait(self, trials: Trials, study: Study) -> None:
        end, (kind, _), what = heapq.heappop(self.flying)
        self.servers.now = max(self.servers.now, end)
        if kind:
            begun, i, result = cast(tuple[Begun[Any], int, Any], what)
            begun.ended(i, result)
        else:
            asked, ended = cast(tuple[Asked, Ended], what)
            trials.events.trial_finished(ended.tell(study, asked))

    def stop(self, trials: Trials, study: Study) -> None:
        for _, (kind, _), what in self.flying:
            if not kind:
                study.tell_interrupted(cast(tuple[Asked, Ended], what)[0])
        self.flying.clear()

    def each(self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J]) -> list[T]:
        out, ends = self._serve(trials, serve, jobs)
        self.servers.now = max(ends, default=self.servers.now)
        return out

    def begin(
        self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J],
        then: Callable[[list[T]], None],
    ) -> None:  # fmt: skip
        out, ends = self._serve(trials, serve, jobs)
        begun: Begun[T] = Begun.of(jobs, then)
        for i, (result, end) in enumerate(zip(out, ends, strict=True)):
            self.begun += 1
            heapq.heappush(self.flying, (end, (1, self.begun), (begun, i, result)))

    def drop(self, jobs: Sequence[Any] | None = None) -> None:
        def dropped(entry: tuple[float, tuple[int, int], _InFlight]) -> bool:
            if not entry[1][0]:
                return False  # a trial
            begun, i, _ = cast(tuple[Begun[Any], int, Any], entry[2])
            return begun.holds(i, jobs)

        self.flying = [entry for entry in self.flying if not dropped(entry)]
        heapq.heapify(self.flying)

    def _serve(
        self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J]
    ) -> tuple[list[T], list[float]]:  # fmt: skip
        """Each job served from now, as if on a worker of its own: its result and its end."""
        now, out, ends = self.servers.now, [], []
        for job in jobs:
            self.servers.now = now
            out.append(serve(trials, job))
            ends.append(self.servers.now)
        self.servers.now = now
        return out, ends


def _turned(readings: Sequence[Reading], steady: Sequence[Reading], plan: WindowPlan) -> bool:
    """Whether a warm-up turned a point's verdict: its kept windows' mean latency over the limit,
    the same windows' without the warm-up within it."""

    def mean(windows: Sequence[Reading]) -> float:
        return statistics.fmean(r.latency_ms(plan.percentile) for r in windows)

    return mean(readings) > plan.limit_ms >= mean(steady)


@dataclass(frozen=True)
class SimOutcome:
    seed: int
    results: tuple[TrialResult, ...]
    verifications: tuple[Verification, ...]
    winner: int | None
    sim_s: float
    measured: int
    honest: bool
    # the race's winner with its rounds read without their servers' warm-up (:func:`read_steady`)
    steady_winner: int | None
    turned: int = 0  # race rounds a fresh server's warm-up turned (:func:`_turned`)
    checked_s: float = 0.0  # the open-loop check's time, its server's start included (0: none)
    open_loop: OpenLoopCheck | None = None  # the open-loop check's record (None: none)
    searched_s: float = 0.0  # when the search ended: its last trial told
    trial_s: float = 0.0  # the trials' own time, summed over them (several at once: over workers)

    @property
    def decided(self) -> bool:
        """A fresh server's warm-up decided the race: its rounds read without it crown another."""
        return self.steady_winner != self.winner

    @property
    def winner_config(self) -> Candidate | None:
        """The winning trial's config (None: no winner)."""
        return next((r.candidate for r in self.results if r.number == self.winner), None)


def window_length(plan: WindowPlan, throughput: float) -> float:
    """How long a window of ``throughput`` requests a second lasts: the plan's, extended by quarters
    (up to 4x) until it holds ``plan.min_requests``, as :func:`autotune.loadgen._windows.run_windows`
    extends it."""
    lasted = plan.window_s
    while throughput * lasted < plan.min_requests and lasted < 4 * plan.window_s:
        lasted += plan.window_s / 4
    return lasted


def space_of(surface: Surface) -> SearchSpace:
    """The space a surface is tuned in: a survey's own, else :func:`default_space`."""
    return surface.space or default_space()


def baseline_of(surface: Surface) -> Candidate:
    """The config a surface's tuning starts from: a survey's model's own, else :data:`BASELINE`."""
    return surface.baseline or BASELINE


def default_space() -> SearchSpace:
    """The default search space as a CPU model that batches sees it."""
    space = load_search_space(bundled("default"))
    return space.restricted(batching=True, gpu=False, tensorrt=False)


BASELINE = Candidate(1, "KIND_CPU", (), 16, False, (), 0, False)  # the examples' committed config


def simulate(
    surface: Surface,
    seed: int,
    space: SearchSpace | None = None,
    baseline: Candidate | None = None,
    workdir: Path | None = None,
    trials_type: type[Trials] = Trials,
    servers_type: type[SimServers] | None = None,
    warmup: WarmUp | None = None,
    at_once: int = 1,
    events: Events | None = None,
    overheads: Overheads | None = None,
    drift: Drift | None = None,
    **options: Any,
) -> SimOutcome:
    """One tuning run against ``surface``, with the CLI's defaults (``options``: RunSettings
    fields to change, such as ``max_trials``) and the sampler seeded with ``seed``
    (``trials_type``, ``servers_type``: one's own :class:`Trials`, :class:`SimServers`;
    ``warmup``: each fresh server's; ``at_once``: trials measured together, :class:`SimWorkers`;
    ``events``: what the run tells, in simulated time; ``overheads``: the time a real run spends
    beyond starts, warm-ups and windows, :class:`Overheads`; ``drift``: the machine's within the
    run, :class:`Drift`)."""
    user = space or space_of(surface)
    baseline = baseline if baseline is not None else baseline_of(surface)
    settings = RunSettings(
        model="sim", repository=Path("."), sla=surface.sla, seed=seed, output_check=False,
        **{"open_loop_check": True, **options},
    )  # fmt: skip
    settings = replace(settings, plan=search_plan(surface.sla, 0.5))
    prep = prepare.Prepared(
        settings, mcfg.ModelConfig(name="sim"), Path("."), user, baseline, None,
        Loader(Traffic()), server_gpus=surface.gpus, cores=surface.cores,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        record = RunRecord(
            run_id="sim", model="sim", repository=Path(tmp), sla=surface.sla, launch=Launch(),
            protocol="http", study_name="sim", storage=None, original_config="", original_digest="",
            started="",
        )  # fmt: skip
        run = RunDir.create(Path(tmp) / "run", record)
        study = Study.open(None, "sim", prep.space, surface.sla, seed=seed, scoring=prep.scoring)
        path = (drift or Drift()).path(random.Random(f"drift-{seed}"))  # its own draws, as the warm-up's
        servers = (servers_type or SimServers)(
            surface, random.Random(seed), warmup, random.Random(f"warm-{seed}"), overheads, path
        )
        trials = trials_type(prep, servers, run, events or Events(), clock=servers.clock)
        workers = SimWorkers(servers, at_once) if at_once > 1 else None
        run = tuner.search(prep, trials, study, workers)
        results = tuple(study.results())
        verifications = run.record.verifications
        s = prep.settings
        winner = race_winner(verifications, results, s.search_sla, prep.scoring, prep.baseline)
        raced_s = servers.now  # a wave's workers leave the clock at the wave's end
        if winner is not None:  # its open-loop check, as a real run's end measures it
            chosen = next(r for r in results if r.number == winner)
            run = finals.check_open_loop(prep, trials, run, chosen, workers)
        steady = read_steady(verifications, servers.steady, s.search_sla)
        steady_winner = race_winner(steady, results, s.search_sla, prep.scoring, prep.baseline)
        told = study.told_values()
    measured = sum(r.measurement is not None for r in results)
    truthful = honest(results, told, prep, servers.readings)
    trial_s = sum(r.duration_s for r in results if r.measurement is not None)
    return SimOutcome(
        seed, results, verifications, winner, servers.now, measured, truthful, steady_winner, servers.turned,
        servers.now - raced_s, run.record.open_loop, run.record.searched_s, trial_s,
    )  # fmt: skip


def read_steady(
    verifications: Sequence[Verification], steady: Mapping[int, Point], sla: Sla
) -> list[Verification]:
    """The verifications with each race round swapped for the same windows read without the
    warm-up (``steady``: by the id of the round's point). Each one's ``sla_met`` is judged again,
    as :class:`autotune.search.racing.Race` judges it: with the spread of the finalists' rounds,
    the levels they left included and the control's left out."""

    def read(points: Sequence[Point]) -> tuple[Point, ...]:
        return tuple(steady.get(id(p), p) for p in points)

    swapped = [
        replace(v, points=read(v.points), others=tuple((at, read(pts)) for at, pts in v.others))
        for v in verifications
    ]
    finals = [v for v in swapped if not v.control]
    rounds = [*(v.points for v in finals), *(p for v in finals for _, p in v.others)]
    spread = round_spread(rounds, sla.percentile)
    return [replace(v, sla_met=rounds_met(v.points, sla, spread)) for v in swapped]


def honest(
    results: Sequence[TrialResult], told: dict[int, list[float] | None], prep: prepare.Prepared,
    readings: Mapping[str, Sequence[Point]],
) -> bool:  # fmt: skip
    """Whether the study was told only what was measured for each trial: a measured trial the
    scores of its own measurement, every point of which its own servers read (``readings``: each
    point the simulator handed out, by its server's stage), any other none."""
    sla = prep.settings.sla

    def key(p: Point) -> tuple[float, float, float]:
        return p.level, p.throughput, p.latency_ms(sla.percentile)

    for r in results:
        if r.measurement is None:
            if told.get(r.number) is not None:
                return False
            continue
        own = {key(p) for p in readings.get(f"trial-{r.number:03d}", ())}
        if any(key(p) not in own for p in r.measurement.points):
            return False
        share = prep.scoring.share(r.candidate)
        if told.get(r.number) != list(scores(r.measurement.closest(sla), sla, share)):
            return False
    return True


GOOD = 0.95  # the bar: a winner is good at this share of the surface's best goodput or more
# a re-measuring client reads our latencies this much slower (perf_analyzer on cnn: 1.05-1.08x,
# benchmarks/results/agree-*-20261203.txt): the headline's meets is read so
READER = 1.08


def wilson(share: float, n: int) -> tuple[float, float]:
    """The 95% (two-sided) Wilson interval of a share of ``n`` runs."""
    if n <= 0:
        return 0.0, 1.0
    z = 1.96
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Tally:
    """Runs on one surface, summarised as the acceptance reads them."""

    judged: list[Judged] = field(default_factory=list)
    # the best true goodput under the search's limit over the best under the SLA: the most a run
    # that keeps --margin can recommend, so `users` is 0 wherever it is under 0.95
    cap: float = 1.0

    def share(self, test: Any) -> float:
        return sum(bool(test(j)) for j in self.judged) / len(self.judged) if self.judged else 0.0

    @property
    def good(self) -> float:
        """Runs whose winner's true goodput is at least 0.95 of the best."""
        return self.share(lambda j: j.ratio >= GOOD)

    @property
    def good_at_limit(self) -> float:
        """Runs whose winner's true goodput at the search's limit is at least 0.95 of the best there."""
        return self.share(lambda j: j.ratio_at_limit >= GOOD)

    @property
    def good_at_point(self) -> float:
        """Runs whose winner's true throughput at its recommended operating point is at least 0.95
        of the best true goodput at the search's limit (the config and where it stands, judged
        together, as a re-measurement of the recommendation judges them)."""
        return self.share(lambda j: j.at_point >= GOOD)

    @property
    def users_point(self) -> float:
        """Runs whose recommended operating point truly serves at least 0.95 of the surface's best
        goodput under the SLA itself (:attr:`Judged.users`): the headline, what users get."""
        return self.share(lambda j: j.users >= GOOD)

    @property
    def mean(self) -> float:
        """The winners' true goodput over the best, averaged over the runs (a threshold-free
        ``good``: a winner of 0.948 and one of 0.953 read alike)."""
        return statistics.fmean(j.ratio for j in self.judged) if self.judged else 0.0

    @property
    def meets(self) -> float:
        return self.meets_read_by(1.0)

    def meets_read_by(self, factor: float) -> float:
        """Runs whose operating point meets the SLA read by a client whose latency reads ``factor``
        times the truth (a re-measuring tool's bias against ours)."""
        return self.share(lambda j: j.latency_share * factor <= 1)

    @property
    def seen(self) -> float:
        """Runs whose search measured a config of at least 0.95 of the best (the rest: ``good``
        was lost before any decision between good configs)."""
        return self.share(lambda j: j.seen >= GOOD)

    def good_interval(
        self, tables: Sequence[Mapping[str, float]], rng: random.Random, draws: int = 2000
    ) -> tuple[float, float]:
        """:attr:`good`'s 95% interval: ``draws`` times, the runs drawn again with replacement
        and judged against one of ``tables`` (:func:`truth_tables`, in turn): the error of a
        share of so many runs and, for a surveyed surface, that of its truth."""
        winners = [survey_label(j.winner) if j.winner is not None else None for j in self.judged]
        shares = []
        for i in range(draws):
            table = tables[i % len(tables)]
            bar = GOOD * max(table.values())
            runs = rng.choices(winners, k=len(winners))
            shares.append(sum(label is not None and table[label] >= bar for label in runs))
        shares.sort()
        count = len(self.judged)
        return shares[int(0.025 * draws)] / count, shares[int(0.975 * draws) - 1] / count

    @property
    def median_s(self) -> float:
        return self.median(lambda j: j.sim_s)

    def median(self, of: Callable[[Judged], float]) -> float:
        """The median of ``of`` over the runs (the upper one of an even count; 0.0: no runs)."""
        values = sorted(of(j) for j in self.judged)
        return values[len(values) // 2] if values else 0.0


# ---------------------------------------------------------------- surveyed surfaces


SURVEY_VERSION = 1


Levels = dict[int, tuple[tuple[float, float], ...]]  # level -> a server's windows (throughput, ms)


@dataclass(frozen=True)
class Surveyed:
    """A surface measured on a real server (``benchmarks/survey.py``): for each config of a space
    (one of each :func:`autotune.search.walk.equivalent` class), at each surveyed level, its windows'
    throughputs and latencies at the survey's percentile, on one server (``windows``) and, where
    the survey was run again (``survey.py --server 2``...), on others (``again``: every config, or
    some). The truth at a level is the mean over the servers that read the config of their windows'
    means (:meth:`truth`); a window is one of such a server's at its nearest surveyed level, drawn
    at random and scaled to the level. A simulated
    server's bias is drawn with :attr:`server_cv`, else the spread between the surveyed servers
    (:attr:`server_spread`), else half the windows' spread (one server cannot say more)."""

    name: str
    sla: Sla
    cores: int
    windows: dict[str, Levels]  # label -> the first server's readings
    start_s: float = 3.0  # a server's start: the survey's median where it timed them
    space: SearchSpace | None = None  # the space surveyed (None: the default, as a CPU model sees it)
    baseline: Candidate | None = None  # the model's own config (None: the examples' :data:`BASELINE`)
    gpus: int = 0  # the server's GPUs
    # how far a fresh server reads off the truth (relative sd); None: as the survey measured it
    server_cv: float | None = None
    # how far a fresh server's latency reads off beyond what its throughput explains (relative
    # sd); None: as the survey measured it (:attr:`tail_spread`; none from one server)
    tail_cv: float | None = None
    again: tuple[dict[str, Levels], ...] = ()  # other servers' readings of the same configs
    timed: bool = False  # whether the survey timed its servers' starts (``start_s`` is theirs)
    # the machine's speed against the survey's day: throughputs times it, latencies over it (a
    # closed loop's latency is its clients over its throughput); 1.0: as surveyed
    speed: float = 1.0

    @classmethod
    def load(cls, path: Path, sla: Sla | None = None) -> Surveyed:
        """A survey file (JSON, gzipped when it ends in .gz); ``sla``: another limit at the
        survey's percentile (default the survey's)."""
        import gzip
        import json

        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        data = json.loads(raw)
        if data.get("version") != SURVEY_VERSION:
            raise ValueError(f"{path}: survey version {data.get('version')}, this reads {SURVEY_VERSION}")

        def readings(windows: dict[str, Any]) -> dict[str, Levels]:
            def pairs(raw: list[list[float]]) -> tuple[tuple[float, float], ...]:
                return tuple((float(t), float(ms)) for t, ms in raw)

            return {label: {int(lv): pairs(raw) for lv, raw in by.items()} for label, by in windows.items()}

        chosen = sla or Sla(int(data["percentile"]), float(data["limit_ms"]))
        gpus = int(data.get("gpus", 0))
        space = None
        if "space" in data:  # the space file's document, as the machine's server could run it
            batch = int(data.get("workload", {}).get("batch_size", 1))  # as the survey's run narrowed it
            space = parse_search_space(data["space"], gpu_available=gpus > 0).restricted(
                batching=True, gpu=gpus > 0, tensorrt=False, min_batch=batch, gpu_count=gpus
            )
        baseline = None
        if "baseline" in data:
            fields: dict[str, Any] = {
                k: tuple(v) if isinstance(v, list) else v for k, v in data["baseline"].items()
            }
            baseline = Candidate(**fields)
        server_cv = float(data["server_cv"]) if "server_cv" in data else None
        starts = data.get("starts_s") or [3.0]  # each server's start, as the survey timed it
        return cls(
            str(data["model"]), chosen, int(data["cores"]), readings(data["windows"]), space=space,
            baseline=baseline, gpus=gpus, server_cv=server_cv,
            again=tuple(readings(w) for w in data.get("again", ())), start_s=statistics.median(starts),
            timed=bool(data.get("starts_s")),
        )  # fmt: skip

    @property
    def servers(self) -> tuple[dict[str, Levels], ...]:
        """Each surveyed server's readings, the first first."""
        return (self.windows, *self.again)

    @cached_property
    def cv(self) -> float:
        """The windows' throughput spread, pooled over every surveyed point of every server."""
        from autotune.search.noise import Noise

        return Noise.pooled(
            [t for t, _ in pairs]
            for server in self.servers
            for levels in server.values()
            for pairs in levels.values()
        ).cv

    @cached_property
    def server_spread(self) -> float | None:
        """How far one server's reading of a config lies off the truth, as a relative sd (None:
        fewer than two configs read by every server): per config every server read and per server,
        the mean log throughput over the levels all of them measured, less that server's mean over
        those configs (a drift of the machine moves every config alike), pooled about each config's
        mean."""
        if not self.again:
            return None
        shared = [label for label in self.windows if all(label in s for s in self.again)]
        logs: list[list[float]] = []
        for label in shared:
            levels = set.intersection(*(set(s[label]) for s in self.servers))
            if levels:
                logs.append([
                    statistics.fmean(math.log(statistics.fmean(t for t, _ in s[label][lv])) for lv in levels)
                    for s in self.servers
                ])  # fmt: skip
        return None if len(logs) < 2 else math.sqrt(_between_servers(logs))

    @cached_property
    def tail_spread(self) -> float | None:
        """How far one server's latency lies off the truth beyond what its throughput explains
        (Little's law: latency times throughput is the clients), as a relative sd (None: fewer
        than two configs read by every server). As :attr:`server_spread`, on each config's mean
        over its shared levels of log latency plus log throughput, less the spread the windows'
        own noise gives those means (the simulator draws that noise itself)."""
        if not self.again:
            return None
        shared = [label for label in self.windows if all(label in s for s in self.again)]
        rows: list[list[float]] = []
        noise: list[float] = []  # each row's windows' variance, per server's mean
        for label in shared:
            levels = sorted(set.intersection(*(set(s[label]) for s in self.servers)))
            if not levels:
                continue
            rows.append([
                statistics.fmean(_log_mean(s[label][lv], 1) + _log_mean(s[label][lv], 0) for lv in levels)
                for s in self.servers
            ])  # fmt: skip
            noise.append(
                statistics.fmean(
                    (_log_se(s[label][lv], 1) ** 2 + _log_se(s[label][lv], 0) ** 2) / len(levels)
                    for s in self.servers
                    for lv in levels
                )
            )
        if len(rows) < 2:
            return None
        return math.sqrt(max(0.0, _between_servers(rows) - statistics.fmean(noise)))

    def missing(self, space: SearchSpace) -> int:
        """How many configs of ``space`` the first server lacks (0: it can stand for the space;
        the others may have read a part of them again)."""
        return len({survey_label(c) for c in candidates(space)} - set(self.windows))

    def _readings(self, candidate: Candidate) -> list[Levels]:
        label = survey_label(candidate)
        found = [s[label] for s in self.servers if label in s]
        if not found:
            raise KeyError(f"{self.name}: {candidate.label()} was not surveyed")
        return found

    def truth(self, candidate: Candidate, level: int) -> Reading:
        """The mean over the servers of each one's :func:`_truth` there."""
        readings = [_truth(levels, level) for levels in self._readings(candidate)]
        throughput = statistics.fmean(r.throughput for r in readings) * self.speed
        latency = statistics.fmean(r.p95_ms for r in readings) / self.speed
        return Reading(throughput, latency, latency, latency, latency)

    def window(
        self, candidate: Candidate, level: int, rng: random.Random, window_s: float, bias: Bias,
        block: tuple[int, int] | None = None,
    ) -> Reading:  # fmt: skip
        """A window the survey read there; with ``block`` (a point's start and this window's
        place), the windows of one point are consecutive ones of one surveyed server, from a
        random start, so the survey's own window-to-window correlation stays (resampled in
        blocks); without, each drawn on its own."""
        readings = self._readings(candidate)
        if block is not None:
            start, k = block
            levels = readings[start % len(readings)]
        else:
            levels = readings[0] if len(readings) == 1 else rng.choice(readings)  # one: no draw
        nearest = min(levels, key=lambda lv: (abs(lv - level), lv))
        true, there = self.truth(candidate, level), _speeded(_truth(levels, nearest), self.speed)
        recorded = levels[nearest]
        if block is not None:
            throughput, latency = recorded[(start // len(readings) + k) % len(recorded)]
        else:
            throughput, latency = rng.choice(recorded)
        throughput, latency = throughput * self.speed, latency / self.speed
        scale = math.sqrt(QUIET_WINDOW_S / window_s)  # a longer window is quieter about its mean
        throughput = (
            (there.throughput + (throughput - there.throughput) * scale) * true.throughput / there.throughput
        )
        latency = (there.p95_ms + (latency - there.p95_ms) * scale) * true.p95_ms / there.p95_ms
        latency *= bias.tail / bias.speed
        return Reading(throughput * bias.speed, latency, latency, latency, latency)

    def block_start(self, rng: random.Random) -> int | None:
        """A point's start in the survey's windows (:meth:`window`)."""
        return rng.getrandbits(30)

    def server_bias(self, rng: random.Random, share: Share = WHOLE, stalls: bool = True) -> Bias:
        """A fresh server's factors, drawn: its throughput's with :attr:`bias_sd`, and its
        latency's beyond that with :attr:`tail_cv`, else (where the survey read other servers)
        :attr:`tail_spread`; ``share`` of each variance. A survey has no stalls."""
        speed = max(0.5, 1 + rng.gauss(0, self.bias_sd * math.sqrt(share.speed)))
        tail = self.tail_spread if self.tail_cv is None else self.tail_cv
        return Bias(speed, max(0.5, 1 + rng.gauss(0, tail * math.sqrt(share.tail)))) if tail else Bias(speed)

    @property
    def bias_sd(self) -> float:
        """How far a fresh server reads off the truth (a relative sd): :attr:`server_cv` where
        given, else :attr:`server_spread`, else half the windows' spread."""
        spread = self.server_cv if self.server_cv is not None else self.server_spread
        return self.cv / 2 if spread is None else spread

    def truth_sd(self, candidate: Candidate) -> float:
        """A mean over the servers that read ``candidate``: :attr:`bias_sd` over the root of their count."""
        return self.bias_sd / math.sqrt(len(self._readings(candidate)))


def _between_servers(rows: Sequence[Sequence[float]]) -> float:
    """The variance of one server's figure about each config's mean: ``rows`` has a row per
    config and a figure per server; each server's mean over the configs is taken out first (a
    drift of the machine moves every config alike, and takes one degree of freedom a server)."""
    servers = len(rows[0])
    drift = [statistics.fmean(row[i] for row in rows) for i in range(servers)]
    centred = [[x - d for x, d in zip(row, drift, strict=True)] for row in rows]
    squares = sum((x - statistics.fmean(row)) ** 2 for row in centred for x in row)
    return squares / ((len(centred) - 1) * (servers - 1))


def _log_mean(pairs: Sequence[tuple[float, float]], i: int) -> float:
    """The log of the mean of the windows' throughputs (``i`` 0) or latencies (1)."""
    return math.log(statistics.fmean(pair[i] for pair in pairs))


def _log_se(pairs: Sequence[tuple[float, float]], i: int) -> float:
    """The standard error of :func:`_log_mean`: the windows' relative spread over their root."""
    values = [pair[i] for pair in pairs]
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) / statistics.fmean(values) / math.sqrt(len(values))


def _speeded(reading: Reading, speed: float) -> Reading:
    """``reading`` on a machine ``speed`` times as fast (:attr:`Surveyed.speed`)."""
    latency = reading.p95_ms / speed
    return Reading(reading.throughput * speed, latency, latency, latency, latency)


def _truth(levels: Levels, level: int) -> Reading:
    """One server's reading at ``level``: its windows' mean; between surveyed levels, the line
    between the nearest two; above the last (the survey stops where latency is far over the
    limit), its throughput, and latency growing with the clients (Little's law: a saturated
    closed loop only queues)."""
    below = max((lv for lv in levels if lv <= level), default=min(levels))
    above = min((lv for lv in levels if lv >= level), default=max(levels))

    def mean(lv: int, i: int) -> float:
        return statistics.fmean(pair[i] for pair in levels[lv])

    share = 0.0 if above == below else (level - below) / (above - below)
    throughput = mean(below, 0) * (1 - share) + mean(above, 0) * share
    latency = mean(below, 1) * (1 - share) + mean(above, 1) * share
    if level > above:
        latency *= level / above
    return Reading(throughput, latency, latency, latency, latency)


def survey_label(candidate: Candidate) -> str:
    """How a survey names a config: its :func:`autotune.search.walk.canonical` form's label
    (:func:`autotune.search.walk.equivalent` configs share one entry)."""
    return walk.canonical(candidate).label()
