"""Trials on a Ray cluster: each trial a Ray task on a node, several at once.

``autotune run ... --ray ADDRESS`` measures up to ``--trials-at-once`` trials together. This
process asks the study and tells it; each task serves its candidate with the run's own launcher
on its node, measures it (:meth:`autotune.trials.Trials.ended`) and returns how it ended and
where. A node offers trials through the ``autotune`` resource (``ray start --resources
'{"autotune": 1}'``: one trial at a time there); a trial on GPUs asks for them too, and Ray sets
``CUDA_VISIBLE_DEVICES``. The nodes reach the model repository and the run directory through a
path they share. A task whose node is lost runs again on another (Ray's retries): the study
counts it once. Ray is the optional extra ``autotune[ray]``.
"""

from __future__ import annotations

import contextlib
import importlib
import socket
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, cast

from autotune.errors import LaunchError, UsageError
from autotune.events import Events
from autotune.launch import make_launcher
from autotune.launched import LaunchedServers
from autotune.prepare import Prepared
from autotune.results import TrialResult
from autotune.rundir import RunDir
from autotune.search_space import Candidate
from autotune.study import INTERRUPTED, Asked, Study
from autotune.trials import Ended, Trials, tell_stopped

T = TypeVar("T")
J = TypeVar("J")
RESOURCE = "autotune"  # a node offers this many trials at once
RETRIES = 3  # a task whose node was lost runs again on another, this many times at most
CANCEL_S = 30.0  # a cancelled task's time to stop its server (a local server's stop takes seconds)


def _ray() -> Any:
    """The ray module, or a UsageError that says how to get it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise UsageError("--ray needs Ray: pip install 'autotune[ray]'") from exc


class RayWorkers:
    """:class:`autotune.workers.Workers` on a Ray cluster. ``at_once`` None: as many trials as
    the cluster's nodes offer (:data:`RESOURCE`)."""

    def __init__(self, prep: Prepared, address: str, at_once: int | None = None) -> None:
        self.ray, self.prep = _ray(), prep
        self.started_ray = not self.ray.is_initialized()
        if self.started_ray:
            try:
                self.ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise LaunchError(f"no Ray cluster at {address}: {str(exc).splitlines()[0]}") from exc
        offered = int(self.ray.cluster_resources().get(RESOURCE, 0))
        if offered < 1:
            self.close()
            raise LaunchError(
                f"no node of the Ray cluster at {address} offers trials",
                hint=f"start each node with: ray start ... --resources '{{\"{RESOURCE}\": 1}}'",
            )
        self.at_once = min(at_once or offered, offered)
        self.task = self.ray.remote(max_retries=RETRIES, retry_exceptions=False)(trial_on_node)
        self.rounds = self.ray.remote(max_retries=RETRIES, retry_exceptions=False)(round_on_node)
        self.flying: dict[Any, tuple[Asked, float]] = {}  # each task in flight: its trial, its start

    def free(self) -> bool:
        return len(self.flying) < self.at_once

    def busy(self) -> bool:
        return bool(self.flying)

    def start(self, trials: Trials, study: Study, results: list[TrialResult]) -> None:
        asked = trials.ask(study)
        gpus = gpus_of(self.prep, asked.candidate)
        shipped = replace(asked, trial=cast(Any, None))  # the study stays here
        ref = self.task.options(resources={RESOURCE: 1}, num_cpus=0, num_gpus=gpus).remote(
            self.prep, trials.run_dir.path, shipped, results
        )
        self.flying[ref] = (asked, trials.clock())

    def wait(self, trials: Trials, study: Study) -> None:
        (ref,), _ = self.ray.wait(list(self.flying), num_returns=1)
        asked, began = self.flying.pop(ref)
        try:
            ended, node, version = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:  # the trial raised on its node: as here
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            tell_stopped(study, asked, cause, trials.clock() - began, trials.log(asked.number))
            raise cause from None
        except self.ray.exceptions.RayError as exc:  # its nodes were lost, every retry
            why = f"its node was lost ({type(exc).__name__}), {RETRIES} times"
            ended, node, version = Ended(failed=(why, "", False), duration_s=trials.clock() - began), "", ""
        asked.set({"node": node})
        record = trials.run_dir.record
        made = record.made if not version or "triton" in record.made else {**record.made, "triton": version}
        trials.run_dir = trials.run_dir.update(nodes={**record.nodes, str(asked.number): node}, made=made)
        trials.events.trial_finished(ended.tell(study, asked))

    def each(self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J]) -> list[T]:
        """The race's rounds, each a task on a node of its own where the nodes allow: a round asks
        for the GPUs of its racer that needs most."""
        refs = [
            self.rounds.options(resources={RESOURCE: 1}, num_cpus=0, num_gpus=self._round_gpus(job)).remote(
                self.prep, trials.run_dir.path, serve, job
            )
            for job in jobs
        ]
        try:
            return cast(list[T], self.ray.get(refs))
        except self.ray.exceptions.RayTaskError as exc:
            raise (exc.cause if isinstance(exc.cause, BaseException) else exc) from None
        finally:  # a round that failed, or a stop: the others end too, their servers with them
            self._cancel(refs)

    def stop(self, trials: Trials, study: Study) -> None:
        self._cancel(list(self.flying))
        for asked, began in self.flying.values():
            with contextlib.suppress(Exception):
                study.tell_failed(asked, INTERRUPTED, "", trials.clock() - began, interrupted=True)
        self.flying.clear()

    def _cancel(self, refs: Sequence[Any]) -> None:
        """Stop the tasks ``refs`` as Ctrl-C stops a run: each unwinds on its node and stops its
        server. Killing a task's worker instead would kill its server's guard before the guard
        could end the server (Ray ends a dead worker's children). Waits :data:`CANCEL_S` at most."""
        for ref in refs:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
        with contextlib.suppress(Exception):
            self.ray.wait(list(refs), num_returns=len(refs), timeout=CANCEL_S)

    def _round_gpus(self, job: Any) -> int:
        """The most GPUs one racer of a race round's ``job`` runs on."""
        return max((gpus_of(self.prep, r.candidate) for r in getattr(job, "racers", ())), default=0)

    def close(self) -> None:
        """Tasks in flight cancelled (:meth:`_cancel`), and Ray left."""
        self._cancel(list(self.flying))
        self.flying.clear()
        if self.started_ray:
            self.ray.shutdown()


def trial_on_node(
    prep: Prepared, run_path: Path, asked: Asked, results: list[TrialResult]
) -> tuple[Ended, str, str]:
    """A Ray task: ``asked`` served and measured on this node with the run's launcher; how it
    ended, this node's name (its host and Ray's node id), and its server's version."""
    trials = _trials_here(prep, run_path)
    try:
        return trials.ended(asked, results), node_name(), trials.servers.version
    finally:
        trials.close()


def round_on_node(prep: Prepared, run_path: Path, serve: Callable[[Trials, J], T], job: J) -> T:
    """A Ray task: a race round (``serve`` of ``job``) on this node."""
    trials = _trials_here(prep, run_path)
    try:
        return serve(trials, job)
    finally:
        trials.close()


def _trials_here(prep: Prepared, run_path: Path) -> Trials:
    """Trials on this node: the run's launcher here, the run's directory through the shared path.
    Only the driver writes run.json: the node's copy holds a Triton version already, so serving
    does not write it (its version goes back with the trial)."""
    run = RunDir.load(run_path)
    run = replace(run, record=replace(run.record, made={**run.record.made, "triton": ""}))
    launcher = make_launcher(prep.settings.launch, run.record.run_id)
    return Trials(prep, LaunchedServers(prep, launcher, run.record.run_id), run, Events())


def node_name() -> str:
    """This node: its host and the start of Ray's node id."""
    return f"{socket.gethostname()}/{_ray().get_runtime_context().get_node_id()[:8]}"


def gpus_of(prep: Prepared, candidate: Candidate | None) -> int:
    """The GPUs a trial of ``candidate`` asks Ray for: those it lists, else (KIND_GPU on every
    GPU) as many as your server has; none on CPUs. Ray hides the rest (CUDA_VISIBLE_DEVICES)."""
    if candidate is None or candidate.kind != "KIND_GPU":
        return 0
    return len(candidate.gpus) or max(prep.server_gpus, 1)
