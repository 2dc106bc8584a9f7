"""What every launcher shares: the Server handle, free ports, readiness and log tails.

Readiness is the *model's* ready endpoint (a server can be ready with no model); while
waiting, the launcher's ``alive`` check turns an early exit into ServerExitedError with
the log's last lines.
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from autotune.errors import ModelNotReadyError, ServerExitedError

LOG_TAIL_LINES = 25


@dataclass(frozen=True)
class Server:
    """A running Triton server: where to reach it and where its log is."""

    host: str
    http_port: int
    grpc_port: int
    log_path: Path | None
    alive: Callable[[], bool]
    description: str = ""

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return read_tail(self.log_path, lines) if self.log_path else ""


class Launcher(Protocol):
    """Starts Triton on a model repository; the context manager always tears it down."""

    name: str

    def serve(self, repository: Path, model: str, log_path: Path) -> AbstractContextManager[Server]: ...

    def drain(self) -> None:
        """Wait until every server this launcher started has stopped (some stop in the background)."""


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


def read_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def http_status(host: str, port: int, path: str, timeout: float = 2.0) -> int | None:
    """GET ``path``; the status code, or None when nothing answers."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def wait_model_ready(
    server: Server,
    model: str,
    timeout_s: float = 180.0,
    poll_s: float = 0.05,
    exit_detail: Callable[[], str] | None = None,
) -> None:
    """Poll the model's ready endpoint until 200; early exit or timeout raise with the log tail.

    ``exit_detail`` (asked once the server is found dead) adds how it ended, e.g. " with exit code 1".
    """
    deadline = time.monotonic() + timeout_s
    path = f"/v2/models/{model}/ready"
    for _ in _polls(deadline, poll_s):
        if not server.alive():
            detail = exit_detail() if exit_detail else ""
            raise ServerExitedError(
                f"{server.description or 'tritonserver'} exited{detail} before model {model!r} was ready"
                + _tail_suffix(server)
            )
        if http_status(server.host, server.http_port, path) == 200:
            return
    raise ModelNotReadyError(
        f"model {model!r} was not ready after {timeout_s:.0f} s" + _tail_suffix(server)
    )


def _polls(deadline: float, poll_s: float) -> Iterator[None]:
    while time.monotonic() < deadline:
        yield
        time.sleep(poll_s)


def _tail_suffix(server: Server) -> str:
    tail = server.log_tail(LOG_TAIL_LINES)
    where = f" (log: {server.log_path})" if server.log_path else ""
    return f"{where}\n{tail}" if tail else where


def failure_line(log_text: str) -> str:
    """The most telling line of a server log: the first error, else the last line."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    noise = ("NVML", "DCGM", "CudaDriverHelper", "GPU metrics", "cuda")
    for line in lines:
        if (line.startswith("E") or "error" in line.lower()) and not any(n in line for n in noise):
            return line[:300]
    return ""
