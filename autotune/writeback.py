"""Write the winner back: atomic, with a backup and a diff, verified by loading it in Triton.

Refused when the repository's config.pbtxt changed since the run started (someone else's
edit would be lost). The backup is ``config.pbtxt.autotune-<run-id>.bak`` beside the config
and a copy in the run directory; ``undo`` restores it. A run tuned in rounds (a pipeline's
steps, several models on one server) writes its last round's winner and every earlier round's,
each checked and backed up the same way, and ``undo`` restores them all: never one changed
without the others. Every write, restores included, is atomic
(:func:`autotune.files.copy_atomic`): a reader never sees half a config.

Only the fields the winner changes are rewritten (:func:`autotune.config_edit.edit_in_place`):
the rest of the file (comments, order, layout) stays byte for byte, and each diff is of the
file's text as it was against the text as written.

The written config is verified on the kind of server the run measured on: the launcher and
options recorded in the run directory (a local tritonserver, a container of the run's image,
or the remote server, which loads it through its repository API and then goes back to its
own). That launcher is set up before anything is written: if it cannot be (no engine, no
server there), nothing is written and the error says so. If the written config does not
load, the original is put back before the error is raised.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import model_config as mcfg
from autotune import trt_build
from autotune.config_edit import edit_in_place, text_diff
from autotune.errors import AutotuneError, UsageError, WriteBackError, WrongOutputError
from autotune.files import copy_atomic, file_digest, write_text_atomic
from autotune.launch import Launcher, make_launcher
from autotune.loadgen import LoadGenerator
from autotune.outputs import compare, parse_tolerance
from autotune.pipeline import BLS, Pipeline, read_pipeline, with_caller
from autotune.rundir import WINNER_CONFIG, RunDir, RunRecord
from autotune.staging import Stages, mirror

STATE_FILE = "writeback.json"


@dataclass(frozen=True)
class Written:
    """One config written back: where, its backup, and the diff of the file's text as it was
    against the text as written."""

    path: Path
    backup: Path
    diff: str


@dataclass(frozen=True)
class WriteBackResult:
    """What a write-back wrote: the run's own config first, then (a run tuned in rounds) each
    model an earlier round tuned."""

    written: tuple[Written, ...]
    verified_on: str = ""  # the server that loaded the written configs ("" when not verified)

    @property
    def path(self) -> Path:
        return self.written[0].path

    @property
    def backup(self) -> Path:
        return self.written[0].backup

    @property
    def diff(self) -> str:
        return self.written[0].diff

    @property
    def verified(self) -> bool:
        return bool(self.verified_on)


@dataclass(frozen=True)
class _Target:
    """A config the write-back replaces: its file, the config written there, the sha256 that
    file had when the run (or its round) began, and where its original is kept in the run."""

    path: Path
    config: mcfg.ModelConfig
    digest: str
    original: str  # file name in the run directory
    backup: Path


def _targets(run_dir: Path, record: RunRecord) -> list[_Target]:
    """The run's own winner, then each model earlier rounds tuned (:attr:`RunRecord.tuned_steps`),
    and a BLS model with the instances it was served with (:func:`autotune.pipeline.with_caller`)."""
    winner_file = run_dir / WINNER_CONFIG
    own = mcfg.parse_config(winner_file.read_text(encoding="utf-8"), str(winner_file))
    found = {record.tuned: (own, record.original_digest, "original.pbtxt")}
    for t in record.tuned_steps:
        config = mcfg.parse_config(t.config, f"{t.run} ({t.model})")
        found[t.model] = (config, t.digest, f"original-{t.model}.pbtxt")
    if record.caller_digest:  # a BLS model, served with as many instances as the models it calls
        bls = Pipeline(record.model, BLS, record.composing)
        served = with_caller(bls, record.repository, {m: c for m, (c, _, _) in found.items()})
        if record.model in served:
            _, digest, original = found.get(
                record.model, (None, record.caller_digest, f"original-{record.model}.pbtxt")
            )
            found[record.model] = (served[record.model], digest, original)
    backup = f"{mcfg.CONFIG_NAME}.autotune-{record.run_id}.bak"
    targets = []
    for model, (config, digest, original) in found.items():
        path = record.repository / model / mcfg.CONFIG_NAME
        targets.append(_Target(path, config, digest, original, path.with_name(backup)))
    return targets


def models_written(run_dir: Path, record: RunRecord) -> list[str]:
    """The models whose configs :func:`write_back` would replace (the run's winner first)."""
    return [t.path.parent.name for t in _targets(run_dir, record)]


def write_back(run_dir: Path, *, verify: bool = True, force: bool = False) -> WriteBackResult:
    """Write the run's winner (and, after rounds, every earlier round's) over the repository's
    configs: each checked unchanged since its run began and its folder writable before any is
    written, each backed up, then each replaced; verified by loading the whole model, every
    config put back if it does not load."""
    run = RunDir.load(run_dir)
    record = run.record
    if record.winner is None or not (run_dir / WINNER_CONFIG).is_file():
        raise UsageError(f"{run_dir}: the run has no winner to apply (unfinished, or no config met the SLA)")
    if record.shown_better is False and not force:
        raise WriteBackError(
            f"{run_dir}: keep your config: the race did not show its winner better than your config, "
            "raced beside it; nothing was written",
            hint="--force writes the winner all the same",
        )
    targets = _targets(run_dir, record)
    launcher = _verifier(record) if verify else None  # before anything is written
    done = {t.path for t in targets if _already_written(run_dir, t)}  # a write-back stopped after those
    for t in targets:
        if t.path not in done:
            _check_unchanged(t.path, t.digest)
            _check_writable(t.path.parent, run_dir)
    written = []
    for t in targets:
        before = _text_of(t.backup if t.path in done else t.path)
        after = edit_in_place(before, t.config, str(t.path))
        if t.path not in done:
            with _named(t.path):
                copy_atomic(t.path, t.backup)
                copy_atomic(t.path, run_dir / t.original)
                _save_state(run_dir, targets)
                write_text_atomic(t.path, after)
        written.append(Written(t.path, t.backup, text_diff(before, after)))
    verified_on = ""
    if launcher is not None:
        try:
            verified_on = _load_once(launcher, run, targets[0].config)
        except AutotuneError as exc:
            for t in targets:
                copy_atomic(t.backup, t.path)
            raise WriteBackError(
                f"the written config did not load and answer as your config does, so the original was "
                f"restored: {exc}"
            ) from exc
    return WriteBackResult(tuple(written), verified_on)


def _verifier(record: RunRecord) -> Launcher[Any]:
    """The run's own launcher, ready to serve (or a WriteBackError saying why it cannot be)."""
    try:
        return make_launcher(record.launch, record.run_id)
    except AutotuneError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WriteBackError(
            f"cannot verify the config with the run's {record.launch.kind} launcher, so nothing was "
            f"written: {first}",
            hint="make that launcher work here, or give --no-verify to write without loading it",
        ) from exc


def _load_once(launcher: Launcher[Any], run: RunDir, config: mcfg.ModelConfig) -> str:
    """Serve the model from its real folder (a stage that links to each of its files, the
    written config.pbtxt included: :func:`autotune.staging.mirror`) until it is ready, and send
    it the run's workload (LoadGenerator.preflight: each distinct shape, then a spread; the
    written config must answer what the user sends) and the output check's requests (its answers
    must be your config's, as the run recorded them: :func:`_check_answers`); the server's
    description. A ``config`` with TensorRT gets the default engine build time."""
    model = run.record.model
    stages = Stages.for_run(run.record.run_id)
    view = stages.path("writeback")
    found = read_pipeline(run.record.repository, model, run.record.composing)
    beside = tuple(c.model for c in run.record.beside)  # several models on one server: all of them
    for name in (*(found.models if found else (model,)), *beside):  # a pipeline: every model of it
        mirror(run.record.repository / name, view / name)
    try:
        with trt_build.serving(launcher, view, model, run.log("writeback-verify.log"), config) as server:
            described = server.description or "tritonserver"
            workload = run.record.workload
            if workload.path is not None and not workload.path.exists():
                return f"{described} (loaded; not sent the workload: {workload.path} is gone)"
            gen = LoadGenerator.connect(server.host, server.http_port, server.grpc_port, model,
                                        workload=workload, preflight=True)  # fmt: skip
            return f"{described}, answering {workload.label}{_check_answers(gen, run, config)}"
    finally:
        stages.remove()


def _check_answers(gen: LoadGenerator, run: RunDir, config: mcfg.ModelConfig) -> str:
    """The written config's answers against your config's (:mod:`autotune.outputs`), as the run
    checked every candidate: a WrongOutputError when they differ; what was checked, for people."""
    options = run.record.options
    reference = run.reference() if options.output_check else None
    if reference is None:
        return "" if not options.output_check else " (the run kept no answers to check against)"
    sample = gen.check_sample(run.record.workload, options.seed or 0, len(reference.answers))
    answers, _ = gen.answers([payload for payload, _ in sample])
    fp16 = mcfg.candidate_of(config).trt_fp16
    tolerance = parse_tolerance(options.output_tolerance)
    found = compare(reference.answers, answers, reference.datatypes, tolerance, fp16, [s for _, s in sample])
    if found is not None:
        raise WrongOutputError(found.line)
    return f", {len(sample)} answers as your config's"


def _already_written(run_dir: Path, target: _Target) -> bool:
    """A write-back of this run that was stopped after ``target``'s replace (so: not again)."""
    if not (run_dir / STATE_FILE).is_file() or not target.backup.is_file() or not target.path.is_file():
        return False
    same = _normal(target.path.read_text(encoding="utf-8")) == mcfg.config_text(target.config)
    return same and file_digest(target.backup) == target.digest


def undo(run_dir: Path) -> tuple[list[Path], bool]:
    """Put back every config the write-back replaced: their paths, and whether any had to be
    (False: each already holds its original, an undo done before). Refused, nothing restored,
    when a written config changed since."""
    state_path = run_dir / STATE_FILE
    if not state_path.is_file():
        raise UsageError(f"{run_dir}: nothing was written back from this run")
    state = json.loads(state_path.read_text(encoding="utf-8"))
    entries = state.get("targets") or [  # a write-back of before 0.4: one config, the run's winner
        {"target": state["target"], "backup": state["backup"],
         "written": (run_dir / WINNER_CONFIG).read_text(encoding="utf-8")}
    ]  # fmt: skip
    todo = []
    for entry in entries:
        target, backup = Path(entry["target"]), Path(entry["backup"])
        if not backup.is_file():
            raise WriteBackError(f"backup {backup} is gone; the original is also in {run_dir}")
        if target.is_file() and target.read_bytes() == backup.read_bytes():
            continue
        if target.exists() and _normal(target.read_text(encoding="utf-8")) != _normal(entry["written"]):
            raise WriteBackError(
                f"{target} changed after the write-back; restore {backup} by hand if you mean it"
            )
        todo.append((target, backup))
    for target, backup in todo:
        with _named(target):
            copy_atomic(backup, target)
    return [Path(e["target"]) for e in entries], bool(todo)


def _check_writable(folder: Path, run_dir: Path) -> None:
    """Files can be made in the model's folder and the run directory (a read-only mount refuses
    even root, which ``os.access`` would not tell): a WriteBackError naming the one that cannot,
    before anything is written."""
    for place in (folder, run_dir):
        try:
            fd, probe = tempfile.mkstemp(prefix=".autotune-", dir=place)
        except OSError as exc:
            raise WriteBackError(
                f"cannot write in {place} ({exc.strerror}): nothing was changed",
                hint="make that folder writable (a read-only mount or permissions), then apply again",
            ) from exc
        os.close(fd)
        os.unlink(probe)


@contextmanager
def _named(target: Path) -> Iterator[None]:
    """An OSError while writing becomes a WriteBackError that names the file and what was
    missing (space, permission); every write before the config's own is of a new file, and that
    one is atomic, so ``target`` keeps its old content."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or target
        raise WriteBackError(
            f"could not write {where} ({exc.strerror}); {target} is unchanged",
            hint="free space or fix permissions on that disk, then apply again",
        ) from exc


def _check_unchanged(target: Path, digest: str) -> None:
    if not target.is_file():
        raise WriteBackError(f"{target} no longer exists")
    if file_digest(target) != digest:
        raise WriteBackError(
            f"{target} changed since the run started; refusing to overwrite it",
            hint="re-run the tuning on the current config, or copy winner.pbtxt by hand",
        )


def _save_state(run_dir: Path, targets: list[_Target]) -> None:
    """What :func:`undo` restores: every target, its backup and the config written there
    (saved before the first replace)."""
    entries = [
        {"target": str(t.path), "backup": str(t.backup), "written": mcfg.config_text(t.config)}
        for t in targets
    ]
    write_text_atomic(run_dir / STATE_FILE, json.dumps({"targets": entries}, indent=2))


def _text_of(path: Path) -> str:
    """A config's text as it is on disk, line endings included (nothing translated)."""
    return path.read_bytes().decode("utf-8")


def _normal(text: str) -> str:
    return mcfg.config_text(mcfg.parse_config(text))
