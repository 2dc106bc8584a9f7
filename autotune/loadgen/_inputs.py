"""Request payloads: tensors from the model's metadata, encoded once for HTTP and gRPC.

Random data honours each input's datatype and shape (integers in [0, 100) so embedding
lookups stay in range; BYTES as short strings), or comes from perf_analyzer's
``--input-data`` JSON format. Requests are encoded once, before the load starts.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from autotune.errors import UsageError

NP_TYPES: dict[str, Any] = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BYTES": np.object_,
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # without the batch dimension; -1 for variable


@dataclass(frozen=True)
class ModelIO:
    name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], config: Mapping[str, Any]) -> ModelIO:
        mbs = int(config.get("max_batch_size", 0))

        def specs(items: Sequence[Mapping[str, Any]]) -> tuple[TensorSpec, ...]:
            return tuple(
                TensorSpec(t["name"], t["datatype"], tuple(int(d) for d in t["shape"])[1 if mbs > 0 else 0 :])
                for t in items
            )

        inputs, outputs = specs(metadata.get("inputs", [])), specs(metadata.get("outputs", []))
        return cls(metadata["name"], mbs, inputs, outputs)


@dataclass(frozen=True)
class Payload:
    """One request's tensors, in request order, with the batch dimension included."""

    model: str
    tensors: tuple[tuple[TensorSpec, NDArray[Any]], ...]
    outputs: tuple[str, ...]
    batch_size: int


def random_payload(
    io: ModelIO,
    batch_size: int = 1,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
) -> Payload:
    rng = np.random.default_rng(seed)
    tensors = []
    for spec in io.inputs:
        dims = _dims(spec, shapes or {})
        full = (batch_size, *dims) if io.max_batch_size > 0 else dims
        tensors.append((spec, _random(spec.datatype, full, rng)))
    return Payload(io.name, tuple(tensors), tuple(o.name for o in io.outputs), batch_size)


def payload_from_file(
    io: ModelIO, path: Path, batch_size: int = 1, shapes: Mapping[str, Sequence[int]] | None = None
) -> Payload:
    """perf_analyzer's ``--input-data`` JSON: ``{"data": [{"NAME": [...] | {"content": [...],
    "shape": [...]} | {"b64": "..."}}]}``. The first entry is used for every request; a
    shape (from the entry, else ``shapes``, else the model's) excludes the batch dimension."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        entry = doc["data"][0]
        if not isinstance(entry, dict):
            raise TypeError("data[0] is not an object of inputs (sequence data is not supported)")
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise UsageError(f"{path}: not perf_analyzer input data: {exc}") from exc
    tensors = []
    for spec in io.inputs:
        if spec.name not in entry:
            raise UsageError(f"{path}: no data for input {spec.name!r}")
        array = _from_json(spec, entry[spec.name], (shapes or {}).get(spec.name))
        tensors.append((spec, np.stack([array] * batch_size) if io.max_batch_size > 0 else array))
    return Payload(io.name, tuple(tensors), tuple(o.name for o in io.outputs), batch_size)


def _from_json(spec: TensorSpec, value: Any, shape: Sequence[int] | None) -> NDArray[Any]:
    """One input's tensor (without the batch dimension) from its JSON value."""
    if spec.datatype not in NP_TYPES:
        raise UsageError(f"input {spec.name!r}: datatype {spec.datatype} is not supported")
    if isinstance(value, dict):
        shape = value.get("shape", shape)
        if "b64" in value:
            array = _from_b64(spec, value["b64"])
        elif "content" in value:
            array = _from_content(spec, value["content"])
        else:
            raise UsageError(f"input {spec.name!r}: an object needs 'content' or 'b64'")
    else:
        array = _from_content(spec, value)
    dims = tuple(int(d) for d in shape) if shape else tuple(d if d > 0 else -1 for d in spec.shape)
    try:
        return array.reshape(dims)
    except ValueError as exc:
        raise UsageError(f"input {spec.name!r}: {array.size} values do not fit shape {list(dims)}") from exc


def _from_content(spec: TensorSpec, content: Any) -> NDArray[Any]:
    if spec.datatype == "BYTES":
        items = np.ravel(np.asarray(content, dtype=np.object_))
        return np.array([v if isinstance(v, bytes) else str(v).encode() for v in items], dtype=np.object_)
    try:
        return np.ravel(np.asarray(content, dtype=NP_TYPES[spec.datatype]))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"input {spec.name!r}: cannot read the data as {spec.datatype}: {exc}") from exc


def _from_b64(spec: TensorSpec, text: Any) -> NDArray[Any]:
    try:
        raw = base64.b64decode(str(text), validate=True)
    except binascii.Error as exc:
        raise UsageError(f"input {spec.name!r}: 'b64' is not base64: {exc}") from exc
    if spec.datatype == "BYTES":
        return np.array([raw], dtype=np.object_)
    dtype = np.dtype(NP_TYPES[spec.datatype])
    if len(raw) % dtype.itemsize:
        raise UsageError(f"input {spec.name!r}: {len(raw)} bytes are not whole {spec.datatype} values")
    return np.frombuffer(raw, dtype=dtype).copy()


def _dims(spec: TensorSpec, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
    if spec.name in shapes:
        return tuple(int(d) for d in shapes[spec.name])
    if any(d < 0 for d in spec.shape):
        raise UsageError(
            f"input {spec.name!r} has a variable shape {list(spec.shape)}: give --shape {spec.name}:D1,D2"
        )
    return spec.shape


def _random(datatype: str, shape: tuple[int, ...], rng: np.random.Generator) -> NDArray[Any]:
    if datatype not in NP_TYPES:
        raise UsageError(f"datatype {datatype} is not supported by the load generator")
    if datatype == "BYTES":
        flat = [bytes(rng.integers(97, 123, size=8, dtype=np.uint8)) for _ in range(int(np.prod(shape)))]
        return np.array(flat, dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if datatype.startswith(("INT", "UINT")):
        return rng.integers(0, 100, size=shape).astype(NP_TYPES[datatype])
    return rng.random(size=shape).astype(NP_TYPES[datatype])


def raw_bytes(array: NDArray[Any], datatype: str) -> bytes:
    """Triton's binary tensor encoding (BYTES: 4-byte little-endian length before each item)."""
    if datatype != "BYTES":
        return np.ascontiguousarray(array).tobytes()
    parts = []
    for item in array.ravel():
        data = item if isinstance(item, bytes) else str(item).encode()
        parts.append(struct.pack("<I", len(data)) + data)
    return b"".join(parts)


def http_request(payload: Payload, host: str) -> bytes:
    """A complete HTTP/1.1 infer request using the binary tensor data extension."""
    blobs = [raw_bytes(a, s.datatype) for s, a in payload.tensors]
    header = {
        "inputs": [
            {"name": s.name, "shape": list(a.shape), "datatype": s.datatype,
             "parameters": {"binary_data_size": len(b)}}
            for (s, a), b in zip(payload.tensors, blobs, strict=True)
        ],
        "outputs": [{"name": o, "parameters": {"binary_data": True}} for o in payload.outputs],
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    body = head + b"".join(blobs)
    start = (
        f"POST /v2/models/{payload.model}/infer HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(head)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return start.encode() + body


def grpc_request(payload: Payload) -> Any:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=payload.model)
    for spec, array in payload.tensors:
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = spec.name, spec.datatype
        tensor.shape.extend(array.shape)
        request.raw_input_contents.append(raw_bytes(array, spec.datatype))
    for name in payload.outputs:
        request.outputs.add().name = name
    return request
