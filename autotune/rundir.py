"""A run directory and its typed record, ``run.json``: the one place that reads or writes it.

    reports/<model>/<run-id>/
      run.json          RunRecord: settings that must not change on --resume, the launcher and
                        its options, the run's options (budget, margin, windows) that --resume
                        keeps, the owner process, the winner and the verifications
      study.db          the Optuna study (unless --storage names another)
      logs/             server logs (candidates are staged elsewhere: autotune.staging)
      reference.npz     your config's answers to the output check's requests (autotune.outputs)
      winner.pbtxt  winner.diff  report.html  trials.csv

The tuner creates and updates it, ``autotune report`` (:mod:`autotune.reload`) and ``autotune
apply`` (:mod:`autotune.writeback`) load it; every write is atomic, so a run killed at any
instant leaves the previous record whole.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import AutotuneError, UsageError
from autotune.files import write_text_atomic
from autotune.objective import Scoring, Sla
from autotune.outputs import Reference
from autotune.pipeline import TunedStep
from autotune.processes import Owner
from autotune.results import OpenLoopCheck, RunInfo, Verification
from autotune.settings import CoModel, Launch, RunOptions, RunSettings, Traffic, Workload

RUN_FILE = "run.json"
WINNER_CONFIG = "winner.pbtxt"
WINNER_DIFF = "winner.diff"
REFERENCE_FILE = "reference.npz"  # your config's answers to the output check's requests


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    model: str
    repository: Path  # resolved
    sla: Sla
    launch: Launch
    protocol: str
    study_name: str
    storage: str | None  # the study's URL with any password hidden; None: study.db here
    original_config: str  # config.pbtxt text when the run started
    original_digest: str  # its sha256: write-back refuses a config changed since
    started: str  # ISO time
    owner: Owner | None = None  # the process running it (None once it finished)
    finished: str = ""
    winner: int | None = None  # trial number
    verifications: tuple[Verification, ...] = ()
    workload: Workload = field(default_factory=Workload)  # what each request carried
    traffic: Traffic = field(default_factory=Traffic)  # closed loop or arrivals at a rate
    open_loop: OpenLoopCheck | None = None  # a concurrency run: the winner's sustained arrival rate
    scoring: Scoring = field(default_factory=Scoring)  # goodput or goodput per GPU: decided once, kept
    options: RunOptions = field(default_factory=RunOptions)  # budget, margin, windows: --resume keeps them
    searched_s: float = 0.0  # the search's time so far, over every resume: its time budget counts it
    # how the run was made, as the report's header says it: the command line, autotune's and
    # Triton's versions, the model's backend, the machine's CPU and GPUs, the rules
    made: dict[str, str] = field(default_factory=dict)
    step: str = ""  # the ensemble's step whose config was tuned ("": the model's own)
    composing: tuple[str, ...] = ()  # the models a BLS model calls (--composing-models)
    # a BLS round tuning a model it calls: the BLS model's config.pbtxt's sha256 as the round
    # began (apply writes it with the instances it was served with: pipeline.caller_served)
    caller_digest: str = ""
    rounds: bool = False  # a round of a run tuned in rounds (a pipeline's steps, models on one server)
    tuned_steps: tuple[TunedStep, ...] = ()  # the steps earlier rounds tuned, served with their winners
    beside: tuple[CoModel, ...] = ()  # models served beside the tuned one (--models)
    weight: float = 1.0  # the tuned model's weight in the objective, with models beside it
    # the winner shown ahead of your config in the race, raced beside it (results.gain); None: no
    # verdict (your config did not race); False: keep your config, apply refuses without --force
    shown_better: bool | None = None
    nodes: dict[str, str] = field(default_factory=dict)  # on a Ray cluster: each trial's node, by number
    # on a Ray cluster whose nodes share no path with this machine: the models shipped through
    # Ray's object store (bytes, seconds to pack and put them, nodes that needed them)
    shipped: dict[str, float] = field(default_factory=dict)

    @property
    def tuned(self) -> str:
        """The model whose config the run tunes and writes back: the step, else the model."""
        return self.step or self.model

    def differences(self, settings: RunSettings) -> list[str]:
        """What a command would change of this run if it continued it (nothing may change: the
        trials measured so far would not compare with the next ones), as "what: was -> now"."""
        s, workload = settings, settings.workload
        pairs = [
            ("model", self.model, s.model),
            ("step", self.step, s.step),
            ("composing models", ",".join(self.composing), ",".join(s.composing)),
            ("steps tuned before", _steps(self.tuned_steps), _steps(s.tuned_steps)),
            ("models beside", _beside(self.beside, self.weight), _beside(s.beside, s.weight)),
            ("repository", str(self.repository), str(s.repository.resolve())),
            ("SLA", self.sla.label, s.sla.label),
            ("launcher", self.launch.to_json(), s.launch.to_json()),
            ("protocol", self.protocol, s.protocol),
            ("workload", self.workload.label, workload.label),
            ("traffic", self.traffic.to_json(), s.traffic.to_json()),
        ]
        if (
            self.workload != workload and self.workload.label == workload.label
        ):  # a file of that name elsewhere
            pairs.append(("workload", self.workload.to_json(), workload.to_json()))
        return [f"{what}: {was} -> {now}" for what, was, now in pairs if was != now]

    def running_elsewhere(self) -> bool:
        """Another process of this host that is still alive runs it. A run last owned on another
        host (a container, a renamed machine, a shared disk) cannot be looked at: taken as stopped."""
        owner = self.owner
        if owner is None or owner.is_me() or owner.host != socket.gethostname():
            return False
        return not owner.gone()

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "model": self.model,
            "step": self.step,
            "composing": list(self.composing),
            "caller_digest": self.caller_digest,
            "rounds": self.rounds,
            "tuned_steps": [t.to_json() for t in self.tuned_steps],
            "beside": [c.to_json() for c in self.beside],
            "weight": self.weight,
            "repository": str(self.repository),
            "sla": self.sla.to_json(),
            "scoring": self.scoring.to_json(),
            "launcher": self.launch.to_json(),
            "protocol": self.protocol,
            "workload": self.workload.to_json(),
            "traffic": self.traffic.to_json(),
            "study_name": self.study_name,
            "storage": self.storage,
            "original_config": self.original_config,
            "original_digest": self.original_digest,
            "started": self.started,
            "owner": self.owner.text() if self.owner else None,
            "finished": self.finished,
            "winner": self.winner,
            "verifications": [v.to_json() for v in self.verifications],
            "open_loop": self.open_loop.to_json() if self.open_loop else None,
            "options": self.options.to_json(),
            "searched_s": round(self.searched_s, 3),
            "made": dict(self.made),
            "shown_better": self.shown_better,
            **({"nodes": dict(self.nodes)} if self.nodes else {}),
            **({"shipped": dict(self.shipped)} if self.shipped else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        """Read :meth:`to_json` back; also a record of before 0.2 (a bare launcher name, the
        owner as ``owner_pid``, the verifications kept in the study)."""
        owner = data.get("owner", data.get("owner_pid"))
        return cls(
            run_id=str(data["run_id"]),
            model=str(data["model"]),
            step=str(data.get("step", "")),
            composing=tuple(str(m) for m in data.get("composing", ())),
            caller_digest=str(data.get("caller_digest", "")),
            rounds=bool(data.get("rounds", False)),
            tuned_steps=tuple(TunedStep.from_json(t) for t in data.get("tuned_steps", ())),
            beside=tuple(CoModel.from_json(c) for c in data.get("beside", ())),
            weight=float(data.get("weight", 1.0)),
            repository=Path(data["repository"]),
            sla=Sla.from_json(data["sla"]),
            scoring=Scoring.from_json(data.get("scoring")),
            launch=Launch.from_json(data.get("launcher") or "local"),
            protocol=str(data.get("protocol", "http")),
            workload=Workload.from_json(data.get("workload")),
            traffic=Traffic.from_json(data.get("traffic")),
            open_loop=OpenLoopCheck.from_json(data["open_loop"]) if data.get("open_loop") else None,
            study_name=str(data["study_name"]),
            storage=data.get("storage"),
            original_config=str(data["original_config"]),
            original_digest=str(data["original_digest"]),
            started=str(data["started"]),
            owner=Owner.parse(owner) if isinstance(owner, str | int) else None,
            finished=str(data.get("finished") or ""),
            winner=data.get("winner"),
            verifications=tuple(Verification.from_json(v) for v in data.get("verifications", [])),
            options=RunOptions.from_json(data.get("options")),
            searched_s=float(data.get("searched_s", 0.0)),
            shown_better=data.get("shown_better"),
            made={str(k): str(v) for k, v in (data.get("made") or {}).items()},
            nodes={str(k): str(v) for k, v in (data.get("nodes") or {}).items()},
            shipped={str(k): float(v) for k, v in (data.get("shipped") or {}).items()},
        )


@dataclass(frozen=True)
class RunDir:
    """A run directory with the record it holds (a new value after each :meth:`update`)."""

    path: Path
    record: RunRecord

    @staticmethod
    def new_path(reports_dir: Path, model: str, run_id: str) -> Path:
        """A path for a new run that no run uses yet (a suffix when two start in one second)."""
        path, suffix = reports_dir / model / run_id, 1
        while path.exists():
            suffix += 1
            path = reports_dir / model / f"{run_id}-{suffix}"
        return path

    @classmethod
    def create(cls, path: Path, record: RunRecord) -> RunDir:
        path.mkdir(parents=True)
        return cls(path, record).save()

    @classmethod
    def load(cls, path: Path) -> RunDir:
        try:
            data = json.loads((path / RUN_FILE).read_text(encoding="utf-8"))
            return cls(path, RunRecord.from_json(data))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, AutotuneError) as exc:
            raise UsageError(f"{path}: not a run directory ({exc})") from exc

    def save(self) -> RunDir:
        write_text_atomic(self.path / RUN_FILE, json.dumps(self.record.to_json(), indent=2))
        return self

    def update(self, **changes: Any) -> RunDir:
        return replace(self, record=replace(self.record, **changes)).save()

    def log(self, name: str) -> Path:
        return self.path / "logs" / name

    def save_reference(self, reference: Reference) -> None:
        """Keep your config's answers to the output check's requests (atomically; each writer its
        own temporary file, since Ray nodes on one machine may write them at once)."""
        tmp = self.path / f".{REFERENCE_FILE}.{os.getpid()}.{uuid.uuid4().hex}.tmp.npz"
        np.savez(tmp, **reference.arrays())
        tmp.replace(self.path / REFERENCE_FILE)

    def reference(self) -> Reference | None:
        """The answers :meth:`save_reference` kept; None when there are none (or they cannot be read)."""
        try:
            with np.load(self.path / REFERENCE_FILE, allow_pickle=True) as data:
                return Reference.from_arrays({key: data[key] for key in data.files})
        except (OSError, ValueError):
            return None

    def study_url(self, storage: str | None = None) -> str:
        """Where the study lives: ``storage`` (the full URL, password included) when given,
        else the recorded one, else the SQLite file in this directory."""
        url = storage or self.record.storage
        if url and "***" in url:
            raise UsageError(f"{self.path}: the study lives in {url}; give --storage with the password")
        return url or f"sqlite:///{(self.path / 'study.db').resolve()}"

    def info(self) -> RunInfo:
        """The summary the report and the console read."""
        r = self.record
        winner_config = self.path / WINNER_CONFIG
        diff = self.path / WINNER_DIFF
        chosen = r.winner is not None and winner_config.is_file()
        return RunInfo(
            run_id=r.run_id,
            model=r.model,
            sla=r.sla,
            launcher=r.launch.kind,
            original_config=r.original_config,
            started=r.started,
            finished=r.finished,
            winner=r.winner,
            winner_config=winner_config.read_text(encoding="utf-8") if chosen else "",
            winner_diff=diff.read_text(encoding="utf-8") if chosen and diff.is_file() else "",
            verifications=r.verifications,
            workload=r.workload.label,
            traffic=r.traffic.label,
            open_loop_run=r.traffic.open_loop,
            open_loop=r.open_loop,
            scoring=r.scoring,
            docker_gpus=r.launch.docker.gpus if r.launch.kind == "docker" else "",
            made=tuple(r.made.items()),
        )


def _steps(tuned: tuple[TunedStep, ...]) -> str:
    return ", ".join(f"{t.model} ({Path(t.run).name})" for t in tuned) or "none"


def _beside(beside: tuple[CoModel, ...], weight: float) -> str:
    if not beside:
        return "none"
    return f"weight {weight:g} beside " + ", ".join(sorted(c.label for c in beside))  # in any order


def find_unfinished(settings: RunSettings) -> Path | None:
    """The newest run under the settings' reports folder that stopped before finishing and that
    these settings would continue unchanged (:meth:`RunRecord.differences`; without ``--step``,
    the step the run tunes, as it chose it); runs it cannot read are skipped."""
    folder = settings.reports_dir / settings.model
    for run_file in sorted(folder.glob(f"*/{RUN_FILE}"), reverse=True) if folder.is_dir() else []:
        try:
            record = RunDir.load(run_file.parent).record
        except UsageError:
            continue
        stopped = not record.finished and not record.running_elsewhere()
        # no --step: the run's step, as it chose it, and (a round) the steps earlier rounds tuned
        chosen = replace(settings, step=record.step, tuned_steps=record.tuned_steps)
        same = settings if settings.step else chosen
        if stopped and not record.differences(same):
            return run_file.parent
    return None
