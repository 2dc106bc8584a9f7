"""What every launcher shares: the Server handle, and the sequence of serving one model.

:meth:`Launcher.serve` owns the sequence (ports, a retry on others when a port was taken
between our check and the server's bind, readiness on the *model's* ready endpoint, and a
teardown that always happens); a subclass only starts (:meth:`Launcher._start`) and stops
(:meth:`Launcher._stop`). Readiness asks the model, not the server: a server can be ready
with no model (a missing mount, a failed load). While waiting, the server's ``alive`` check
turns an early exit into ServerExitedError with the log's last lines. A server we start also
serves its metrics (GPU figures), on a port of its own that can clash too: Triton opens it
just after its HTTP endpoint and exits if it cannot, so readiness waits for the metrics to
answer as well (:func:`wait_metrics`).
"""

from __future__ import annotations

import re
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, NamedTuple, TypeVar

from autotune.control import ServerControl
from autotune.errors import LaunchError, ModelNotReadyError, ServerExitedError
from autotune.gpu_probe import scrape

LOG_TAIL_LINES = 25
READY_TIMEOUT_S = 180.0
# the longest a server's stop waits for a graceful exit (Triton gives in-flight work 5 s,
# --exit-timeout-secs; its python stubs unload after), then for what is left of it to be gone
STOP_TIMEOUT_S = 15
METRICS_INTERVAL_MS = 500  # a server's GPU figures refreshed twice a second (a window is 0.5-1 s)
METRICS_WAIT_S = 10.0  # metrics that do not answer by then only cost the GPU figures
H = TypeVar("H")  # what a launcher keeps of one started server (a process, a container, ...)


@dataclass(frozen=True)
class Server:
    """A running Triton server: where to reach it and where its log is. ``metrics_url``: the full
    URL of its Prometheus ``/metrics`` ("" when it has none), where its GPU figures come from."""

    host: str
    http_port: int
    grpc_port: int
    log_path: Path | None
    alive: Callable[[], bool]
    description: str = ""
    metrics_url: str = ""
    pid: int = 0  # the server's process on this machine (0: not one of ours here)

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return read_tail(self.log_path, lines) if self.log_path else ""


@dataclass(frozen=True)
class Started(Generic[H]):
    """A server a launcher started: the handle people use, and what the launcher keeps to stop it."""

    server: Server
    handle: H
    exit_detail: Callable[[], str] = field(default=lambda: "")  # how it ended, once found dead


class Ports(NamedTuple):
    """The ports one server is started on (each a free port of 127.0.0.1 when chosen here)."""

    http: int
    grpc: int
    metrics: int


class PortClash(LaunchError):
    """A port we chose was taken before the server could bind it: worth one more try."""


class Launcher(ABC, Generic[H]):
    """Starts Triton on a model repository; :meth:`serve`'s context always tears it down."""

    name: ClassVar[str]
    starts_servers: ClassVar[bool] = True  # False: it serves on a running server (whose metrics are its own)

    def __init__(self, *, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.ready_timeout_s = ready_timeout_s

    @contextmanager
    def serve(
        self, repository: Path, model: str, log_path: Path, *, ready_timeout_s: float | None = None
    ) -> Iterator[Server]:
        """A server with ``model`` of ``repository`` ready; its log goes to ``log_path``. The
        model gets ``ready_timeout_s`` to get ready (default the launcher's ``ready_timeout_s``:
        a config whose load builds a TensorRT engine is given longer, see autotune.trt_build)."""
        timeout_s = self.ready_timeout_s if ready_timeout_s is None else ready_timeout_s
        started = self._ready(repository, model, log_path, timeout_s)
        try:
            yield started.server
        except BaseException:
            self._stop(started, failed=True)  # a failure here is raised, chained to the one in flight
            raise
        self._stop(started, failed=False)

    def _ready(self, repository: Path, model: str, log_path: Path, timeout_s: float) -> Started[H]:
        for attempt in (1, 2):
            try:
                started = self._start(repository, model, log_path, self._ports())
            except PortClash:
                if attempt == 1:
                    continue
                raise
            try:
                self._wait_ready(started, model, timeout_s)
            except BaseException as exc:
                self._stop(started, failed=True)
                clashed = isinstance(exc, ServerExitedError) and port_clash(started.server.log_tail(40))
                if attempt == 1 and clashed:
                    continue
                raise
            return started
        raise AssertionError("unreachable")

    def _wait_ready(self, started: Started[H], model: str, timeout_s: float) -> None:
        """Until the model is ready, at most ``timeout_s``, and the metrics of a server we
        started answer (ServerExitedError if the server ends first)."""
        wait_model_ready(started.server, model, timeout_s, started.exit_detail)
        if self.starts_servers and started.server.metrics_url:
            wait_metrics(started.server, started.exit_detail)

    def _ports(self) -> Ports:
        """HTTP, gRPC and metrics ports for the next server (all three new on a retry)."""
        return Ports(*free_ports(3))

    @abstractmethod
    def _start(self, repository: Path, model: str, log_path: Path, ports: Ports) -> Started[H]:
        """Start a server (not yet ready); raise PortClash when a port turned out to be taken."""

    @abstractmethod
    def _stop(self, started: Started[H], *, failed: bool) -> None:
        """Stop it; ``failed``: an error or a stop request is on its way (stop now, quietly)."""


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the OS says are free now (held open together so they differ)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def metrics_args(port: int, address: str = "") -> tuple[str, ...]:
    """Prometheus metrics on ``port`` (GPU figures, when the server sees GPUs; no CPU figures),
    refreshed every :data:`METRICS_INTERVAL_MS`; ``address``: the one to bind (default: the HTTP one's)."""
    bind = (f"--metrics-address={address}",) if address else ()
    return (
        "--allow-metrics=true", "--allow-gpu-metrics=true", "--allow-cpu-metrics=false",
        *bind, f"--metrics-port={port}", f"--metrics-interval-ms={METRICS_INTERVAL_MS}",
    )  # fmt: skip


def port_clash(log_text: str) -> bool:
    text = log_text.lower()
    return any(s in text for s in ("already in use", "failed to bind", "port is already allocated"))


def read_tail(path: Path, lines: int | None = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the log's last 64 KiB (None: all of them)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:] if lines is not None else data.splitlines())


def wait_model_ready(
    server: Server,
    model: str,
    timeout_s: float = READY_TIMEOUT_S,
    exit_detail: Callable[[], str] | None = None,
    poll_s: float = 0.05,
) -> None:
    """Poll the model's readiness until it is ready; early exit or timeout raise with the log tail.

    ``exit_detail`` (asked once the server is found dead) adds how it ended, e.g. " with exit code 1".
    """
    deadline = time.monotonic() + timeout_s
    with ServerControl(server.host, server.http_port, timeout_s=2.0) as control:
        while time.monotonic() < deadline:
            if not server.alive():
                raise _exited(server, exit_detail, f"before model {model!r} was ready")
            if control.model_ready(model):
                return
            time.sleep(poll_s)
    raise ModelNotReadyError(f"model {model!r} was not ready after {timeout_s:.0f} s" + _tail_suffix(server))


def wait_metrics(
    server: Server,
    exit_detail: Callable[[], str] | None = None,
    timeout_s: float = METRICS_WAIT_S,
    poll_s: float = 0.05,
) -> None:
    """Poll the server's metrics until they answer; a server that exits first (its metrics port
    was taken) raises ServerExitedError with the log tail. Metrics that never answer from a
    live server only cost the GPU figures: after ``timeout_s`` this returns."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if scrape(server.metrics_url) is not None:
            return
        if not server.alive():
            raise _exited(server, exit_detail, "before its metrics answered")
        time.sleep(poll_s)


def _exited(server: Server, exit_detail: Callable[[], str] | None, when: str) -> ServerExitedError:
    detail = exit_detail() if exit_detail else ""
    what = server.description or "tritonserver"
    return ServerExitedError(f"{what} exited{detail} {when}" + _tail_suffix(server))


def _tail_suffix(server: Server) -> str:
    tail = server.log_tail(LOG_TAIL_LINES)
    where = f" (log: {server.log_path})" if server.log_path else ""
    return f"{where}\n{tail}" if tail else where


def failure_line(log_text: str) -> str:
    """The most telling line of a server log: why the model did not load (its load error, or
    the reason in the model status table; with the TensorRT error that caused it, when the
    load error is TensorRT's), else a TensorRT error (a build that crashed the server or has
    not finished), else the first error, else nothing."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    trt = tensorrt_error(log_text)
    for line in lines:
        for said in ("failed to load '", "failed to load model '"):  # a version's load, the model's
            if said in line:  # Triton writes a Python traceback's newlines as "\\n": its first line
                load = line[line.index(said) :].split("\\n")[0].rstrip('"')
                return _with_cause(load, trt)[:300]
    for line in lines:
        for state in ("| UNAVAILABLE: ", "| Not loaded: "):  # the status table: | name | version | why |
            if state in line:
                return _with_cause("model " + line.split(state, 1)[1].rstrip("| "), trt)[:300]
    if trt:
        return trt[:300]
    noise = ("NVML", "DCGM", "CudaDriverHelper", "GPU metrics", "cuda")
    for line in lines:
        if _ORT_NOT_ERROR.search(line):  # onnxruntime's warnings and information ("... overflow errors")
            continue
        if (line.startswith("E") or "error" in line.lower()) and not any(n in line for n in noise):
            return line[:300]
    return ""


# TensorRT errors, as the backends log them. onnxruntime's TensorRT execution provider names its
# own failures ("TensorRT EP could not build engine for fused node: ...", "TensorRT EP failed
# to create engine from network ..."), and passes TensorRT's messages through its logger, which
# writes the ORT severity (E:, or W: in old versions), the source file, then TensorRT's stamp
# and severity:
#   <time> [E:onnxruntime:log, tensorrt_execution_provider.h:88 log] [<time>   ERROR] 4: [...] ...
# TensorFlow's TF-TRT logs as TensorFlow does: "<time>: E tensorflow/compiler/tf2tensorrt/...] ...".
_ORT_TRT = re.compile(r"tensorrt_execution_provider[^\]]*\]\s*\[[^\]]*\b(?:INTERNAL_ERROR|ERROR)\]\s*(.+)")
_ORT_TRT_FAILURE = re.compile(r"TensorRT EP (?:could not|fail)[^\n]*", re.IGNORECASE)
_ORT_NOT_ERROR = re.compile(r"\[[VIW]:onnxruntime:")
_TF_TRT = re.compile(r"\bE \S*tf2tensorrt/\S+\]\s*(.+)")


def tensorrt_error(log_text: str) -> str:
    """The first TensorRT error in a server log (onnxruntime's TensorRT execution provider, or
    TensorFlow's TF-TRT), as ``TensorRT: <its message>`` (or the execution provider's own
    ``TensorRT EP ...`` failure); "" when there is none: their warning and information lines,
    and every other error, are not TensorRT errors."""
    for line in log_text.splitlines():
        logged = _ORT_TRT.search(line) or _TF_TRT.search(line)
        if logged is not None:
            return "TensorRT: " + logged.group(1).strip()
        failure = _ORT_TRT_FAILURE.search(line)
        if failure is not None:  # it names TensorRT itself
            return failure.group(0).strip().rstrip('";')
    return ""


def _with_cause(load: str, trt: str) -> str:
    """A load error that is TensorRT's, with TensorRT's own reason (``load — TensorRT: ...``)."""
    if not trt or "tensorrt" not in load.lower() or trt.removeprefix("TensorRT: ") in load:
        return load
    head = re.match(r"failed to load '[^']*'(?: version \d+)?", load)
    return f"{head.group(0) if head else load[:120]} — {trt}"
