"""Launchers: where each trial's Triton runs (a local process, a container, a remote server).

    launcher = make_launcher(settings.launch, run_id)
    with launcher.serve(repository, model, log_path) as server:   # the model is ready
        ...                                                        # stopped when the block ends

:class:`Launcher` owns the sequence (ports, retry on a port clash, readiness, teardown); each
launcher only starts and stops. ``autotune clean`` calls :func:`reap_leftovers`;
:func:`server_gpus` says how many GPUs the servers will have, before any is started.
"""

from __future__ import annotations

from dataclasses import dataclass
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
from autotune.settings import DockerOptions, Launch, RemoteOptions

__all__ = [
    "Launcher", "Server", "ServerGpus", "failure_line", "free_ports", "make_launcher", "read_tail",
    "reap_leftovers", "server_gpus", "tensorrt_error", "wait_model_ready",
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
    from autotune.launch.local import reap_shared_memory

    servers = _pids.reap()
    reap_shared_memory()
    try:
        from autotune.launch.docker import reap_containers

        containers = reap_containers()
    except AutotuneError:
        containers = []
    return servers, containers


@dataclass(frozen=True)
class ServerGpus:
    """How many GPUs the launcher's servers have; ``note``: one line for people when the count
    could not be had (it is then 0)."""

    count: int
    note: str = ""


def server_gpus(launch: Launch) -> ServerGpus:
    """The GPUs of the side where ``launch`` runs its servers, asked there, never of this
    machine, except for the local launcher, whose servers run here."""
    if launch.kind == "docker":
        return _docker_gpus(launch.docker)
    if launch.kind == "remote":
        return _remote_gpus(launch.remote)
    from autotune.gpu_probe import local_gpu_count

    return ServerGpus(local_gpu_count())


def _docker_gpus(options: DockerOptions) -> ServerGpus:
    """The devices ``--gpus`` gives each container ("all" counts as one: see
    :func:`autotune.launch.docker.gpu_count`)."""
    from autotune.launch.docker import gpu_count

    return ServerGpus(gpu_count(options.gpus))


def _remote_gpus(options: RemoteOptions) -> ServerGpus:
    """The GPUs the remote server's metrics report; 0, with a note, when they do not answer."""
    from autotune.gpu_probe import scraped_gpus
    from autotune.launch.remote import metrics_url

    url = metrics_url(options)
    found = scraped_gpus(url)
    if found is None:
        return ServerGpus(
            0, f"no metrics at {url}: GPUs unknown, tuning as for a CPU server (see --metrics-url)"
        )
    return ServerGpus(len(found))
