"""The end of a tuning run: the finalists re-measured, and a concurrency run's winner under
arrivals at a rate.

:func:`verify_finalists` re-measures the finalists of :func:`autotune.decide.finalists` at their
operating points (a concurrency, or a request rate in an open loop); :func:`check_open_loop`
measures the winner of a concurrency run in an open loop, so that the report shows the arrival
rate it sustains beside the rate its closed loop was credited with. The tuner
(:mod:`autotune.tuner`) calls both; they serve candidates through its trial runner.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from autotune import decide, stopping
from autotune.errors import LaunchError, MeasurementError
from autotune.measure import Point
from autotune.results import OpenLoopCheck, TrialResult, Verification, recommendation
from autotune.rundir import RunDir
from autotune.study import Study
from autotune.traffic import CHECK_DISTRIBUTION, check_sustained

if TYPE_CHECKING:
    from autotune.tuner import Prepared, Trials

RAMP_S = 0.3  # warm-up before each point after a server's first one (the first gets the plan's)


def verify_finalists(prep: Prepared, trials: Trials, run: RunDir, study: Study) -> RunDir:
    """Re-measure the finalists (:func:`decide.finalists`) at their operating points, several
    times on one server, so that noise cannot crown a loser nor hand the user a point that
    breaks the SLA; once one has met the SLA in every repeat, only those that could still beat
    it (:func:`decide.could_beat`; goodputs compared as the run's scoring says, per GPU or not).
    Each verification is recorded as it ends, in the study (a resumed run, or another worker of
    the study, does not repeat it) and in the run's record, which ends up holding exactly the
    ones the winner is chosen from."""
    out: list[Verification] = []
    if prep.settings.repeats >= 1:
        done = {v.trial: v for v in study.verifications()}
        results, scoring = study.results(), prep.scoring
        for result in decide.finalists(results, prep.settings.finalists, scoring):
            if result.number in done:
                out.append(done[result.number])
            elif (
                decide.could_beat(result, out, scoring, results)
                and (verification := verify(prep, trials, result)) is not None
            ):
                out.append(verification)
                study.record_verifications(list({**done, **{v.trial: v for v in out}}.values()))
                run = run.update(verifications=tuple(out))
    return run.update(verifications=tuple(out))


def verify(prep: Prepared, trials: Trials, result: TrialResult) -> Verification | None:
    """Every repeat must meet the SLA; if one does not, the level halfway down to the next
    lower one its search measured is verified instead, then that one (:func:`decide.verify_levels`),
    on the same server. None: it could not be measured (its server or a measurement failed)."""
    assert result.candidate is not None
    settings, name, loader = prep.settings, f"verify-{result.number:03d}", prep.loader
    plan = replace(settings.plan, window_s=settings.plan.window_s * 2)  # longer than screening
    ramp = replace(plan, warmup_s=min(plan.warmup_s, RAMP_S))
    try:
        with trials.serve(result.candidate, trials.run_dir.log(f"{name}.log"), name) as server:
            gen = trials.generator(server, plan)
            for level in decide.verify_levels(result):
                points: list[Point] = []
                for i in range(settings.repeats):
                    where = f"{level:.4g} req/s" if loader.open_loop else f"concurrency {level:.0f}"
                    trials.events.verifying(result.number, where, i + 1, settings.repeats)
                    # an open loop's repeats see other arrivals (seeds 1, 2, ...; the search had 0)
                    points.append(loader.point(replace(gen, seed=i + 1) if loader.open_loop else gen, level))
                    stopping.check()
                    gen = gen.with_plan(ramp)
                    if not settings.sla.met_by(points[-1]):
                        break  # this level failed: no need to finish its repeats
                met = sum(settings.sla.met_by(p) for p in points)
                if met == settings.repeats:
                    break
    except (LaunchError, MeasurementError) as exc:
        trials.events.verification_failed(result, str(exc).splitlines()[0])
        return None
    concurrency, rate = (0, level) if loader.open_loop else (int(level), 0.0)
    return Verification(result.number, concurrency, tuple(points), met, rate)


def check_open_loop(prep: Prepared, trials: Trials, run: RunDir, winner: TrialResult) -> RunDir:
    """A concurrency run's winner under Poisson arrivals, from the rate its closed loop was
    credited with (its verified throughput in requests per second) down to the highest rate
    that meets the SLA (:func:`autotune.traffic.check_sustained`); recorded in the run. A
    failure is told and leaves no record: the check informs, it does not choose. Not in an
    open-loop run (it measured rates already), nor with ``--repeats 0`` (nothing re-measured)
    or ``--no-open-loop-check``, nor twice for one winner (a resumed run)."""
    settings, done_before = prep.settings, run.record.open_loop
    if prep.loader.open_loop or settings.repeats < 1 or not settings.open_loop_check:
        return run
    if done_before is not None and done_before.trial == winner.number:
        return run
    rec = recommendation(winner, run.record.verifications, settings.sla.percentile)
    if winner.candidate is None or rec is None or rec.throughput <= 0:
        return run
    credited = rec.throughput / settings.workload.batch_size
    trials.events.checking_open_loop(winner.number, credited)
    name = f"open-loop-{winner.number:03d}"
    try:
        with trials.serve(winner.candidate, trials.run_dir.log(f"{name}.log"), name) as server:
            gen = trials.generator(server, settings.plan)
            ramp = gen.with_plan(replace(settings.plan, warmup_s=min(settings.plan.warmup_s, RAMP_S)))
            done: list[Point] = []

            def at(rate: float) -> Point:
                point = (ramp if done else gen).at_rate(rate, CHECK_DISTRIBUTION)
                done.append(point)
                stopping.check()
                return point

            measured = check_sustained(at, settings.sla, credited)
            stopping.check()
    except (LaunchError, MeasurementError) as exc:
        trials.events.verification_failed(winner, f"open-loop check: {str(exc).splitlines()[0]}")
        return run
    sustained = max((p.request_rate for p in measured.points if settings.sla.met_by(p)), default=0.0)
    check = OpenLoopCheck(winner.number, credited, CHECK_DISTRIBUTION, tuple(done), sustained)
    return run.update(open_loop=check)
