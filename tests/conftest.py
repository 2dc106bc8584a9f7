"""Shared fixtures and helpers: copies of the test model repository, small search spaces,
the common `autotune run` arguments for the toy model."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from autotune.launch import Server

MODELS = Path(__file__).parent / "models"


def pytest_configure(config: pytest.Config) -> None:
    """The suite's runs take a measurement lock of their own (autotune.hostlock), not the
    machine's: a run of a person beside the suite neither fails its tests nor waits for them.
    The lock's own tests name theirs."""
    lock = Path(tempfile.mkdtemp(prefix="autotune-tests-")) / "lock"
    os.environ.setdefault("AUTOTUNE_LOCK_FILE", str(lock))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used a ``server`` fixture reports whether that server still runs and
    the end of its log: a server that died under a test (a crash, or a signal from elsewhere)
    tells which, where only a refused connection would show."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    server = getattr(item, "funcargs", {}).get("server")
    if report.failed and isinstance(server, Server):
        state = "still running" if server.alive() else "gone"
        report.sections.append(("server", f"{server.description}: {state}\n{server.log_tail(40)}"))


CLI = [sys.executable, "-m", "autotune.cli"]  # the command line, in a process of its own


def toy_run_args(repo: Path, space: Path, reports: Path, *extra: str) -> list[str]:
    """`autotune run` on the toy model with short windows and one finalist, without the winner's
    open-loop check (one test asks for it): what the end-to-end, fault and distributed tests
    share (they add budgets, seeds, storage)."""
    return ["run", "--model", "toy", "--model-repository", str(repo), "--sla-p95-ms", "60",
            "--reports-dir", str(reports), "--search-space", str(space),
            "--window", "0.5", "--finalists", "1", "--no-open-loop-check", *extra]  # fmt: skip


def files_of(folder: Path) -> dict[Path, bytes]:
    """Every file under ``folder`` and its bytes: a repository before and after a command."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def changed_files(folder: Path, before: dict[Path, bytes]) -> list[Path]:
    """The files under ``folder`` that are new or differ from ``before``."""
    return [p for p, data in files_of(folder).items() if before.get(p) != data]


def examples_builder() -> ModuleType:
    """examples/build_models.py, imported by path (it is a script, not a package module)."""
    name = "autotune_examples_builder"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).parents[1] / "examples/build_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fast_toy_repo(root: Path) -> Path:
    """A repository under ``root`` holding the toy model at 1 ms per execution (not 4), for
    the load generator's tests; returns the repository."""
    repo = root / "repo"
    shutil.copytree(MODELS / "toy", repo / "toy", ignore=shutil.ignore_patterns("__pycache__"))
    config = repo / "toy" / "config.pbtxt"
    config.write_text(config.read_text().replace('string_value: "4"', 'string_value: "1"'))
    return repo


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


def servers_of(run_dir: Path) -> list[int]:
    """Pids of the servers (guards and python backend stubs included) of the run ``run_dir``:
    those whose command line names one of its stages (autotune.staging.Stages.for_run)."""
    from autotune.staging import stage_root

    return servers_under(f"{stage_root()}/{run_dir.name}.")


def staged_servers() -> list[int]:
    """Pids of every server of this user whose repository is an autotune stage, of any run."""
    from autotune.staging import stage_root

    return servers_under(f"{stage_root()}/")


def servers_under(marker: Path | str) -> list[int]:
    """Pids of tritonserver processes (their guards and python backend stubs included) whose
    command line names a path under ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if ("tritonserver" in cmd or "triton_python_backend_stub" in cmd) and str(marker) in cmd:
                found.append(int(proc.name))
    return found
