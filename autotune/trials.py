"""One trial, start to finish: the candidate served, its answers checked, its goodput searched,
the study told.

:class:`Trials` is what the tuner (:mod:`autotune.tuner`) and the finalists' race
(:mod:`autotune.finals`) measure through. It serves candidates on the run's
:class:`autotune.serving.Servers` (real ones: :class:`autotune.launched.LaunchedServers`;
simulated: :class:`autotune.sim.SimServers`), and tells the study what it measured, or why it
failed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune import model_config as mcfg
from autotune import openfiles, stopping, warmup
from autotune.errors import (
    AutotuneError,
    ConfigError,
    LaunchError,
    MachineLimitError,
    MeasurementError,
    ServerExitedError,
    WorkloadError,
    WrongOutputError,
    YourConfigError,
)
from autotune.events import Events
from autotune.files import disk_full
from autotune.launch import failure_line, read_tail
from autotune.outputs import Reference, check_requests, compare, parse_tolerance
from autotune.points import Measurement, Point, WindowPlan, errors_line
from autotune.prepare import Prepared
from autotune.results import TrialResult
from autotune.rundir import RunDir
from autotune.search import level_search, walk
from autotune.search.noise import RAMP_S, Estimate, Noise
from autotune.search_space import Candidate
from autotune.serving import Load, Servers
from autotune.study import Asked, Study
from autotune.traffic import requests_per_s


class Trials:
    """Runs trials through the run's :class:`~autotune.serving.Servers` and tells the study; the
    race serves its rounds through it too."""

    def __init__(
        self, prep: Prepared, servers: Servers[Any], run: RunDir, events: Events,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.prep, self.servers, self.run_dir, self.events = prep, servers, run, events
        self.started = False  # a server of this run has loaded its model
        self.noise = Noise()  # the run's window latency spread so far (level_search.latency_noise)
        self._reference: Reference | None = None  # your config's answers (autotune.outputs)
        self._sample: list[tuple[Any, str]] = []  # the check's requests, made on the first server
        self.clock = clock  # what trial durations and the time budget are read from
        self.loaded = False  # the trial in flight's server got its model ready
        self.node = ""  # on a Ray cluster, the node this measures on: each point names it
        self.deadline: float | None = None  # the run's time budget ends then, on :attr:`clock`
        self.check_s = 0.0  # the time the open-loop check will take, kept from the race's

    def out_of_time(self, keep_s: float = 0.0) -> bool:
        """The run's time budget is spent, ``keep_s`` kept for what follows (a round started
        goes on; none starts after it)."""
        return self.deadline is not None and self.clock() + keep_s >= self.deadline

    def close(self) -> None:
        """What serving left removed (:meth:`Servers.close`)."""
        self.servers.close()

    def run(self, study: Study, results: list[TrialResult]) -> None:
        """Ask one trial and tell its result; ``results``: every trial so far, this worker's or not."""
        asked = self.ask(study)
        self.events.trial_finished(self.measure_trial(study, asked, results).tell(study, asked))

    def ask(self, study: Study) -> Asked:
        """The next trial, announced."""
        stopping.check()
        asked = study.ask()
        self.events.trial_started(asked.number, asked.candidate, asked.baseline, asked.again_of)
        return asked

    def measure_trial(self, study: Study, asked: Asked, results: list[TrialResult]) -> Ended:
        """What the asked trial ends with, not yet told (:meth:`Ended.tell`): several trials at
        once tell theirs in the order they end. An error that stops the run is told at once
        (:func:`tell_stopped`) and raised."""
        start = self.clock()
        try:
            return self.ended(asked, results)
        except BaseException as exc:
            tell_stopped(study, asked, exc, self.clock() - start, self.log(asked.number))
            raise

    def ended(self, asked: Asked, results: list[TrialResult]) -> Ended:
        """The asked trial measured, or pruned, or failed for a reason of the candidate's own.
        Anything else stops the run and is raised: the data or the machine at fault
        (:meth:`_not_the_candidate`), a crash, a stop request. Touches no study, so a worker
        elsewhere can run it (:mod:`autotune.fleet`)."""
        start = self.clock()
        yours = asked.baseline or asked.as_is  # your config, or its twin here: measured wherever it lies
        pruned = walk.stand_in(results, asked.candidate, self.prep.space, self.prep.scoring, yours)
        if pruned is not None:
            twin = pruned[0] in {r.number for r in walk.flying(results)}
            return Ended(pruned=pruned, twin_in_flight=twin)
        try:
            measurement = self._measure_twice(asked, results)
            return Ended(measurement=measurement, duration_s=self.clock() - start)
        except (LaunchError, MeasurementError, ConfigError) as exc:  # this candidate failed
            log = self.log(asked.number)
            why = _reason(exc, _tail(log, None))  # the load error may lie far above the log's end
            stop = self._not_the_candidate(exc, why, asked.candidate, log)
            if stop is not None:  # measured again on --resume
                raise stop from exc
            wrong = isinstance(exc, WrongOutputError)
            return Ended(failed=(why, _tail(log), wrong), duration_s=self.clock() - start)

    def _not_the_candidate(
        self, exc: AutotuneError, why: str, candidate: Candidate, log: Path
    ) -> AutotuneError | None:
        """The error that stops the run, rather than count the candidate failed: the machine's
        open-file limit ran out (:mod:`autotune.openfiles`), or your own config, as this machine
        runs it, did not load (every candidate is it with other settings); the model refused the
        workload's data in the warm-up (a WorkloadError, as in the preflight); None otherwise."""
        tail = _tail(log, None)
        if openfiles.exhausted(exc, tail):
            return openfiles.limit_error(why)
        data = self.prep.data
        refused = warmup.refused(tail, self.prep.settings.workload.batch_size)
        if refused is not None and data is not None:  # the warm-up sends the workload's first entry
            what = data.source if len(data.entries) == 1 else f"entry 0 of {data.source}"
            said = f"model {data.io.name!r} answered an error to {what} (its warm-up): {refused}"
            return WorkloadError(said)
        if not self.loaded and candidate == walk.in_space(self.prep.baseline, self.prep.space):
            said = failure_line(tail) or why
            hint = f"{YourConfigError.hint} (the server's log: {log})"
            return YourConfigError(f"your config does not load here: {said}", hint=hint)
        return None

    def named(self, point: Point) -> Point:
        """``point`` naming the node it was measured on, on a Ray cluster (:attr:`node`)."""
        return replace(point, node=self.node) if self.node else point

    def log(self, number: int) -> Path:
        return self.run_dir.log(f"trial-{number:03d}.log")

    def _measure_twice(self, asked: Asked, results: list[TrialResult]) -> Measurement:
        """:meth:`measure` from the best level (:func:`walk.start_level`) against the best trial
        (:func:`level_search.incumbent`), and once more on a new server should the first die
        under load: the nvidia-pytriton wheel's tritonserver crashes
        now and then under the python backend with dynamic batching (an assertion in gRPC's
        sync.cc, or signal 11), and a failed config is not proposed again by the neighbour rule:
        a mobilenet run lost its best config so and stopped after 5 trials at 1198 infer/s, where
        the others found 1680-1760. The first server's log is kept (``trial-NNN.1.log``)."""
        start = walk.start_level(results, self.prep.scoring)
        self.noise = level_search.latency_noise(
            level_search.measured_points(results), self.prep.settings.plan.percentile
        )
        beat = level_search.incumbent(results, self.prep.scoring, asked.candidate)
        try:
            return self.measure(asked, start, beat)
        except LaunchError as exc:
            log = self.log(asked.number)
            cold = not self.loaded and self._warm_suspect(asked.candidate, log)
            crashed = self.loaded and isinstance(exc, ServerExitedError)  # under load: once more
            if not cold and not crashed:
                raise  # a model that did not load, not for our warm-up
            if log.exists():
                log.replace(log.with_suffix(".1.log"))
            said = str(exc).splitlines()[0]
            if cold:  # measured without it, and so is the rest of the run
                self.servers.warm = False
                said = f"{said}; our warm-up may be why: without it from now on"
            self.events.trial_retried(asked.number, said)
            return self.measure(asked, start, beat)

    def _warm_suspect(self, candidate: Candidate, log: Path) -> bool:
        """Whether our warm-up may be what kept the run's first server from loading: no server
        of this run has loaded yet, the config got our warm-up, and the log does not say the
        model refused the workload's data in it (that is the data's: :meth:`_not_the_candidate`).
        Seen: the python backend's server died (signal 11) on a sample its model refused."""
        if not self.servers.warm or self.started:
            return False
        config = mcfg.apply_candidate(self.prep.original, candidate)
        if self.servers.warmed(config)[0] is config:
            return False
        return warmup.refused(_tail(log, None), self.prep.settings.workload.batch_size) is None

    def generator(self, server: Any, plan: WindowPlan, model: str = "") -> Load:
        """The load on ``server`` (:meth:`Servers.generator`); the server's version goes into the
        run's record once one has answered."""
        gen = self.servers.generator(server, plan, model)
        made = self.run_dir.record.made
        if self.servers.version and "triton" not in made:
            self.run_dir = self.run_dir.update(made={**made, "triton": self.servers.version})
        return gen

    def serve(self, candidate: Candidate, log: Path, stage_name: str) -> AbstractContextManager[Any]:
        return self.servers.serve(candidate, log, stage_name)

    def serve_all(
        self, candidates: Mapping[str, Candidate], log: Path, stage_name: str
    ) -> AbstractContextManager[Any]:
        return self.servers.serve_all(candidates, log, stage_name)

    def can_share(self) -> bool:
        return self.servers.can_share()

    def measure(self, asked: Asked, start: float | None = None, beat: Estimate | None = None) -> Measurement:
        """The candidate's goodput search (:meth:`Loader.search`) from ``start``, the best
        candidate's level, against ``beat`` (the best trial's throughput), on a server of its
        own, its points judged at :attr:`RunSettings.search_sla` (:func:`level_search.judged_at`).
        Errors are a verdict: a point with any breaks the SLA (:meth:`Sla.met_by`), and a candidate whose
        every point got them fails, naming their share and the server's first."""
        settings, loader = self.prep.settings, self.prep.loader
        search_sla = settings.search_sla
        plan = level_search.judged_at(settings.plan, search_sla.limit_ms, noise=self.noise)
        if settings.output_check and self.reference() is None and asked.candidate not in self._sources():
            self._record_reference()  # on a server of its own, before this candidate's
        self.loaded = False
        began = self.clock()
        with self.serve(asked.candidate, self.log(asked.number), f"trial-{asked.number:03d}") as server:
            self.loaded, self.started, ready_s = True, True, self.clock() - began
            first = self.generator(server, plan)  # once warm, a new level settles within a few requests
            check_start = self.clock()
            checked = self._check_outputs(asked.candidate, first)  # before anything is measured
            check_s = self.clock() - check_start
            later = first.with_plan(replace(plan, warmup_s=min(plan.warmup_s, RAMP_S)))
            done: list[Point] = []

            def note(point: Point) -> Point:
                point = self.named(point)
                done.append(point)
                stopping.check()
                self.events.point_measured(asked.number, point)
                return point

            def once(level: float) -> Point:
                return note(loader.point(later if done else first, level))

            def first_guess() -> float:  # an open loop's first candidate: the rate one client gets
                return requests_per_s(note(first.at_concurrency(1)))

            try:
                measured = loader.search(once, search_sla, self.prep.space, start, beat, first_guess)
            except MeasurementError as exc:
                if _died(server):  # the server died under load (a crash, an OOM kill)
                    raise ServerExitedError(f"{server.description} exited during the measurement") from exc
                raise
        if measured.points and all(p.errors for p in measured.points):  # errors are a verdict: it failed
            raise MeasurementError(f"every load measured got errors: {errors_line(measured.points)}")
        return replace(measured, output_check=checked, output_check_s=check_s, ready_s=ready_s)

    # ------------------------------------------------------------ the output check

    def reference(self) -> Reference | None:
        """Your config's answers to the check's requests: recorded by this run (this session or an
        earlier one), or None yet."""
        if self._reference is None:
            self._reference = self.run_dir.reference()
        return self._reference

    def _sources(self) -> tuple[Candidate, ...]:
        """The candidates whose answers the others are held to: your config as it is, and (if
        that cannot run here) its twin in the search space."""
        return tuple(dict.fromkeys((self.prep.baseline, walk.in_space(self.prep.baseline, self.prep.space))))

    def _check_outputs(self, candidate: Candidate, gen: Load) -> str:
        """The check of :mod:`autotune.outputs` on the candidate's server, before it is measured:
        "reference" (its answers become the run's reference), "passed", "" (--output-check off);
        a WrongOutputError naming the first difference."""
        settings = self.prep.settings
        if not settings.output_check:
            return ""
        if not self._sample:
            count = check_requests(self.prep.space.max_batch_size)
            self._sample = gen.check_sample(settings.workload, settings.seed or 0, count)
        answers, datatypes = gen.answers([payload for payload, _ in self._sample])
        reference = self.reference()
        if reference is None:  # a source (_sources): the candidate is your config
            self._reference = Reference(tuple(answers), datatypes)
            self.run_dir.save_reference(self._reference)
            return "reference"
        tolerance = parse_tolerance(settings.output_tolerance)
        labels = [label for _, label in self._sample]
        found = compare(
            reference.answers, answers, reference.datatypes, tolerance, candidate.trt_fp16, labels
        )
        if found is not None:
            raise WrongOutputError(found.line)
        return "passed"

    def _record_reference(self) -> None:
        """Your config's answers, on a server of its own (this worker did not measure it: another
        worker of the study did, or it failed here), from the first source that serves."""
        failures = []
        for candidate in self._sources():
            try:
                with self.serve(candidate, self.run_dir.log("reference.log"), "reference") as server:
                    self._check_outputs(candidate, self.generator(server, self.prep.settings.plan))
                return
            except (LaunchError, MeasurementError) as exc:
                failures.append(str(exc).splitlines()[0])
        raise MeasurementError(
            "your config could not be served to record the answers the output check compares with: "
            + "; ".join(failures),
            hint="--output-check off measures candidates without comparing their answers",
        )


def tell_stopped(study: Study, asked: Asked, exc: BaseException, duration_s: float, log: Path) -> None:
    """Tell ``study`` of a trial ``exc`` stopped. The data or the machine at fault, a full disk, or
    a stop request: interrupted, so --resume measures it again. A crash: failed with its reason,
    never run again."""
    stops = (WorkloadError, MachineLimitError, YourConfigError)
    if isinstance(exc, Exception) and not isinstance(exc, stops) and disk_full(exc) is None:
        study.tell_failed(asked, _crash_reason(exc), _tail(log), duration_s)
        return
    with contextlib.suppress(Exception):  # a full disk: the study may be what could not be written
        study.tell_interrupted(asked, duration_s)


@dataclass(frozen=True)
class Ended:
    """How a trial ended, held until the study is told: measured, pruned (the trial standing in
    and why), or failed (why, the log's tail, whether its answers were wrong)."""

    measurement: Measurement | None = None
    duration_s: float = 0.0
    pruned: tuple[int | None, str] | None = None
    failed: tuple[str, str, bool] | None = None
    twin_in_flight: bool = False  # pruned as the twin of a trial still in flight

    def tell(self, study: Study, asked: Asked) -> TrialResult:
        """Tell ``study`` of ``asked``'s end; its result."""
        if self.measurement is not None:
            return study.tell_measured(asked, self.measurement, self.duration_s)
        if self.pruned is not None:
            return study.tell_pruned(asked, self.pruned[1], self.pruned[0], self.twin_in_flight)
        assert self.failed is not None
        why, tail, wrong = self.failed
        return study.tell_failed(asked, why, tail, self.duration_s, wrong_outputs=wrong)


def _died(server: Any, settle_s: float = 1.0) -> bool:
    """Whether the server is gone (a killed process closes its sockets a moment before it is reaped)."""
    deadline = time.monotonic() + settle_s
    while server.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _tail(log: Path, lines: int | None = 40) -> str:
    return read_tail(log, lines) if log.exists() else ""


def _reason(exc: AutotuneError, tail: str) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    detail = failure_line(tail)
    return f"{first} — {detail}" if detail and detail not in first else first


def _crash_reason(exc: Exception) -> str:
    if isinstance(exc, AutotuneError):
        return _reason(exc, "")
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"internal error: {type(exc).__name__}" + (f": {text}" if text else "")
