"""Serving a config that builds a TensorRT engine (autotune.trt_build): its longer time to get
ready, and failure reasons that say the build did not finish or failed. A launcher whose
servers are plain records: what is tested is the rule, not a server."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autotune import model_config as mc
from autotune import trt_build
from autotune.errors import LaunchError, ModelNotReadyError, ServerExitedError
from autotune.launch._base import Launcher, Ports, Server, Started, read_tail
from autotune.search_space import Candidate
from autotune.trials import _reason

ONNX = """
name: "resnet"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]
instance_group [ { count: 1 kind: KIND_GPU } ]
"""
PLAIN = Candidate(1, "KIND_GPU", (), 8, False, (), 0, False)
FP16 = replace(PLAIN, trt_fp16=True, trt_workspace_mb=1024)
# Written for these tests, not captured from a run: lines in the shape Triton and onnxruntime's
# TensorRT execution provider print them (see tests/test_launch_base.py).
TRT_OOM = (
    "2024-04-12 10:02:11.000000000 [E:onnxruntime:log, tensorrt_execution_provider.h:88 log] "
    "[2024-04-12 10:02:11   ERROR] 2: [virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: "
    "OutOfMemory (no further information)"
)
LOAD_FAILED = (
    "E0412 10:02:11.500000 1 model_lifecycle.cc:638] failed to load 'resnet' version 1: Internal: onnx "
    "runtime error 1: TensorRT EP failed to create engine from network for fused node: "
    "TensorrtExecutionProvider_TRTKernel_graph_main_graph_1234_0_0"
)
MISSING_FILE = (
    "E0412 10:00:02.000000 1 model_lifecycle.cc:638] failed to load 'resnet' version 1: Not found: "
    "unable to load model file /models/resnet/1/model.onnx"
)


class Scripted(Launcher[int]):
    """Readiness ends as ``outcome`` says, with ``log`` written to the server's log first."""

    name = "scripted"

    def __init__(self, outcome: str = "ok", log: str = "") -> None:
        super().__init__(ready_timeout_s=180.0)
        self.outcome, self.log = outcome, log
        self.timeouts: list[float] = []

    def _start(self, repository: Path, model: str, log_path: Path, ports: Ports) -> Started[int]:
        return Started(Server("127.0.0.1", ports.http, ports.grpc, log_path, alive=lambda: True), 1)

    def _wait_ready(self, started: Started[int], model: str, timeout_s: float) -> None:
        self.timeouts.append(timeout_s)
        assert started.server.log_path is not None
        started.server.log_path.write_text(self.log + "\n", encoding="utf-8")
        tail = f" (log: {started.server.log_path})\n{self.log}"
        if self.outcome == "late":
            raise ModelNotReadyError(f"model {model!r} was not ready after {timeout_s:.0f} s{tail}")
        if self.outcome == "exit":
            raise ServerExitedError(
                f"tritonserver (pid 7) exited with exit code 1 before model {model!r} was ready{tail}"
            )

    def _stop(self, started: Started[int], *, failed: bool) -> None:
        pass


def _serve(launcher: Scripted, candidate: Candidate, log: Path, build_s: float = 900.0) -> None:
    config = mc.apply_candidate(mc.parse_config(ONNX), candidate)
    with trt_build.serving(launcher, Path("repo"), "resnet", log, config, build_s):
        pass


def _failure(launcher: Scripted, candidate: Candidate, log: Path) -> tuple[LaunchError, str]:
    """The error and the trial's failure reason, as the tuner makes it from the log's tail."""
    with pytest.raises(LaunchError) as info:
        _serve(launcher, candidate, log)
    return info.value, _reason(info.value, read_tail(log, 40))


def test_only_a_config_with_tensorrt_gets_the_build_time(tmp_path: Path) -> None:
    launcher = Scripted()
    _serve(launcher, PLAIN, tmp_path / "a.log")
    _serve(launcher, FP16, tmp_path / "b.log")
    _serve(launcher, FP16, tmp_path / "c.log", build_s=60.0)  # never less than the usual limit
    assert launcher.timeouts == [180.0, 900.0, 180.0]


def test_a_build_that_runs_out_of_time_says_so(tmp_path: Path) -> None:
    error, reason = _failure(Scripted("late", "I0412 ... building"), FP16, tmp_path / "t.log")
    assert isinstance(error, ModelNotReadyError)
    assert reason.startswith(
        "the TensorRT engine build did not finish within 900 s (--trt-build-timeout-s): "
        "model 'resnet' was not ready after 900 s"
    )
    assert str(error).splitlines()[1:] == ["I0412 ... building"]  # the log tail stays below


def test_a_build_that_fails_says_so_with_tensorrts_error(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    error, reason = _failure(Scripted("exit", f"{TRT_OOM}\n{LOAD_FAILED}"), FP16, log)
    assert isinstance(error, ServerExitedError)
    assert reason == (
        "the TensorRT engine build failed: tritonserver (pid 7) exited with exit code 1 before model "
        f"'resnet' was ready (log: {log}) — failed to load 'resnet' version 1 — TensorRT: 2: "
        "[virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: OutOfMemory (no further information)"
    )


def test_other_failures_are_not_blamed_on_tensorrt(tmp_path: Path) -> None:
    _, reason = _failure(Scripted("exit", MISSING_FILE), FP16, tmp_path / "t.log")
    assert "TensorRT" not in reason and reason.endswith(
        "unable to load model file /models/resnet/1/model.onnx"
    )
    with pytest.raises(ModelNotReadyError, match=r"^model 'resnet' was not ready after 180 s"):
        _serve(Scripted("late"), PLAIN, tmp_path / "plain.log")  # no TensorRT: as the launcher says


def test_errors_after_the_model_is_ready_are_the_callers(tmp_path: Path) -> None:
    config = mc.apply_candidate(mc.parse_config(ONNX), FP16)
    raised = ServerExitedError("tritonserver exited during the measurement")
    serving = trt_build.serving(Scripted("ok", TRT_OOM), Path("repo"), "resnet", tmp_path / "t.log", config)
    with pytest.raises(ServerExitedError) as info, serving:
        raise raised
    assert info.value is raised  # not relabelled, though the log holds a TensorRT error
