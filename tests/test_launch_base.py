"""The sequence every launcher shares (launch._base.Launcher): ports, one retry when a port
was taken, readiness, and a teardown on every path. A launcher whose servers are plain
records: what is tested is the base class's logic, not a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ModelNotReadyError, ServerExitedError
from autotune.launch._base import Launcher, PortClash, Server, Started


class Recorder(Launcher[int]):
    """Starts "servers" numbered 1, 2, ...; ``outcomes`` says how each start and readiness ends."""

    name = "recorder"

    def __init__(self, outcomes: list[str], log: Path) -> None:
        super().__init__()
        self.outcomes, self.log = outcomes, log
        self.started: list[tuple[int, tuple[int, int]]] = []
        self.stopped: list[tuple[int, bool]] = []
        self.ports = iter([(1000, 1001), (2000, 2001), (3000, 3001)])

    def _ports(self) -> tuple[int, int]:
        return next(self.ports)

    def _start(self, repository: Path, model: str, log_path: Path, ports: tuple[int, int]) -> Started[int]:
        number = len(self.started) + 1
        self.started.append((number, ports))
        if self.outcomes[number - 1] == "start-clash":
            raise PortClash("port is already allocated")
        server = Server("127.0.0.1", ports[0], ports[1], self.log, alive=lambda: True)
        return Started(server, number)

    def _wait_ready(self, started: Started[int], model: str, timeout_s: float) -> None:
        outcome = self.outcomes[started.handle - 1]
        if outcome == "exit-clash":
            self.log.write_text("E... failed to bind: Address already in use\n")
            raise ServerExitedError("tritonserver exited")
        if outcome == "exit":
            self.log.write_text("E... failed to load all models\n")
            raise ServerExitedError("tritonserver exited")
        if outcome == "timeout":
            raise ModelNotReadyError("not ready")

    def _stop(self, started: Started[int], *, failed: bool) -> None:
        self.stopped.append((started.handle, failed))


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "server.log"


def test_a_ready_server_is_stopped_when_the_block_ends(log: Path) -> None:
    launcher = Recorder(["ok"], log)
    with launcher.serve(Path("repo"), "m", log) as server:
        assert (server.http_port, server.grpc_port) == (1000, 1001)
        assert launcher.stopped == []
    assert launcher.stopped == [(1, False)]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_error_in_the_block_stops_the_server_as_failed(log: Path, error: type[BaseException]) -> None:
    launcher = Recorder(["ok"], log)
    with pytest.raises(error), launcher.serve(Path("repo"), "m", log):
        raise error()
    assert launcher.stopped == [(1, True)]


@pytest.mark.parametrize("first", ["exit-clash", "start-clash"])
def test_a_port_clash_is_retried_once_on_other_ports(log: Path, first: str) -> None:
    launcher = Recorder([first, "ok"], log)
    with launcher.serve(Path("repo"), "m", log) as server:
        assert server.http_port == 2000
    assert [ports for _, ports in launcher.started] == [(1000, 1001), (2000, 2001)]
    stopped_first = [(1, True)] if first == "exit-clash" else []  # a start that raised left nothing
    assert launcher.stopped == [*stopped_first, (2, False)]


def test_a_second_clash_is_not_retried(log: Path) -> None:
    launcher = Recorder(["exit-clash", "exit-clash", "ok"], log)
    with pytest.raises(ServerExitedError), launcher.serve(Path("repo"), "m", log):
        pytest.fail("no server")
    assert len(launcher.started) == 2 and launcher.stopped == [(1, True), (2, True)]


@pytest.mark.parametrize(("outcome", "error"), [("exit", ServerExitedError), ("timeout", ModelNotReadyError)])
def test_a_server_that_never_gets_ready_is_stopped_and_not_retried(
    log: Path, outcome: str, error: type[Exception]
) -> None:
    launcher = Recorder([outcome, "ok"], log)
    with pytest.raises(error), launcher.serve(Path("repo"), "m", log):
        pytest.fail("no server")
    assert launcher.started == [(1, (1000, 1001))] and launcher.stopped == [(1, True)]
