"""Stage a candidate: a model repository of our own that holds the candidate's config.pbtxt and
links to every other file of the user's model, which is never written.

Two things about the python backend decide the shape of a stage:

- its stub is started through a shell command line that carries the model's path unquoted,
  so a space or a non-ASCII letter anywhere in that path kills the stub and the model never
  loads. Stages therefore live under :func:`stage_root`, a folder whose path holds only
  characters any shell takes (:func:`safe_path`), wherever the run directory and the model
  repository are;
- Python writes bytecode (``__pycache__``) beside the source it imports, by the path it was
  given. A folder that holds Python sources is therefore made anew in the stage with each file
  linked one by one (:func:`mirror`), so the bytecode lands in the stage; other entries (model
  weights, tokenizers) are linked whole.

Each process's stages are in a folder of its own named after it (:class:`Stages`); a process
that was killed leaves its folder behind, and the next one removes it (:func:`reap`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import UsageError
from autotune.model_config import CONFIG_NAME, ModelConfig, write_config
from autotune.processes import Owner

WARMUP = "warmup"  # the folder Triton reads model_warmup's input_data_file from
_SAFE = re.compile(r"[A-Za-z0-9_./+@%,=:-]+")
_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_path(path: Path | str) -> bool:
    """Whether every character of the path is one a shell command line takes unquoted."""
    return bool(_SAFE.fullmatch(str(path)))


def stage_root() -> Path:
    """Where stages go: ``autotune-stage-<uid>`` in the temporary folder (:func:`safe_temp`)."""
    return safe_temp(f"autotune-stage-{os.getuid()}")


def safe_temp(name: str) -> Path:
    """``name`` in the temporary folder, or in ``/tmp`` when that folder's path is not
    :func:`safe_path`; a UsageError if neither is."""
    for base in (Path(tempfile.gettempdir()), Path("/tmp")):
        root = base / name
        if safe_path(root.resolve() if base.exists() else root):
            return root
    raise UsageError(
        f"no folder to stage models in: {tempfile.gettempdir()} has characters (a space, a non-ASCII "
        "letter) that Triton's python backend cannot take",
        hint="set TMPDIR to a folder with a plain path",
    )


@dataclass(frozen=True)
class Stages:
    """This process's stages for one run: ``<stage_root>/<run>.<pid>.<start time>/<name>``."""

    folder: Path

    @classmethod
    def for_run(cls, run_id: str) -> Stages:
        """A new folder for this process's stages of the run ``run_id`` (leftovers of processes
        that are gone removed first)."""
        root = stage_root()
        reap(root)
        me = Owner.current()
        folder = root / f"{_SLUG.sub('-', run_id).strip('-.') or 'run'}.{me.pid}.{me.started or 0}"
        for _ in range(3):  # another process may remove the empty root between our two mkdirs
            with contextlib.suppress(FileNotFoundError):
                folder.mkdir(parents=True, exist_ok=True)
                break
        return cls(folder)

    def path(self, name: str) -> Path:
        return self.folder / name

    def remove(self) -> None:
        """This process's stages gone, and the stage root too once no other process has any."""
        shutil.rmtree(self.folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # another process's stages are still there
            self.folder.parent.rmdir()


def reap(root: Path) -> list[Path]:
    """Remove the stage folders under ``root`` whose process is gone; return them."""
    gone = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        parts = folder.name.rsplit(".", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        owner = Owner(socket.gethostname(), int(parts[1]), "" if parts[2] == "0" else parts[2])
        if owner.gone():
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


def stage_model(
    source: Path, config: ModelConfig, repository: Path, warmup: Mapping[str, bytes] | None = None
) -> Path:
    """Make ``repository/<name>/`` mirror ``source`` (:func:`mirror`) with ``config`` as its
    config.pbtxt, and ``warmup``'s files (name -> bytes) in a ``warmup/`` folder of its own (a
    model folder with a ``warmup/`` of yours keeps yours: :func:`can_warm`); returns ``repository``."""
    target = repository / config.name
    mirror(source, target, skip=CONFIG_NAME)
    write_config(config, target / CONFIG_NAME)
    if warmup:
        (target / WARMUP).mkdir()
        for name, data in warmup.items():
            (target / WARMUP / name).write_bytes(data)
    return repository


def can_warm(source: Path) -> bool:
    """Whether a stage of the model folder ``source`` can hold warm-up files of ours: it has no
    ``warmup/`` of its own (which its stage links, and which is never written)."""
    return not (source / WARMUP).exists()


def stage_members(
    repository: Path, models: Iterable[str], stage: Path, configs: Mapping[str, ModelConfig]
) -> None:
    """Each of ``models`` of ``repository`` made a view in ``stage`` (:func:`mirror`), those
    ``configs`` names served with that config in place of their own (:func:`stage_model`)."""
    for name in models:
        if name in configs:
            stage_model(repository / name, configs[name], stage)
        else:
            mirror(repository / name, stage / name)


def mirror(source: Path, target: Path, skip: str = "") -> Path:
    """``target`` made anew as a view of ``source``: each entry linked (but ``skip`` and hidden
    ones), except folders that hold Python sources, which are made anew the same way; returns
    ``target``."""
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for entry in sorted(source.iterdir()):
        if entry.name == skip or entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        real = entry.resolve()
        if real.is_dir() and _has_python(real):
            mirror(real, target / entry.name)
        else:
            os.symlink(real, target / entry.name)
    return target


def _has_python(folder: Path) -> bool:
    with contextlib.suppress(OSError):
        return any(folder.rglob("*.py"))
    return False
