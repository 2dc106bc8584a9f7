"""The sequence every launcher shares (launch._base.Launcher): ports, one retry when a port
was taken, readiness, and a teardown on every path. A launcher whose servers are plain
records: what is tested is the base class's logic, not a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ModelNotReadyError, ServerExitedError
from autotune.launch._base import (
    READY_TIMEOUT_S,
    Launcher,
    PortClash,
    Ports,
    Server,
    Started,
    failure_line,
    tensorrt_error,
)


class Recorder(Launcher[int]):
    """Starts "servers" numbered 1, 2, ...; ``outcomes`` says how each start and readiness ends."""

    name = "recorder"

    def __init__(self, outcomes: list[str], log: Path) -> None:
        super().__init__()
        self.outcomes, self.log = outcomes, log
        self.started: list[tuple[int, Ports]] = []
        self.stopped: list[tuple[int, bool]] = []
        self.timeouts: list[float] = []
        self.ports = iter([Ports(1000, 1001, 1002), Ports(2000, 2001, 2002), Ports(3000, 3001, 3002)])

    def _ports(self) -> Ports:
        return next(self.ports)

    def _start(self, repository: Path, model: str, log_path: Path, ports: Ports) -> Started[int]:
        number = len(self.started) + 1
        self.started.append((number, ports))
        if self.outcomes[number - 1] == "start-clash":
            raise PortClash("port is already allocated")
        server = Server("127.0.0.1", ports[0], ports[1], self.log, alive=lambda: True)
        return Started(server, number)

    def _wait_ready(self, started: Started[int], model: str, timeout_s: float) -> None:
        self.timeouts.append(timeout_s)
        outcome = self.outcomes[started.handle - 1]
        if outcome == "exit-clash":
            self.log.write_text("E... failed to bind: Address already in use\n")
            raise ServerExitedError("tritonserver exited")
        if outcome == "metrics-clash":  # tritonserver 2.51's line when its metrics port is taken
            self.log.write_text(
                'E1124 15:27:27.883280 17344 main.cc:293] "failed to start Metrics service: '
                "Unavailable - Socket '127.0.0.1:1002' already in use \"\n"
            )
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


@pytest.mark.parametrize("first", ["exit-clash", "metrics-clash", "start-clash"])
def test_a_port_clash_is_retried_once_on_other_ports(log: Path, first: str) -> None:
    launcher = Recorder([first, "ok"], log)
    with launcher.serve(Path("repo"), "m", log) as server:
        assert server.http_port == 2000
    assert [ports for _, ports in launcher.started] == [(1000, 1001, 1002), (2000, 2001, 2002)]  # all new
    stopped_first = [] if first == "start-clash" else [(1, True)]  # a start that raised left nothing
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
    assert launcher.started == [(1, (1000, 1001, 1002))] and launcher.stopped == [(1, True)]


def test_a_serve_may_give_the_model_longer_to_get_ready(log: Path) -> None:
    launcher = Recorder(["ok", "ok"], log)
    with launcher.serve(Path("repo"), "m", log):
        pass
    with launcher.serve(Path("repo"), "m", log, ready_timeout_s=900.0):
        pass
    assert launcher.timeouts == [READY_TIMEOUT_S, 900.0]


# Server logs of a TensorRT engine build that failed. Written for these tests, not captured from
# a run: each line has the shape Triton and onnxruntime's TensorRT execution provider (or
# TensorFlow's TF-TRT) print, as their issue trackers show them; the messages are made up.
ORT_WARNING = (
    "2024-04-12 10:00:05.123456789 [W:onnxruntime:log, tensorrt_execution_provider.h:86 log] "
    "[2024-04-12 10:00:05 WARNING] onnx2trt_utils.cpp:374: Your ONNX model has been generated with "
    "INT64 weights, while TensorRT does not natively support INT64. Attempting to cast down to INT32."
)
ORT_OOM = (
    "2024-04-12 10:02:11.000000000 [E:onnxruntime:log, tensorrt_execution_provider.h:88 log] "
    "[2024-04-12 10:02:11   ERROR] 2: [virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: "
    "OutOfMemory (no further information)"
)
# older onnxruntime wrote TensorRT's errors at its own warning level
ORT_OLD_ERROR = (
    "2024-04-12 10:02:11.000000000 [W:onnxruntime:Default, tensorrt_execution_provider.h:35 log] "
    "[2024-04-12 10:02:11   ERROR] Network validation failed."
)
TRITON_TRT_LOAD = (
    "E0412 10:02:11.500000 1 model_lifecycle.cc:638] failed to load 'resnet' version 1: Internal: "
    "onnx runtime error 6: Exception during initialization: /workspace/onnxruntime/onnxruntime/core/"
    "providers/tensorrt/tensorrt_execution_provider.cc:2415 TensorRT EP failed to create engine from "
    "network for fused node: TensorrtExecutionProvider_TRTKernel_graph_main_graph_1234_0_0"
)
TRITON_SHAPE_LOAD = (
    "E0412 10:02:11.500000 1 model_lifecycle.cc:638] failed to load 'resnet' version 1: Invalid "
    "argument: model 'resnet', tensor 'input': the model expects 4 dimensions (shape [-1,3,224,224]) "
    "but the model configuration specifies 3 dimensions (an initial batch dimension because "
    "max_batch_size > 0 followed by the explicit tensor shape, making complete shape [-1,3,224])"
)
TF_TRT_ERROR = (
    "2024-04-12 10:03:00.000000: E tensorflow/compiler/tf2tensorrt/utils/trt_logger.cc:42] "
    "DefaultLogger 2: [ltWrapper.cpp::setupHeuristic::327] Error Code 2: Internal Error "
    "(Assertion cublasStatus == CUBLAS_STATUS_SUCCESS failed. )"
)
STARTUP = (
    "I0412 10:00:01.000000 1 onnxruntime.cc:2900] TRITONBACKEND_ModelInstanceInitialize: resnet_0_0 "
    "(GPU device 0)"
)


def test_a_tensorrt_load_failure_names_tensorrts_own_error() -> None:
    log = "\n".join([STARTUP, ORT_WARNING, ORT_OOM, TRITON_TRT_LOAD, "error: creating server: Internal"])
    assert tensorrt_error(log) == (
        "TensorRT: 2: [virtualMemoryBuffer.cpp::resizePhysical::145] Error Code 2: "
        "OutOfMemory (no further information)"
    )
    assert failure_line(log) == f"failed to load 'resnet' version 1 — {tensorrt_error(log)}"
    alone = "\n".join([STARTUP, TRITON_TRT_LOAD])  # no TensorRT line before it: the load error says it
    assert failure_line(alone).startswith("failed to load 'resnet' version 1: Internal: onnx runtime error 6")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (ORT_OLD_ERROR, "TensorRT: Network validation failed."),
        (
            TF_TRT_ERROR,
            "TensorRT: DefaultLogger 2: [ltWrapper.cpp::setupHeuristic::327] Error Code 2: Internal",
        ),
        (
            "2024-04-12T10:02:11Z load resnet with the candidate config: FAILED: loading model 'resnet': "
            "load failed for model 'resnet': version 1 is at UNAVAILABLE state: Internal: onnx runtime "
            "error 1: TensorRT EP could not build engine for fused node: "
            "TensorrtExecutionProvider_TRTKernel_0_0;",
            "TensorRT EP could not build engine for fused node: TensorrtExecutionProvider_TRTKernel_0_0",
        ),
    ],
)
def test_tensorrt_errors_of_a_build_that_did_not_end_in_a_load_error(line: str, said: str) -> None:
    """A build still running (or a server that died in it) has no load error: TensorRT's is the
    telling line, before any other error."""
    log = "\n".join([STARTUP, ORT_WARNING, line, "E0412 10:05:00.000000 1 server.cc:300] Timeout 30: ..."])
    assert failure_line(log).startswith(said)


def test_tensorrt_warnings_and_other_errors_are_not_tensorrt_errors() -> None:
    log = "\n".join([STARTUP, ORT_WARNING, TRITON_SHAPE_LOAD])
    assert tensorrt_error(log) == ""
    assert failure_line(log).startswith(
        "failed to load 'resnet' version 1: Invalid argument"
    )  # not swallowed
    recovered = "\n".join(
        [ORT_OOM, TRITON_SHAPE_LOAD]
    )  # a TensorRT error, then a load error of another cause
    assert failure_line(recovered).startswith("failed to load 'resnet' version 1: Invalid argument")
    warned = ORT_WARNING.replace(
        "Attempting to cast down to INT32.", "Weights may overflow: errors possible."
    )
    assert failure_line(warned) == ""  # onnxruntime's warnings are no error, whatever they say


def test_a_model_that_did_not_load_is_told_in_tritons_words() -> None:
    """The model's own load error, however far above the log's end (a model folder without a
    version: Triton says so in a line and in its status table, then 40 lines of shutdown)."""
    log = "\n".join(
        [
            'W1127 04:47:16.563005 1 pinned_memory_manager.cc:273] "Unable to allocate pinned memory"',
            "E1127 04:47:16.563969 1 model_repository_manager.cc:724] \"failed to load model 'toy': at "
            "least one version must be available under the version policy of model 'toy'\"",
            "| toy   | -       | Not loaded: No model version was found |",
            *["I1127 04:47:16.565503 1 server.cc:321] shutting down"] * 40,
            "error: creating server: Internal - failed to load all models",
        ]
    )
    assert failure_line(log).startswith("failed to load model 'toy': at least one version must be available")
    assert failure_line(log.split("\n", 2)[2]) == "model No model version was found"
