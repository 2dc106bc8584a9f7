"""Triton python-backend ``model.py`` that serves ``model.onnx`` with ONNX Runtime on CPU.

Copy it as ``<model>/<version>/model.py`` beside ``model.onnx``. The input and output names
and data types come from ``config.pbtxt`` and must match the ONNX graph's. Every call to
``execute`` runs the whole dynamic batch as ONE ONNX Runtime call: each input is
concatenated across requests along axis 0 (a request may itself carry a batch), and the
outputs are split back by each request's batch size. With ``max_batch_size: 0`` (no batch
dimension) requests run one by one. A request that fails gets an error response; the
other requests of the batch are still answered.

Config parameters (``parameters { key: ... value { string_value: ... } }``):

    intra_op_threads   ONNX Runtime intra-op threads (default "1")
    allow_spinning     "1" lets idle intra-op threads spin (default "0")
    request_wait_ms    milliseconds each request waits before the batch runs (default "0"), as
                       a python model waiting on I/O per request does (a feature-store lookup,
                       a remote call): the instance is busy, the CPU is not

Keep numpy < 2 in the Python that runs the stub: with numpy 2, the python backend of
tritonserver 2.51 returns empty output tensors.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

Array = npt.NDArray[Any]
Feeds = dict[str, Array]
RunFn = Callable[[Feeds], list[Array]]
# Per request: its outputs in config order, or an error message.
Result = list[Array] | str

MODEL_FILE = "model.onnx"


def config_parameter(config: dict[str, Any], key: str, default: str) -> str:
    """A ``parameters`` entry of the model config (as Triton's JSON), or the default."""
    value = config.get("parameters", {}).get(key, {}).get("string_value", default)
    return str(value)


def make_session(path: str, intra_op_threads: int = 1, allow_spinning: bool = False) -> Any:
    """An ONNX Runtime CPU session: sequential execution, one inter-op thread."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


def batch_size(feeds: Feeds) -> int | str:
    """The shared leading dimension of a request's inputs, or why there is none."""
    sizes = {name: array.shape[0] if array.ndim else -1 for name, array in feeds.items()}
    if len(set(sizes.values())) != 1 or -1 in sizes.values():
        return f"inputs must share one batch dimension, got leading dims {sizes}"
    return next(iter(sizes.values()))


def shape_groups(requests: Sequence[Feeds]) -> list[list[int]]:
    """Indices of requests whose inputs can be concatenated (same names, dtypes, inner shapes).

    Triton's dynamic batcher only groups requests of equal shapes, so this is one group
    in practice; it keeps a mixed batch correct all the same.
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, feeds in enumerate(requests):
        key = tuple((name, a.dtype.str, a.shape[1:]) for name, a in sorted(feeds.items()))
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def pad_rows(feeds: Feeds, pad_to: int) -> Feeds:
    """The inputs with their last row repeated up to the next multiple of ``pad_to`` rows."""
    rows = next(iter(feeds.values())).shape[0]
    extra = -rows % pad_to
    if extra == 0:
        return feeds
    return {name: np.concatenate([a, np.repeat(a[-1:], extra, axis=0)]) for name, a in feeds.items()}


def run_group(run: RunFn, group: Sequence[Feeds], sizes: Sequence[int], pad_to: int = 1) -> list[Result]:
    """One call for a group of requests, padded to a multiple of ``pad_to`` rows; the outputs,
    without the padding, split back by batch size."""
    if len(group) == 1:
        feeds = group[0]
    else:
        feeds = {name: np.concatenate([f[name] for f in group]) for name in group[0]}
    total = sum(sizes)
    feeds = pad_rows(feeds, pad_to)
    rows = next(iter(feeds.values())).shape[0]
    try:
        outputs = run(feeds)
    except Exception as exc:  # onnxruntime raises several unrelated exception types
        return [f"onnxruntime failed on a batch of {total}: {exc}"] * len(group)
    wrong = [o.shape for o in outputs if o.ndim == 0 or o.shape[0] != rows]
    if wrong:
        return [f"output shapes {wrong} do not start with the batch size {rows}"] * len(group)
    outputs = [o[:total] for o in outputs]
    bounds = np.cumsum(sizes)[:-1]
    parts = [np.split(output, bounds) for output in outputs]
    return [[part[i] for part in parts] for i in range(len(group))]


def run_batched(run: RunFn, requests: Sequence[Feeds | str], pad_to: int = 1) -> list[Result]:
    """Run the valid requests, one call per shape group (padded to a multiple of ``pad_to``
    rows); a string is an error to pass on."""
    results: list[Result] = []
    pending: list[tuple[int, Feeds, int]] = []
    for index, feeds in enumerate(requests):
        results.append("")
        if isinstance(feeds, str):
            results[index] = feeds
        elif isinstance(size := batch_size(feeds), str):
            results[index] = size
        else:
            pending.append((index, feeds, size))
    for group in shape_groups([feeds for _, feeds, _ in pending]):
        members = [pending[g] for g in group]
        feeds_of, sizes = [feeds for _, feeds, _ in members], [size for _, _, size in members]
        answers = run_group(run, feeds_of, sizes, pad_to)
        for (index, _, _), answer in zip(members, answers, strict=True):
            results[index] = answer
    return results


def run_each(run: RunFn, requests: Sequence[Feeds | str]) -> list[Result]:
    """No batch dimension (max_batch_size 0): one call per request."""
    results: list[Result] = []
    for feeds in requests:
        if isinstance(feeds, str):
            results.append(feeds)
            continue
        try:
            results.append(run(feeds))
        except Exception as exc:  # onnxruntime raises several unrelated exception types
            results.append(f"onnxruntime failed: {exc}")
    return results


class TritonPythonModel:
    """Serve ``model.onnx`` from this model's version directory."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in config["output"]}
        self.batching = int(config.get("max_batch_size", 0)) > 0
        if int(np.__version__.split(".")[0]) >= 2:
            pb_utils.Logger.log_warn(
                f"numpy {np.__version__}: the python backend of tritonserver 2.51 returns empty "
                "outputs with numpy 2; install numpy<2 in the Python that runs the stub"
            )
        path = os.path.join(args["model_repository"], args["model_version"], MODEL_FILE)
        self.session = make_session(
            path,
            intra_op_threads=int(config_parameter(config, "intra_op_threads", "1")),
            allow_spinning=config_parameter(config, "allow_spinning", "0") == "1",
        )
        self._check_names(path)
        self.wait_s = float(config_parameter(config, "request_wait_ms", "0")) / 1000.0
        self.pad_to = max(1, int(config_parameter(config, "pad_to", "1")))

    def _check_names(self, path: str) -> None:
        onnx_inputs = {i.name for i in self.session.get_inputs()}
        onnx_outputs = {o.name for o in self.session.get_outputs()}
        missing = sorted((set(self.inputs) - onnx_inputs) | (set(self.outputs) - onnx_outputs))
        if missing:
            raise pb_utils.TritonModelException(
                f"{path}: config names {missing} are not in the ONNX graph "
                f"(inputs {sorted(onnx_inputs)}, outputs {sorted(onnx_outputs)})"
            )

    def _run(self, feeds: Feeds) -> list[Array]:
        return list(self.session.run(list(self.outputs), feeds))

    def _feeds(self, request: Any) -> Feeds | str:
        feeds: Feeds = {}
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                return f"missing input {name!r}"
            feeds[name] = tensor.as_numpy()
        return feeds

    def _response(self, result: Result) -> Any:
        if isinstance(result, str):
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(result))
        tensors = [
            pb_utils.Tensor(name, np.ascontiguousarray(array, dtype=dtype))
            for (name, dtype), array in zip(self.outputs.items(), result, strict=True)
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests: list[Any]) -> list[Any]:
        if self.wait_s > 0:  # one round trip per request, one after the other
            time.sleep(self.wait_s * len(requests))
        feeds = [self._feeds(request) for request in requests]
        if not self.batching:
            return [self._response(result) for result in run_each(self._run, feeds)]
        return [self._response(result) for result in run_batched(self._run, feeds, self.pad_to)]

    def finalize(self) -> None:
        self.session = None
