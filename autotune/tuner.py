"""A tuning run, start to finish: trials, the finalists' race, the winner.

    candidate --apply--> ModelConfig --stage--> repository --Launcher--> Server
      --LoadGenerator / find_goodput--> Measurement --> Study.tell --> TrialResult

This module runs the loop and does the I/O; every decision (seeds, where a search starts,
convergence, finalists, the winner) is a pure function of :mod:`autotune.search`. The run's
record is :mod:`autotune.rundir`'s; progress goes to an :class:`~autotune.events.Events`
object, and the tuner prints nothing itself.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from autotune import __version__, finals, fleet, hostlock, stopping
from autotune import model_config as mcfg
from autotune.config_edit import edit_in_place, text_diff
from autotune.errors import DiskFullError, WorkloadError
from autotune.events import Events
from autotune.files import Room, disk_full, file_digest, free_bytes, mib, write_text_atomic
from autotune.launch import make_launcher
from autotune.launched import LaunchedServers
from autotune.pipeline import caller_digest, describe
from autotune.prepare import RUN_ROOM_BYTES, Prepared
from autotune.processes import Owner
from autotune.report import write_report
from autotune.results import Outcome, TrialResult, gain
from autotune.rundir import WINNER_CONFIG, WINNER_DIFF, RunDir, RunRecord
from autotune.search import racing, ranking, walk
from autotune.search_space import params_of
from autotune.settings import RunOptions
from autotune.study import Study, redact
from autotune.traffic import CHECK_POINTS
from autotune.trials import Trials
from autotune.workers import OneAtATime, Workers


def tune(prep: Prepared, events: Events | None = None, *, wait: bool = False) -> Outcome:
    """The run, start to finish, holding the machine's measurement lock (:mod:`autotune.hostlock`;
    ``wait``: wait for another run that holds it, else refuse)."""
    events = events or Events()
    settings = prep.settings
    with hostlock.measuring("autotune run", wait=wait, waiting=events.waiting) as lease:
        path = settings.run_dir or RunDir.new_path(settings.reports_dir, settings.model, _run_id())
        lease.name(str(path))  # what a run refused meanwhile is told
        launcher = make_launcher(settings.launch, path.name)  # a wrong set-up fails before any write
        workers = fleet.RayWorkers(prep, settings.ray, settings.trials_at_once) if settings.ray else None
        try:
            run, study = _open(prep, path)
            trials = Trials(prep, LaunchedServers(prep, launcher, run.record.run_id), run, events)
            try:
                return _search(prep, trials, study, workers)
            finally:
                trials.close()
        finally:
            if workers is not None:
                workers.close()


def _search(prep: Prepared, trials: Trials, study: Study, workers: Workers | None = None) -> Outcome:
    """Trials until the budget or convergence ends them, the finalists raced, the winner
    written. Room for the report is kept on the disk meanwhile (:class:`Room`): a disk that
    fills up ends the run with a :class:`DiskFullError`, its trials and report kept."""
    run = trials.run_dir
    room = Room(run.path, RUN_ROOM_BYTES)
    try:
        run = search(prep, trials, study, workers)
        room.release()
        outcome = _finish(prep, trials, run, study, workers)  # written while the last server stops
        if trials.deadline is not None and (over := trials.clock() - trials.deadline) > 0:
            trials.events.said(
                f"the run took {over:.0f} s more than its time budget: a race round or the open-loop "
                "check, once started, runs to its end"
            )
        return outcome
    except Exception as exc:
        full = disk_full(exc)
        if full is None:
            raise
        room.release()
        raise _out_of_room(full, run, study) from exc


def search(prep: Prepared, trials: Trials, study: Study, workers: Workers | None = None) -> RunDir:
    """The seeds queued (a new study), trials until the budget or convergence ends them, and the
    finalists raced: the run directory that records them (the winner is chosen from it).
    ``workers``: how many trials are measured at once (default: one at a time)."""
    settings, run = prep.settings, trials.run_dir
    workers = workers or OneAtATime()
    if study.created:
        _seed(study, prep)
    study.interrupted()  # measured again first
    started = trials.clock() - run.record.searched_s  # the time budget counts earlier sessions
    budget = settings.time_budget_s
    trials.deadline = None if budget is None else started + budget  # the whole run's, race included
    trials.events.run_started(run.path, settings.max_trials, budget, after_search(prep))
    try:
        early = _trials(prep, trials, study, started, workers)
    except WorkloadError:
        _forget_if_empty(prep, trials.run_dir, study)
        raise
    stopping.check()
    results = study.results()
    trials.check_s = reserve_s(prep, results, rounds=0)  # the race leaves the open-loop check its time
    most = reserve_s(prep, results, rounds=prep.settings.repeats)
    what = after_search(prep, short=True)
    trials.events.search_ended(trials.clock() - started, reserve_s(prep, results), budget, most, what)
    return finals.race(prep, trials, trials.run_dir, study, workers, early)


def _trials(
    prep: Prepared, trials: Trials, study: Study, started: float, workers: Workers
) -> finals.Early | None:  # fmt: skip
    """Trials while :func:`_go_on` says so: a free worker starts the next one; with every worker
    busy, or nothing more to start, the next trial in flight to end is told; then the search
    decides again. The workers the search leaves free while it waits for its trials in flight
    begin the race (:func:`finals.ahead`): it goes on from there where its finalists stay the same.
    A free worker serves the search first."""
    early: finals.Early | None = None
    try:
        while True:
            results = study.results()
            elapsed, reserve = trials.clock() - started, reserve_s(prep, results)
            if workers.free() and _go_on(prep, study, results, elapsed, reserve, workers.at_once):
                workers.start(trials, study, results)
            elif not workers.busy() or not walk.in_flight(results):
                return early  # the race's rounds in flight end in it (:func:`finals.race`)
            else:
                if workers.free():  # the search waits for its trials in flight
                    trials.check_s = reserve_s(prep, results, rounds=0)
                    early = finals.ahead(prep, trials, study, workers, early)
                workers.wait(trials, study)
            trials.run_dir = trials.run_dir.update(searched_s=trials.clock() - started)
    except BaseException:
        workers.stop(trials, study)  # the trials in flight: measured again on --resume
        raise


def reserve_s(prep: Prepared, results: Sequence[TrialResult], rounds: int = racing.SETTLE_ROUNDS) -> float:
    """The time the race and the open-loop check will take (:func:`walk.after_search_s`): the
    finalists and your config, ``rounds`` rounds (by default :data:`racing.SETTLE_ROUNDS`, the
    fewest that settle a race; 0: the check alone), on one server a round where they can share one."""
    s = prep.settings
    if s.repeats < 1:
        return 0.0
    checks = s.open_loop_check and not prep.loader.open_loop and not s.beside
    shared = prep.pipeline is None and not s.beside and s.launch.kind != "remote"
    rounds = min(rounds, s.repeats)
    return walk.after_search_s(
        results, max(s.finalists, 1) + 1, rounds, shared, CHECK_POINTS if checks else 0, s.plan.warmup_s
    )


def after_search(prep: Prepared, short: bool = False) -> str:
    """What the run does after its search, for people: the race (your config beside the
    finalists), the open-loop check ("": neither; ``short``: their names alone)."""
    s = prep.settings
    steps = []
    if s.repeats >= 1 and s.finalists >= 1:
        rounds = f" of up to {s.finalists} finalists and your config (up to {s.repeats} rounds)"
        steps.append(f"the race{'' if short else rounds}")
    if s.repeats >= 1 and s.open_loop_check and not prep.loader.open_loop and not s.beside:
        steps.append("the open-loop check" if short else "the winner's open-loop check")
    return " and ".join(steps)


def _open(prep: Prepared, path: Path) -> tuple[RunDir, Study]:
    """The run directory (:func:`_open_run`) and its study. A study in a storage of its own
    (--storage) is opened first: one that cannot be opened leaves no run directory behind (the
    same command would take it for an unfinished run, and fail on that storage again)."""
    settings = prep.settings
    resumed = RunDir.load(path) if settings.run_dir is not None else None
    name = resumed.record.study_name if resumed else settings.study_name or f"{settings.model}-{path.name}"

    def study(url: str) -> Study:
        return Study.open(url, name, prep.space, settings.sla, seed=settings.seed, scoring=prep.scoring)

    if settings.storage:
        opened = study(settings.storage)
        return _open_run(prep, path, name, resumed), opened
    run = _open_run(prep, path, name, resumed)
    try:
        return run, study(run.study_url())
    except BaseException:
        if resumed is None:
            shutil.rmtree(path, ignore_errors=True)
        raise


def _out_of_room(exc: BaseException, run: RunDir, study: Study) -> DiskFullError:
    """The disk filled up (``exc`` says so): the report of what was measured is written in the
    room the run kept, and the error names the file and the space left (the trial in flight is
    measured again on --resume: its end never reached the study)."""
    where = getattr(exc, "filename", None) or run.path / "study.db"
    try:
        outcome = Outcome(run.path, run.info(), tuple(study.results()))
        write_report(outcome.info, outcome.trials, outcome.run_dir)
        kept = f"the trials so far and their report are kept in {run.path}"
    except Exception:  # nothing more can be written there
        kept = f"the trials so far are kept in {run.path}"
    return DiskFullError(
        f"no space left on the disk of {where} ({mib(free_bytes(run.path))} free): the run stopped; {kept}"
    )


def _forget_if_empty(prep: Prepared, run: RunDir, study: Study) -> None:
    """A new run its data stopped before any trial ended leaves nothing (its study is in it)."""
    s = prep.settings
    if s.run_dir is None and s.storage is None and not walk.finished(study.results()):
        shutil.rmtree(run.path, ignore_errors=True)


def _run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _open_run(prep: Prepared, path: Path, study_name: str, resumed: RunDir | None) -> RunDir:
    """The resumed run, or a new one; owned by this process."""
    settings = prep.settings
    if resumed is not None:
        return resumed.update(owner=Owner.current())
    record = RunRecord(
        run_id=path.name,
        model=settings.model,
        step=settings.step,
        composing=settings.composing,
        caller_digest=caller_digest(prep.pipeline, prep.original.name, settings.repository),
        rounds=settings.rounds,
        tuned_steps=settings.tuned_steps,
        beside=settings.beside,
        weight=settings.weight,
        repository=settings.repository.resolve(),
        sla=settings.sla,
        launch=settings.launch,
        protocol=settings.protocol,
        workload=settings.workload,
        traffic=settings.traffic,
        study_name=study_name,
        storage=redact(settings.storage) if settings.storage else None,
        original_config=mcfg.config_text(prep.original),
        original_digest=file_digest(prep.model_dir / mcfg.CONFIG_NAME),
        started=_now(),
        owner=Owner.current(),
        scoring=prep.scoring,
        options=RunOptions.of(settings),
        made=made(prep),
    )
    return RunDir.create(path, record)


def made(prep: Prepared) -> dict[str, str]:
    """How the run is made, as far as it is known before a server starts (Triton's version is
    added by the first one: :meth:`autotune.trials.Trials.generator`)."""
    settings, original = prep.settings, prep.original
    facts = {
        "command": settings.command,
        "autotune": __version__,
        "backend": original.backend or original.platform,
        "cpu": f"{cpu_model()} ({os.cpu_count() or 1} cores)",
        "gpus": str(prep.server_gpus) if prep.server_gpus else "none",
        "pipeline": describe(prep.pipeline, settings.step or settings.model) if prep.pipeline else "",
        "tuned in earlier rounds": ", ".join(
            f"{t.model} (run {Path(t.run).name})" for t in settings.tuned_steps
        ),
        "models beside": "; ".join(c.label for c in settings.beside),
    }
    return {k: v for k, v in facts.items() if v}


def cpu_model() -> str:
    """This machine's CPU, as /proc/cpuinfo names it ("" where it does not)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), ""
    )


def _seed(study: Study, prep: Prepared) -> None:
    """The original config first, then the heuristic seeds of :func:`walk.heuristic_seeds`."""
    twin = walk.in_space(prep.baseline, prep.space)
    study.enqueue(params_of(prep.baseline), baseline=True, as_is=prep.baseline)
    if twin != prep.baseline:  # yours cannot run here: its CPU twin next (as it is, if outside the space)
        study.enqueue(params_of(twin), again=True, as_is=twin)
    for params in walk.heuristic_seeds(prep.space, prep.cores or os.cpu_count() or 1, twin):
        study.enqueue(params)


def _go_on(
    prep: Prepared, study: Study, results: list[TrialResult], elapsed_s: float, reserve: float = 0.0,
    at_once: int = 1,
) -> bool:  # fmt: skip
    """Whether to run another trial: within the budget (trials, time), and not converged. While
    nothing is queued, the next step of the walk from the best trial is (:func:`walk.unexplored`;
    several at once, a step from the trials in flight: before any trial met the SLA, from the
    batching ones, :func:`walk.steps_ahead`; until converged, once the best has none left, from
    its steps, :func:`walk.steps_beyond`);
    once converged, or once the sampler proposes a config measured before (:func:`walk.out_of_ideas`),
    the untried one-step neighbours of the finalists (``--finalists``, at least 1: the incumbent
    and the ties the race would take; :func:`walk.unexplored`) are queued and measured first; a
    converged search ends when none is left. The time budget is the whole run's: ``reserve`` is
    kept for the race and the open-loop check (:func:`reserve_s`). Trials in flight count
    against ``--max-trials``; with ``at_once`` of them, a trial takes that many times the run's
    time per trial ended, and a step is queued only when a worker is free to ask it."""
    settings = prep.settings
    finished = walk.finished(results)
    if finished + walk.in_flight(results) >= settings.max_trials or not walk.time_left(
        settings.time_budget_s, elapsed_s, finished, reserve, at_once
    ):
        return False
    steps = [] if study.queued() else walk.unexplored(results, prep.space, study.scoring, 1)
    first_wave = at_once > 1 and ranking.best_trial(results, study.scoring) is None  # no best to step from
    converged = walk.converged(results, settings.patience, study.scoring)
    going = not converged and not walk.out_of_ideas(results)
    if not steps and at_once > 1 and not study.queued():  # a step from the trials in flight
        if first_wave:
            steps = walk.steps_ahead(results, prep.space)
        elif going:
            steps = walk.steps_beyond(results, prep.space, study.scoring)
    for step in steps[:1]:
        study.enqueue(params_of(step))
    if going:
        return True
    untried = walk.unexplored(results, prep.space, study.scoring, max(settings.finalists, 1))
    # several at once: one at a time, asked at once, so each step is taken from the best so far
    for candidate in untried[: 1 if at_once > 1 else None]:  # a neighbour queued before is not queued twice
        study.enqueue(params_of(candidate))
    return bool(untried) or not converged


# ---------------------------------------------------------------- the winner


def _your_text(prep: Prepared, digest: str) -> str:
    """Your config.pbtxt's text as the run began: the file, while it is unchanged since (else
    the config the run read, in text format)."""
    path = prep.model_dir / mcfg.CONFIG_NAME
    if path.is_file() and file_digest(path) == digest:
        return path.read_bytes().decode("utf-8")
    return mcfg.config_text(prep.original)


def _finish(
    prep: Prepared, trials: Trials, run: RunDir, study: Study, workers: Workers | None = None
) -> Outcome:
    """The winner (:func:`autotune.search.racing.race_winner`) written beside the report; a concurrency
    run's winner is measured under arrivals at a rate too (:func:`finals.check_open_loop`)."""
    results = study.results()
    s = prep.settings
    winner = racing.race_winner(run.record.verifications, results, s.search_sla, prep.scoring, prep.baseline)
    shown = None  # the winner shown ahead of your config, raced beside it (None: no verdict)
    if winner is not None:
        chosen = next(r for r in results if r.number == winner)
        run = finals.check_open_loop(prep, trials, run, chosen, workers)
        assert chosen.candidate is not None
        config = mcfg.apply_candidate(prep.original, chosen.candidate)
        text = _your_text(prep, run.record.original_digest)
        written = edit_in_place(text, config)  # your file with only the winner's fields changed
        write_text_atomic(run.path / WINNER_CONFIG, written)
        write_text_atomic(run.path / WINNER_DIFF, text_diff(text, written))
        yours = Outcome(run.path, run.info(), tuple(results)).baseline
        found = gain(chosen, yours, run.record.verifications, s.sla.percentile, prep.scoring)
        shown = found.shown if found is not None else None
    run = run.update(finished=_now(), winner=winner, owner=None, shown_better=shown)
    outcome = Outcome(run.path, run.info(), tuple(results))
    write_report(outcome.info, outcome.trials, outcome.run_dir)
    return outcome
