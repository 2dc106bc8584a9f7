"""A tuning run, start to finish: trials, verification of the finalists, the winner.

    candidate --apply--> ModelConfig --stage--> repository --Launcher--> Server
      --LoadGenerator / find_goodput--> Measurement --> Study.tell

The tuner reports progress through an :class:`Events` object and prints nothing itself.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from autotune import model_config as mcfg
from autotune import stopping
from autotune.errors import (
    AutotuneError,
    ConfigError,
    LaunchError,
    MeasurementError,
    ServerExitedError,
    UsageError,
)
from autotune.files import write_text_atomic
from autotune.launch import make_launcher
from autotune.launch._common import Launcher, Server, failure_line
from autotune.launch._pids import pid_alive
from autotune.loadgen import LoadGenerator, WindowPlan
from autotune.measure import Measurement, Point, find_goodput
from autotune.objective import Sla
from autotune.results import COMPLETE, FAIL, RunInfo, TrialResult, Verification
from autotune.search_space import Candidate, SearchSpace, load_search_space, params_of
from autotune.settings import RunSettings
from autotune.staging import stage_model
from autotune.study import Asked, Study, redact

RUN_FILE = "run.json"


class Events(Protocol):
    """What a run tells the person watching it (the CLI draws progress bars from these)."""

    def run_started(self, run_dir: Path, total: int, budget_s: float | None) -> None: ...
    def trial_started(self, number: int, candidate: Candidate, baseline: bool) -> None: ...
    def point_measured(self, number: int, point: Point) -> None: ...
    def trial_finished(self, result: TrialResult) -> None: ...
    def verifying(self, trial: int, concurrency: int, repeat: int, repeats: int) -> None: ...


class SilentEvents:
    def run_started(self, run_dir: Path, total: int, budget_s: float | None) -> None: ...
    def trial_started(self, number: int, candidate: Candidate, baseline: bool) -> None: ...
    def point_measured(self, number: int, point: Point) -> None: ...
    def trial_finished(self, result: TrialResult) -> None: ...
    def verifying(self, trial: int, concurrency: int, repeat: int, repeats: int) -> None: ...


@dataclass(frozen=True)
class Outcome:
    run_dir: Path
    info: RunInfo
    trials: tuple[TrialResult, ...]

    @property
    def winner(self) -> TrialResult | None:
        return next((t for t in self.trials if t.number == self.info.winner), None)

    @property
    def baseline(self) -> TrialResult | None:
        return next((t for t in self.trials if t.baseline and t.state == COMPLETE), None)


@dataclass(frozen=True)
class Prepared:
    """Everything checked before anything is started or written."""

    settings: RunSettings
    original: mcfg.ModelConfig
    model_dir: Path
    space: SearchSpace
    baseline: Candidate


def prepare(settings: RunSettings, gpu_available: bool = False) -> Prepared:
    """Validate the input (UsageError on anything wrong); writes nothing."""
    if settings.run_dir is not None:
        _check_resumable(settings)
    original = mcfg.load_config(settings.repository, settings.model)
    space = load_search_space(settings.search_space or default_space_path(), gpu_available=gpu_available)
    baseline = mcfg.candidate_of(original)
    space = space.restricted(
        batching=original.max_batch_size > 0, gpu=gpu_available, tensorrt=mcfg.supports_tensorrt(original)
    ).including(baseline)
    _check_writable(settings.reports_dir if settings.run_dir is None else settings.run_dir)
    return Prepared(settings, original, mcfg.model_dir(settings.repository, settings.model), space, baseline)


def default_space_path() -> Path:
    from importlib.resources import files

    return Path(str(files("autotune.search_spaces").joinpath("default.yaml")))


def _check_writable(path: Path) -> None:
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise UsageError(f"report directory is not writable: {path} ({probe} is not a writable directory)")


def tune(prep: Prepared, events: Events | None = None) -> Outcome:
    events = events or SilentEvents()
    settings = prep.settings
    launcher = make_launcher(settings, settings.run_dir)  # a wrong set-up fails before anything is written
    run_dir = _open_run_dir(prep)
    study = _open_study(prep, run_dir)
    if study.created:
        _seed(study, prep)
    for params in study.interrupted_params():
        study.enqueue(params, again=True)
    _mark_owner(run_dir)
    started = time.monotonic()
    events.run_started(run_dir, settings.max_trials, settings.time_budget_s)
    trial_runner = _TrialRunner(prep, launcher, run_dir, events)
    try:
        while (
            study.finished_trials < settings.max_trials
            and _time_left(settings, started, study)
            and not converged(study.results(), settings.patience)
        ):
            trial_runner.run(study)
        stopping.check()
        verifications = _verify(prep, launcher, run_dir, study, events)
        return _finish(prep, run_dir, study, verifications)  # written while the last server stops
    finally:
        launcher.drain()  # no server outlives the run


def _open_run_dir(prep: Prepared) -> Path:
    settings = prep.settings
    if settings.run_dir is not None:
        return settings.run_dir
    run_id = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = settings.reports_dir / settings.model / run_id
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = settings.reports_dir / settings.model / f"{run_id}-{suffix}"
    run_dir.mkdir(parents=True)
    record = {
        "run_id": run_dir.name,
        "model": settings.model,
        "repository": str(settings.repository.resolve()),
        "sla": {"percentile": settings.sla.percentile, "limit_ms": settings.sla.limit_ms},
        "launcher": settings.launcher,
        "storage": redact(settings.storage) if settings.storage else None,
        "study_name": _study_name(settings, run_dir),
        "original_config": mcfg.config_text(prep.original),
        "original_digest": file_digest(prep.model_dir / mcfg.CONFIG_NAME),
        "started": _now(),
    }
    _write_json(run_dir / RUN_FILE, record)
    return run_dir


def _check_resumable(settings: RunSettings) -> None:
    assert settings.run_dir is not None
    record = read_run(settings.run_dir)
    if record.get("model") != settings.model:
        raise UsageError(
            f"--resume {settings.run_dir}: that run tuned {record.get('model')!r}, not {settings.model!r}"
        )
    sla = record.get("sla", {})
    if (sla.get("percentile"), sla.get("limit_ms")) != (settings.sla.percentile, settings.sla.limit_ms):
        raise UsageError(
            f"--resume {settings.run_dir}: that run's SLA was p{sla.get('percentile')} <= "
            f"{sla.get('limit_ms')} ms; resume it with the same SLA"
        )
    if _owner_alive(record):
        raise UsageError(f"--resume {settings.run_dir}: process {record['owner_pid']} is still running it")


def find_unfinished(settings: RunSettings) -> Path | None:
    """The newest run of the same model, repository and SLA that stopped before finishing."""
    folder = settings.reports_dir / settings.model
    runs = sorted(folder.glob(f"*/{RUN_FILE}"), reverse=True) if folder.is_dir() else []
    for run_file in runs:
        try:
            record = json.loads(run_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        same = record.get("repository") == str(settings.repository.resolve()) and record.get("sla") == {
            "percentile": settings.sla.percentile,
            "limit_ms": settings.sla.limit_ms,
        }
        if same and not record.get("finished") and not _owner_alive(record):
            return run_file.parent
    return None


def _owner_alive(record: dict[str, Any]) -> bool:
    pid = record.get("owner_pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    return pid_alive(pid)


def _mark_owner(run_dir: Path) -> None:
    record = read_run(run_dir)
    record["owner_pid"] = os.getpid()
    _write_json(run_dir / RUN_FILE, record)


def read_run(run_dir: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{run_dir}: not a run directory ({exc})") from exc
    return data


def file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def study_storage(settings: RunSettings, run_dir: Path) -> str:
    return settings.storage or f"sqlite:///{(run_dir / 'study.db').resolve()}"


def _study_name(settings: RunSettings, run_dir: Path) -> str:
    return settings.study_name or f"{settings.model}-{run_dir.name}"


def _open_study(prep: Prepared, run_dir: Path) -> Study:
    settings = prep.settings
    name = read_run(run_dir).get("study_name") or _study_name(settings, run_dir)
    return Study.open(study_storage(settings, run_dir), name, prep.space, settings.sla, seed=settings.seed)


def _seed(study: Study, prep: Prepared) -> None:
    """The original config first, then sound heuristics: batching at the largest batch size
    with one instance and with as many instances as cores (capped by the space)."""
    study.enqueue(params_of(prep.baseline), baseline=True)
    for candidate in heuristic_seeds(prep.space, os.cpu_count() or 1):
        study.enqueue(params_of(candidate))


def heuristic_seeds(space: SearchSpace, cores: int) -> list[Candidate]:
    mbs = max(space.max_batch_size)
    if mbs == 0 or True not in space.dynamic_batching:
        return []
    kind = space.kind[0]
    counts = sorted({min(space.instance_count), _closest(space.instance_count, cores)})
    pref = "none" if "none" in space.preferred_batch_size else space.preferred_batch_size[0]
    seeds = []
    for count in counts:
        params = {
            "instance_count": count,
            "kind": kind,
            "max_batch_size": mbs,
            "dynamic_batching": True,
            "preferred_batch_size": pref,
            "max_queue_delay_us": min(space.max_queue_delay_us),
            "gpus": space.gpus[0],
            "trt_fp16": False,
        }
        seeds.append(space.suggest(_Fixed(params)))
    return seeds


def _closest(choices: tuple[int, ...], target: int) -> int:
    return min(choices, key=lambda c: (abs(c - target), c))


class _Fixed:
    def __init__(self, params: dict[str, Any]) -> None:
        self._params = params

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return self._params[name]


def _time_left(settings: RunSettings, started: float, study: Study) -> bool:
    if settings.time_budget_s is None:
        return True
    elapsed = time.monotonic() - started
    done = max(1, study.finished_trials)
    # stop when the next trial would likely overrun the budget (verification included)
    per_trial = elapsed / done if study.finished_trials else 0.0
    return elapsed + per_trial * 0.5 < settings.time_budget_s


RAMP_S = 0.3  # warm-up before each point after a trial's first one (the first gets the plan's)
# A goodput this much better than the best so far counts as progress, not noise: short screening
# windows differ by 5-10% on a busy two-core machine (cnn: 0.5 s windows). At 5%, one cnn run
# went on for 20 trials on gains of 5.3% and 7.7% that re-measurement could not tell apart.
IMPROVEMENT = 0.08


def converged(results: list[TrialResult], patience: int) -> bool:
    """Whether the last ``patience`` configs measured (reused ones are free and do not count)
    brought no goodput ``IMPROVEMENT`` better than the best before them."""
    if patience < 1:
        return False
    best, since = 0.0, 0
    for result in sorted(results, key=lambda r: r.number):
        if result.reused_from is not None or result.state not in (COMPLETE, FAIL):
            continue
        if result.state == FAIL and result.reason.startswith("interrupted"):
            continue
        if result.goodput() > best * (1 + IMPROVEMENT):
            best, since = result.goodput(), 0
        else:
            since += 1
    return best > 0 and since >= patience


def measured_before(results: list[TrialResult], candidate: Candidate) -> TrialResult | None:
    """An earlier COMPLETE trial of the same candidate, if any (not measured twice)."""
    for result in results:
        if result.state == COMPLETE and result.candidate == candidate and result.reused_from is None:
            return result
    return None


def incumbent(results: list[TrialResult]) -> tuple[int | None, float]:
    """Where the next goodput search starts (the best candidate's concurrency) and the
    goodput it must beat to be worth refining (see :func:`find_goodput`)."""
    best = max((r for r in results if r.feasible), key=lambda r: r.goodput(), default=None)
    if best is None or best.best is None:
        return None, 0.0
    return best.best.concurrency, best.goodput()


class _TrialRunner:
    def __init__(self, prep: Prepared, launcher: Launcher, run_dir: Path, events: Events) -> None:
        self.prep, self.launcher, self.run_dir, self.events = prep, launcher, run_dir, events
        self.search_sla = _tightened(prep.settings.sla, prep.settings.margin)

    def run(self, study: Study) -> None:
        stopping.check()
        asked = study.ask()
        baseline = bool(asked.trial.user_attrs.get("baseline"))
        self.events.trial_started(asked.number, asked.candidate, baseline)
        start = time.monotonic()
        results = study.results()  # read once the trial is asked: other workers' trials included
        earlier = measured_before(results, asked.candidate)
        try:
            if earlier is not None and earlier.measurement is not None:
                study.tell_measured(asked, earlier.measurement, 0.0, reused_from=earlier.number)
            else:
                measurement = self.measure(asked, *incumbent(results))
                study.tell_measured(asked, measurement, time.monotonic() - start)
        except (LaunchError, MeasurementError, ConfigError) as exc:
            log = self.log_path(asked.number)
            tail = _tail(log)
            study.tell_failed(asked, _reason(exc, tail), tail, time.monotonic() - start)
        except BaseException:
            study.tell_failed(
                asked, "interrupted: the tuner stopped during this trial", "", time.monotonic() - start
            )
            raise
        self.events.trial_finished(next(r for r in study.results() if r.number == asked.number))

    def generator(self, server: Server, plan: WindowPlan) -> LoadGenerator:
        settings = self.prep.settings
        return LoadGenerator.connect(
            server.host,
            server.http_port,
            server.grpc_port,
            settings.model,
            protocol=settings.protocol,
            plan=plan,
        )

    def log_path(self, number: int) -> Path:
        return self.run_dir / "logs" / f"trial-{number:03d}.log"

    def measure(self, asked: Asked, start: int | None = None, beat: float = 0.0) -> Measurement:
        settings = self.prep.settings
        with self.serve(asked.candidate, self.log_path(asked.number), asked.number) as server:
            first = self.generator(server, settings.plan)
            # once the server is warm, a new concurrency level settles within a few requests
            later = first.with_plan(replace(settings.plan, warmup_s=min(settings.plan.warmup_s, RAMP_S)))
            done: list[Point] = []

            def at(concurrency: int) -> Point:
                point = (later if done else first).at_concurrency(concurrency)
                done.append(point)
                stopping.check()
                self.events.point_measured(asked.number, point)
                return point

            space = self.prep.space
            try:
                return find_goodput(
                    at, self.search_sla, space.concurrency_min, space.concurrency_max, start=start, beat=beat
                )
            except MeasurementError as exc:
                if _died(server):  # the server died under load (a crash, an OOM kill)
                    raise ServerExitedError(f"{server.description} exited during the measurement") from exc
                raise

    def serve(self, candidate: Candidate, log: Path, number: int) -> Any:
        config = mcfg.apply_candidate(self.prep.original, candidate)
        stage = self.run_dir / "stage" / f"trial-{number:03d}"
        stage_model(self.prep.model_dir, config, stage)
        return _cleanup_after(self.launcher.serve(stage, self.prep.settings.model, log), stage)


class _cleanup_after:
    """Wrap a server context so the staged repository is removed when it ends."""

    def __init__(self, inner: Any, stage: Path) -> None:
        self.inner, self.stage = inner, stage

    def __enter__(self) -> Server:
        try:
            server: Server = self.inner.__enter__()
        except BaseException:
            shutil.rmtree(self.stage, ignore_errors=True)
            raise
        return server

    def __exit__(self, *exc: Any) -> None:
        try:
            self.inner.__exit__(*exc)
        finally:
            shutil.rmtree(self.stage, ignore_errors=True)


def _died(server: Server, settle_s: float = 1.0) -> bool:
    """Whether the server is gone; a process being killed closes its sockets a moment
    before it can be reaped, so look again for a little while."""
    deadline = time.monotonic() + settle_s
    while server.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _tightened(sla: Sla, margin: float) -> Sla:
    return replace(sla, limit_ms=sla.limit_ms * (1.0 - margin))


def _tail(log: Path) -> str:
    from autotune.launch._common import read_tail

    return read_tail(log, 40) if log.exists() else ""


def _reason(exc: AutotuneError, tail: str) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    detail = failure_line(tail)
    return f"{first} — {detail}" if detail and detail not in first else first


# ---------------------------------------------------------------- verification and the winner


CONTENDER = 0.90  # a finalist after the first is verified only within this fraction of its goodput


def _verify(
    prep: Prepared, launcher: Launcher, run_dir: Path, study: Study, events: Events
) -> list[Verification]:
    """Re-measure the finalists at their operating points, several times on one server, so
    that noise cannot crown a loser nor hand the user a point that breaks the SLA. Only real
    contenders are verified: those within ``CONTENDER`` of the best screening goodput, and,
    once one has met the SLA in every repeat, only those that could still beat it."""
    settings = prep.settings
    if settings.repeats < 1:
        return []
    ranked = sorted(
        (r for r in study.results() if r.feasible and r.reused_from is None),
        key=lambda r: r.goodput(),
        reverse=True,
    )
    chosen = [r for r in ranked[: settings.finalists] if r.goodput() >= CONTENDER * ranked[0].goodput()]
    done = {v["trial"]: v for v in study.attr("verifications", [])}
    runner = _TrialRunner(prep, launcher, run_dir, events)
    out = []
    for result in chosen:
        if result.number in done:
            out.append(_verification_from_json(done[result.number]))
            continue
        if not could_beat(result, out):
            continue
        verification = _verify_one(runner, result, settings, events)
        if verification is None:
            continue
        out.append(verification)
        study.set_attr("verifications", [_verification_json(v) for v in out])
    return out


def could_beat(result: TrialResult, verified: list[Verification]) -> bool:
    """Whether a finalist is worth verifying: yes unless a verified one met the SLA in every
    repeat at a median throughput that this finalist's screening goodput does not clearly
    (by ``IMPROVEMENT``) exceed. Screening figures are the noisy maxima of short windows, so
    a finalist within that margin would be chosen by noise, at the price of a server and
    several windows."""
    passed = [v.median_throughput for v in verified if v.passed]
    return not passed or result.goodput() > max(passed) * (1 + IMPROVEMENT)


def _verify_one(
    runner: _TrialRunner, result: TrialResult, settings: RunSettings, events: Events
) -> Verification | None:
    """Every repeat must meet the SLA; if one does not, the next lower concurrency that met
    it while searching is verified instead (once), on the same server."""
    assert result.best is not None and result.candidate is not None and result.measurement is not None
    levels = [result.best.concurrency]
    lower = [p.concurrency for p in result.measurement.points if p.concurrency < levels[0]]
    levels += [max(lower)] if lower else []
    log = runner.run_dir / "logs" / f"verify-{result.number:03d}.log"
    plan = replace(settings.plan, window_s=settings.plan.window_s * 2)  # longer than screening
    ramp = replace(plan, warmup_s=min(plan.warmup_s, RAMP_S))
    try:
        with runner.serve(result.candidate, log, 1000 + result.number) as server:
            gen = runner.generator(server, plan)
            for concurrency in levels:
                points: list[Point] = []
                for i in range(settings.repeats):
                    events.verifying(result.number, concurrency, i + 1, settings.repeats)
                    points.append(gen.at_concurrency(concurrency))
                    stopping.check()
                    gen = gen.with_plan(ramp)
                    if not settings.sla.met_by(points[-1]):
                        break  # this level failed: no need to finish its repeats
                met = sum(settings.sla.met_by(p) for p in points)
                if met == settings.repeats:
                    break
    except (LaunchError, MeasurementError) as exc:
        events.trial_finished(replace(result, reason=f"verification failed: {exc}"))
        return None
    return Verification(result.number, concurrency, tuple(points), met)


def _verification_json(v: Verification) -> dict[str, Any]:
    return {
        "trial": v.trial,
        "concurrency": v.concurrency,
        "sla_met": v.sla_met,
        "points": [p.to_dict() for p in v.points],
    }


def _verification_from_json(data: dict[str, Any]) -> Verification:
    return Verification(
        int(data["trial"]),
        int(data["concurrency"]),
        tuple(Point.from_dict(p) for p in data["points"]),
        int(data["sla_met"]),
    )


TIE = 0.02  # verified throughputs this close are a tie: the lower latency wins


def choose_winner(
    results: list[TrialResult], verifications: list[Verification], percentile: int = 95
) -> int | None:
    """Verified finalists that met the SLA in every repeat (else in most), by median
    throughput, a tie going to the lower latency (more headroom under the SLA); else the
    best feasible trial not verified, by its search measurement. A finalist that could not
    beat a passed one by ``IMPROVEMENT`` is not verified (:func:`could_beat`), so such
    near-ties are settled by the search ranking."""
    every = [v for v in verifications if v.passed]
    most = [v for v in verifications if v.sla_met * 2 > len(v.points)]
    for passing in (every, most):
        if passing:
            top = max(v.median_throughput for v in passing)
            tied = [v for v in passing if v.median_throughput >= top * (1 - TIE)]
            return min(tied, key=lambda v: v.median_latency_ms(percentile)).trial
    verified = {v.trial for v in verifications}
    feasible = [r for r in results if r.feasible and r.reused_from is None and r.number not in verified]
    if feasible:
        return max(feasible, key=lambda r: r.goodput()).number
    return None


def _finish(prep: Prepared, run_dir: Path, study: Study, verifications: list[Verification]) -> Outcome:
    results = study.results()
    winner = choose_winner(results, verifications, prep.settings.sla.percentile)
    record = read_run(run_dir)
    info = RunInfo(
        run_id=record["run_id"],
        model=prep.settings.model,
        sla=prep.settings.sla,
        launcher=prep.settings.launcher,
        original_config=record["original_config"],
        started=record["started"],
        finished=_now(),
        winner=winner,
        verifications=tuple(verifications),
    )
    if winner is not None:
        candidate = next(r.candidate for r in results if r.number == winner)
        assert candidate is not None
        config = mcfg.apply_candidate(prep.original, candidate)
        info = replace(
            info, winner_config=mcfg.config_text(config), winner_diff=mcfg.config_diff(prep.original, config)
        )
        mcfg.write_config(config, run_dir / "winner.pbtxt")
        write_text_atomic(run_dir / "winner.diff", info.winner_diff)
    record.update(finished=info.finished, winner=winner)
    _write_json(run_dir / RUN_FILE, record)
    outcome = Outcome(run_dir, info, tuple(results))
    write_outputs(outcome)
    return outcome


def write_outputs(outcome: Outcome) -> Path:
    from autotune.report import write_report

    return write_report(outcome.info, list(outcome.trials), outcome.run_dir)
