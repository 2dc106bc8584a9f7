"""A tuning run, start to finish: trials, verification of the finalists, the winner.

    candidate --apply--> ModelConfig --stage--> repository --Launcher--> Server
      --LoadGenerator / find_goodput--> Measurement --> Study.tell --> TrialResult

This module runs the loop and does the I/O; every decision (seeds, where a search starts,
convergence, finalists, the winner) is a pure function of :mod:`autotune.decide`. The run's
record is :mod:`autotune.rundir`'s; progress goes to an :class:`~autotune.events.Events`
object, and the tuner prints nothing itself.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from autotune import decide, finals, stopping
from autotune import model_config as mcfg
from autotune.errors import UsageError, WorkloadError
from autotune.events import Events
from autotune.files import file_digest, write_text_atomic
from autotune.launch import make_launcher
from autotune.loadgen import ModelIO, WorkloadData, read_workload
from autotune.objective import RAW, Scoring, scoring_for
from autotune.processes import Owner
from autotune.report import write_report
from autotune.results import Outcome, TrialResult
from autotune.rundir import WINNER_CONFIG, WINNER_DIFF, RunDir, RunRecord
from autotune.search_space import Candidate, SearchSpace, bundled, load_search_space, params_of
from autotune.settings import RunSettings
from autotune.study import Study, redact
from autotune.traffic import Loader
from autotune.trials import Trials


@dataclass(frozen=True)
class Prepared:
    """Everything checked before anything is started or written."""

    settings: RunSettings
    original: mcfg.ModelConfig
    model_dir: Path
    space: SearchSpace
    baseline: Candidate
    data: WorkloadData | None  # the workload read and checked; None: the config declares no inputs
    loader: Loader  # the traffic, its arrival pattern read and checked
    server_gpus: int = 0  # GPUs the server side has (asked of the launcher, not of this machine)
    scoring: Scoring = RAW  # goodput, or goodput per GPU (objective.scoring_for); a resumed run's own


def prepare(settings: RunSettings, server_gpus: int = 0) -> Prepared:
    """Validate the input (UsageError on anything wrong); writes nothing. ``server_gpus``: how
    many GPUs the server side has (``kind: auto`` follows it, and whether goodputs are compared
    per GPU: :func:`autotune.objective.scoring_for`, decided once; a resumed run keeps its own)."""
    gpu_available = server_gpus > 0
    resumed = None if settings.run_dir is None else _check_resumable(settings, settings.run_dir)
    original = mcfg.load_config(settings.repository, settings.model)
    space = load_search_space(settings.search_space or default_space_path(), gpu_available=gpu_available)
    baseline = mcfg.candidate_of(original)
    space = space.restricted(
        batching=original.max_batch_size > 0,
        gpu=gpu_available,
        tensorrt=mcfg.supports_tensorrt(original),
        min_batch=settings.workload.batch_size,
        gpu_count=server_gpus,
    )
    space = space.including(decide.in_space(baseline, space))
    io = ModelIO.from_config(settings.model, original)  # None: it declares no inputs, the server will
    data = None if io is None else read_workload(io, settings.workload, settings.seed or 0)  # read once
    loader = Loader.read(settings.traffic)
    _check_writable(settings.reports_dir if settings.run_dir is None else settings.run_dir)
    model_dir = mcfg.model_dir(settings.repository, settings.model)
    scoring = resumed.scoring if resumed is not None else scoring_for(space, server_gpus)
    return Prepared(settings, original, model_dir, space, baseline, data, loader, server_gpus, scoring)


def default_space_path() -> Path:
    return bundled("default")


def _check_writable(path: Path) -> None:
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise UsageError(f"report directory is not writable: {path} ({probe} is not a writable directory)")


def _check_resumable(settings: RunSettings, run_dir: Path) -> RunRecord:
    run = RunDir.load(run_dir)
    run.study_url(settings.storage)  # a recorded URL whose password was hidden needs --storage
    record = run.record
    changed = record.differences(settings)
    if changed:
        raise UsageError(
            f"--resume {run_dir}: resume a run with the settings it started with ({'; '.join(changed)})"
        )
    if record.running_elsewhere() and record.owner is not None:
        raise UsageError(f"--resume {run_dir}: process {record.owner.pid} is still running it")
    return record


def tune(prep: Prepared, events: Events | None = None) -> Outcome:
    events = events or Events()
    settings = prep.settings
    path = settings.run_dir or RunDir.new_path(settings.reports_dir, settings.model, _run_id())
    launcher = make_launcher(settings.launch, path.name)  # a wrong set-up fails before anything is written
    run = _open_run(prep, path)
    url, name = run.study_url(settings.storage), run.record.study_name
    study = Study.open(url, name, prep.space, settings.sla, seed=settings.seed, scoring=prep.scoring)
    if study.created:
        _seed(study, prep)
    for params, baseline in study.interrupted():
        study.enqueue(params, baseline=baseline, again=True, as_is=prep.baseline if baseline else None)
    started = time.monotonic()
    events.run_started(run.path, settings.max_trials, settings.time_budget_s)
    trials = Trials(prep, launcher, run, events)
    try:
        try:
            while _go_on(settings, study, results := study.results(), time.monotonic() - started):
                trials.run(study, results)
        except WorkloadError:
            _forget_if_empty(prep, run, study)
            raise
        stopping.check()
        run = finals.verify_finalists(prep, trials, run, study)
        return _finish(prep, trials, run, study)  # written while the last server stops
    finally:
        launcher.drain()  # no server outlives the run


def _forget_if_empty(prep: Prepared, run: RunDir, study: Study) -> None:
    """A new run its data stopped before any trial ended leaves nothing (its study is in it)."""
    s = prep.settings
    if s.run_dir is None and s.storage is None and not decide.finished(study.results()):
        shutil.rmtree(run.path, ignore_errors=True)


def _run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _open_run(prep: Prepared, path: Path) -> RunDir:
    """The resumed run, or a new one; owned by this process."""
    settings = prep.settings
    if settings.run_dir is not None:
        return RunDir.load(path).update(owner=Owner.current())
    record = RunRecord(
        run_id=path.name,
        model=settings.model,
        repository=settings.repository.resolve(),
        sla=settings.sla,
        launch=settings.launch,
        protocol=settings.protocol,
        workload=settings.workload,
        traffic=settings.traffic,
        study_name=settings.study_name or f"{settings.model}-{path.name}",
        storage=redact(settings.storage) if settings.storage else None,
        original_config=mcfg.config_text(prep.original),
        original_digest=file_digest(prep.model_dir / mcfg.CONFIG_NAME),
        started=_now(),
        owner=Owner.current(),
        scoring=prep.scoring,
    )
    return RunDir.create(path, record)


def _seed(study: Study, prep: Prepared) -> None:
    """The original config first, then the heuristic seeds of :func:`decide.heuristic_seeds`."""
    twin = decide.in_space(prep.baseline, prep.space)
    study.enqueue(params_of(twin), baseline=True, as_is=prep.baseline)
    if twin != prep.baseline:  # your config cannot run here: its CPU twin is measured next
        study.enqueue(params_of(twin), again=True)
    for params in decide.heuristic_seeds(prep.space, os.cpu_count() or 1, twin):
        study.enqueue(params)


def _go_on(settings: RunSettings, study: Study, results: list[TrialResult], elapsed_s: float) -> bool:
    """Whether to run another trial: within the budget (trials, time), and not converged. Once
    converged, or once the sampler proposes a config measured before (:func:`decide.out_of_ideas`),
    the untried one-step neighbours of the incumbent and of its ties (:func:`decide.unexplored`)
    are queued and measured first; a converged search ends when none is left."""
    finished = decide.finished(results)
    if finished >= settings.max_trials or not decide.time_left(settings.time_budget_s, elapsed_s, finished):
        return False
    converged = decide.converged(results, settings.patience, study.scoring)
    if not converged and not decide.out_of_ideas(results):
        return True
    untried = decide.unexplored(results, study.space, study.scoring)
    for candidate in untried:  # a neighbour queued before is not queued twice
        study.enqueue(params_of(candidate))
    return bool(untried) or not converged


# ---------------------------------------------------------------- verification and the winner


def _finish(prep: Prepared, trials: Trials, run: RunDir, study: Study) -> Outcome:
    """The winner (:func:`decide.choose_winner`) written beside the report; a concurrency run's
    winner is measured under arrivals at a rate too (:func:`finals.check_open_loop`)."""
    results = study.results()
    pct = prep.settings.sla.percentile
    winner = decide.choose_winner(results, run.record.verifications, pct, prep.scoring)
    if winner is not None:
        chosen = next(r for r in results if r.number == winner)
        run = finals.check_open_loop(prep, trials, run, chosen)
        assert chosen.candidate is not None
        config = mcfg.apply_candidate(prep.original, chosen.candidate)
        mcfg.write_config(config, run.path / WINNER_CONFIG)
        write_text_atomic(run.path / WINNER_DIFF, mcfg.config_diff(prep.original, config))
    run = run.update(finished=_now(), winner=winner, owner=None)
    outcome = Outcome(run.path, run.info(), tuple(results))
    write_report(outcome.info, outcome.trials, outcome.run_dir)
    return outcome
