"""A running Triton server in explicit model-control mode: candidates are loaded through the
repository API (a load with the candidate's config as an override, through tritonclient).

The server's own files are never changed. When a trial ends, the model is unloaded and loaded
again without an override, which puts it back on the config of the server's repository. That
restore must succeed: if it does not, :class:`~autotune.errors.RestoreError` stops the run
and says what state the server was left in, rather than leaving the user's server on a
candidate config without a word.

A stage that holds several models (a pipeline: the ensemble or BLS model and the models it
calls; several models on one server) has each loaded with its staged config, the served model
last, and each restored after the trial in the opposite order; a model that was not loaded
before the trial is unloaded again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from google.protobuf import json_format

from autotune.control import ServerControl
from autotune.errors import ControlError, LaunchError, ModelNotReadyError, RestoreError, UsageError
from autotune.launch._base import Launcher, Ports, Server, Started, wait_model_ready
from autotune.model_config import CONFIG_NAME, parse_config
from autotune.settings import RemoteOptions

LOAD_TIMEOUT_S = 300.0  # a load can build an engine, or copy large weights (TensorRT candidates: longer)
HEALTH_TIMEOUT_S = 5.0
METRICS_PORT = 8002  # Triton's default


def split_url(url: str, what: str = "--url") -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rstrip("/").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{what} must be HOST:PORT, got {url!r}")
    return host, int(port)


def metrics_url(options: RemoteOptions) -> str:
    """The server's Prometheus ``/metrics``: ``--metrics-url``, else Triton's default port on
    ``--url``'s host."""
    if options.metrics_url:
        return options.metrics_url
    return f"http://{split_url(options.url)[0]}:{METRICS_PORT}/metrics"


@dataclass(frozen=True)
class _Candidate:
    """What a remote "server" keeps: each model the stage holds with the config it loads there
    (JSON), the served model last, and the models that were loaded before (restored, not unloaded)."""

    loads: tuple[tuple[str, str], ...]
    loaded_before: set[str]


class RemoteLauncher(Launcher[_Candidate]):
    """Serves candidates on one running server; a started "server" is the model loaded there."""

    name = "remote"
    starts_servers = False

    def __init__(self, host: str, http_port: int, grpc_port: int, metrics_url: str = "") -> None:
        super().__init__(ready_timeout_s=LOAD_TIMEOUT_S)
        self.host, self.http_port, self.grpc_port = host, http_port, grpc_port
        self.metrics_url = metrics_url

    @classmethod
    def from_options(cls, options: RemoteOptions) -> RemoteLauncher:
        host, port = split_url(options.url)
        grpc_port = split_url(options.grpc_url, "--grpc-url")[1] if options.grpc_url else port + 1
        launcher = cls(host, port, grpc_port, metrics_url(options))
        launcher.check_reachable()
        return launcher

    def control(self, timeout_s: float = LOAD_TIMEOUT_S) -> ServerControl:
        """The server's control API; loads can take minutes, health questions get ``HEALTH_TIMEOUT_S``."""
        return ServerControl(self.host, self.http_port, timeout_s=timeout_s)

    def check_reachable(self) -> None:
        with self.control(HEALTH_TIMEOUT_S) as control:
            if not control.live():
                raise LaunchError(
                    f"no Triton server answers at {self.host}:{self.http_port}",
                    hint="start it (e.g. docker-compose up) or fix --url",
                )

    def _ports(self) -> Ports:
        return Ports(self.http_port, self.grpc_port, 0)  # the server's; its metrics: ``metrics_url``

    def _start(self, repository: Path, model: str, log_path: Path, ports: Ports) -> Started[_Candidate]:
        """Nothing starts: the staged configs are read (``model``'s, and those of the other models
        the stage holds), to be loaded by :meth:`_wait_ready`."""
        names = sorted(p.parent.name for p in repository.glob(f"*/{CONFIG_NAME}") if p.parent.name != model)
        loads = tuple((name, _override(repository / name / CONFIG_NAME)) for name in [*names, model])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        server = Server(
            self.host, self.http_port, self.grpc_port, log_path,
            alive=self._alive, description=f"remote server {self.host}:{self.http_port}",
            metrics_url=self.metrics_url,
        )  # fmt: skip
        return Started(server, _Candidate(loads, set()))

    def _wait_ready(self, started: Started[_Candidate], model: str, timeout_s: float) -> None:
        """Load the candidate config (and the stage's other models, each with its staged config),
        waiting up to ``timeout_s`` for the loads (one builds any TensorRT engine); a refusal is
        a LaunchError, no answer in time a ModelNotReadyError (the base class then puts the
        server back on its own configs)."""
        log = started.server.log_path
        assert log is not None
        began = time.monotonic()
        try:
            with self.control(timeout_s) as control:
                for name, override in started.handle.loads:
                    if control.model_ready(name):
                        started.handle.loaded_before.add(name)
                    what = (
                        f"load {name} with the candidate config"
                        if name == model
                        else f"load {name} as staged"
                    )
                    _logged(log, what, lambda name=name, override=override: control.load(name, override))  # type: ignore[misc]
        except ControlError as exc:
            if exc.status is None and time.monotonic() - began >= timeout_s:
                raise ModelNotReadyError(
                    f"model {model!r} was not ready after {timeout_s:.0f} s: {exc}"
                ) from exc
            raise LaunchError(f"the server refused the candidate config: {exc}") from exc
        wait_model_ready(started.server, model, timeout_s)

    def _stop(self, started: Started[_Candidate], *, failed: bool) -> None:
        assert started.server.log_path is not None
        for name, _ in reversed(started.handle.loads):  # the served model first
            self._restore(name, started.server.log_path, reload=name in started.handle.loaded_before)

    def _restore(self, model: str, log_path: Path, reload: bool = True) -> None:
        """Back to the server's own config: a load without an override does not re-read the
        repository while the model is loaded, so unload first, then load (tried even if the
        unload failed; not ``reload``: a model the trial loaded, unloaded only); either failing
        is a RestoreError."""
        failed: list[ControlError] = []
        calls: list[tuple[str, Callable[[], object]]] = []
        with self.control() as control:
            calls.append((f"unload {model}", lambda: control.unload(model)))
            if reload:
                calls.append((f"load {model} from the server's repository", lambda: control.load(model)))
            for what, call in calls:
                try:
                    _logged(log_path, what, call)
                except ControlError as exc:
                    failed.append(exc)
        if failed:
            raise RestoreError(
                f"the server at {self.host}:{self.http_port} could not go back to its own config of "
                f"model {model!r}: {failed[-1]}; the model may be unloaded or on a candidate config there"
            ) from failed[-1]

    def _alive(self) -> bool:
        with self.control(HEALTH_TIMEOUT_S) as control:
            return control.live()


def _override(path: Path) -> str:
    """A staged config.pbtxt as the JSON a load takes for its override."""
    return json_format.MessageToJson(
        parse_config(path.read_text(encoding="utf-8")), preserving_proto_field_name=True
    )


def _logged(log_path: Path, what: str, call: Callable[[], object]) -> None:
    """Run a repository call and write what it did, and how it ended, to the trial's log."""
    stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    try:
        call()
    except ControlError as exc:
        _append(log_path, f"{stamp} {what}: FAILED: {exc}")
        raise
    _append(log_path, f"{stamp} {what}: ok")


def _append(log_path: Path, line: str) -> None:
    with log_path.open("a", encoding="utf-8") as log:
        log.write(line + "\n")
