"""The run's files for Ray nodes that share no path with the driver.

Where a node does not see the run (:func:`sees`), the models the run serves are packed once
(:func:`pack`), put in Ray's object store, and unpacked once on each such node
(:func:`unpack`), beside a run directory of the node's own, under :func:`root`. The logs a task
writes there go back with it (:func:`new_logs`), and what it measured; the output check's
reference stays on the node. When the run ends, :func:`forget` removes it all.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.model_config import CONFIG_NAME
from autotune.prepare import Prepared
from autotune.rundir import RUN_FILE, RunDir, RunRecord


@dataclass(frozen=True)
class Bundle:
    """The models a run serves, packed (``ref``: Ray's reference to the bytes, in a list so that a
    node fetches them only when it needs them), and the run's record, for a run directory of a
    node's own."""

    record: RunRecord
    ref: list[Any]
    size: int
    digest: str


def served_models(prep: Prepared) -> list[str]:
    """The model folders the run serves: the tuned one, a pipeline's models, the models beside it."""
    s = prep.settings
    names = [
        prep.model_dir.name,
        *(prep.pipeline.models if prep.pipeline else ()),
        *(c.model for c in s.beside),
    ]
    return list(dict.fromkeys(names))


def sees(model_dir: str, run_path: str, run_id: str) -> bool:
    """Whether this machine sees the run at the driver's paths: the model's folder with its
    config, and the run's directory with its record."""
    run_file = Path(run_path) / RUN_FILE
    try:
        return (Path(model_dir) / CONFIG_NAME).is_file() and f'"{run_id}"' in run_file.read_text("utf-8")
    except OSError:
        return False


def pack(repository: Path, models: Sequence[str]) -> bytes:
    """The ``models`` folders of ``repository`` as a gzipped tar (links followed)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1, dereference=True) as tar:
        for name in models:
            tar.add(repository / name, arcname=f"repo/{name}")
    return buffer.getvalue()


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def root() -> Path:
    """Where this machine keeps the runs shipped to it."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autotune" / "shipped"


def unpack(bundle: Bundle, fetch: Callable[[Any], bytes], where: Path | None = None) -> tuple[Path, Path]:
    """The run's models on this machine, and its run directory here: made once from ``bundle``
    (``fetch``: its bytes from the reference); later calls, from any process, find them made."""
    folder = (where or root()) / bundle.record.run_id
    repo, run = folder / f"repo-{bundle.digest[:12]}", folder / "run"
    folder.mkdir(parents=True, exist_ok=True)
    if not (run / RUN_FILE).exists():
        with contextlib.suppress(FileExistsError):  # another process made it first
            RunDir.create(run, bundle.record)
    if repo.is_dir():  # renamed in whole: complete
        return repo, run
    made = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=folder))
    try:
        with tarfile.open(fileobj=io.BytesIO(fetch(bundle.ref[0])), mode="r:gz") as tar:
            for member in tar.getmembers():  # files and folders under repo/, as pack made them
                if not (member.isfile() or member.isdir()) or not _inside(member.name):
                    raise ValueError(f"the shipped run holds an entry it should not: {member.name!r}")
            tar.extractall(made)
        with contextlib.suppress(OSError):  # another process made it first: keep theirs
            (made / "repo").rename(repo)
    finally:
        shutil.rmtree(made, ignore_errors=True)
    return repo, run


def forget(run_id: str, where: Path | None = None) -> int:
    """Remove what this machine keeps of run ``run_id``: the models it unpacked, and its run
    directory (the logs went back with each task). Returns how many model copies it removed."""
    folder = (where or root()) / run_id
    copies = len(list(folder.glob("repo-*")))
    shutil.rmtree(folder, ignore_errors=True)
    return copies


def logs_in(run: Path) -> set[str]:
    """The names of the logs in run directory ``run``."""
    folder = run / "logs"
    return {p.name for p in folder.iterdir() if p.is_file()} if folder.is_dir() else set()


def new_logs(run: Path, before: set[str]) -> dict[str, bytes]:
    """The logs in run directory ``run`` that are not among ``before``, with their bytes."""
    return {name: (run / "logs" / name).read_bytes() for name in sorted(logs_in(run) - before)}


def _inside(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and parts[0] == "repo" and ".." not in parts and not Path(name).is_absolute()


def here(prep: Prepared, repo: Path) -> Prepared:
    """``prep`` reading the models unpacked in ``repo``."""
    settings = replace(prep.settings, repository=repo)
    return replace(prep, settings=settings, model_dir=repo / prep.model_dir.name)
