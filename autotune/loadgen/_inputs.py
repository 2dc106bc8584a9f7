"""Request payloads: tensors from the model's metadata, encoded once for HTTP and gRPC.

Random data honours each input's datatype and shape (integers in [0, 100) so embedding
lookups stay in range; BYTES as short strings), or comes from perf_analyzer's
``--input-data`` JSON format. Requests are encoded once, before the load starts.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import ijson
import numpy as np
from numpy.typing import NDArray

from autotune.errors import UsageError
from autotune.loadgen._h2 import grpc_message
from autotune.model_config import ModelConfig, data_type_name
from autotune.settings import Workload

NP_TYPES: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


_DATATYPES = {f"TYPE_{t}": t for t in NP_TYPES} | {"TYPE_STRING": "BYTES"}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # without the batch dimension; -1 for variable
    optional: bool = False  # an input the model runs without (config.pbtxt's `optional: true`)


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

    @classmethod
    def from_config(cls, name: str, config: ModelConfig) -> ModelIO | None:
        """The inputs and outputs a config.pbtxt declares, to check a workload before any
        server runs; None when it declares none (the server completes such a config)."""
        if not config.input:
            return None

        def spec(t: Any, optional: bool) -> TensorSpec:
            datatype = _DATATYPES.get(data_type_name(t.data_type), "?")
            return TensorSpec(t.name, datatype, tuple(int(d) for d in t.dims), optional)

        inputs = tuple(spec(t, bool(t.optional)) for t in config.input)
        return cls(name, int(config.max_batch_size), inputs, tuple(spec(t, False) for t in config.output))


@dataclass(frozen=True)
class Payload:
    """One request's tensors, in request order, with the batch dimension included."""

    model: str
    tensors: tuple[tuple[TensorSpec, NDArray[Any]], ...]
    outputs: tuple[str, ...]
    batch_size: int


# one sample of each input, in the model's input order, no batch dimension; None: an optional
# input the entry leaves out
Entry = tuple[NDArray[Any] | None, ...]


@dataclass(frozen=True)
class WorkloadData:
    """A workload read once: its entries (one for random or zero data), sent in turn, and the
    requests they make, built (and checked) once and encoded once per protocol."""

    io: ModelIO
    entries: tuple[Entry, ...]
    batch_size: int
    source: str  # where the entries came from, for messages
    order: str = "spread"  # settings.DATA_ORDERS: how a closed loop's clients take the requests

    def __post_init__(self) -> None:
        self.payloads()  # a batch of entries of different shapes is refused here, not mid-run

    @cached_property
    def _payloads(self) -> tuple[Payload, ...]:
        n, b = len(self.entries), self.batch_size
        count = n // math.gcd(n, b)
        return tuple(self._payload([(k * b + i) % n for i in range(b)]) for k in range(count))

    def payloads(self) -> tuple[Payload, ...]:
        """The distinct requests, in the order they are sent: request k carries entries
        k*b .. k*b+b-1 (mod the number of entries), as perf_analyzer steps through its data."""
        return self._payloads

    def stride(self, concurrency: int) -> int:
        """How the ``concurrency`` clients of a closed loop take the requests: 0, each every
        request from its own start; N > 0, each from the first request in steps of N
        (perf_analyzer's order). An open loop (concurrency 0) takes them as with 0."""
        return concurrency if self.order == "perf-analyzer" and concurrency > 0 else 0

    def encoded(self, protocol: str, host: str) -> tuple[bytes, ...]:
        """The requests on the wire (HTTP/1.1 requests, or gRPC messages, length-prefixed),
        encoded once per protocol and host, whatever the number of trials and levels."""
        cache: dict[tuple[str, str], tuple[bytes, ...]] = self.__dict__.setdefault("_encoded", {})
        key = (protocol, host if protocol == "http" else "")
        if key not in cache:
            if protocol == "grpc":
                cache[key] = tuple(grpc_message(grpc_request(p).SerializeToString()) for p in self.payloads())
            else:
                cache[key] = tuple(http_request(p, host) for p in self.payloads())
        return cache[key]

    def for_model(self, io: ModelIO) -> WorkloadData:
        """These entries for the model as a server serves it (its inputs' order, its outputs):
        read from config.pbtxt, the server's view wins. A UsageError if an input has no data."""
        if io == self.io:
            return self
        columns = {spec.name: column for column, spec in enumerate(self.io.inputs)}
        for spec in io.inputs:
            if spec.name not in columns and not spec.optional:
                raise UsageError(f"{self.source}: no data for the served model's input {spec.name!r}")
        order = [columns.get(spec.name) for spec in io.inputs]
        entries = tuple(tuple(None if c is None else e[c] for c in order) for e in self.entries)
        return replace(self, io=io, entries=entries)  # the caches are not carried over: rebuilt for io

    def _payload(self, picks: Sequence[int]) -> Payload:
        tensors = []
        for column, spec in enumerate(self.io.inputs):
            given = [self.entries[i][column] for i in picks]
            if all(a is None for a in given):
                continue  # an optional input these entries leave out
            if any(a is None for a in given):
                raise UsageError(
                    f"{self.source}: optional input {spec.name!r} is in some of the entries one request of "
                    f"batch size {self.batch_size} carries ({', '.join(map(str, picks))}), not in all"
                )
            arrays = [a for a in given if a is not None]
            if any(a.shape != arrays[0].shape for a in arrays):
                shapes = ", ".join(f"entry {i}: {list(a.shape)}" for i, a in zip(picks, arrays, strict=True))
                raise UsageError(
                    f"{self.source}: input {spec.name!r} has different shapes in the entries one request of "
                    f"batch size {self.batch_size} carries ({shapes}); Triton needs one shape per request"
                )
            if self.io.max_batch_size == 0:
                tensors.append((spec, arrays[0]))
            else:  # a batch of one is a view of its entry: a large file's values are held once
                tensors.append((spec, arrays[0][np.newaxis] if len(arrays) == 1 else np.stack(arrays)))
        return Payload(self.io.name, tuple(tensors), tuple(o.name for o in self.io.outputs), self.batch_size)


def read_workload(io: ModelIO, workload: Workload | None = None, seed: int = 0) -> WorkloadData:
    """The workload's entries, read and checked against the model's inputs (a UsageError
    naming the entry and the input on anything that does not fit)."""
    workload = workload or Workload()
    input_data, shapes, batch_size = workload.input_data, workload.shape_map, workload.batch_size
    _check_batch(io, batch_size)
    _check_shapes(io, shapes)
    if input_data in ("random", "zero"):
        _check_size(io, shapes, batch_size)
        rng = np.random.default_rng(seed)
        zero = input_data == "zero"
        entry: Entry = tuple(
            None  # an optional input of unknown size is left out
            if spec.optional and spec.name not in shapes and any(d < 0 for d in spec.shape)
            else _zeros(spec.datatype, _dims(spec, shapes))
            if zero
            else _random(spec.datatype, _dims(spec, shapes), rng)
            for spec in io.inputs
        )
        return WorkloadData(io, (entry,), batch_size, f"{input_data} data", workload.order)
    path = Path(input_data)
    entries = _read_directory(io, path, shapes) if path.is_dir() else _read_json(io, path, shapes)
    return WorkloadData(io, entries, batch_size, str(path), workload.order)


def random_payload(
    io: ModelIO,
    batch_size: int = 1,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
) -> Payload:
    return read_workload(io, _workload("random", shapes, batch_size), seed).payloads()[0]


def payload_from_file(
    io: ModelIO, path: Path, batch_size: int = 1, shapes: Mapping[str, Sequence[int]] | None = None
) -> Payload:
    """The first request of perf_analyzer's ``--input-data`` JSON (see :func:`read_workload`)."""
    return read_workload(io, _workload(str(path), shapes, batch_size)).payloads()[0]


def _workload(data: str, shapes: Mapping[str, Sequence[int]] | None, batch_size: int) -> Workload:
    return Workload(
        data, tuple((n, tuple(int(d) for d in dims)) for n, dims in (shapes or {}).items()), batch_size
    )


def _check_batch(io: ModelIO, batch_size: int) -> None:
    if batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
    if batch_size > 1 and io.max_batch_size == 0:
        raise UsageError(f"--batch-size {batch_size}: model {io.name!r} does not batch (max_batch_size 0)")
    if batch_size > io.max_batch_size > 0:
        raise UsageError(
            f"--batch-size {batch_size} exceeds model {io.name!r}'s max_batch_size {io.max_batch_size}"
        )


def _check_shapes(io: ModelIO, shapes: Mapping[str, tuple[int, ...]]) -> None:
    by_name = {spec.name: spec for spec in io.inputs}
    for name, dims in shapes.items():
        spec = by_name.get(name)
        if spec is None:
            raise UsageError(
                f"--shape {name}: model {io.name!r} has no input {name!r} (its inputs: {', '.join(by_name)})"
            )
        if not _fits(spec, dims):
            raise UsageError(
                f"--shape {name}:{','.join(map(str, dims))} does not fit the model's dims "
                f"{list(spec.shape)} (only -1 dimensions can be chosen)"
            )


def _check_size(io: ModelIO, shapes: Mapping[str, tuple[int, ...]], batch_size: int) -> None:
    """A request of made-up data fits in this machine's memory (a UsageError naming its size
    else: a --shape with a digit too many would otherwise fail to allocate)."""
    sizes = {
        spec.name: int(np.prod(shapes[spec.name])) * batch_size * _itemsize(spec.datatype)
        for spec in io.inputs
        if spec.name in shapes
    }
    need, have = sum(sizes.values()), _available_memory()
    if have is not None and need > have:
        name = max(sizes, key=lambda n: sizes[n])
        raise UsageError(
            f"--shape {name}:{','.join(map(str, shapes[name]))}: one request would need "
            f"{need / 2**30:.1f} GiB of data, and this machine has {have / 2**30:.1f} GiB of memory available"
        )


def _itemsize(datatype: str) -> int:
    """Bytes one value takes (BYTES: the made-up 8-letter strings)."""
    kind = NP_TYPES.get(datatype)
    return 8 if kind is None or kind is np.object_ else int(np.dtype(kind).itemsize)


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation (MemAvailable), None where it cannot be told."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _fits(spec: TensorSpec, dims: Sequence[int]) -> bool:
    """Do ``dims`` fit the input's shape (-1 matches any size)?"""
    if len(spec.shape) != len(dims):
        return False
    return all(m < 0 or m == d for m, d in zip(spec.shape, dims, strict=True))


def _read_json(io: ModelIO, path: Path, shapes: Mapping[str, tuple[int, ...]]) -> tuple[Entry, ...]:
    """perf_analyzer's JSON, entry by entry (ijson): only the arrays are kept, never the whole
    document's Python objects (a file of 100 MB of numbers would take 7 times that as lists)."""
    names = {spec.name for spec in io.inputs}
    entries = []
    try:
        with path.open("rb") as stream:
            for number, entry in enumerate(ijson.items(stream, "data.item", use_float=True)):
                entries.append(_entry(io, entry, names, shapes, f"{path}, entry {number}"))
    except (OSError, UnicodeDecodeError, ijson.JSONError) as exc:
        raise UsageError(f"{path}: not perf_analyzer input data: {_first_line(exc)}") from exc
    if not entries:
        raise UsageError(f"{path}: not perf_analyzer input data: no entries in a list under 'data'")
    return tuple(entries)


def _first_line(exc: Exception) -> str:
    """The parser's message without the excerpt it draws below it (yajl's are several lines)."""
    text = exc.args[0] if exc.args else exc
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def _entry(
    io: ModelIO, entry: Any, names: set[str], shapes: Mapping[str, tuple[int, ...]], where: str
) -> Entry:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: not an object of inputs (sequence data is not supported)")
    unknown = sorted(set(entry) - names)
    if unknown:
        raise UsageError(
            f"{where}: model {io.name!r} has no input {unknown[0]!r} (its inputs: "
            f"{', '.join(s.name for s in io.inputs)})"
        )
    columns: list[NDArray[Any] | None] = []
    for spec in io.inputs:
        if spec.name not in entry:
            if spec.optional:
                columns.append(None)
                continue
            raise UsageError(f"{where}: no data for input {spec.name!r}")
        columns.append(_from_json(spec, entry[spec.name], shapes.get(spec.name), where))
    return tuple(columns)


def _read_directory(io: ModelIO, path: Path, shapes: Mapping[str, tuple[int, ...]]) -> tuple[Entry, ...]:
    """perf_analyzer's directory format: a file per input, named as the input, holding one
    sample: its raw values, or for BYTES one string per line."""
    columns: list[NDArray[Any] | None] = []
    for spec in io.inputs:
        file = path / spec.name
        if not file.is_file():
            if spec.optional:
                columns.append(None)
                continue
            raise UsageError(f"{path}: no file for input {spec.name!r} (expected {file})")
        raw = file.read_bytes()
        dims = _dims(spec, shapes)
        if spec.datatype == "BYTES":
            lines = raw.splitlines()
            if len(lines) != int(np.prod(dims)):
                raise UsageError(f"{file}: {len(lines)} lines are not the {int(np.prod(dims))} strings of "
                                 f"shape {list(dims)} (one string per line)")  # fmt: skip
            array = np.array(lines, dtype=np.object_).reshape(dims)
        else:
            dtype = np.dtype(_np_type(spec, str(path)))
            if len(raw) != dtype.itemsize * int(np.prod(dims)):
                raise UsageError(
                    f"{file}: {len(raw)} bytes are not the {int(np.prod(dims))} {spec.datatype} "
                    f"values of shape {list(dims)}"
                )
            array = np.frombuffer(raw, dtype=dtype).reshape(dims).copy()
        columns.append(array)
    return (tuple(columns),)


def _from_json(spec: TensorSpec, value: Any, shape: Sequence[int] | None, where: str) -> NDArray[Any]:
    """One input's tensor (without the batch dimension) from its JSON value."""
    _np_type(spec, where)
    if isinstance(value, dict):
        shape = value.get("shape", shape)
        if "b64" in value:
            array = _from_b64(spec, value["b64"], where)
        elif "content" in value:
            array = _from_content(spec, value["content"], where)
        else:
            raise UsageError(f"{where}: input {spec.name!r}: an object needs 'content' or 'b64'")
    else:
        array = _from_content(spec, value, where)
    if shape:
        dims = tuple(int(d) for d in shape)
    elif any(d < 0 for d in spec.shape):  # one variable dimension can be inferred from the values
        dims = tuple(d if d >= 0 else -1 for d in spec.shape)
        if sum(d < 0 for d in dims) > 1:
            raise UsageError(
                f"{where}: input {spec.name!r} has variable dims {list(spec.shape)}: give the "
                f'entry\'s "shape" or --shape {spec.name}:D1,D2'
            )
    else:
        dims = spec.shape
    try:
        array = array.reshape(dims)
    except ValueError as exc:
        raise UsageError(
            f"{where}: input {spec.name!r}: {array.size} values do not fit shape {list(dims)}"
        ) from exc
    if not _fits(spec, array.shape):
        raise UsageError(
            f"{where}: input {spec.name!r}: shape {list(array.shape)} does not fit the model's "
            f"{list(spec.shape)}"
        )
    return array


def _np_type(spec: TensorSpec, where: str) -> Any:
    if spec.datatype not in NP_TYPES:
        raise UsageError(f"{where}: input {spec.name!r}: datatype {spec.datatype} is not supported")
    return NP_TYPES[spec.datatype]


def _from_content(spec: TensorSpec, content: Any, where: str) -> NDArray[Any]:
    if spec.datatype == "BYTES":
        items = np.ravel(np.asarray(content, dtype=np.object_))
        return np.array([v if isinstance(v, bytes) else str(v).encode() for v in items], dtype=np.object_)
    try:
        return np.ravel(np.asarray(content, dtype=NP_TYPES[spec.datatype]))
    except (ValueError, TypeError, OverflowError) as exc:
        raise UsageError(
            f"{where}: input {spec.name!r}: cannot read the data as {spec.datatype}: {exc}"
        ) from exc


def _from_b64(spec: TensorSpec, text: Any, where: str) -> NDArray[Any]:
    try:
        raw = base64.b64decode(str(text), validate=True)
    except binascii.Error as exc:
        raise UsageError(f"{where}: input {spec.name!r}: 'b64' is not base64: {exc}") from exc
    if spec.datatype == "BYTES":
        return np.array([raw], dtype=np.object_)
    dtype = np.dtype(NP_TYPES[spec.datatype])
    if len(raw) % dtype.itemsize:
        raise UsageError(
            f"{where}: input {spec.name!r}: {len(raw)} bytes are not whole {spec.datatype} values"
        )
    return np.frombuffer(raw, dtype=dtype).copy()


def _dims(spec: TensorSpec, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
    if spec.name in shapes:
        return tuple(int(d) for d in shapes[spec.name])
    if any(d < 0 for d in spec.shape):
        raise UsageError(
            f"input {spec.name!r} has a variable shape {list(spec.shape)}: give --shape {spec.name}:D1,D2"
        )
    return spec.shape


def _zeros(datatype: str, shape: tuple[int, ...]) -> NDArray[Any]:
    if datatype not in NP_TYPES:
        raise UsageError(f"datatype {datatype} is not supported by the load generator")
    if datatype == "BYTES":
        return np.array([b"0"] * int(np.prod(shape)), dtype=np.object_).reshape(shape)
    return np.zeros(shape, dtype=NP_TYPES[datatype])


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
            {
                "name": s.name,
                "shape": list(a.shape),
                "datatype": s.datatype,
                "parameters": {"binary_data_size": len(b)},
            }
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
