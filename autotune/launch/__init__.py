"""Launchers: where each trial's Triton runs (a local process, a container, a remote server)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.launch._common import Launcher, Server, free_ports, wait_model_ready

if TYPE_CHECKING:
    from autotune.settings import RunSettings

__all__ = ["Launcher", "Server", "free_ports", "make_launcher", "wait_model_ready"]


def make_launcher(settings: RunSettings, run_dir: Path | None = None) -> Launcher:
    """The launcher the settings ask for (imported lazily: docker is optional at run time)."""
    if settings.launcher == "docker":
        from autotune.launch.docker import DockerLauncher

        return DockerLauncher.from_settings(settings, run_dir)
    if settings.launcher == "remote":
        from autotune.launch.remote import RemoteLauncher

        return RemoteLauncher.from_settings(settings)
    from autotune.launch import _pids
    from autotune.launch.local import LocalLauncher, find_installation

    _pids.reap()  # servers a killed run left behind
    return LocalLauncher(find_installation(settings.tritonserver), stop_in_background=True)
