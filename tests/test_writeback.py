"""Write-back on a real tritonserver: every restore of the original is atomic, and the written
config is verified on the run's own launcher."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.control import ServerControl
from autotune.launch.local import LocalLauncher
from autotune.model_config import parse_config
from tests.conftest import servers_of, staged_servers, toy_run_args

pytestmark = pytest.mark.integration


def _tuned(repo: Path, space: Path, reports: Path, *extra: str) -> Path:
    argv = toy_run_args(repo, space, reports, "--seed", "1", "--max-trials", "2", "--repeats", "0", *extra)
    assert main(argv) == 0
    (run_dir,) = list((reports / "toy").iterdir())
    return run_dir


@contextmanager
def _versions(path: Path) -> Iterator[dict[int, set[bytes]]]:
    """Every (inode -> contents) the file had while the block ran, polled every few ms: a file
    replaced atomically shows each inode with one content; one rewritten in place shows an
    inode with two."""
    seen: dict[int, set[bytes]] = {}
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            try:
                with path.open("rb") as handle:
                    seen.setdefault(os.fstat(handle.fileno()).st_ino, set()).add(handle.read())
            except OSError:
                pass
            time.sleep(0.002)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()


def test_a_config_that_does_not_load_is_restored_atomically(
    toy_repo: Path, tmp_path: Path, small_space: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _tuned(toy_repo, small_space, tmp_path / "reports")
    config = toy_repo / "toy" / "config.pbtxt"
    original = config.read_bytes()
    model = toy_repo / "toy" / "1" / "model.py"  # the config is unchanged: only the model breaks
    broken = "        raise RuntimeError('broken after the run')\n        config = json.loads("
    model.write_text(model.read_text().replace("        config = json.loads(", broken))
    with _versions(config) as seen:
        assert main(["apply", str(run_dir)]) == 6
        time.sleep(0.05)  # the poller sees what the restore left
    err = capsys.readouterr().err
    assert "did not load and answer as your config does, so the original was restored" in err
    assert config.read_bytes() == original
    winner = (run_dir / "winner.pbtxt").read_bytes()
    assert any(winner in contents for contents in seen.values()), "the winner was written, then undone"
    assert all(len(contents) == 1 for contents in seen.values()), "a config was rewritten in place"
    assert staged_servers() == [] and servers_of(run_dir) == []


def test_undo_restores_atomically(toy_repo: Path, tmp_path: Path, small_space: Path) -> None:
    run_dir = _tuned(toy_repo, small_space, tmp_path / "reports")
    config = toy_repo / "toy" / "config.pbtxt"
    original = config.read_bytes()
    assert main(["apply", "--no-verify", str(run_dir)]) == 0
    with _versions(config) as seen:
        time.sleep(0.05)  # the written winner is seen first
        assert main(["apply", "--undo", str(run_dir)]) == 0
        time.sleep(0.05)
    assert config.read_bytes() == original
    assert len(seen) == 2 and all(len(contents) == 1 for contents in seen.values()), seen.keys()


@pytest.fixture
def remote_server(toy_repo: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A tritonserver in explicit model-control mode serving ``toy_repo`` (its own repository):
    the HTTP and gRPC addresses."""
    launcher = LocalLauncher(extra_args=("--model-control-mode=explicit", "--load-model=toy"))
    with launcher.serve(toy_repo, "toy", tmp_path / "remote-server.log") as server:
        yield server.http_url, server.grpc_url


def test_apply_verifies_on_the_remote_server_of_the_run(
    remote_server: tuple[str, str],
    toy_repo: Path,
    tmp_path: Path,
    small_space: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    http, grpc = remote_server
    run_dir = _tuned(
        toy_repo, small_space, tmp_path / "reports", "--launcher", "remote", "--url", http, "--grpc-url", grpc
    )
    capsys.readouterr()
    assert main(["apply", str(run_dir)]) == 0
    # the check's requests: as many as the space's largest batch (small_space: 8)
    said = f"loaded it in Triton (remote server {http}, answering random data, 8 answers as your config's)"
    assert said in capsys.readouterr().out
    log = (run_dir / "logs" / "writeback-verify.log").read_text()
    assert "load toy with the candidate config: ok" in log
    assert "load toy from the server's repository: ok" in log
    # the server serves the repository written to: it now runs the winner, from its own files
    winner = parse_config((run_dir / "winner.pbtxt").read_text())
    host, port = http.rsplit(":", 1)
    with ServerControl(host, int(port)) as control:
        served = control.config("toy")
    changed = (winner.instance_group[0].count, winner.HasField("dynamic_batching")) != (1, False)
    assert changed, "the winner differs from the server's config, so the check below means something"
    assert served["instance_group"][0]["count"] == winner.instance_group[0].count
    assert ("dynamic_batching" in served) == winner.HasField("dynamic_batching")


def test_a_remote_server_that_cannot_go_back_to_its_config_stops_the_run(
    remote_server: tuple[str, str],
    toy_repo: Path,
    tmp_path: Path,
    small_space: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The restore after a trial reloads the server's own config from its repository; when that
    fails, the run stops with the server's reason instead of leaving it on a candidate config."""
    http, grpc = remote_server
    tuned = tmp_path / "tuned"  # the model as the user has it; the server's own copy then breaks
    shutil.copytree(toy_repo, tuned)
    (toy_repo / "toy" / "config.pbtxt").write_text("this is not a model config {{{")
    argv = toy_run_args(
        tuned,
        small_space,
        tmp_path / "reports",
        "--max-trials",
        "2",
        "--repeats",
        "0",
        "--launcher",
        "remote",
        "--url",
        http,
        "--grpc-url",
        grpc,
    )
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert f"the server at {http} could not go back to its own config of model 'toy'" in err, err
    (run_dir,) = list((tmp_path / "reports" / "toy").iterdir())
    assert "load toy from the server's repository: FAILED" in (run_dir / "logs" / "trial-000.log").read_text()
