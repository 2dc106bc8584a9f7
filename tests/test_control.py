"""The control plane's errors (control.py), against servers that are not Triton: a closed port
and an HTTP server that answers something else. Triton itself is in the integration tests."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import pytest

from autotune.control import AsyncStatistics, ServerControl
from autotune.errors import ControlError
from autotune.launch import free_ports


class _NotTriton(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>a web page, not Triton</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def not_triton() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotTriton)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_nothing_listening_is_no_answer_with_no_status() -> None:
    (port,) = free_ports(1)
    with ServerControl("127.0.0.1", port, timeout_s=2.0) as control:
        assert not control.live() and not control.model_ready("m")
        with pytest.raises(ControlError, match="no answer from") as info:
            control.metadata("m")
    assert info.value.status is None and info.value.exit_code == 3


def test_another_server_on_the_port_is_a_control_error_not_a_crash(not_triton: int) -> None:
    with ServerControl("127.0.0.1", not_triton, timeout_s=2.0) as control:
        assert control.live()  # it answers 200 to anything: health is all it can tell
        with pytest.raises(ControlError):
            control.metadata("m")  # a body that is not JSON


def test_statistics_from_an_event_loop_translate_errors_too() -> None:
    (port,) = free_ports(1)

    async def ask() -> None:
        statistics = AsyncStatistics("127.0.0.1", port, "m", timeout_s=2.0)
        try:
            await statistics()
        finally:
            await statistics.close()

    with pytest.raises(ControlError, match="statistics of model 'm'"):
        asyncio.run(ask())
