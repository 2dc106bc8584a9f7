"""The end of a tuning run: the finalists raced (:func:`race`), and a concurrency run's winner
measured under arrivals at a rate (:func:`check_open_loop`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from autotune import openfiles, rules, stopping
from autotune.errors import LaunchError, MeasurementError
from autotune.launch import read_tail
from autotune.loadgen import LoadGenerator
from autotune.noise import Noise
from autotune.points import Point, WindowPlan
from autotune.results import OpenLoopCheck, TrialResult, Verification, recommendation
from autotune.rundir import RunDir
from autotune.study import Study
from autotune.traffic import CHECK_DISTRIBUTION, check_sustained

if TYPE_CHECKING:
    from autotune.trials import Trials
    from autotune.tuner import Prepared

RAMP_S = 0.3  # warm-up before each point after a server's first one (the first gets the plan's)


def race(prep: Prepared, trials: Trials, run: RunDir, study: Study) -> RunDir:
    """The :func:`rules.finalists` raced, at most ``--repeats`` rounds, each on a fresh server (shared where
    :meth:`Trials.can_share`), each contender at its level, its windows judged with its earlier rounds' there
    (:func:`rules.judged_at`): rounds that :func:`rules.rounds_break` send it :func:`rules.level_below` (none:
    it leaves; sent down in the last round: one round there); after each round the :func:`rules.outraced`
    leave, until one is left with two rounds. The leader must :func:`rules.rounds_meet` where it stands as a
    mean across servers (the race's :func:`rules.round_spread`): undecided, it gets another round there, up to
    ``--repeats``, then a level down. A contender's rounds at its last level
    are its verification (those it left, its ``others``); a race the study recorded is not run again."""
    settings, scoring = prep.settings, prep.scoring
    results = study.results()
    ranked = rules.finalists(results, settings.finalists, scoring) if settings.repeats >= 1 else []
    done = {v.trial: v for v in study.verifications()}
    if not ranked or all(r.number in done for r in ranked):
        return run.update(verifications=tuple(done[r.number] for r in ranked if r.number in done))
    sla = settings.search_sla
    shares = {r.number: scoring.share(r.candidate) for r in ranked}
    levels = {r.number: rules.race_levels(r, sla) for r in ranked}
    level = {n: listed[0] for n, listed in levels.items()}
    rounds: dict[int, list[Point]] = {n: [] for n in shares}
    others: dict[int, list[tuple[float, tuple[Point, ...]]]] = {n: [] for n in shares}
    count = dict.fromkeys(shares, 0)
    pct = settings.sla.percentile
    to_limit = {r.number: rules.to_limit(r, sla.limit_ms, pct) for r in ranked}
    carries = None if prep.loader.open_loop else to_limit
    changes = rules.changes_from(ranked, prep.baseline)  # ties go to the nearest to your config

    def measured(contenders: Sequence[TrialResult]) -> dict[int, Point | None]:
        """A round of each of ``contenders``: on one server (where they can share one) in an order
        that turns each round; else, or where that failed them, each on its own."""
        out: dict[int, Point | None] = {}
        plans = {r.number: rules.judged_at(settings.plan, sla.limit_ms, rounds[r.number]) for r in contenders}
        # not on GPUs: a server's GPU figures (its memory) are all its models'
        on_gpus = any(r.candidate is not None and r.candidate.kind == "KIND_GPU" for r in contenders)
        if len(contenders) > 1 and not on_gpus and trials.can_share():
            turn = count[contenders[0].number] % len(contenders)
            turned = [*contenders[turn:], *contenders[:turn]]
            out.update(_shared_round(prep, trials, turned, level, plans, count))
        for r in contenders:
            if r.number not in out:
                out[r.number] = _round(prep, trials, r, level[r.number], plans[r.number], count[r.number])
        return out

    def one_round(result: TrialResult, point: Point | None) -> bool:
        """``result``'s round added (None: it failed); False: it is out."""
        n = result.number
        count[n] += 1
        if point is None:
            return False
        rounds[n].append(point)
        return not rules.rounds_break(rounds[n], sla) or down(n)

    def down(n: int) -> bool:
        """``n`` to :func:`rules.level_below`; False: none is left."""
        below = rules.level_below(level[n], rounds[n], sla, levels[n], spread())
        others[n].append((level[n], tuple(rounds[n])))
        rounds[n], level[n] = [], level[n] if below is None else below
        return below is not None

    def spread() -> Noise:
        """The race's :func:`rules.round_spread`: every contender's rounds at each of its levels."""
        return rules.round_spread([*rounds.values(), *(p for past in others.values() for _, p in past)], pct)

    alive = list(ranked)
    for _ in range(settings.repeats):
        this_round = measured(alive)
        alive = [r for r in alive if one_round(r, this_round[r.number])]
        left = rules.outraced({r.number: rounds[r.number] for r in alive}, shares, carries, changes)
        alive = [r for r in alive if r.number not in left]
        if len(alive) <= 1 and all(len(rounds[r.number]) >= 2 for r in alive):
            break
    moved = [r for r in alive if not rounds[r.number]]  # down a level in the last round: one there
    got = measured(moved) if moved else {}
    alive = [r for r in alive if r not in moved or one_round(r, got[r.number])]
    by_number = {r.number: r for r in ranked}
    while True:  # the leader must meet the SLA where it stands, as a mean across servers
        standing = {n: pts for n, pts in rounds.items() if pts and not rules.rounds_break(pts, sla)}
        n = rules.race_leader(standing, shares, pct, carries, changes)
        if n is None or rules.rounds_meet(rounds[n], sla, spread()):
            break
        if len(rounds[n]) >= settings.repeats and not down(n):  # undecided at the budget: a level down
            continue  # (none: it leaves)
        while (ok := one_round(by_number[n], measured([by_number[n]])[n])) and not rounds[n]:
            pass  # a round where it stands (one that breaks it sends it down a level: one there)
        if not ok and rounds[n]:
            down(n)  # its server failed: it leaves, on its rounds there
    out, found = [], spread()
    for result in ranked:
        n = result.number
        at, points, past = level[n], tuple(rounds[n]), list(others[n])
        if not points and past:  # it left the race at its last level: it stands on that one's rounds
            at, points = past.pop()
        concurrency, rate = (0, at) if prep.loader.open_loop else (int(at), 0.0)
        met = len(points) if rules.rounds_meet(points, sla, found) else sum(sla.met_by(p) for p in points)
        out.append(Verification(n, concurrency, points, met, rate, tuple(past), limit_ms=sla.limit_ms))
    study.record_verifications(out)
    return run.update(verifications=tuple(out))


def _round(
    prep: Prepared, trials: Trials, result: TrialResult, level: float, plan: WindowPlan, i: int
) -> Point | None:
    """A round of the finalist at ``level`` on a fresh server of its own (None: it failed)."""
    assert result.candidate is not None
    name = f"race-{result.number:03d}-{i + 1}"
    try:
        with trials.serve(result.candidate, trials.run_dir.log(f"{name}.log"), name) as server:
            point = _point(prep, trials, trials.generator(server, plan), result.number, level, i)
    except (LaunchError, MeasurementError) as exc:
        if openfiles.exhausted(exc, read_tail(trials.run_dir.log(f"{name}.log"), None)):
            raise openfiles.limit_error(str(exc).splitlines()[0]) from exc
        trials.events.verification_failed(result, str(exc).splitlines()[0])
        return None
    stopping.check()
    return point


def _shared_round(
    prep: Prepared, trials: Trials, contenders: Sequence[TrialResult], level: dict[int, float],
    plans: dict[int, WindowPlan], count: dict[int, int],
) -> dict[int, Point]:  # fmt: skip
    """A round of several finalists on one fresh server, each staged under a name of its own and
    measured in turn at its level by its plan; those it failed are left out."""
    numbers = [r.number for r in contenders]
    name = f"race-{'+'.join(f'{n:03d}' for n in numbers)}-{count[numbers[0]] + 1}"
    alias = {r.number: f"{prep.settings.model}__race{r.number:03d}" for r in contenders}
    candidates = {alias[r.number]: r.candidate for r in contenders if r.candidate is not None}
    out: dict[int, Point] = {}
    try:
        with trials.serve_all(candidates, trials.run_dir.log(f"{name}.log"), name) as server:
            for n in numbers:
                try:
                    gen = trials.generator(server, plans[n], alias[n])
                    out[n] = _point(prep, trials, gen, n, level[n], count[n])
                except MeasurementError:
                    if not server.alive():
                        break
                stopping.check()
    except LaunchError:
        pass
    return out


def _point(prep: Prepared, trials: Trials, gen: LoadGenerator, number: int, level: float, i: int) -> Point:
    """Trial ``number``'s round ``i`` at ``level``, told to the console (an open loop's arrivals
    drawn with the round's own seed)."""
    where = f"{level:.4g} req/s" if prep.loader.open_loop else f"concurrency {level:.0f}"
    trials.events.verifying(number, where, i + 1, prep.settings.repeats)
    return prep.loader.point(replace(gen, seed=i + 1) if prep.loader.open_loop else gen, level)


def check_open_loop(prep: Prepared, trials: Trials, run: RunDir, winner: TrialResult) -> RunDir:
    """A concurrency run's winner under Poisson arrivals, from the rate its closed loop was
    credited with down to the highest that meets the SLA or one left undecided at its limit
    (:func:`autotune.traffic.check_sustained`), recorded in the run (a failure is told, not it).
    Not in an open loop, with ``--repeats 0``, ``--no-open-loop-check`` or models beside it, nor
    twice for one winner."""
    s, done_before = prep.settings, run.record.open_loop
    checks = not prep.loader.open_loop and s.repeats >= 1 and s.open_loop_check and not s.beside
    if not checks or (done_before is not None and done_before.trial == winner.number):
        return run
    rec = recommendation(winner, run.record.verifications, s.sla.percentile)
    if winner.candidate is None or rec is None or rec.throughput <= 0:
        return run
    credited = rec.throughput / s.workload.batch_size
    name, plan = f"open-loop-{winner.number:03d}", rules.judged_at(s.plan, s.sla.limit_ms)
    done: list[Point] = []
    try:
        with trials.serve(winner.candidate, trials.run_dir.log(f"{name}.log"), name) as server:
            first = trials.generator(server, plan)
            ramp = first.with_plan(replace(plan, warmup_s=min(plan.warmup_s, RAMP_S)))
            trials.events.checking_open_loop(winner.number, credited)

            def at(rate: float) -> Point:
                point = (ramp if done else first).at_rate(rate, CHECK_DISTRIBUTION)
                done.append(point)
                stopping.check()
                return point

            at_limit = check_sustained(at, s.sla, credited)
            stopping.check()
    except (LaunchError, MeasurementError) as exc:
        trials.events.verification_failed(winner, f"open-loop check: {str(exc).splitlines()[0]}")
        return run
    sustained = max((p.request_rate for p in done if s.sla.met_by(p)), default=0.0)
    check = OpenLoopCheck(winner.number, credited, CHECK_DISTRIBUTION, tuple(done), sustained, at_limit)
    return run.update(open_loop=check)
