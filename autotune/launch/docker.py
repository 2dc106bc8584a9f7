"""The docker launcher: each trial's Triton in its own container, through the Docker SDK.

Any Docker-compatible engine works: Docker itself, or podman's API service
(``DOCKER_HOST=unix:///run/podman/podman.sock``). Without DOCKER_HOST the usual sockets of
Docker and podman are tried.

What the container sees: every linked entry of the staged model directory, bind-mounted
read-only at its place under ``/models/<model>/`` from its resolved target (the candidate's
config.pbtxt, and the user's own files behind the staging symlinks), so nothing of the user's
can be written.
HTTP, gRPC and Prometheus metrics (the server's GPU figures) are published on free ports of
127.0.0.1 only.

Every container carries labels naming its owner (host, pid, process start time): the next
start and ``autotune clean`` remove those whose owner is gone. Teardown always happens
(exceptions, Ctrl-C): a graceful stop with a timeout (podman's default is an immediate
SIGKILL), the container's output saved to ``log_path``, then removal. Docker's exceptions
are translated where they enter, into :class:`LaunchError` and its subclasses.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.types import DeviceRequest, Mount

from autotune.errors import LaunchError, UsageError
from autotune.launch import _base
from autotune.launch._base import (
    READY_TIMEOUT_S,
    STOP_TIMEOUT_S,
    Launcher,
    PortClash,
    Ports,
    Server,
    Started,
    port_clash,
)
from autotune.processes import Owner
from autotune.settings import DockerOptions

MODELS_DIR = "/models"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
COMMAND = (
    "tritonserver",
    f"--model-repository={MODELS_DIR}",
    f"--http-port={HTTP_PORT}",
    f"--grpc-port={GRPC_PORT}",
    *_base.metrics_args(METRICS_PORT),
    "--exit-timeout-secs=5",
    "--log-verbose=0",
)
DEFAULT_SOCKETS = (
    "/var/run/docker.sock",
    "/run/podman/podman.sock",
    f"/run/user/{os.getuid()}/podman/podman.sock",
    f"/run/user/{os.getuid()}/docker.sock",
)

LABEL = "autotune"  # "1" on every container we start
LABEL_HOST = "autotune.owner-host"
LABEL_PID = "autotune.owner-pid"
LABEL_STARTED = "autotune.owner-started"  # the owner's start time: a reused pid is not the owner
LABEL_RUN = "autotune.run"
LABEL_MODEL = "autotune.model"

_ENGINE_ERRORS = (DockerException, requests.RequestException)
_GPU_ID = re.compile(r"^(\d+|(GPU|MIG)-[0-9A-Za-z-]+)$")  # an index or a GPU/MIG UUID


# ---------------------------------------------------------------- the engine


def engine_url(
    environ: Mapping[str, str] = os.environ, sockets: Sequence[str] = DEFAULT_SOCKETS
) -> str | None:
    """DOCKER_HOST when set, else the first of the usual sockets that exists (None: none)."""
    if environ.get("DOCKER_HOST"):
        return environ["DOCKER_HOST"]
    return next((f"unix://{path}" for path in sockets if Path(path).is_socket()), None)


def connect(environ: Mapping[str, str] = os.environ) -> docker.DockerClient:
    """A client of a reachable engine, or a LaunchError that says how to point at one."""
    url = engine_url(environ)
    hint = (
        "start Docker, or podman's API (podman system service), and point DOCKER_HOST at it, "
        "e.g. export DOCKER_HOST=unix:///run/podman/podman.sock"
    )
    if url is None:
        raise LaunchError(
            "no container engine found: DOCKER_HOST is not set and no engine socket exists", hint=hint
        )
    try:
        # from_env: DOCKER_TLS_VERIFY and DOCKER_CERT_PATH are honoured too
        client = docker.from_env(environment={**environ, "DOCKER_HOST": url})
        client.ping()
    except _ENGINE_ERRORS as exc:
        raise LaunchError(f"cannot reach the container engine at {url}: {_why(exc)}", hint=hint) from exc
    return client


def ensure_image(client: docker.DockerClient, image: str, pull: bool) -> None:
    """The image is there, or is pulled when ``pull``; never a silent pull."""
    try:
        client.images.get(image)
        return
    except ImageNotFound:
        if not pull:
            raise LaunchError(
                f"image {image} is not on the container engine (not pulling it without --pull)",
                hint=f"docker pull {image}, or add --pull, or pick another --image",
            ) from None
    except _ENGINE_ERRORS as exc:
        raise LaunchError(f"cannot look up image {image}: {_why(exc)}") from exc
    try:
        client.images.pull(image)
    except _ENGINE_ERRORS as exc:
        raise LaunchError(
            f"could not pull image {image}: {_why(exc)}",
            hint="check the image name and the registry login (docker login)",
        ) from exc


def _why(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    return str(text).splitlines()[0][:300]


# ---------------------------------------------------------------- what a container is made of (pure)


def device_requests(gpus: str) -> list[DeviceRequest]:
    """``--gpus``: "" none, "all", or indices / UUIDs like "0,1" or "GPU-8f2a..."."""
    gpus = gpus.strip()
    if not gpus:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    ids = [part.strip() for part in gpus.split(",")]
    if not all(_GPU_ID.match(part) for part in ids):
        raise UsageError(f"--gpus {gpus!r}: use 'all' or GPU ids like 0,1")
    return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


def gpu_count(gpus: str) -> int:
    """How many GPUs ``--gpus`` gives the container: "" none, "0,1" two. "all" counts as 1: the
    GPUs the engine's host has are not asked (this machine may not be that host, and nothing
    is started just to count them), so it means "at least one"."""
    gpus = gpus.strip()
    if gpus == "all":
        return 1
    return len([part for part in gpus.split(",") if part.strip()])


def model_mounts(repository: Path) -> list[Mount]:
    """Each linked entry of each staged model directory, read-only at the same place under
    /models (a folder the stage made anew, one that holds Python sources, is walked: its
    files are linked one by one, see :func:`autotune.staging.mirror`)."""
    mounts: list[Mount] = []
    for model_dir in sorted(p for p in repository.iterdir() if p.is_dir()):
        mounts += _mounts(model_dir, f"{MODELS_DIR}/{model_dir.name}")
    return mounts


def _mounts(folder: Path, inside: str) -> list[Mount]:
    mounts: list[Mount] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        target = f"{inside}/{entry.name}"
        if entry.is_dir() and not entry.is_symlink():
            mounts += _mounts(entry, target)
            continue
        try:
            source = entry.resolve(strict=True)
        except OSError as exc:
            raise LaunchError(
                f"{entry} points to {os.readlink(entry) if entry.is_symlink() else entry}, "
                "which does not exist",
                hint="check the model's files",
            ) from exc
        mounts.append(Mount(target=target, source=str(source), type="bind", read_only=True))
    return mounts


def container_request(
    options: DockerOptions,
    repository: Path,
    ports: Ports,
    labels: Mapping[str, str],
    name: str,
) -> dict[str, Any]:
    """The keyword arguments of ``containers.create`` for one server (files are only read)."""
    inside = {HTTP_PORT: ports.http, GRPC_PORT: ports.grpc, METRICS_PORT: ports.metrics}
    return {
        "image": options.image,
        "command": list(COMMAND),
        "name": name,
        "labels": dict(labels),
        "mounts": model_mounts(repository),
        "ports": {f"{port}/tcp": ("127.0.0.1", published) for port, published in inside.items()},
        "shm_size": options.shm_size,
        "device_requests": device_requests(options.gpus),
        "detach": True,
    }


def owner_labels(run: str, model: str) -> dict[str, str]:
    owner = Owner.current()
    return {
        LABEL: "1",
        LABEL_HOST: owner.host,
        LABEL_PID: str(owner.pid),
        LABEL_STARTED: owner.started,
        LABEL_RUN: run,
        LABEL_MODEL: model,
    }


def _container_name(model: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-.") or "model"
    return f"autotune-{slug[:40]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- leftovers


def owner_gone(labels: Mapping[str, str]) -> bool:
    """True when the labels name an owner on this host that no longer runs (never for other hosts)."""
    pid = labels.get(LABEL_PID, "")
    if not pid.isdigit():
        return False
    return Owner(labels.get(LABEL_HOST, ""), int(pid), labels.get(LABEL_STARTED, "")).gone()


def reap_containers(client: docker.DockerClient | None = None) -> list[str]:
    """Remove our containers whose owner process is gone; return their names."""
    client = client or connect()
    try:
        leftovers = client.containers.list(all=True, filters={"label": f"{LABEL}=1"})
    except _ENGINE_ERRORS as exc:
        raise LaunchError(f"cannot list containers: {_why(exc)}") from exc
    reaped = []
    for container in leftovers:
        if owner_gone(container.labels):
            _remove(container)
            reaped.append(container.name)
    return reaped


def _remove(container: Container) -> None:
    try:
        container.remove(force=True)
    except NotFound:
        pass
    except _ENGINE_ERRORS as exc:
        raise LaunchError(
            f"could not remove container {container.name}: {_why(exc)}",
            hint="remove it with 'docker rm -f', or run 'autotune clean' later",
        ) from exc


# ---------------------------------------------------------------- the launcher


_Running = tuple[Container, "_LogCopy"]


class DockerLauncher(Launcher[_Running]):
    """Starts one Triton container per :meth:`serve`."""

    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient,
        options: DockerOptions,
        *,
        run: str,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        """``run``: the run's id, on every container's labels (``autotune clean`` and the next
        start find a killed run's containers by their owner; people, by the run)."""
        super().__init__(ready_timeout_s=ready_timeout_s)
        self._client = client
        self._options = options
        self._run = run

    @classmethod
    def from_options(cls, options: DockerOptions, run: str) -> DockerLauncher:
        """Connect, remove what killed runs left, and make sure the image is there: all before
        trial 1. ``run`` (the run's id) labels every container."""
        device_requests(options.gpus)
        client = connect()
        reap_containers(client)
        ensure_image(client, options.image, options.pull)
        return cls(client, options, run=run)

    def _start(self, repository: Path, model: str, log_path: Path, ports: Ports) -> Started[_Running]:
        log = _LogCopy(log_path)
        request = container_request(
            self._options, repository, ports, owner_labels(self._run, model), _container_name(model)
        )
        try:
            container = _create_started(self._client, request)
        except LaunchError as exc:
            if port_clash(str(exc)):
                raise PortClash(str(exc)) from exc
            raise
        log.follow(container)
        server = Server(
            "127.0.0.1", ports.http, ports.grpc, log_path,
            alive=lambda: _running(container) or log.finish(container),
            description=f"container {container.name}", metrics_url=f"http://127.0.0.1:{ports.metrics}/metrics",
        )  # fmt: skip
        return Started(server, (container, log), exit_detail=lambda: _how_it_ended(container))

    def _stop(self, started: Started[_Running], *, failed: bool) -> None:
        container, log = started.handle
        _teardown(container, log, strict=not failed)


def _create_started(client: docker.DockerClient, request: dict[str, Any]) -> Container:
    """Create and start; a failed start leaves a "created" container behind: remove it."""
    try:
        container: Container = client.containers.create(**request)
    except _ENGINE_ERRORS as exc:
        raise LaunchError(f"cannot create container from {request['image']}: {_why(exc)}") from exc
    try:
        container.start()
    except BaseException as exc:
        with contextlib.suppress(LaunchError):  # the start's error is the one to tell
            _remove(container)
        if isinstance(exc, _ENGINE_ERRORS):
            raise LaunchError(
                f"container {container.name} did not start: {_why(exc)}",
                hint="check --image, --gpus and --shm-size",
            ) from exc
        raise
    return container


def _running(container: Container) -> bool:
    try:
        container.reload()
    except NotFound:
        return False
    except _ENGINE_ERRORS as exc:
        raise LaunchError(f"lost the container engine while watching {container.name}: {_why(exc)}") from exc
    return container.status in ("created", "running", "restarting", "paused")


def _how_it_ended(container: Container) -> str:
    state = container.attrs.get("State", {})
    detail = f" with exit code {state.get('ExitCode')}"
    return detail + " (out of memory)" if state.get("OOMKilled") else detail


def _teardown(container: Container, log: _LogCopy, strict: bool) -> None:
    """Stop gracefully, keep the output, remove; ``strict=False`` while another error is on its way."""
    try:
        container.stop(timeout=STOP_TIMEOUT_S)
    except NotFound:
        log.finish(None)
        return
    except _ENGINE_ERRORS:
        pass  # removal below forces it
    log.finish(container)
    try:
        _remove(container)
    except LaunchError:
        if strict:
            raise


class _LogCopy:
    """The container's output in ``path``: copied while it runs (so a failed start can quote its
    tail), and complete once it has stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        self._stream: Any = None
        self._thread: threading.Thread | None = None
        self._complete = False

    def follow(self, container: Container) -> None:
        try:
            self._stream = container.logs(stream=True, follow=True)
        except _ENGINE_ERRORS:
            return  # finish() saves the whole log instead
        self._thread = threading.Thread(target=self._copy, name=f"log-{container.name}", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        try:
            with self.path.open("ab") as handle:
                for chunk in self._stream:
                    handle.write(chunk)
                    handle.flush()
        except (*_ENGINE_ERRORS, OSError, ValueError):
            return  # the stream broke or was closed: finish() saves the whole log
        self._complete = True

    def finish(self, container: Container | None, timeout_s: float = 5.0) -> bool:
        """Once it has stopped: let the copy reach the end, else save the engine's whole log.

        Returns False, so that ``running() or log.finish(c)`` settles the log before an error quotes it.
        """
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._complete or container is None:
            return False
        if self._stream is not None:
            self._stream.close()
        try:
            data = container.logs(stdout=True, stderr=True)
        except _ENGINE_ERRORS:
            return False
        partial = self.path.with_name(self.path.name + ".part")
        partial.write_bytes(data)
        os.replace(partial, self.path)
        self._complete = True
        return False
