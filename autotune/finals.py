"""The end of a tuning run: the finalists raced (:func:`race`), and a concurrency run's winner
measured under arrivals at a rate (:func:`check_open_loop`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from autotune import openfiles, stopping
from autotune.errors import LaunchError, MeasurementError
from autotune.launch import read_tail
from autotune.objective import Sla
from autotune.points import Point, WindowPlan
from autotune.prepare import Prepared
from autotune.results import COMPLETE, OpenLoopCheck, TrialResult, recommendation
from autotune.rundir import RunDir
from autotune.search import level_search, ranking
from autotune.search.noise import RAMP_S
from autotune.search.racing import Race
from autotune.serving import Load
from autotune.study import Study
from autotune.traffic import CHECK_DISTRIBUTION, check_rates, check_sustained, sustained_of
from autotune.trials import Trials
from autotune.workers import OneAtATime, Workers

T = TypeVar("T")


def race(
    prep: Prepared, trials: Trials, run: RunDir, study: Study, workers: Workers | None = None,
    early: Early | None = None,
) -> RunDir:  # fmt: skip
    """The :func:`ranking.finalists` raced, your config beside them as the control (:func:`control`).
    :class:`autotune.search.racing.Race` decides each round; this serves it: each round on a fresh server
    (shared where :meth:`Trials.can_share`), each racer at its level, its windows judged with its
    earlier rounds' there (:func:`level_search.judged_at`). Each free worker begins a round the
    race needs beside those in flight (:meth:`Race.another`), taken in the order begun. A racer's rounds
    at its last level are its verification; a race the study recorded is not run again. The race
    begun in the search's tail (``early``, :func:`ahead`) goes on where its racers are these."""
    s, results, workers = prep.settings, study.results(), workers or OneAtATime()
    ranked = ranking.finalists(results, s.finalists, prep.scoring) if s.repeats >= 1 else []
    done = {v.trial: v for v in study.verifications()}
    if not ranked or all(r.number in done for r in ranked):
        if early is not None and early.flying:
            workers.drop()
        recorded = [done[r.number] for r in ranked if r.number in done]
        return run.update(verifications=(*recorded, *(v for v in done.values() if v.control)))
    begun = _begin(prep, results, early, workers)
    assert begun is not None
    state, yours, searched = begun.state, begun.control, level_search.measured_points(results)
    while True:  # a round on each free worker while the race needs one, taken in the order begun
        _rounds(prep, trials, begun, searched, workers)
        if state.phase == "done":
            workers.drop()  # the race is decided: it needs no round still in flight
        if not workers.busy():
            break
        workers.wait(trials, study)
    if state.out_of_time:
        trials.events.said(
            "the race stops here: the run's time budget is spent (each racer has its rounds so far)"
        )
    out = state.verifications([r.number for r in begun.ranked] + _raced_control(yours, state))
    study.record_verifications(out)
    return run.update(verifications=tuple(out))


@dataclass
class Early:
    """A race and the racers it runs: the finalists and your config as the trials so far rank
    them (:func:`_begin`); ``flying``: its rounds not yet taken, in the order they began;
    ``ended``: the points of those that ended, by their job."""

    ranked: tuple[TrialResult, ...]
    control: TrialResult | None
    state: Race
    flying: list[RoundJob] = field(default_factory=list)
    ended: dict[RoundJob, dict[int, Point | None]] = field(default_factory=dict)

    @property
    def by_number(self) -> dict[int, TrialResult]:
        """Each racer by its trial number, the finalists first."""
        return {r.number: r for r in (*self.ranked, *([self.control] if self.control else []))}


def ahead(
    prep: Prepared, trials: Trials, study: Study, workers: Workers, early: Early | None
) -> Early | None:  # fmt: skip
    """The race begun on the workers that the search leaves free while it waits for its trials in
    flight: the race of the finalists as the trials so far rank them (``early`` goes on where they
    are its racers; a race of others ends). :func:`race` goes on from it where its finalists are
    the same."""
    results = study.results()
    begun = _begin(prep, results, early, workers)
    if begun is None or study.verifications():
        return early
    _rounds(prep, trials, begun, level_search.measured_points(results), workers)
    return begun


def _rounds(
    prep: Prepared, trials: Trials, begun: Early, searched: Sequence[Point], workers: Workers
) -> None:  # fmt: skip
    """A round the race needs begun on each free worker (:meth:`Race.another`), each taken once it
    and every round begun before it ended (:meth:`Race.take_ended`): in the order they began,
    since a round that ends first is more often one far from the limit. ``searched``: the points
    the search measured."""
    state, by_number = begun.state, begun.by_number
    while stale := [job for job in begun.flying if state.stale(job.levels, job.above)]:
        workers.drop(stale)  # rounds the race can never take: their workers serve those it needs
        begun.flying = [job for job in begun.flying if job not in stale]
        _take_in_order(begun)
    while workers.free():
        levels, out_of_time = [job.levels for job in begun.flying], trials.out_of_time(trials.check_s)
        here = [job.levels for job in begun.flying if not state.held(job.levels, job.above)]
        numbers, at = state.another(here, out_of_time), None
        if _take_in_order(begun):
            continue  # the race moved (a leader sent down where its held rounds ended): ask again
        if numbers is None and (at := state.below(levels, out_of_time)) is not None:
            numbers = list(at)  # a worker the race leaves free: the leader's round a level down
        if numbers is None:
            return
        leader = state.current if state.phase == "leader" else None
        racers = [by_number[n] for n in numbers]
        job = _job(prep, trials, state, racers, searched, len(begun.flying), leader, at)
        begun.flying.append(job)

        def take(served: list[dict[int, Point | None]], job: RoundJob = job) -> None:
            begun.ended[job] = served[0]
            _take_in_order(begun)

        workers.begin(trials, serve_round, [job], take)


def _take_in_order(begun: Early) -> bool:
    """The rounds that ended taken (:meth:`Race.take_ended`) while every round begun before each
    has ended too; a round dropped, or held a level down (:meth:`Race.held`), is not waited for.
    Whether it took one."""
    state, took = begun.state, False
    begun.ended = {job: points for job, points in begun.ended.items() if job in begun.flying}
    while True:
        first = next((job for job in begun.flying if not state.held(job.levels, job.above)), None)
        if first is None or first not in begun.ended:
            return took
        begun.flying.remove(first)
        state.take_ended(first.levels, begun.ended.pop(first), first.leader)
        took = True


def _begin(
    prep: Prepared, results: Sequence[TrialResult], early: Early | None, workers: Workers
) -> Early | None:  # fmt: skip
    """The race of the finalists of ``results`` and your config: ``early`` where they are its
    racers, else a new one (None: no finalist). The rounds in flight of a race of other racers
    end (:meth:`Workers.drop`)."""
    s = prep.settings
    ranked = ranking.finalists(results, s.finalists, prep.scoring) if s.repeats >= 1 else []
    yours = control(results, ranked) if ranked else None
    racers = [r.number for r in (*ranked, *([yours] if yours else []))]
    if early is not None and list(early.by_number) == racers:
        return early
    if early is not None and early.flying:
        workers.drop()
    if not ranked:
        return None
    state = Race.start(
        ranked, yours, s.search_sla, s.sla.percentile, prep.scoring, prep.baseline, prep.loader.open_loop,
        s.repeats,
    )  # fmt: skip
    return Early(tuple(ranked), yours, state)


@dataclass(frozen=True, eq=False)
class RoundJob:
    """One race round to serve: its racers, each one's level, round index and plan, and whether
    they share one server (first ``turn`` places later: the order turns each round). Each job is
    itself (equal and hashed by identity), so the race can hold the points of those that ended."""

    racers: tuple[TrialResult, ...]
    levels: dict[int, float]
    counts: dict[int, int]
    plans: dict[int, WindowPlan]
    shared: bool
    turn: int = 0
    leader: int | None = None  # the leader it was asked for, in the race's last phase
    above: dict[int, float] = field(default_factory=dict)  # each racer's level then (Race.below)


def _job(
    prep: Prepared, trials: Trials, state: Race, racers: Sequence[TrialResult], searched: Sequence[Point],
    ahead: int, leader: int | None = None, at: dict[int, float] | None = None,
) -> RoundJob:  # fmt: skip
    """The round of ``racers`` the race asked for, ``ahead`` rounds of it served beside it before
    it in turn, at their levels (``at``: those :meth:`Race.below` gave): each racer judged with
    its earlier rounds at its level (:func:`level_search.judged_at`); on one server where they can
    share one (not on GPUs: a server's GPU figures, its memory, are all its models')."""
    numbers = [r.number for r in racers]
    levels = at or {n: state.level[n] for n in numbers}
    seen = [*searched, *(p for rounds in state.rounds.values() for p in rounds)]
    noise = level_search.latency_noise(seen, prep.settings.plan.percentile)  # the warm-up test's spread
    before = {n: state.rounds[n] if levels[n] == state.level[n] else [] for n in numbers}  # none a level down
    plan, limit = prep.settings.plan, state.sla.limit_ms
    plans = {n: level_search.judged_at(plan, limit, before[n], noise) for n in numbers}
    on_gpus = any(r.candidate is not None and r.candidate.kind == "KIND_GPU" for r in racers)
    shared = len(racers) > 1 and not on_gpus and trials.can_share()
    counts = {n: state.count[n] + ahead for n in numbers}
    turn = counts[numbers[0]] % len(racers)
    above = {n: state.level[n] for n in numbers}
    return RoundJob(tuple(racers), levels, counts, plans, shared, turn, leader, above)


def serve_round(trials: Trials, job: RoundJob) -> dict[int, Point | None]:
    """A round of each racer of ``job``: on one server where they share one, in its turned order;
    else, or where that failed them, each on its own (None: it failed)."""
    prep = trials.prep
    out: dict[int, Point | None] = {}
    if job.shared:
        out.update(_shared_round(prep, trials, [*job.racers[job.turn :], *job.racers[: job.turn]], job))
    for r in job.racers:
        if r.number not in out:
            out[r.number] = _round(
                prep, trials, r, job.levels[r.number], job.plans[r.number], job.counts[r.number]
            )
    return out


def control(results: Sequence[TrialResult], ranked: Sequence[TrialResult]) -> TrialResult | None:
    """Your config's trial, to race beside the finalists: measured, meeting the SLA somewhere,
    and not a finalist itself (None otherwise)."""
    numbers = {r.number for r in ranked}
    yours = next((r for r in results if r.baseline and r.state == COMPLETE and r.best is not None), None)
    return None if yours is None or yours.number in numbers or yours.reused_from is not None else yours


def _raced_control(yours: TrialResult | None, state: Race) -> list[int]:
    """The control's number, for its verification, when it raced (at least one round)."""
    return [yours.number] if yours is not None and state.count[yours.number] else []


def _round(
    prep: Prepared, trials: Trials, result: TrialResult, level: float, plan: WindowPlan, i: int
) -> Point | None:
    """A round of the finalist at ``level`` on a fresh server of its own (None: it failed)."""
    assert result.candidate is not None
    name = f"race-{result.number:03d}-{i + 1}"
    try:
        with trials.serve(result.candidate, trials.run_dir.log(f"{name}.log"), name) as server:
            point = _point(prep, trials, trials.generator(server, plan), result.number, level, i, name)
    except (LaunchError, MeasurementError) as exc:
        if openfiles.exhausted(exc, read_tail(trials.run_dir.log(f"{name}.log"), None)):
            raise openfiles.limit_error(str(exc).splitlines()[0]) from exc
        trials.events.verification_failed(result, str(exc).splitlines()[0])
        return None
    stopping.check()
    return point


def _shared_round(
    prep: Prepared, trials: Trials, contenders: Sequence[TrialResult], job: RoundJob
) -> dict[int, Point]:
    """A round of several racers on one fresh server, each staged under a name of its own and
    measured in turn at its level by its plan; those it failed are left out."""
    numbers = [r.number for r in contenders]
    name = f"race-{'+'.join(f'{n:03d}' for n in numbers)}-{job.counts[numbers[0]] + 1}"
    alias = {r.number: f"{prep.settings.model}__race{r.number:03d}" for r in contenders}
    candidates = {alias[r.number]: r.candidate for r in contenders if r.candidate is not None}
    out: dict[int, Point] = {}
    try:
        with trials.serve_all(candidates, trials.run_dir.log(f"{name}.log"), name) as server:
            for n in numbers:
                try:
                    gen = trials.generator(server, job.plans[n], alias[n])
                    out[n] = _point(prep, trials, gen, n, job.levels[n], job.counts[n], name)
                except MeasurementError:
                    if not server.alive():
                        break
                stopping.check()
    except LaunchError:
        pass
    return out


def _point(prep: Prepared, trials: Trials, gen: Load, number: int, level: float, i: int, stage: str) -> Point:
    """Trial ``number``'s round ``i`` at ``level`` on the server of ``stage``, told to the console
    (an open loop's arrivals drawn with the round's own seed)."""
    where = f"{level:.4g} req/s" if prep.loader.open_loop else f"concurrency {level:.0f}"
    trials.events.verifying(number, where, i + 1, prep.settings.repeats)
    point = prep.loader.point(gen.with_seed(i + 1) if prep.loader.open_loop else gen, level)
    return replace(trials.named(point), stage=stage)


def check_open_loop(
    prep: Prepared, trials: Trials, run: RunDir, winner: TrialResult, workers: Workers | None = None
) -> RunDir:
    """The winner measured under Poisson arrivals on a fresh server (by ``workers``: on a node of a
    Ray cluster there), from the rate it was credited with down to the highest that meets the SLA
    or one left undecided at its limit (:func:`autotune.traffic.check_sustained`), recorded in the
    run (a failure is told, not it). Not in an open loop, with ``--repeats 0``,
    ``--no-open-loop-check`` or models beside it, nor twice for one winner."""
    s, done_before = prep.settings, run.record.open_loop
    checks = not prep.loader.open_loop and s.repeats >= 1 and s.open_loop_check and not s.beside
    if not checks or (done_before is not None and done_before.trial == winner.number):
        return run
    if trials.out_of_time():
        trials.events.said("the open-loop check was skipped: the run's time budget is spent")
        return run
    rec = recommendation(winner, run.record.verifications, s.sla.percentile)
    if winner.candidate is None or rec is None or rec.throughput <= 0:
        return run
    job = OpenLoopJob(winner, rec.throughput / s.workload.batch_size)
    trials.events.checking_open_loop(winner.number, job.credited)
    if workers is not None and workers.at_once > 1:
        found = _check_at_once(trials, workers, job)
    else:
        found = (workers or OneAtATime()).each(trials, serve_open_loop, [job])[0]
    if isinstance(found, str):
        trials.events.verification_failed(winner, f"open-loop check: {found}")
        return run
    return run.update(open_loop=found)


def _check_at_once(trials: Trials, workers: Workers, job: OpenLoopJob) -> OpenLoopCheck | str:
    """The check on several workers: each wave measures the highest rates not yet measured
    (:func:`autotune.traffic.check_rates`), each on a fresh server, until one meets the SLA or is
    left undecided (:func:`autotune.traffic.sustained_of`), or the floor is reached. Read from
    the top, it settles where the bisection would, in fewer turns of a server's start."""
    sla, rates, done = trials.prep.settings.sla, check_rates(job.credited), list[Point]()
    rate, undecided = 0.0, False
    while rates:
        wave, rates = rates[: workers.at_once], rates[workers.at_once :]
        found = workers.each(trials, serve_open_loop_rate, [replace(job, rate=r) for r in wave])
        failed = [f for f in found if isinstance(f, str)]
        if failed:
            return failed[0]
        done.extend(p for p in found if isinstance(p, Point))
        rate, undecided = sustained_of(done, sla)
        if rate:
            break
        if trials.out_of_time():
            break
        stopping.check()
    return _checked(job, done, sla, rate if undecided else 0.0)


def _checked(job: OpenLoopJob, points: Sequence[Point], sla: Sla, at_limit: float) -> OpenLoopCheck:
    """The check's record: its points, the highest rate that met the SLA, the one left undecided."""
    sustained = max((p.request_rate for p in points if sla.met_by(p)), default=0.0)
    number, measured = job.winner.number, tuple(points)
    return OpenLoopCheck(number, job.credited, CHECK_DISTRIBUTION, measured, sustained, at_limit)


def _check_plan(trials: Trials) -> WindowPlan:
    """The windows of a check's point, judged against the SLA itself."""
    s = trials.prep.settings
    return level_search.judged_at(s.plan, s.sla.limit_ms)


@dataclass(frozen=True)
class OpenLoopJob:
    """The open-loop check to serve: the winner, and the rate its closed loop was credited with;
    with ``rate``, one rate of it on a server of its own (:func:`serve_open_loop_rate`)."""

    winner: TrialResult
    credited: float
    rate: float = 0.0

    @property
    def racers(self) -> tuple[TrialResult, ...]:
        """The configs it serves, as a race round names them (a worker asks for their GPUs)."""
        return (self.winner,)


def serve_open_loop_rate(trials: Trials, job: OpenLoopJob) -> Point | str:
    """``job.rate`` of the check on a fresh server (:func:`_check_at_once`); why it failed, if it did."""

    def measure(server: Any) -> Point:
        gen = trials.generator(server, _check_plan(trials))
        return trials.named(gen.at_rate(job.rate, CHECK_DISTRIBUTION))

    return _on_fresh_server(trials, job, f"open-loop-{job.winner.number:03d}-{job.rate:g}", measure)


def serve_open_loop(trials: Trials, job: OpenLoopJob) -> OpenLoopCheck | str:
    """The check of ``job`` on a fresh server (:func:`check_open_loop`); why it failed, if it did."""
    sla, plan, done = trials.prep.settings.sla, _check_plan(trials), list[Point]()

    def measure(server: Any) -> OpenLoopCheck:
        first = trials.generator(server, plan)
        ramp = first.with_plan(replace(plan, warmup_s=min(plan.warmup_s, RAMP_S)))

        def at(rate: float) -> Point:
            point = trials.named((ramp if done else first).at_rate(rate, CHECK_DISTRIBUTION))
            done.append(point)
            stopping.check()
            return point

        return _checked(job, done, sla, check_sustained(at, sla, job.credited))

    return _on_fresh_server(trials, job, f"open-loop-{job.winner.number:03d}", measure)


def _on_fresh_server(trials: Trials, job: OpenLoopJob, name: str, measure: Callable[[Any], T]) -> T | str:
    """``measure`` of the winner's fresh server, named ``name``; why it failed, if it did."""
    assert job.winner.candidate is not None
    try:
        with trials.serve(job.winner.candidate, trials.run_dir.log(f"{name}.log"), name) as server:
            out = measure(server)
            stopping.check()
            return out
    except (LaunchError, MeasurementError) as exc:
        return str(exc).splitlines()[0]
