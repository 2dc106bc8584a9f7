"""config.pbtxt as a protobuf message: load, apply a candidate, validate, write, diff.

The config never becomes a string we build by hand: it is parsed with
``google.protobuf.text_format`` into ``model_config_pb2.ModelConfig``; a candidate copies
the message and edits the copy.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TypeAlias

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from autotune.errors import ConfigError, ModelNotFoundError
from autotune.files import write_text_atomic
from autotune.search_space import Candidate

# The real message type: mypy reads it from stubs that scripts/protobuf_stubs.py generates from the
# installed tritonclient (``make lint`` runs it), so field names and value types are checked.
ModelConfig: TypeAlias = mc.ModelConfig

CONFIG_NAME = "config.pbtxt"
TRT_BACKENDS = frozenset({"onnxruntime", "tensorflow"})
TRT_PLATFORMS = frozenset({"onnxruntime_onnx", "tensorflow_savedmodel", "tensorflow_graphdef"})
KINDS = {"KIND_CPU": mc.ModelInstanceGroup.KIND_CPU, "KIND_GPU": mc.ModelInstanceGroup.KIND_GPU}


def data_type_name(value: int) -> str:
    """A tensor's data type as config.pbtxt spells it (``TYPE_FP32``)."""
    return str(mc.DataType.Name(value))  # type: ignore[arg-type]


def model_dir(repository: Path, model: str) -> Path:
    """The model's directory, or a ModelNotFoundError that says what is there."""
    if not repository.is_dir():
        raise ModelNotFoundError(f"model repository not found: {repository}")
    path = repository / model
    if not path.is_dir():
        found = sorted(p.name for p in repository.iterdir() if p.is_dir())
        raise ModelNotFoundError(
            f"model {model!r} not found in {repository} (models there: {', '.join(found) or 'none'})"
        )
    return path


def parse_config(text: str, origin: str = "config.pbtxt") -> ModelConfig:
    """Parse protobuf text format; translate protobuf errors into ConfigError."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ConfigError(f"{origin}: malformed config: {exc}") from exc
    return config


def load_config(repository: Path, model: str) -> ModelConfig:
    """Read ``<repository>/<model>/config.pbtxt``; the name defaults to the directory's."""
    path = model_dir(repository, model) / CONFIG_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no config.pbtxt (autotune needs an explicit config)") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    config = parse_config(text, str(path))
    if not config.name:
        config.name = model
    if config.name != model:
        raise ConfigError(f"{path}: name {config.name!r} differs from its directory {model!r}")
    validate(config)
    return config


def config_text(config: ModelConfig) -> str:
    return str(text_format.MessageToString(config))


def write_config(config: ModelConfig, path: Path) -> None:
    """Write atomically: a temporary file beside the target, fsync, then rename."""
    write_text_atomic(path, config_text(config))


def config_diff(before: ModelConfig, after: ModelConfig, label: str = "config.pbtxt") -> str:
    lines = difflib.unified_diff(
        config_text(before).splitlines(keepends=True),
        config_text(after).splitlines(keepends=True),
        fromfile=f"a/{label}",
        tofile=f"b/{label}",
    )
    return "".join(lines)


def supports_tensorrt(config: ModelConfig) -> bool:
    return config.backend in TRT_BACKENDS or config.platform in TRT_PLATFORMS


def candidate_of(config: ModelConfig) -> Candidate:
    """The candidate that describes an existing config (used for the baseline)."""
    groups = list(config.instance_group)
    count = sum(g.count or 1 for g in groups) if groups else 1
    kind = "KIND_GPU" if groups and groups[0].kind == mc.ModelInstanceGroup.KIND_GPU else "KIND_CPU"
    gpus = tuple(groups[0].gpus) if groups else ()
    batching = config.HasField("dynamic_batching")
    accel = config.optimization.execution_accelerators.gpu_execution_accelerator
    fp16 = any(a.name == "tensorrt" and a.parameters.get("precision_mode") == "FP16" for a in accel)
    return Candidate(
        instance_count=count,
        kind=kind,
        gpus=gpus,
        max_batch_size=config.max_batch_size,
        dynamic_batching=batching,
        preferred_batch_sizes=tuple(config.dynamic_batching.preferred_batch_size) if batching else (),
        max_queue_delay_us=config.dynamic_batching.max_queue_delay_microseconds if batching else 0,
        trt_fp16=fp16,
    )


def apply_candidate(config: ModelConfig, candidate: Candidate) -> ModelConfig:
    """A validated copy of ``config`` with the candidate's settings; the input is untouched."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    out.max_batch_size = candidate.max_batch_size
    _apply_instances(out, candidate)
    _apply_batching(out, candidate)
    _apply_fp16(out, candidate)
    validate(out)
    return out


def _apply_instances(out: ModelConfig, candidate: Candidate) -> None:
    del out.instance_group[:]
    group = out.instance_group.add()
    group.count = candidate.instance_count
    group.kind = KINDS[candidate.kind]
    group.gpus.extend(candidate.gpus)


def _apply_batching(out: ModelConfig, candidate: Candidate) -> None:
    if not candidate.dynamic_batching:
        out.ClearField("dynamic_batching")
        return
    batching = out.dynamic_batching
    batching.SetInParent()
    del batching.preferred_batch_size[:]
    batching.preferred_batch_size.extend(candidate.preferred_batch_sizes)
    batching.max_queue_delay_microseconds = candidate.max_queue_delay_us


def _apply_fp16(out: ModelConfig, candidate: Candidate) -> None:
    accel = out.optimization.execution_accelerators.gpu_execution_accelerator
    keep = [a for a in accel if a.name != "tensorrt"]
    del accel[:]
    for item in keep:
        accel.add().CopyFrom(item)
    if candidate.trt_fp16:
        trt = accel.add()
        trt.name = "tensorrt"
        trt.parameters["precision_mode"] = "FP16"
    if not list(accel):
        out.optimization.execution_accelerators.ClearField("gpu_execution_accelerator")
        if not out.optimization.execution_accelerators.ListFields():
            out.optimization.ClearField("execution_accelerators")
    if not out.optimization.ListFields():
        out.ClearField("optimization")


def validate(config: ModelConfig) -> None:
    """Semantic checks Triton would otherwise report at load time, one reason each."""
    reasons = list(_problems(config))
    if reasons:
        raise ConfigError(f"invalid config for {config.name or 'model'}: {'; '.join(reasons)}")


def _problems(config: ModelConfig) -> list[str]:
    found: list[str] = []
    if config.max_batch_size < 0:
        found.append("max_batch_size must be >= 0")
    if config.HasField("dynamic_batching"):
        found += _batching_problems(config)
    for group in config.instance_group:
        if group.count < 0:
            found.append("instance_group count must be >= 0")
        if group.kind == mc.ModelInstanceGroup.KIND_CPU and list(group.gpus):
            found.append("instance_group gpus is a GPU-only option but kind is KIND_CPU")
    if _has_trt(config):
        if not supports_tensorrt(config):
            found.append(f"TensorRT acceleration is not supported by backend {config.backend!r}")
        if all(g.kind == mc.ModelInstanceGroup.KIND_CPU for g in config.instance_group):
            found.append("TensorRT FP16 is a GPU-only option but every instance is KIND_CPU")
    return found


def _batching_problems(config: ModelConfig) -> list[str]:
    found: list[str] = []
    if config.max_batch_size == 0:
        found.append("dynamic_batching needs max_batch_size > 0")
    for size in config.dynamic_batching.preferred_batch_size:
        if size <= 0 or size > config.max_batch_size:
            found.append(f"preferred_batch_size {size} not in 1..max_batch_size ({config.max_batch_size})")
    return found


def _has_trt(config: ModelConfig) -> bool:
    accel = config.optimization.execution_accelerators.gpu_execution_accelerator
    return any(a.name == "tensorrt" for a in accel)
