"""Stages (autotune.staging): a safe place whatever the user's paths, Python folders made anew
so that bytecode is not written beside the user's sources, and leftovers of dead runs removed."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from autotune import staging
from autotune.model_config import load_config
from autotune.staging import Stages, safe_path, stage_model
from tests.conftest import MODELS


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_python_folder_is_made_anew_and_other_entries_linked(tmp_path: Path) -> None:
    source = tmp_path / "my models ü" / "toy"
    (source / "1" / "helpers").mkdir(parents=True)
    (source / "1" / "model.py").write_text("x = 1\n")
    (source / "1" / "helpers" / "util.py").write_text("y = 2\n")
    (source / "assets").mkdir()
    (source / "assets" / "vocab.txt").write_text("a\n")
    (source / "config.pbtxt").write_text((MODELS / "toy" / "config.pbtxt").read_text())
    before = _tree(source)
    stage = stage_model(source, load_config(source.parent, "toy"), tmp_path / "stage") / "toy"
    assert (stage / "1").is_dir() and not (stage / "1").is_symlink()
    assert (stage / "1" / "model.py").resolve() == (source / "1" / "model.py").resolve()
    assert (stage / "1" / "helpers").is_dir() and not (stage / "1" / "helpers").is_symlink()
    assert (stage / "assets").is_symlink()  # no Python below: linked whole
    assert not (stage / "config.pbtxt").is_symlink()  # the candidate's own
    # Python writes bytecode beside the path it imports: the stage's, not the user's folder
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(["python3", "-c", "import model"], cwd=stage / "1", check=True, env=env)
    assert (stage / "1" / "__pycache__").is_dir()
    assert _tree(source) == before


def test_stages_live_under_a_path_any_shell_takes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spaced = tmp_path / "temp dir é"
    spaced.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spaced))
    root = staging.stage_root()
    assert safe_path(root) and not str(root).startswith(str(spaced))
    assert not safe_path("/tmp/a b") and not safe_path("/tmp/é") and safe_path("/tmp/autotune-stage-0/x.1.2")


def test_the_folders_of_dead_processes_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(staging, "stage_root", lambda: tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f"20261127-101010.{dead.pid}.1").mkdir()
    mine = Stages.for_run("my run")
    assert not (tmp_path / f"20261127-101010.{dead.pid}.1").exists()
    assert mine.folder.is_dir() and mine.folder.name.startswith(f"my-run.{os.getpid()}.")
    mine.remove()
    assert not mine.folder.exists()


def test_the_python_backend_is_copied_where_its_stub_can_be_started(tmp_path: Path) -> None:
    """A cache folder (XDG_CACHE_HOME, ~/.cache) with a space or a non-ASCII letter: the backend
    folder, whose stub the python backend starts through a shell line, goes to a plain one."""
    pytest.importorskip("pytriton")
    from autotune.launch.local import find_installation

    installation = find_installation(cache_dir=tmp_path / "my cache é")
    assert safe_path(installation.backend_dir) and (installation.backend_dir / "python").is_dir()
    assert find_installation(cache_dir=tmp_path / "plain").backend_dir.is_relative_to(tmp_path / "plain")
