"""One trial, start to finish: the candidate staged and served, its goodput searched, the study told.

:class:`Trials` is what the tuner (:mod:`autotune.tuner`) and the finalists' verification
(:mod:`autotune.finals`) serve candidates through: it stages a candidate, starts its server on
the run's launcher, measures it with the run's load, and tells the study what it measured, or
why it failed.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune import decide, openfiles, rules, stopping, trt_build, warmup
from autotune import model_config as mcfg
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
from autotune.gpu import GpuProbe
from autotune.gpu_probe import at_server, choose_probe
from autotune.launch import Launcher, Server, failure_line, read_tail
from autotune.loadgen import Beside, LoadGenerator, Payload, WorkloadData
from autotune.noise import Estimate, Noise
from autotune.outputs import Reference, check_requests, compare, parse_tolerance
from autotune.pipeline import tuned_configs, with_caller
from autotune.points import RAMP_S, Measurement, Point, WindowPlan, errors_line
from autotune.prepare import Prepared
from autotune.results import TrialResult
from autotune.rundir import RunDir
from autotune.search_space import Candidate
from autotune.staging import Stages, can_warm, stage_members, stage_model
from autotune.study import INTERRUPTED, Asked, Study
from autotune.traffic import requests_per_s


class Trials:
    """Runs trials and verifications: stages the candidate, serves it, measures, tells the study."""

    def __init__(self, prep: Prepared, launcher: Launcher[Any], run: RunDir, events: Events) -> None:
        self.prep, self.launcher, self.run_dir, self.events = prep, launcher, run, events
        # the requests for each served name (the tuned model's, and those serve_all staged)
        self._data: dict[str, WorkloadData | None] = {prep.settings.model: prep.data}
        self.checked = False  # the preflight passed
        self.warm = True  # staged configs get our warm-up (off once it kept your config from loading)
        self.started = False  # a server of this run has loaded its model
        self.noise = Noise()  # the run's window latency spread so far (rules.latency_noise)
        self._beside_checked = False  # the models beside it passed theirs
        self.probe: GpuProbe | None = None  # how points sample the server's GPUs, chosen on the first server
        self.probed = False
        self._stages: Stages | None = None  # made on the first serve, removed by close
        self._reference: Reference | None = None  # your config's answers (autotune.outputs)
        self._sample: list[tuple[Payload, str]] = []  # the check's requests, made on the first server
        self.clock = time.monotonic  # what trial durations and the time budget are read from
        self.loaded = False  # the trial in flight's server got its model ready
        self.deadline: float | None = None  # the run's time budget ends then, on :attr:`clock`
        self.check_s = 0.0  # the time the open-loop check will take, kept from the race's

    def out_of_time(self, keep_s: float = 0.0) -> bool:
        """The run's time budget is spent, ``keep_s`` kept for what follows (a round started
        goes on; none starts after it)."""
        return self.deadline is not None and self.clock() + keep_s >= self.deadline

    def close(self) -> None:
        """Remove the stages (every server has stopped when its :meth:`Launcher.serve` block ended)."""
        if self._stages is not None:
            self._stages.remove()

    def run(self, study: Study, results: list[TrialResult]) -> None:
        """Ask one trial and tell its result; ``results``: every trial so far, this worker's or not."""
        stopping.check()
        asked = study.ask()
        self.events.trial_started(asked.number, asked.candidate, asked.baseline, asked.again_of)
        self.events.trial_finished(self._measure_and_tell(study, asked, results, self.clock()))

    def _measure_and_tell(
        self, study: Study, asked: Asked, results: list[TrialResult], start: float
    ) -> TrialResult:
        yours = asked.baseline or asked.as_is  # your config, or its twin here: measured wherever it lies
        pruned = decide.stand_in(results, asked.candidate, self.prep.space, self.prep.scoring, yours)
        try:
            if pruned is not None:
                source, why = pruned
                return study.tell_pruned(asked, why, source)
            measurement = self._measure_twice(asked, results)
            return study.tell_measured(asked, measurement, self.clock() - start)
        except (LaunchError, MeasurementError, ConfigError) as exc:  # this candidate failed
            log = self.log(asked.number)
            why = _reason(exc, _tail(log, None))  # the load error may lie far above the log's end
            stop = self._not_the_candidate(exc, why, asked.candidate, log)
            if stop is not None:  # measured again on --resume
                study.tell_failed(asked, INTERRUPTED, "", self.clock() - start, interrupted=True)
                raise stop from exc
            wrong = isinstance(exc, WrongOutputError)
            return study.tell_failed(asked, why, _tail(log), self.clock() - start, wrong_outputs=wrong)
        except (WorkloadError, MachineLimitError, YourConfigError):  # not the config's: the run stops
            study.tell_failed(asked, INTERRUPTED, "", self.clock() - start, interrupted=True)
            raise
        except Exception as exc:  # a crash: recorded with its reason, never re-run; the run stops
            if disk_full(exc) is not None:  # not the candidate's fault: measured again on --resume
                with contextlib.suppress(Exception):  # the study may be what could not be written
                    study.tell_failed(asked, INTERRUPTED, "", self.clock() - start, interrupted=True)
                raise
            tail = _tail(self.log(asked.number))
            study.tell_failed(asked, _crash_reason(exc), tail, self.clock() - start)
            raise
        except BaseException:  # a stop request: measured again on --resume
            study.tell_failed(asked, INTERRUPTED, "", self.clock() - start, interrupted=True)
            raise

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
        if not self.loaded and candidate == decide.in_space(self.prep.baseline, self.prep.space):
            said = failure_line(tail) or why
            hint = f"{YourConfigError.hint} (the server's log: {log})"
            return YourConfigError(f"your config does not load here: {said}", hint=hint)
        return None

    def log(self, number: int) -> Path:
        return self.run_dir.log(f"trial-{number:03d}.log")

    def _measure_twice(self, asked: Asked, results: list[TrialResult]) -> Measurement:
        """:meth:`measure` from the best level (:func:`decide.start_level`) against the best trial
        (:func:`rules.incumbent`), and once more on a new
        server should the first die under load: the nvidia-pytriton wheel's tritonserver crashes
        now and then under the python backend with dynamic batching (an assertion in gRPC's
        sync.cc, or signal 11), and a failed config is not proposed again by the neighbour rule:
        a mobilenet run lost its best config so and stopped after 5 trials at 1198 infer/s, where
        the others found 1680-1760. The first server's log is kept (``trial-NNN.1.log``)."""
        start = decide.start_level(results, self.prep.scoring)
        self.noise = rules.latency_noise(rules.measured_points(results), self.prep.settings.plan.percentile)
        beat = rules.incumbent(results, self.prep.scoring, asked.candidate)
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
                self.warm = False
                said = f"{said}; our warm-up may be why: without it from now on"
            self.events.trial_retried(asked.number, said)
            return self.measure(asked, start, beat)

    def _warm_suspect(self, candidate: Candidate, log: Path) -> bool:
        """Whether our warm-up may be what kept the run's first server from loading: no server
        of this run has loaded yet, the config got our warm-up, and the log does not say the
        model refused the workload's data in it (that is the data's: :meth:`_not_the_candidate`).
        Seen: the python backend's server died (signal 11) on a sample its model refused."""
        if not self.warm or self.started:
            return False
        config = mcfg.apply_candidate(self.prep.original, candidate)
        if self._warmed(config)[0] is config:
            return False
        return warmup.refused(_tail(log, None), self.prep.settings.workload.batch_size) is None

    def generator(self, server: Server, plan: WindowPlan, model: str = "") -> LoadGenerator:
        """The load for this server (``model``: a name :meth:`serve_all` staged, else the tuned
        model's); the first server that answers also gets the preflight
        (LoadGenerator.preflight: each distinct shape of the workload, then a spread of its
        requests; a WorkloadError stops the run) and chooses the run's GPU probe (none: no sampling),
        which then reads each server at its own metrics (:func:`autotune.gpu_probe.at_server`)."""
        settings = self.prep.settings
        self._check_open_files(server)
        name = model or settings.model
        data = self._data[name] if name in self._data else self._data[settings.model]
        gen = LoadGenerator.connect(
            server.host, server.http_port, server.grpc_port, name, protocol=settings.protocol,
            plan=plan, workload=settings.workload, data=data, preflight=not self.checked,
        )  # fmt: skip
        self._data[name], self.checked = gen.data, True  # as the server serves it, encoded once
        if not self.probed:
            self.probe, self.probed = choose_probe(server.metrics_url, settings.launch.kind), True
            version = triton_version(server.host, server.http_port)
            if version and "triton" not in self.run_dir.record.made:
                self.run_dir = self.run_dir.update(made={**self.run_dir.record.made, "triton": version})
        gen = gen.with_steps(self.prep.pipeline.members) if self.prep.pipeline else gen
        gen = gen.with_beside(self._beside(server, plan), settings.weight) if settings.beside else gen
        return gen.with_gpu_probe(at_server(self.probe, server.metrics_url))  # this server's metrics

    def _beside(self, server: Server, plan: WindowPlan) -> list[Beside]:
        """A load generator for each model served beside the tuned one, with its own workload
        (checked on the first server, as the tuned model's), as many clients as the tuned one."""
        beside = []
        for co, data in zip(self.prep.settings.beside, self.prep.beside_data, strict=True):
            gen = LoadGenerator.connect(
                server.host, server.http_port, server.grpc_port, co.model,
                protocol=self.prep.settings.protocol, plan=plan, workload=co.workload, data=data,
                preflight=not self._beside_checked,
            )  # fmt: skip
            beside.append(Beside(gen, co.weight, co.sla.percentile))
        self._beside_checked = True
        return beside

    def measure(self, asked: Asked, start: float | None = None, beat: Estimate | None = None) -> Measurement:
        """The candidate's goodput search (:meth:`Loader.search`) from ``start``, the best
        candidate's level, against ``beat`` (the best trial's throughput), on a server of its
        own, its points judged at :attr:`RunSettings.search_sla` (:func:`rules.judged_at`). Errors are a
        verdict: a point with any breaks the SLA (:meth:`Sla.met_by`), and a candidate whose
        every point got them fails, naming their share and the server's first."""
        settings, loader = self.prep.settings, self.prep.loader
        search_sla = settings.search_sla
        plan = rules.judged_at(settings.plan, search_sla.limit_ms, noise=self.noise)
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

    def _check_open_files(self, server: Server) -> None:
        """A server of ours that cannot take the run's clients under the open-file limit ends
        the run (:func:`autotune.openfiles.check_server`)."""
        if server.pid and self.prep.clients:
            openfiles.check_server(server.pid, self.prep.clients, server.description)

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
        return tuple(
            dict.fromkeys((self.prep.baseline, decide.in_space(self.prep.baseline, self.prep.space)))
        )

    def _check_outputs(self, candidate: Candidate, gen: LoadGenerator) -> str:
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

    @contextmanager
    def serve(self, candidate: Candidate, log: Path, stage_name: str) -> Iterator[Server]:
        """The candidate staged (:func:`autotune.staging.stage_model`; with ``--step``, beside the
        ensemble and its other steps as they are, or with the configs earlier rounds chose for
        them, a BLS model with :func:`autotune.pipeline.caller_served`'s instances) and served
        (a config with TensorRT gets --trt-build-timeout-s to build its engine); the staged
        folder is removed when the server's context ends."""
        config, files = self._warmed(mcfg.apply_candidate(self.prep.original, candidate))
        with self._stage(stage_name) as stage:
            stage_model(self.prep.model_dir, config, stage, files)
            s = self.prep.settings
            models = self.prep.pipeline.models if self.prep.pipeline else ()
            others = [name for name in models if name != config.name] + [c.model for c in s.beside]
            # the ensemble and its other steps as they are, or as earlier rounds tuned them; a
            # BLS model calling the tuned one with at least as many instances as it
            served = tuned_configs(s.tuned_steps)
            pipeline = self.prep.pipeline
            if pipeline is not None and config.name != pipeline.model:
                served = with_caller(pipeline, s.repository, {**served, config.name: config})
            stage_members(s.repository, others, stage, served)
            with trt_build.serving(self.launcher, stage, s.model, log, config, s.trt_build_timeout_s) as srv:
                yield srv

    def can_share(self) -> bool:
        """Whether several candidates can be served by one server (:meth:`serve_all`): the
        launcher starts its own servers and the tuned model is served alone (no pipeline, no
        models beside it)."""
        return self.launcher.starts_servers and self.prep.pipeline is None and not self.prep.settings.beside

    @contextmanager
    def serve_all(self, candidates: Mapping[str, Candidate], log: Path, stage_name: str) -> Iterator[Server]:
        """Each of ``candidates`` staged as a model of its own, named by its key, and all served
        by one server (:meth:`can_share` says when); the staged folder is removed when the
        server's context ends."""
        with self._stage(stage_name) as stage:
            configs = []
            for name, candidate in candidates.items():
                config, files = self._warmed(mcfg.apply_candidate(self.prep.original, candidate))
                config.name = name
                stage_model(self.prep.model_dir, config, stage, files)
                configs.append(config)
            built = [c for c in configs if mcfg.uses_tensorrt(c)]
            timeout = self.prep.settings.trt_build_timeout_s
            with trt_build.serving(
                self.launcher, stage, configs[-1].name, log, (built or configs)[0], timeout
            ) as srv:
                yield srv

    def _warmed(self, config: mcfg.ModelConfig) -> tuple[mcfg.ModelConfig, dict[str, bytes]]:
        """``config`` with Triton's warm-up of every instance at every batch size it can form, on
        the workload's first entry (:func:`autotune.warmup.samples`), and the files it reads;
        as it is where the workload is not this model's own input (a pipeline's step), where its
        folder has a ``warmup/`` of yours, and on a server we do not start (a remote one loads a
        config, not the files beside it)."""
        data, s = self.prep.data, self.prep.settings
        ours = self.launcher is not None and self.launcher.starts_servers
        if not self.warm or data is None or self.prep.pipeline is not None or not ours:
            return config, {}
        if not can_warm(self.prep.model_dir):
            return config, {}
        names = [spec.name for spec in data.io.inputs]
        return warmup.samples(config, data.entries[0], names, s.workload.batch_size)

    @contextmanager
    def _stage(self, stage_name: str) -> Iterator[Path]:
        """A folder of the run's stages (:class:`autotune.staging.Stages`), removed when the
        context ends."""
        if self._stages is None:
            self._stages = Stages.for_run(self.run_dir.record.run_id)
        stage = self._stages.path(stage_name)
        try:
            yield stage
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def triton_version(host: str, port: int) -> str:
    """The server's version, from its metadata (``GET /v2``); "" when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/v2", timeout=5) as reply:
            return str(json.loads(reply.read()).get("version", ""))
    except (OSError, ValueError):
        return ""


def _died(server: Server, settle_s: float = 1.0) -> bool:
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
