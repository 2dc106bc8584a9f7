"""The docker launcher on a real container engine (Docker, or podman's Docker API here):
a whole tuning run, an early exit, a missing image, leftovers of a killed run, Ctrl-C.

The engine is DOCKER_HOST or podman's socket; the image (``localhost/autotune-triton:test``,
or AUTOTUNE_TEST_IMAGE; CPU only, python backend) comes from build-triton-image.sh, which
these tests run when the engine or the image is missing and the script is there
(AUTOTUNE_BUILD_TRITON_IMAGE, shared/tools/ or ../shared/tools/; AUTOTUNE_SKIP_DOCKER=1 skips).
Only containers labelled with this test process (or a process it started) are looked at or removed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import build_parser, main, settings_from
from autotune.errors import LaunchError, ModelNotReadyError, ServerExitedError
from autotune.events import Events
from autotune.gpu import parse_metrics
from autotune.gpu_probe import scrape
from autotune.launch import docker as dl
from autotune.launch import failure_line, free_ports, read_tail
from autotune.launch._base import Ports
from autotune.model_config import load_config
from autotune.points import Point
from autotune.prepare import prepare
from autotune.settings import DockerOptions
from autotune.staging import stage_model
from autotune.tuner import tune

docker = pytest.importorskip("docker")

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[1]
IMAGE = (
    os.environ.get("AUTOTUNE_TEST_IMAGE")
    or os.environ.get("AUTOTUNE_TRITON_IMAGE")
    or "localhost/autotune-triton:test"
)
PODMAN_SOCKET = "unix:///run/podman/podman.sock"
BUILD_SCRIPTS = [
    Path(p)
    for p in (
        os.environ.get("AUTOTUNE_BUILD_TRITON_IMAGE", ""),
        ROOT / "shared" / "tools" / "build-triton-image.sh",
        ROOT.parent / "shared" / "tools" / "build-triton-image.sh",
    )
    if p
]
MISSING_IMAGE = "localhost/autotune-no-such-image:never-built"
TINY_SPACE = (
    "instance_group:\n  count: [1, 2]\nmax_batch_size: [8]\n"
    "dynamic_batching:\n  enabled: [true, false]\n  max_queue_delay_microseconds: [0]\n"
    "load:\n  concurrency: {min: 1, max: 4}\n"
)
FAST = [
    "--sla-p95-ms",
    "200",
    "--max-trials",
    "3",
    "--finalists",
    "1",
    "--repeats",
    "1",
    "--window",
    "0.5",
    "--time-budget",
    "5m",
    "--seed",
    "1",
]


# ---------------------------------------------------------------- the engine


def _client(url: str) -> Any | None:
    try:
        client = docker.DockerClient(base_url=url, version="auto")
        client.ping()
    except (docker.errors.DockerException, OSError):
        return None
    return client


def _has_image(client: Any) -> bool:
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return False
    return True


def _build() -> str:
    """Run the build script; the DOCKER_HOST it prints."""
    script = next((s for s in BUILD_SCRIPTS if s.is_file()), None)
    if script is None or os.environ.get("AUTOTUNE_SKIP_DOCKER") == "1":
        pytest.skip(
            "no container engine (DOCKER_HOST / podman socket) with the test image, and no "
            "build-triton-image.sh to set one up (AUTOTUNE_BUILD_TRITON_IMAGE)"
        )
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1].split("=", 1)[1]


@pytest.fixture(scope="session")
def engine() -> Iterator[Any]:
    """A client of a reachable engine that has the test image; DOCKER_HOST set to it for the session."""
    url = os.environ.get("DOCKER_HOST") or PODMAN_SOCKET
    client = _client(url)
    if client is None or not _has_image(client):
        url = _build()
        client = _client(url)
        assert client is not None and _has_image(client), f"no engine with {IMAGE} at {url} after the build"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_HOST", url)
        yield client


def _ours(client: Any, pid: int | None = None) -> list[Any]:
    """Containers labelled with ``pid`` (default: this test process) as their owner."""
    label = f"{dl.LABEL_PID}={pid or os.getpid()}"
    return list(client.containers.list(all=True, filters={"label": [f"{dl.LABEL}=1", label]}))


@pytest.fixture
def client(engine: Any) -> Iterator[Any]:
    """The engine; afterwards, any container this test process owns is a failure (and is removed)."""
    yield engine
    left = _ours(engine)
    for container in left:
        container.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"


def _launcher(client: Any, **kwargs: Any) -> dl.DockerLauncher:
    return dl.DockerLauncher(client, DockerOptions(image=IMAGE, shm_size="256m"), run="test", **kwargs)


def _space(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(TINY_SPACE, encoding="utf-8")
    return path


def _run_argv(repo: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--model",
        "toy",
        "--model-repository",
        str(repo),
        "--launcher",
        "docker",
        "--image",
        IMAGE,
        "--shm-size",
        "256m",
        "--reports-dir",
        str(tmp_path / "reports"),
        "--search-space",
        str(_space(tmp_path)),
        *FAST,
        *extra,
    ]


# ---------------------------------------------------------------- 1. a whole run


class _RunLabels(Events):
    """Watches a run: the run label of our containers while a trial measures."""

    def __init__(self, client: Any) -> None:
        self.client, self.run_dir, self.labels = client, Path(), set[str]()

    def run_started(self, run_dir: Path, total: int, budget_s: float | None, then: str = "") -> None:
        self.run_dir = run_dir

    def point_measured(self, number: int, point: Point) -> None:
        self.labels |= {c.labels.get(dl.LABEL_RUN, "") for c in _ours(self.client)}


def test_a_tuning_run_in_containers_labelled_with_the_run_then_applied_in_one(
    client: Any, toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = toy_repo / "toy" / "config.pbtxt"
    original = config.read_bytes()
    argv = _run_argv(toy_repo, tmp_path, "--finalists", "2", "--repeats", "2")
    settings = settings_from(build_parser().parse_args(argv))
    events = _RunLabels(client)
    outcome = tune(prepare(settings), events)
    run_dir = outcome.run_dir
    assert events.labels == {run_dir.name}, "every container carries the run's id"
    assert (run_dir / "report.html").stat().st_size > 10_000
    logs = sorted((run_dir / "logs").glob("trial-*.log"))
    assert logs and all("successfully loaded 'toy'" in log.read_text() for log in logs)
    # two finalists race in one container a round, each loaded under a name of its own
    shared = sorted((run_dir / "logs").glob("race-*+*.log"))
    assert len(outcome.info.verifications) < 2 or shared
    for log in shared:
        numbers = log.name.split("-")[1].split("+")
        assert all(f"successfully loaded 'toy__race{n}'" in log.read_text() for n in numbers)
    assert config.read_bytes() == original
    assert _ours(client) == []
    # write-back is verified on the run's own launcher: a container of the run's image
    assert outcome.winner is not None
    assert main(["apply", str(run_dir)]) == 0
    assert "and loaded it in Triton (container autotune-toy-" in capsys.readouterr().out
    assert "successfully loaded 'toy'" in (run_dir / "logs" / "writeback-verify.log").read_text()
    assert config.read_text() == (run_dir / "winner.pbtxt").read_text()
    assert main(["apply", "--undo", str(run_dir)]) == 0 and config.read_bytes() == original
    assert _ours(client) == []


# ---------------------------------------------------------------- 2. an early exit


def test_a_model_that_fails_to_load_ends_the_container_with_its_reason(
    client: Any, toy_repo: Path, tmp_path: Path
) -> None:
    config = toy_repo / "toy" / "config.pbtxt"
    crash = 'parameters { key: "crash_on_load" value { string_value: "1" } }\n'
    config.write_text(config.read_text() + crash)
    stage = stage_model(toy_repo / "toy", load_config(toy_repo, "toy"), tmp_path / "stage")
    log = tmp_path / "logs" / "trial.log"
    with (
        pytest.raises((ServerExitedError, ModelNotReadyError)) as info,
        _launcher(client, ready_timeout_s=60).serve(stage, "toy", log),
    ):
        pytest.fail("the model must not become ready")
    message = str(info.value)
    assert "exited with exit code 1" in message and "failed to load all models" in message, message
    # the tuner's failure reason: the first error line of the log's tail, which is kept whole
    assert "crash_on_load=1" in failure_line(read_tail(log, 40))
    assert "Failed to initialize Python stub" in log.read_text()


def test_a_failed_start_removes_the_created_container(client: Any, staged_toy: Path) -> None:
    request = dl.container_request(
        DockerOptions(image=IMAGE),
        staged_toy,
        Ports(0, 0, 0),
        dl.owner_labels("t", "toy"),
        f"autotune-badstart-{os.getpid()}",
    )
    request["command"] = ["/no/such/tritonserver"]
    with pytest.raises(LaunchError, match="did not start"):
        dl._create_started(client, request)
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(request["name"])


@pytest.fixture
def staged_toy(toy_repo: Path, tmp_path: Path) -> Path:
    return stage_model(toy_repo / "toy", load_config(toy_repo, "toy"), tmp_path / "stage")


def test_serve_gives_a_ready_server_and_leaves_nothing(client: Any, staged_toy: Path, tmp_path: Path) -> None:
    log = tmp_path / "trial.log"
    with _launcher(client).serve(staged_toy, "toy", log) as server:
        assert server.alive()
        (container,) = _ours(client)
        assert container.status == "running"
        mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
        assert {"/models/toy/config.pbtxt", "/models/toy/1/model.py"} <= set(mounts)  # staging.mirror
        assert not any(m["RW"] for m in mounts.values())
        metrics = scrape(server.metrics_url)  # published on a port of 127.0.0.1; no GPU lines here
        assert metrics is not None and "nv_inference_count" in metrics and parse_metrics(metrics) == ()
    assert not server.alive()
    assert "successfully unloaded 'toy'" in log.read_text()  # a graceful stop, and its log kept


def test_a_port_taken_at_start_is_retried_on_others(
    client: Any, staged_toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed start (the port is taken) leaves a "created" container: it is removed, and new
    ports are tried."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        choices = iter([Ports(port, *free_ports(2))])
        monkeypatch.setattr(
            dl.DockerLauncher, "_ports", lambda self: next(choices, None) or Ports(*free_ports(3))
        )
        names: list[str] = []
        real = dl._create_started

        def recorded(client: Any, request: dict[str, Any]) -> Any:
            names.append(request["name"])
            return real(client, request)

        monkeypatch.setattr(dl, "_create_started", recorded)
        with _launcher(client).serve(staged_toy, "toy", tmp_path / "t.log") as server:
            assert server.http_port != port
            assert len(names) == 2
            with pytest.raises(docker.errors.NotFound):
                client.containers.get(names[0])


def test_an_exception_in_the_block_still_removes_the_container(
    client: Any, staged_toy: Path, tmp_path: Path
) -> None:
    with pytest.raises(KeyboardInterrupt), _launcher(client).serve(staged_toy, "toy", tmp_path / "t.log"):
        assert len(_ours(client)) == 1
        raise KeyboardInterrupt


# ---------------------------------------------------------------- 3. a missing image


def test_a_missing_image_is_one_clear_error_and_no_pull(
    client: Any, toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _run_argv(toy_repo, tmp_path)
    argv[argv.index(IMAGE)] = MISSING_IMAGE
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert f"image {MISSING_IMAGE} is not on the container engine" in err and "--pull" in err, err
    assert err.count("autotune: error:") == 1
    assert not (tmp_path / "reports").exists() or not list((tmp_path / "reports").rglob("trial-*.log"))
    # with --pull the engine is asked to pull it (and cannot: there is no such registry)
    assert main([*argv, "--pull"]) == 3
    assert f"could not pull image {MISSING_IMAGE}" in capsys.readouterr().err


# ---------------------------------------------------------------- 4. leftovers of a killed run


def _leftover(client: Any, owner_pid: int, run: str) -> Any:
    labels = {**dl.owner_labels(run, "toy"), dl.LABEL_PID: str(owner_pid), dl.LABEL_STARTED: ""}
    container = client.containers.create(
        IMAGE, ["sleep", "600"], labels=labels, detach=True, name=f"autotune-leftover-{run}-{owner_pid}"
    )
    container.start()
    return container


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_leftovers_of_dead_owners_are_reaped(client: Any, toy_repo: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    by_clean = _leftover(client, dead, "clean")
    kept = _leftover(client, alive, "alive")
    try:
        assert by_clean.name in dl.reap_containers()
        assert kept.name not in dl.reap_containers(client)
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(by_clean.id)
        kept.reload()
        assert kept.status == "running"
        # the next launcher start reaps too
        by_start = _leftover(client, dead, "start")
        dl.DockerLauncher.from_options(DockerOptions(image=IMAGE), "start")
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(by_start.id)
    finally:
        kept.remove(force=True)
        for container in _ours(client, dead):
            container.remove(force=True)


def test_autotune_clean_reaps_them(client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    dead = _dead_pid()
    _leftover(client, dead, "cli")
    try:
        assert main(["clean"]) == 0
        assert "container(s)" in capsys.readouterr().out
        assert _ours(client, dead) == []
    finally:
        for container in _ours(client, dead):
            container.remove(force=True)


# ---------------------------------------------------------------- 5. Ctrl-C


def test_ctrl_c_mid_trial_stops_and_removes_the_container(
    client: Any, toy_repo: Path, tmp_path: Path
) -> None:
    argv = _run_argv(toy_repo, tmp_path)
    argv[argv.index("--max-trials") + 1] = "50"
    out = (tmp_path / "out.txt").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", *argv],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        _wait_for_a_running_container(client, proc, timeout_s=90)
        time.sleep(1.0)  # into the readiness wait or the measurement
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130, (tmp_path / "out.txt").read_text()[-2000:]
        assert _ours(client, proc.pid) == []
        assert "interrupted" in (tmp_path / "out.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for container in _ours(client, proc.pid):
            container.remove(force=True)
        out.close()


def _wait_for_a_running_container(client: Any, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before a container was started"
        if any(c.status == "running" for c in _ours(client, proc.pid)):
            return
        time.sleep(0.2)
    pytest.fail(f"no container of pid {proc.pid} running after {timeout_s} s")


def test_a_step_of_an_ensemble_is_tuned_in_containers(client: Any, toy_repo: Path, tmp_path: Path) -> None:
    """--step with --launcher docker: each container serves the ensemble and its steps (the
    step's config the candidate's), every point measured through the ensemble."""
    from tests.test_pipeline import _toy_pipeline

    repo = _toy_pipeline(toy_repo)
    argv = [a if a != "toy" else "pipe" for a in _run_argv(repo, tmp_path, "--step", "slow")]
    outcome = tune(prepare(settings_from(build_parser().parse_args(argv))))
    logs = sorted((outcome.run_dir / "logs").glob("trial-*.log"))
    assert logs and all("successfully loaded 'pipe'" in log.read_text() for log in logs)
    assert outcome.winner is not None and outcome.baseline is not None and outcome.baseline.best is not None
    assert set(outcome.baseline.best.server.steps) == {"toy", "slow"}
    assert _ours(client) == []


def test_two_models_share_each_container(client: Any, toy_repo: Path, tmp_path: Path) -> None:
    """--model toy --model twin with --launcher docker: each container serves both models, and
    every point loads both (each model's own figures kept)."""
    from tests.test_shared_server import _twin_repo

    repo = _twin_repo(toy_repo)
    argv = _run_argv(repo, tmp_path, "--model", "twin")
    outcome = tune(prepare(settings_from(build_parser().parse_args(argv))))
    logs = sorted((outcome.run_dir / "logs").glob("trial-*.log"))
    assert logs and all("successfully loaded 'twin'" in log.read_text() for log in logs)
    assert outcome.winner is not None and outcome.winner.best is not None
    assert [name for name, _ in outcome.winner.best.others] == ["toy", "twin"]
    assert _ours(client) == []
