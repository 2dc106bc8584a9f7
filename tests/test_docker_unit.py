"""The docker launcher's pure parts, without an engine: the container request it builds
(GPUs, read-only mounts, ports, labels), engine discovery, and who owns a leftover.

podman accepts ``device_requests`` and ignores them, so the GPU request is checked here, as built.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from autotune.errors import LaunchError, UsageError
from autotune.launch import docker as dl
from autotune.launch import make_launcher
from autotune.launch._base import Ports
from autotune.model_config import load_config
from autotune.settings import DockerOptions, Launch
from autotune.staging import stage_model


@pytest.fixture
def staged(toy_repo: Path, tmp_path: Path) -> Path:
    return stage_model(toy_repo / "toy", load_config(toy_repo, "toy"), tmp_path / "stage")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------- GPUs


def test_no_gpus_asks_for_no_devices() -> None:
    assert dl.device_requests("") == []


def test_all_gpus_is_count_minus_one() -> None:
    (request,) = dl.device_requests("all")
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert not request["DeviceIDs"]


@pytest.mark.parametrize(
    ("gpus", "ids"),
    [("0", ["0"]), ("0,1", ["0", "1"]), (" 2, 3 ", ["2", "3"]), ("GPU-8f2a1c", ["GPU-8f2a1c"])],
)
def test_gpu_ids_are_device_ids(gpus: str, ids: list[str]) -> None:
    (request,) = dl.device_requests(gpus)
    assert request["DeviceIDs"] == ids and request["Capabilities"] == [["gpu"]]
    assert not request["Count"]


@pytest.mark.parametrize(("gpus", "count"), [("", 0), ("  ", 0), ("0", 1), ("0,1", 2), (" 2, 3 ", 2),
                                             ("GPU-8f2a1c,GPU-77aa", 2), ("all", 1)])  # fmt: skip
def test_the_gpus_a_container_gets(gpus: str, count: int) -> None:
    """What `kind: auto` follows; "all" counts as one (the engine's host is not asked)."""
    assert dl.gpu_count(gpus) == count


@pytest.mark.parametrize("gpus", ["0;1", "0,,1", "all,0", "$(id)"])
def test_bad_gpus_are_a_usage_error(gpus: str) -> None:
    with pytest.raises(UsageError, match="--gpus"):
        dl.device_requests(gpus)


def test_bad_gpus_fail_before_the_engine_is_asked(toy_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    launch = Launch("docker", docker=DockerOptions(gpus="0;1"))
    with pytest.raises(UsageError):
        make_launcher(launch, "run-1")


# ---------------------------------------------------------------- mounts and the request


def test_mounts_are_read_only_binds_of_the_resolved_files(staged: Path, toy_repo: Path) -> None:
    mounts = {m["Target"]: m for m in dl.model_mounts(staged)}
    assert set(mounts) == {"/models/toy/config.pbtxt", "/models/toy/1/model.py"}
    assert all(m["Type"] == "bind" and m["ReadOnly"] for m in mounts.values())
    # the candidate's config from the stage; the user's file itself, not the symlink (a folder
    # with Python sources is made anew in the stage, its files linked one by one)
    assert mounts["/models/toy/config.pbtxt"]["Source"] == str((staged / "toy" / "config.pbtxt").resolve())
    assert mounts["/models/toy/1/model.py"]["Source"] == str((toy_repo / "toy" / "1" / "model.py").resolve())


def test_a_dangling_model_file_is_refused(staged: Path, toy_repo: Path) -> None:
    shutil.rmtree(toy_repo / "toy" / "1")  # the stage still links to it
    with pytest.raises(LaunchError, match="does not exist"):
        dl.model_mounts(staged)


def test_the_container_request(staged: Path) -> None:
    options = DockerOptions(image="example/triton:1", gpus="all", shm_size="2g")
    labels = dl.owner_labels("run-1", "toy")
    request = dl.container_request(options, staged, Ports(18000, 18001, 18002), labels, "autotune-toy-1")
    assert request["image"] == "example/triton:1" and request["name"] == "autotune-toy-1"
    assert request["command"][0] == "tritonserver"
    assert {"--model-repository=/models", "--exit-timeout-secs=5", "--allow-metrics=true",
            "--allow-gpu-metrics=true", "--metrics-port=8002"} <= set(request["command"])  # fmt: skip
    assert request["ports"] == {
        "8000/tcp": ("127.0.0.1", 18000), "8001/tcp": ("127.0.0.1", 18001), "8002/tcp": ("127.0.0.1", 18002),
    }  # fmt: skip
    assert request["shm_size"] == "2g"
    assert request["device_requests"] == dl.device_requests("all")
    assert request["labels"] == labels
    assert "auto_remove" not in request  # it would lose the exit code and the log


def test_owner_labels_name_this_process() -> None:
    labels = dl.owner_labels("r", "toy")
    assert labels[dl.LABEL] == "1" and labels[dl.LABEL_RUN] == "r" and labels[dl.LABEL_MODEL] == "toy"
    assert labels[dl.LABEL_PID] == str(os.getpid()) and labels[dl.LABEL_HOST] == socket.gethostname()
    assert labels[dl.LABEL_STARTED]


# ---------------------------------------------------------------- leftovers: whose are they


def test_a_live_owner_keeps_its_containers() -> None:
    assert not dl.owner_gone(dl.owner_labels("r", "toy"))


def test_a_dead_owner_leaves_leftovers() -> None:
    labels = {**dl.owner_labels("r", "toy"), dl.LABEL_PID: str(_dead_pid())}
    assert dl.owner_gone(labels)


def test_a_reused_pid_is_not_the_owner() -> None:
    labels = {**dl.owner_labels("r", "toy"), dl.LABEL_STARTED: "1"}
    assert dl.owner_gone(labels)


@pytest.mark.parametrize(
    "change", [{dl.LABEL_HOST: "another-host"}, {dl.LABEL_PID: "not-a-pid"}, {dl.LABEL_HOST: ""}]
)
def test_containers_of_other_hosts_are_never_judged(change: dict[str, str]) -> None:
    labels = {**dl.owner_labels("r", "toy"), dl.LABEL_PID: str(_dead_pid()), **change}
    assert not dl.owner_gone(labels)


# ---------------------------------------------------------------- finding the engine


def test_docker_host_wins(tmp_path: Path) -> None:
    assert (
        dl.engine_url({"DOCKER_HOST": "tcp://10.0.0.1:2375"}, [str(tmp_path / "x.sock")])
        == "tcp://10.0.0.1:2375"
    )


def test_the_first_existing_socket_is_used(tmp_path: Path) -> None:
    path = tmp_path / "engine.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        (tmp_path / "plain-file.sock").write_text("")
        candidates = [str(tmp_path / "absent.sock"), str(tmp_path / "plain-file.sock"), str(path)]
        found = dl.engine_url({}, candidates)
    assert found == f"unix://{path}"
    assert dl.engine_url({}, [str(tmp_path / "absent.sock")]) is None


def test_an_unreachable_engine_says_how_to_point_at_one(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="cannot reach the container engine") as info:
        dl.connect({"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert "DOCKER_HOST" in info.value.hint
    assert isinstance(info.value.__cause__, Exception)
