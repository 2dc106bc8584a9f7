"""Shared fixtures: copies of the test model repository and small search spaces."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

MODELS = Path(__file__).parent / "models"


@pytest.fixture
def toy_repo(tmp_path: Path) -> Path:
    """A private copy of tests/models (the numpy-only `toy` model)."""
    repo = tmp_path / "repo"
    shutil.copytree(MODELS, repo, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


@pytest.fixture
def small_space(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(
        "instance_group:\n  count: [1, 2]\nmax_batch_size: [8]\n"
        "dynamic_batching:\n  enabled: [true, false]\n  max_queue_delay_microseconds: [0]\n"
        "load:\n  concurrency: {min: 1, max: 16}\n",
        encoding="utf-8",
    )
    return path


def servers_under(marker: Path) -> list[int]:
    """Pids of tritonserver processes whose command line names a path under ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "tritonserver" in cmd and str(marker) in cmd:
                found.append(int(proc.name))
    return found
