"""What a run needs before its first trial, read and checked once by :func:`prepare`.

That is the model's config, the search space as this model and machine allow it, the workload and
the traffic. Nothing is started or written here. Anything wrong is a UsageError (exit 2)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autotune import model_config as mcfg
from autotune import openfiles
from autotune.errors import UsageError
from autotune.files import free_bytes, mib
from autotune.loadgen import ModelIO, WorkloadData, read_workload
from autotune.objective import RAW, Scoring, scoring_for
from autotune.pipeline import ENSEMBLE, Pipeline, for_step
from autotune.rundir import RunDir, RunRecord
from autotune.search_space import Candidate, SearchSpace, bundled, load_search_space
from autotune.settings import RunSettings
from autotune.traffic import Loader

# The disk a run needs. RUN_ROOM_BYTES is kept for what the run writes at the end. report.html is
# about 5 MB because it holds plotly.js inline. trials.csv, winner.pbtxt and winner.diff are small.
# TRIAL_BYTES is for each trial: a server log of 10-100 kB, and the study's rows.
RUN_ROOM_BYTES = 16 * 2**20
TRIAL_BYTES = 2**20


@dataclass(frozen=True)
class Prepared:
    """Everything checked before anything is started or written."""

    settings: RunSettings
    original: mcfg.ModelConfig
    model_dir: Path
    # The user's space as this model, machine and workload allow it. The sampler, the seeds and
    # the neighbours stay in it. Your config is measured whether the space holds it or not.
    space: SearchSpace
    baseline: Candidate
    data: WorkloadData | None  # the workload read and checked; None: the config declares no inputs
    loader: Loader  # the traffic, its arrival pattern read and checked
    server_gpus: int = 0  # GPUs the server side has (asked of the launcher, not of this machine)
    scoring: Scoring = RAW  # goodput, or goodput per GPU (objective.scoring_for); a resumed run keeps its own
    notes: tuple[str, ...] = ()  # what people should know before the run, such as that the space was narrowed
    cores: int = 0  # the cores the server's instances share, the seeds' "many"; 0 means this machine's
    pipeline: Pipeline | None = None  # --step: the ensemble served whole; ``original`` is its step's config
    # --models: the workload of each model served beside the tuned one, read and checked once
    beside_data: tuple[WorkloadData | None, ...] = ()

    @property
    def clients(self) -> int:
        """The most connections a point opens: the space's most clients for each model served.
        It is 0 in an open loop, whose clients are not known before it runs."""
        return 0 if self.loader.open_loop else self.space.concurrency_max * (1 + len(self.settings.beside))


def prepare(settings: RunSettings, server_gpus: int = 0) -> Prepared:
    """Validate the input and return it as :class:`Prepared`. Anything wrong raises a
    UsageError. Nothing is written.

    ``server_gpus`` is how many GPUs the server side has. ``kind: auto`` follows it. It also
    decides, once, whether goodputs are compared per GPU (:func:`autotune.objective.scoring_for`).
    A resumed run keeps its own scoring."""
    gpu_available = server_gpus > 0
    resumed = None if settings.run_dir is None else _check_resumable(settings, settings.run_dir)
    served = mcfg.load_config(settings.repository, settings.model)  # what the load generator sends to
    mcfg.check_versions(mcfg.model_dir(settings.repository, settings.model), served)
    pipeline = for_step(settings.repository, served, settings.step, settings.composing)  # checked
    tuned = settings.step or settings.model
    # an ensemble's step takes requests as large as the ensemble's max batch size
    ensemble = pipeline is not None and pipeline.kind == ENSEMBLE
    original = served
    if tuned != settings.model:
        original = mcfg.load_config(settings.repository, tuned)
        mcfg.check_versions(mcfg.model_dir(settings.repository, tuned), original)
    models = [*(pipeline.models if pipeline else (settings.model,)), *settings.beside_names]  # served
    space_file = settings.search_space or default_space_path()
    given = load_search_space(space_file, gpu_available=gpu_available, model=tuned, served=models)
    baseline = mcfg.candidate_of(original)
    space = given.restricted(
        batching=original.max_batch_size > 0,
        gpu=gpu_available,
        tensorrt=mcfg.supports_tensorrt(original),
        min_batch=max(settings.workload.batch_size, served.max_batch_size if ensemble else 0),
        gpu_count=server_gpus,
    )
    io = ModelIO.from_config(settings.model, served)  # None: it declares no inputs, the server will
    data = None if io is None else read_workload(io, settings.workload, settings.seed or 0)  # read once
    beside_data = beside_workloads(settings, pipeline is not None)
    loader = Loader.read(settings.traffic)
    _check_writable(settings.reports_dir if settings.run_dir is None else settings.run_dir)
    _check_room(settings.reports_dir if settings.run_dir is None else settings.run_dir, settings.max_trials)
    model_dir = mcfg.model_dir(settings.repository, tuned)
    scoring = resumed.scoring if resumed is not None else scoring_for(space, server_gpus)
    notes = narrowed(given, space, settings.workload.batch_size)
    prepared = Prepared(
        settings,
        original,
        model_dir,
        space,
        baseline,
        data,
        loader,
        server_gpus,
        scoring,
        notes,
        pipeline=pipeline,
        beside_data=beside_data,
    )
    openfiles.check_room(prepared.clients)
    return prepared


def narrowed(given: SearchSpace, space: SearchSpace, batch_size: int) -> tuple[str, ...]:
    """What the workload took out of the space that people should hear of. These are the max
    batch sizes below the requests' batch size. When every one of them is below it, only the
    batch size itself is tried."""
    below = sorted({m for m in given.max_batch_size if 0 < m < batch_size})
    if not below or space.max_batch_size == given.max_batch_size:
        return ()
    left = ", ".join(map(str, space.max_batch_size))
    return (
        f"the search space's max_batch_size {', '.join(map(str, below))} cannot take requests of "
        f"--batch-size {batch_size}: trying max_batch_size {left}",
    )


def default_space_path() -> Path:
    return bundled("default")


def _check_writable(path: Path) -> None:
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK):
        raise UsageError(f"report directory is not writable: {path} ({probe} is not a writable directory)")


def _check_room(path: Path, trials: int) -> None:
    """Check that there is enough free disk for a run of ``trials`` trials. Else raise a
    UsageError that says how much the run needs."""
    need, free = RUN_ROOM_BYTES + trials * TRIAL_BYTES, free_bytes(path)
    if free < need:
        raise UsageError(
            f"not enough disk space for the run: {path} has {mib(free)} free, a run of {trials} trials "
            f"needs about {mib(need)} (its report alone is about 5 MiB)",
            hint="free some space, or give --reports-dir on another disk",
        )


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


def beside_workloads(settings: RunSettings, pipeline: bool) -> tuple[WorkloadData | None, ...]:
    """The workload of each model served beside the tuned one, read against its config. An
    entry is None when that model declares no inputs. Raises a UsageError where several models
    on one server cannot be tuned: in an open loop, or with a pipeline's ``--step``."""
    if not settings.beside:
        return ()
    if settings.traffic.open_loop:
        raise UsageError("several models on one server (--models) are measured in a closed loop only")
    if pipeline:
        raise UsageError("several models on one server (--models) cannot include a pipeline's --step yet")
    out = []
    for co in settings.beside:
        config = mcfg.load_config(settings.repository, co.model)
        mcfg.check_versions(mcfg.model_dir(settings.repository, co.model), config)
        io = ModelIO.from_config(co.model, config)
        out.append(None if io is None else read_workload(io, co.workload, settings.seed or 0))
    return tuple(out)
