"""Launchers: where each trial's Triton runs (a local process, a container, a remote server).

    launcher = make_launcher(settings.launch, run_id)
    with launcher.serve(repository, model, log_path) as server:   # the model is ready
        ...
    launcher.drain()                                               # every server has stopped

:class:`Launcher` owns the sequence (ports, retry on a port clash, readiness, teardown); each
launcher only starts and stops. ``autotune clean`` calls :func:`reap_leftovers`.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import AutotuneError
from autotune.launch._base import (
    Launcher,
    Server,
    failure_line,
    free_ports,
    read_tail,
    tensorrt_error,
    wait_model_ready,
)
from autotune.settings import Launch

__all__ = [
    "Launcher", "Server", "failure_line", "free_ports", "make_launcher", "read_tail", "reap_leftovers",
    "tensorrt_error", "wait_model_ready",
]  # fmt: skip


def make_launcher(launch: Launch, run: str) -> Launcher[Any]:
    """The launcher ``launch`` names, set up and checked (a wrong set-up fails here, before any
    trial); ``run`` is the run's id (containers are labelled with it). Imported lazily: the
    docker SDK is only needed by the docker launcher."""
    if launch.kind == "docker":
        from autotune.launch.docker import DockerLauncher

        return DockerLauncher.from_options(launch.docker, run)
    if launch.kind == "remote":
        from autotune.launch.remote import RemoteLauncher

        return RemoteLauncher.from_options(launch.remote)
    from autotune.launch.local import LocalLauncher

    return LocalLauncher.from_options(launch.local)


def reap_leftovers() -> tuple[list[int], list[str]]:
    """Stop the servers and remove the containers of runs whose process is gone: their pids
    and names. No container engine reachable: none of ours can be running there."""
    from autotune.launch import _pids

    servers = _pids.reap()
    try:
        from autotune.launch.docker import reap_containers

        containers = reap_containers()
    except AutotuneError:
        containers = []
    return servers, containers
