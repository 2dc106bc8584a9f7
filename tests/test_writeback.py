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
from autotune.config_edit import edit_in_place
from autotune.control import ServerControl
from autotune.files import file_digest
from autotune.launch.local import LocalLauncher
from autotune.model_config import apply_candidate, config_text, parse_config, write_config
from autotune.objective import Sla
from autotune.rundir import WINNER_CONFIG, RunDir, RunRecord
from autotune.search_space import Candidate
from autotune.settings import Launch
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
    winner = parse_config((run_dir / "winner.pbtxt").read_text())
    written = edit_in_place(original.decode(), winner).encode()  # your file, edited to the winner
    assert any(written in contents for contents in seen.values()), "the winner was written, then undone"
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


def test_apply_keeps_your_comments_and_prints_only_the_lines_it_changes(
    toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The write-back edits your config.pbtxt in place: comments, order and layout stay, and the
    diff printed (the file as it was against the file as written) holds the changed lines alone.
    The run directory is made by hand (no server: --no-verify); undo gives your bytes back."""
    config = toy_repo / "toy" / "config.pbtxt"
    mine = "# toy: hand-tuned, see docs\n" + config.read_text().replace(
        "    count: 1\n", "    # one per core\n    count: 1  # was 2 before 2026\n"
    )
    config.write_text(mine)
    winner = apply_candidate(parse_config(mine), Candidate(3, "KIND_CPU", (), 8, True, (4, 8), 100, False))
    record = RunRecord(
        run_id="20261204-101010", model="toy", repository=toy_repo.resolve(), sla=Sla(95, 60.0),
        launch=Launch(), protocol="http", study_name="s", storage=None,
        original_config=config_text(parse_config(mine)),
        original_digest=file_digest(config), started="", finished="2026-12-04T10:20:00+00:00", winner=0,
    )  # fmt: skip
    run = RunDir.create(tmp_path / "reports" / "toy" / record.run_id, record)
    write_config(winner, run.path / WINNER_CONFIG)
    capsys.readouterr()
    assert main(["apply", "--no-verify", str(run.path)]) == 0
    out = capsys.readouterr().out
    expected = mine.replace("count: 1  #", "count: 3  #") + (
        "dynamic_batching {\n  preferred_batch_size: [ 4, 8 ]\n  max_queue_delay_microseconds: 100\n}\n"
    )
    assert config.read_text() == expected
    lines = out.splitlines()
    changed = [line for line in lines if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
    assert changed == [
        "-    count: 1  # was 2 before 2026",
        "+    count: 3  # was 2 before 2026",
        "+dynamic_batching {",
        "+  preferred_batch_size: [ 4, 8 ]",
        "+  max_queue_delay_microseconds: 100",
        "+}",
    ]
    assert "--- a/config.pbtxt\n+++ b/config.pbtxt\n" in out
    assert main(["apply", "--no-verify", str(run.path)]) == 0  # again: seen as written, not rewritten
    assert config.read_text() == expected and capsys.readouterr().out == out
    assert main(["apply", "--undo", str(run.path)]) == 0
    assert config.read_text() == mine


def test_apply_refuses_a_winner_not_shown_better_than_your_config_unless_forced(
    toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose race did not show its winner ahead of your config (raced beside it) says keep
    your config; apply writes nothing then (exit 6) unless --force."""
    config = toy_repo / "toy" / "config.pbtxt"
    mine = config.read_text()
    winner = apply_candidate(parse_config(mine), Candidate(2, "KIND_CPU", (), 8, False, (), 0, False))
    record = RunRecord(
        run_id="20261204-111111", model="toy", repository=toy_repo.resolve(), sla=Sla(95, 60.0),
        launch=Launch(), protocol="http", study_name="s", storage=None,
        original_config=config_text(parse_config(mine)), original_digest=file_digest(config), started="",
        finished="2026-12-04T11:20:00+00:00", winner=1, shown_better=False,
    )  # fmt: skip
    run = RunDir.create(tmp_path / "reports" / "toy" / record.run_id, record)
    write_config(winner, run.path / WINNER_CONFIG)
    assert RunDir.load(run.path).record.shown_better is False  # kept in run.json
    assert main(["apply", "--no-verify", str(run.path)]) == 6
    assert "keep your config" in capsys.readouterr().err and config.read_text() == mine
    assert main(["apply", "--no-verify", "--force", str(run.path)]) == 0
    assert parse_config(config.read_text()) == winner
