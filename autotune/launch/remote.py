"""A running Triton server in explicit model-control mode: candidates are loaded through the
repository API (``POST /v2/repository/models/NAME/load`` with the config as an override).

The server's own files are never changed; when a trial ends the model is loaded again
without an override, which restores the config in the server's repository.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import json_format

from autotune.errors import LaunchError, UsageError
from autotune.launch._common import Server, http_status, wait_model_ready
from autotune.model_config import CONFIG_NAME, parse_config

if TYPE_CHECKING:
    from autotune.settings import RunSettings

LOAD_TIMEOUT_S = 300.0


def split_url(url: str, what: str = "--url") -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rstrip("/").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{what} must be HOST:PORT, got {url!r}")
    return host, int(port)


class RemoteLauncher:
    name = "remote"

    def __init__(self, host: str, http_port: int, grpc_port: int) -> None:
        self.host, self.http_port, self.grpc_port = host, http_port, grpc_port

    @classmethod
    def from_settings(cls, settings: RunSettings) -> RemoteLauncher:
        host, port = split_url(settings.url)
        grpc_port = split_url(settings.grpc_url, "--grpc-url")[1] if settings.grpc_url else port + 1
        launcher = cls(host, port, grpc_port)
        launcher.check_reachable()
        return launcher

    def check_reachable(self) -> None:
        if http_status(self.host, self.http_port, "/v2/health/live") != 200:
            raise LaunchError(
                f"no Triton server answers at {self.host}:{self.http_port}",
                hint="start it (e.g. docker-compose up) or fix --url",
            )

    def drain(self) -> None:
        """Servers are stopped when their context ends: nothing to wait for."""

    @contextmanager
    def serve(self, repository: Path, model: str, log_path: Path) -> Iterator[Server]:
        config = parse_config((repository / model / CONFIG_NAME).read_text(encoding="utf-8"))
        override = json_format.MessageToJson(config, preserving_proto_field_name=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        server = Server(
            self.host,
            self.http_port,
            self.grpc_port,
            log_path,
            alive=self._alive,
            description=f"remote server {self.host}:{self.http_port}",
        )
        try:
            self._post(f"/v2/repository/models/{model}/load", {"parameters": {"config": override}}, log_path)
            wait_model_ready(server, model, LOAD_TIMEOUT_S)
            yield server
        finally:
            # back to the server's own config: a load without an override does not re-read the
            # repository while the model is loaded, so unload first
            self._post(f"/v2/repository/models/{model}/unload", {}, log_path, check=False)
            self._post(f"/v2/repository/models/{model}/load", {}, log_path, check=False)

    def _alive(self) -> bool:
        return http_status(self.host, self.http_port, "/v2/health/live") == 200

    def _post(self, path: str, body: dict[str, object], log_path: Path, check: bool = True) -> None:
        conn = http.client.HTTPConnection(self.host, self.http_port, timeout=LOAD_TIMEOUT_S)
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            if check:
                raise LaunchError(f"repository API {path} failed: {exc}") from exc
            return
        finally:
            conn.close()
        with log_path.open("a", encoding="utf-8") as log:
            log.write(f"POST {path} -> HTTP {response.status} {text}\n")
        if check and response.status != 200:
            error = json.loads(text).get("error", text) if text.startswith("{") else text
            raise LaunchError(f"the server refused the candidate config: {error}")
