"""Trials on a Ray cluster: each trial a Ray task on a node, several at once.

``autotune run ... --ray ADDRESS`` measures up to ``--trials-at-once`` trials together. This
process asks the study and tells it; each task serves its candidate with the run's own launcher
on its node, measures it (:meth:`autotune.trials.Trials.ended`) and returns how it ended and
where. A node offers trials through the ``autotune`` resource (``ray start --resources
'{"autotune": 1}'``: one trial at a time there); a trial on GPUs asks for them too, and Ray sets
``CUDA_VISIBLE_DEVICES``. The nodes reach the model repository and the run directory through a
path they share, or, where a node sees neither, through Ray's object store
(:mod:`autotune.shipping`); a node that joins during the run is asked too, and offers its trials.
A task whose node is lost runs again on another (Ray's retries): the study
counts it once. A node that cannot serve your own config (a backend, a module or a GPU it lacks)
fails its trial with its reason and is not used again in the run: its trial's config is measured
again elsewhere. Ray is the optional extra ``autotune[ray]``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from autotune import shipping
from autotune.errors import ConfigError, LaunchError, MachineLimitError, UsageError, YourConfigError
from autotune.events import Events
from autotune.launch import failure_line, make_launcher, read_tail
from autotune.launched import LaunchedServers
from autotune.prepare import Prepared
from autotune.results import TrialResult
from autotune.rundir import RunDir
from autotune.search import walk
from autotune.search_space import Candidate
from autotune.shipping import Bundle
from autotune.study import Asked, Study
from autotune.trials import Ended, Trials, tell_stopped
from autotune.workers import Begun

T = TypeVar("T")
J = TypeVar("J")
RESOURCE = "autotune"  # a node offers this many trials at once
RETRIES = 3  # a task whose node was lost runs again on another, this many times at most
CANCEL_S = 30.0  # a cancelled task's time to stop its server (a local server's stop takes seconds)


@dataclass(frozen=True)
class Landed:
    """What a trial's task brings back: how the trial ended, the node that measured it (its
    name and Ray's id), its server's version, ``fault``: why the node cannot serve your config
    ("" when it can, or was not asked), and ``logs``: those it wrote on a node that does not see
    the run's directory (:func:`shipping.new_logs`)."""

    ended: Ended
    node: str
    node_id: str
    version: str
    fault: str = ""
    logs: dict[str, bytes] = field(default_factory=dict)


def _ray() -> Any:
    """The ray module, or a UsageError that says how to get it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise UsageError("--ray needs Ray: pip install 'autotune[ray]'") from exc


def _join_hint(address: str) -> str:
    """What to try when the driver could not join the cluster at ``address``. ``ray start`` turns
    on Ray's token authentication where a token exists (``~/.ray/auth_token``), but a driver that
    names an address sends its token only with RAY_AUTH_MODE=token."""
    if address == "auto":
        return f"start one on this machine: ray start --head --resources '{{\"{RESOURCE}\": 1}}'"
    if os.environ.get("RAY_AUTH_MODE"):
        return "check the address: ray status on the head node prints it"
    return (
        "check the address (ray status on the head node prints it); a cluster with Ray's token "
        "authentication admits a driver that names its address only with RAY_AUTH_MODE=token set "
        "(and its token, as in ~/.ray/auth_token); on a node of the cluster, --ray auto needs neither"
    )


class RayWorkers:
    """:class:`autotune.workers.Workers` on a Ray cluster. ``at_once`` None: as many trials as
    the cluster's nodes offer (:data:`RESOURCE`), counted again before each trial starts."""

    def __init__(self, prep: Prepared, address: str, at_once: int | None = None) -> None:
        self.ray, self.prep = _ray(), prep
        self.started_ray = not self.ray.is_initialized()
        if self.started_ray:
            try:
                self.ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            except (ConnectionError, RuntimeError, ValueError) as exc:
                line = str(exc).splitlines()[0]
                raise LaunchError(f"no Ray cluster at {address}: {line}", hint=_join_hint(address)) from exc
        offered = int(self.ray.cluster_resources().get(RESOURCE, 0))
        if offered < 1:
            self.close()
            raise LaunchError(
                f"no node of the Ray cluster at {address} offers trials",
                hint=f"start each node with: ray start ... --resources '{{\"{RESOURCE}\": 1}}'",
            )
        self.limit = at_once  # --trials-at-once (None: what the nodes offer)
        self.at_once = min(at_once or offered, offered)
        self.task = self.ray.remote(max_retries=RETRIES, retry_exceptions=False)(trial_on_node)
        self.rounds = self.ray.remote(max_retries=RETRIES, retry_exceptions=False)(round_on_node)
        self.flying: dict[Any, tuple[Asked, float]] = {}  # each task in flight: its trial, its start
        self.begun: dict[Any, tuple[Begun[Any], int]] = {}  # each round begun beside them: its wave, place
        self.hold = self.ray.remote(num_cpus=0)(Hold)
        self.held: dict[str, str] = {}  # the nodes left out of the run (Ray's id): each one's reason
        self.holds: list[Any] = []  # the actors that keep them out
        self.bundle: Bundle | None = None  # the run's models, for nodes that do not see its paths
        self.probed: set[str] = set()  # the nodes asked whether they see the run (:meth:`_ship`)

    def free(self) -> int:
        return max(self.at_once - len(self.flying) - len(self.begun), 0)

    def busy(self) -> bool:
        return bool(self.flying) or bool(self.begun)

    def start(self, trials: Trials, study: Study, results: list[TrialResult]) -> None:
        self._ship(trials)
        asked = trials.ask(study)
        gpus = gpus_of(self.prep, asked.candidate)
        shipped = replace(asked, trial=cast(Any, None))  # the study stays here
        ref = self.task.options(resources={RESOURCE: 1}, num_cpus=0, num_gpus=gpus).remote(
            self.prep, trials.run_dir.path, shipped, results, self.bundle
        )
        self.flying[ref] = (asked, trials.clock())

    def wait(self, trials: Trials, study: Study) -> None:
        (ref,), _ = self.ray.wait([*self.flying, *self.begun], num_returns=1)
        if ref in self.begun:
            begun, i = self.begun.pop(ref)
            begun.ended(i, self._served(trials, [ref])[0])
            return
        asked, began = self.flying.pop(ref)
        try:
            landed: Landed = self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:  # the trial raised on its node: as here
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            tell_stopped(study, asked, cause, trials.clock() - began, trials.log(asked.number))
            raise cause from None
        except self.ray.exceptions.RayError as exc:  # its nodes were lost, every retry
            why = f"its node was lost ({type(exc).__name__}), {RETRIES} times"
            landed = Landed(Ended(failed=(why, "", False), duration_s=trials.clock() - began), "", "", "")
        asked.set({"node": landed.node})
        _keep_logs(trials.run_dir, landed.logs)
        record = trials.run_dir.record
        version = landed.version
        made = record.made if not version or "triton" in record.made else {**record.made, "triton": version}
        trials.run_dir = trials.run_dir.update(
            nodes={**record.nodes, str(asked.number): landed.node}, made=made
        )
        if landed.fault:
            self._left_out(trials, study, asked, landed, trials.clock() - began)
        else:
            trials.events.trial_finished(landed.ended.tell(study, asked))

    def _left_out(self, trials: Trials, study: Study, asked: Asked, landed: Landed, took_s: float) -> None:
        """``landed``'s node cannot serve your config: its trial fails with the node's reason
        and its config is measured again first, elsewhere; the node is held for the rest of the
        run (:meth:`_hold`). No node left: the run stops with every node's reason."""
        why = f"node {landed.node} cannot serve the model, not used again in this run: {landed.fault}"
        tail = read_tail(trials.log(asked.number), 40)
        trials.events.trial_finished(study.tell_failed(asked, why, tail, took_s, interrupted=True))
        study.again(asked)
        if landed.node_id in self.held:
            return
        self.held[landed.node_id] = f"{landed.node}: {landed.fault}"
        trials.events.said(f"node {landed.node} is left out of this run: {landed.fault}")
        left = self._hold(landed.node_id)
        if left < 1:
            reasons = "; ".join(self.held.values())
            raise YourConfigError(f"no node of the Ray cluster serves your config: {reasons}")
        self.at_once = min(self.at_once, left)

    def _hold(self, node_id: str) -> int:
        """Take the node's trial slots for good (a :class:`Hold` there), so that Ray sends it no
        task again; the slots the other nodes still offer."""
        alive = self._offering()
        offered = alive.get(node_id, 0)
        if offered:
            strategies = importlib.import_module("ray.util.scheduling_strategies")
            there = strategies.NodeAffinitySchedulingStrategy(node_id, soft=False)
            options = {"resources": {RESOURCE: offered}, "num_cpus": 0, "scheduling_strategy": there}
            self.holds.append(self.hold.options(**options).remote())
        return self._slots(alive)

    def _slots(self, alive: dict[str, int]) -> int:
        """The trial slots of the ``alive`` nodes not left out of the run."""
        return sum(slots for i, slots in alive.items() if i not in self.held)

    def each(self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J]) -> list[T]:
        """The race's rounds, each a task on a node of its own where the nodes allow (Ray's
        ``SPREAD``: rounds at once go to different nodes, so a winner wins on more than one): a
        round asks for the GPUs of its racer that needs most."""
        self._ship(trials)
        return self._served(trials, [self._round(trials, serve, job) for job in jobs])

    def begin(
        self, trials: Trials, serve: Callable[[Trials, J], T], jobs: Sequence[J],
        then: Callable[[list[T]], None],
    ) -> None:  # fmt: skip
        """As :meth:`each`, but beside the trials in flight: :meth:`wait` takes each round as it ends."""
        self._ship(trials)
        begun: Begun[T] = Begun.of(jobs, then)
        for i, job in enumerate(jobs):
            self.begun[self._round(trials, serve, job)] = (begun, i)

    def _round(self, trials: Trials, serve: Callable[[Trials, J], T], job: J) -> Any:
        """``serve`` of ``job`` started as a task: its ref."""
        return self.rounds.options(
            resources={RESOURCE: 1},
            num_cpus=0,
            num_gpus=self._round_gpus(job),
            scheduling_strategy="SPREAD",
        ).remote(self.prep, trials.run_dir.path, serve, job, self.bundle)

    def _served(self, trials: Trials, refs: Sequence[Any]) -> list[Any]:
        """The results of the round tasks ``refs``, their logs kept. Where one failed, or on a
        stop, every round in flight ends, its server with it, and the error goes on."""
        try:
            served: list[tuple[Any, dict[str, bytes]]] = self.ray.get(list(refs))
        except BaseException as exc:
            self._cancel([*refs, *self.begun])
            self.begun.clear()
            if isinstance(exc, self.ray.exceptions.RayTaskError):
                raise (exc.cause if isinstance(exc.cause, BaseException) else exc) from None
            raise
        for _, logs in served:
            _keep_logs(trials.run_dir, logs)
        return [result for result, _ in served]

    def drop(self, jobs: Sequence[Any] | None = None) -> None:
        refs = [ref for ref, (begun, i) in self.begun.items() if begun.holds(i, jobs)]
        self._cancel(refs)
        for ref in refs:
            del self.begun[ref]

    def stop(self, trials: Trials, study: Study) -> None:
        self._cancel([*self.flying, *self.begun])
        self.begun.clear()
        for asked, began in self.flying.values():
            with contextlib.suppress(Exception):
                study.tell_interrupted(asked, trials.clock() - began)
        self.flying.clear()

    def _cancel(self, refs: Sequence[Any]) -> None:
        """Stop the tasks ``refs`` as Ctrl-C stops a run: each unwinds on its node and stops its
        server. Killing a task's worker instead would kill its server's guard before the guard
        could end the server (Ray ends a dead worker's children). Waits :data:`CANCEL_S` at most.
        A task already done is not cancelled: Ray 2.60 aborts the driver when a cancel meets the
        reply of a task that just ended (its check "Tried to complete task that was not pending")."""
        if not refs:
            return
        with contextlib.suppress(Exception):
            _, refs = self.ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in refs:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
        with contextlib.suppress(Exception):
            self.ray.wait(list(refs), num_returns=len(refs), timeout=CANCEL_S)

    def _ship(self, trials: Trials) -> None:
        """Ask each node not asked yet whether it sees the run at this machine's paths; where one
        does not, pack the models the run serves and put them in Ray's object store, once
        (:mod:`autotune.shipping`), and say so in the run's record and on the console. Then count
        the trials the nodes offer: a node that joined offers its own."""
        alive = self._offering()
        self.at_once = max(1, min(self.limit or self._slots(alive), self._slots(alive)))
        new = [node for node in alive if node not in self.probed]
        if not new:
            return
        self.probed.update(new)
        run = trials.run_dir
        seen = self._everywhere(
            shipping.sees, str(self.prep.model_dir), str(run.path), run.record.run_id, nodes=new
        )
        blind = sum(not s for s in seen)
        if not blind:
            return
        shipped = dict(run.record.shipped or {})
        if self.bundle is None:
            began = time.monotonic()
            data = shipping.pack(self.prep.settings.repository, shipping.served_models(self.prep))
            self.bundle = Bundle(run.record, [self.ray.put(data)], len(data), shipping.digest_of(data))
            shipped = {"bytes": len(data), "seconds": round(time.monotonic() - began, 3), "nodes": 0}
        shipped["nodes"] = int(shipped["nodes"]) + blind
        trials.run_dir = run.update(shipped=shipped)
        joined = f"{blind} nodes that joined do not" if blind > 1 else "1 node that joined does not"
        who = f"{blind} of the cluster's {len(seen)} nodes do not" if len(self.probed) == len(new) else joined
        trials.events.said(
            f"{who} see this run's files: its models ({self.bundle.size / 2**20:.1f} MiB packed) go "
            f"through Ray's object store ({shipped['seconds']:.1f} s to pack)"
        )

    def _everywhere(self, func: Callable[..., T], *args: Any, nodes: Sequence[str] | None = None) -> list[T]:
        """``func(*args)`` on each of ``nodes`` (default: each live node that offers trials), at
        once; their answers (Ray's timeout error after :data:`CANCEL_S`)."""
        strategies = importlib.import_module("ray.util.scheduling_strategies")
        task = self.ray.remote(num_cpus=0)(func)
        offering = list(self._offering()) if nodes is None else list(nodes)
        there = [strategies.NodeAffinitySchedulingStrategy(node, soft=False) for node in offering]
        refs = [task.options(scheduling_strategy=s).remote(*args) for s in there]
        return cast(list[T], self.ray.get(refs, timeout=CANCEL_S))

    def _offering(self) -> dict[str, int]:
        """The live nodes that offer trials (Ray's id), each with its slots (:data:`RESOURCE`)."""
        nodes = (n for n in self.ray.nodes() if n.get("Alive"))
        found = {n["NodeID"]: int(n.get("Resources", {}).get(RESOURCE, 0)) for n in nodes}
        return {node: slots for node, slots in found.items() if slots}

    def _round_gpus(self, job: Any) -> int:
        """The most GPUs one racer of a race round's ``job`` runs on."""
        return max((gpus_of(self.prep, r.candidate) for r in getattr(job, "racers", ())), default=0)

    def close(self) -> None:
        """Tasks in flight cancelled (:meth:`_cancel`), the nodes left out let go, what was
        shipped to nodes removed there (their logs came back with each task), and Ray left."""
        self._cancel(list(self.flying))
        self.flying.clear()
        if self.bundle is not None:
            with contextlib.suppress(Exception):
                self._everywhere(shipping.forget, self.bundle.record.run_id)
        for hold in self.holds:
            with contextlib.suppress(Exception):
                self.ray.kill(hold)
        self.holds.clear()
        if self.started_ray:
            self.ray.shutdown()


def trial_on_node(
    prep: Prepared, run_path: Path, asked: Asked, results: list[TrialResult], bundle: Bundle | None = None
) -> Landed:
    """A Ray task: ``asked`` served and measured on this node with the run's launcher. A trial
    that failed before any server of it loaded asks whether this node serves your config
    (:func:`cannot_serve`): a node that does not is at fault, not the candidate."""
    try:
        trials = _trials_here(prep, run_path, bundle)
    except NotHere as exc:
        return _at_fault(str(exc))
    start, before = trials.clock(), shipping.logs_in(trials.run_dir.path)
    try:
        try:
            ended = trials.ended(asked, results)
        except (YourConfigError, MachineLimitError) as exc:  # this node's, not the candidate's
            landed = _at_fault(str(exc).splitlines()[0], trials.clock() - start, trials.servers.version)
        else:
            fault = ""
            if ended.failed is not None and not ended.failed[2] and not trials.started:
                fault = cannot_serve(trials, asked)
            landed = Landed(ended, node_name(), _node_id(), trials.servers.version, fault)
    finally:
        trials.close()
    return replace(landed, logs=_new_logs(trials, run_path, before))


def _at_fault(said: str, duration_s: float = 0.0, version: str = "") -> Landed:
    """A trial this node failed for a reason of its own (``said``): the trial fails with it, and
    the node is at fault."""
    ended = Ended(failed=(said, "", False), duration_s=duration_s)
    return Landed(ended, node_name(), _node_id(), version, said)


def cannot_serve(trials: Trials, asked: Asked) -> str:
    """Why this node cannot serve your config, placed as ``asked``'s candidate is (on its GPUs);
    "" when it serves it. One server started and stopped (its log ``node-check-NNN.log``)."""
    yours = walk.in_space(trials.prep.baseline, trials.prep.space)
    if asked.candidate.kind == "KIND_GPU":
        yours = replace(yours, kind="KIND_GPU", gpus=asked.candidate.gpus)
    log = trials.run_dir.log(f"node-check-{asked.number:03d}.log")
    try:
        with trials.serve(yours, log, f"node-check-{asked.number:03d}"):
            return ""
    except (LaunchError, ConfigError) as exc:
        line = failure_line(read_tail(log, None)) or str(exc).splitlines()[0]
        return f"your config does not load here either: {line}"


class Hold:
    """An actor that holds a node's trial slots (:data:`RESOURCE`) while it lives, so that Ray
    sends no trial or race round to a node left out of the run."""


def round_on_node(
    prep: Prepared, run_path: Path, serve: Callable[[Trials, J], T], job: J, bundle: Bundle | None = None
) -> tuple[T, dict[str, bytes]]:
    """A Ray task: a race round, or the open-loop check (``serve`` of ``job``), on this node; its
    result, and the logs it wrote where this node does not see the run's directory."""
    trials = _trials_here(prep, run_path, bundle)
    before = shipping.logs_in(trials.run_dir.path)
    try:
        served = serve(trials, job)
    finally:
        trials.close()
    return served, _new_logs(trials, run_path, before)


def _new_logs(trials: Trials, run_path: Path, before: set[str]) -> dict[str, bytes]:
    """The logs this task wrote, where its run directory is not the driver's (a shipped run);
    else none: the driver sees them already."""
    here = trials.run_dir.path
    return {} if here == run_path else shipping.new_logs(here, before)


def _keep_logs(run: RunDir, logs: dict[str, bytes]) -> None:
    """Write the logs a task brought back into the run's directory. A copy shorter than the one
    there is older (another task's log, read while it was written): it is not kept."""
    for name, text in logs.items():
        path = run.log(name)
        if not path.exists() or path.stat().st_size <= len(text):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text)


class NotHere(LaunchError):
    """This node sees neither the run's files at the driver's paths nor a bundle of them."""


def _trials_here(prep: Prepared, run_path: Path, bundle: Bundle | None = None) -> Trials:
    """Trials on this node: the run's launcher here, the run's directory through the shared path,
    or, where this node does not see it, the ``bundle`` unpacked here (:mod:`autotune.shipping`).
    Only the driver writes run.json: the node's copy holds a Triton version already, so serving
    does not write it (its version goes back with the trial)."""
    run_id = bundle.record.run_id if bundle is not None else ""
    if bundle is not None and not shipping.sees(str(prep.model_dir), str(run_path), run_id):
        repo, run_path = shipping.unpack(bundle, _ray().get)
        prep = shipping.here(prep, repo)
    elif not (run_path / "run.json").is_file():
        raise NotHere(
            f"this node does not see the run's files at {run_path}: share the path, or restart the run"
        )
    run = RunDir.load(run_path)
    run = replace(run, record=replace(run.record, made={**run.record.made, "triton": ""}))
    launcher = make_launcher(prep.settings.launch, run.record.run_id)
    trials = Trials(prep, LaunchedServers(prep, launcher, run.record.run_id), run, Events())
    trials.node = node_name()
    return trials


def _node_id() -> str:
    return str(_ray().get_runtime_context().get_node_id())


def node_name() -> str:
    """This node: its host and the start of Ray's node id."""
    return f"{socket.gethostname()}/{_ray().get_runtime_context().get_node_id()[:8]}"


def gpus_of(prep: Prepared, candidate: Candidate | None) -> int:
    """The GPUs a trial of ``candidate`` asks Ray for: those it lists, else (KIND_GPU on every
    GPU) as many as your server has; none on CPUs. Ray hides the rest (CUDA_VISIBLE_DEVICES)."""
    if candidate is None or candidate.kind != "KIND_GPU":
        return 0
    return len(candidate.gpus) or max(prep.server_gpus, 1)
