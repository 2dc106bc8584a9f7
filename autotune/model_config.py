"""config.pbtxt as a protobuf message: load, apply a candidate, validate, write (a write-back
edits the user's file in place: :mod:`autotune.config_edit`).

The config never becomes a string we build by hand: it is parsed with
``google.protobuf.text_format`` into ``model_config_pb2.ModelConfig``; a candidate copies
the message and edits the copy.
"""

from __future__ import annotations

import copyreg
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from autotune.errors import ConfigError, ModelNotFoundError
from autotune.files import write_text_atomic
from autotune.search_space import MIB, Candidate

# The real message type: mypy reads it from stubs that scripts/protobuf_stubs.py generates from the
# installed tritonclient (``make lint`` runs it), so field names and value types are checked.
ModelConfig: TypeAlias = mc.ModelConfig
Accelerator: TypeAlias = mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator

CONFIG_NAME = "config.pbtxt"
TRT_BACKENDS = frozenset({"onnxruntime", "tensorflow"})
TRT_PLATFORMS = frozenset({"onnxruntime_onnx", "tensorflow_savedmodel", "tensorflow_graphdef"})
WORKSPACE = "max_workspace_size_bytes"  # a TensorRT accelerator's parameter, in bytes
KINDS = {"KIND_CPU": mc.ModelInstanceGroup.KIND_CPU, "KIND_GPU": mc.ModelInstanceGroup.KIND_GPU}


def from_bytes(data: bytes) -> ModelConfig:
    """A config from its wire bytes: how a pickled config is read back."""
    return ModelConfig.FromString(data)


def _reduce(config: ModelConfig) -> tuple[Callable[[bytes], ModelConfig], tuple[bytes]]:
    return from_bytes, (config.SerializeToString(),)


# tritonclient's generated module names itself ``model_config_pb2``, which no import finds, so
# pickle (and Ray's, to ship a run to its nodes: autotune.fleet) cannot find the class: a config
# travels as its wire bytes instead
copyreg.pickle(ModelConfig, _reduce)


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


def check_versions(path: Path, config: ModelConfig) -> None:
    """The model folder ``path`` holds a version its ``version_policy`` serves (a numbered folder:
    ``1/``); else a ConfigError in Triton's words, before any server is started for it."""
    versions = sorted(int(p.name) for p in path.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        raise ConfigError(
            f"{path}: no version folder: Triton serves a model from a numbered folder beside its "
            f"config.pbtxt ({path / '1'}/ holding the model's files) and says 'No model version was found'"
        )
    policy = config.version_policy
    if policy.WhichOneof("policy_choice") == "specific":
        wanted = sorted(policy.specific.versions)
        if not set(wanted) & set(versions):
            raise ConfigError(
                f"{path}: version_policy asks for version(s) {', '.join(map(str, wanted))}, its folders "
                f"hold {', '.join(map(str, versions))}: Triton says 'at least one version must be "
                "available under the version policy'"
            )


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


def supports_tensorrt(config: ModelConfig) -> bool:
    return config.backend in TRT_BACKENDS or config.platform in TRT_PLATFORMS


def uses_tensorrt(config: ModelConfig) -> bool:
    """Whether the config asks for a TensorRT accelerator (its engine is built while it loads)."""
    return _tensorrt(config) is not None


def candidate_of(config: ModelConfig) -> Candidate:
    """The candidate that describes an existing config (used for the baseline).

    Instance groups are read as one group (:func:`instances_of`); :func:`apply_candidate`
    leaves a config's own groups (and its TensorRT settings) as they are whenever a candidate
    asks for what they read as, so the baseline runs the config exactly as it is written."""
    count, kind, gpus = instances_of(config)
    batching = config.HasField("dynamic_batching")
    trt = _tensorrt(config)
    fp16 = trt is not None and trt.parameters.get("precision_mode") == "FP16"
    return Candidate(
        instance_count=count,
        kind=kind,
        gpus=gpus,
        max_batch_size=config.max_batch_size,
        dynamic_batching=batching,
        preferred_batch_sizes=tuple(config.dynamic_batching.preferred_batch_size) if batching else (),
        max_queue_delay_us=config.dynamic_batching.max_queue_delay_microseconds if batching else 0,
        trt_fp16=fp16,
        trt_workspace_mb=_workspace_mb(trt) if fp16 else 0,
    )


def instances_of(config: ModelConfig) -> tuple[int, str, tuple[int, ...]]:
    """A config's instance groups as one group: (count, kind, gpus), ``count`` per GPU for KIND_GPU.

    The kind is the first group's (KIND_GPU, else KIND_CPU), and only the groups of that kind
    are read. GPU groups are one group when every GPU they name runs the same number of
    instances: the tutorials' ``{count: 2, gpus: [0]}, {count: 2, gpus: [1]}`` reads as count 2
    on gpus 0,1, exactly what one group ``{count: 2, gpus: [0, 1]}`` runs. Groups on every GPU
    (no gpus) add up. Anything else (counts that differ between GPUs, groups on every GPU beside
    groups on listed ones, CPU beside GPU groups) has no one-group equal: it reads as the
    largest count any GPU runs, on the GPUs named, and stays exact only as the baseline (apply
    keeps such groups for a candidate equal to this reading, rewrites them for any other).
    No groups: one CPU instance."""
    groups = list(config.instance_group)
    if not groups:
        return 1, "KIND_CPU", ()
    gpu = mc.ModelInstanceGroup.KIND_GPU
    if groups[0].kind != gpu:
        return sum(g.count or 1 for g in groups if g.kind != gpu), "KIND_CPU", ()
    mine = [g for g in groups if g.kind == gpu]
    if not any(list(g.gpus) for g in mine):
        return sum(g.count or 1 for g in mine), "KIND_GPU", ()
    per_gpu: dict[int, int] = {}
    for group in mine:
        for gpu_id in set(group.gpus):
            per_gpu[gpu_id] = per_gpu.get(gpu_id, 0) + (group.count or 1)
    return max(per_gpu.values()), "KIND_GPU", tuple(sorted(per_gpu))


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
    """One group with the candidate's count, kind and gpus list (``count`` on each GPU of it);
    groups that already read as the candidate's (:func:`instances_of`) stay as written."""
    wanted = (candidate.instance_count, candidate.kind, candidate.gpus)
    if out.instance_group and instances_of(out) == wanted:
        return
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
    """TensorRT FP16 through ``optimization.execution_accelerators``: the config's own
    ``tensorrt`` accelerator keeps its other parameters (an engine cache, say), with
    ``precision_mode`` FP16 and ``max_workspace_size_bytes`` the candidate's (a value already
    there that reads as the same MiB stays as written); without FP16, no TensorRT accelerator."""
    accel = out.optimization.execution_accelerators.gpu_execution_accelerator
    own = _tensorrt(out)
    keep = [a for a in accel if a.name != "tensorrt"]
    del accel[:]
    for item in keep:
        accel.add().CopyFrom(item)
    if candidate.trt_fp16:
        trt = accel.add()
        if own is not None:
            trt.CopyFrom(own)
        trt.name = "tensorrt"
        trt.parameters["precision_mode"] = "FP16"
        _set_workspace(trt, candidate.trt_workspace_mb)
    if not list(accel):
        out.optimization.execution_accelerators.ClearField("gpu_execution_accelerator")
        if not out.optimization.execution_accelerators.ListFields():
            out.optimization.ClearField("execution_accelerators")
    if not out.optimization.ListFields():
        out.ClearField("optimization")


def _tensorrt(config: ModelConfig) -> Accelerator | None:
    """The config's TensorRT GPU accelerator, if it has one."""
    accel = config.optimization.execution_accelerators.gpu_execution_accelerator
    return next((a for a in accel if a.name == "tensorrt"), None)


def _workspace_mb(trt: Accelerator | None) -> int:
    """Its ``max_workspace_size_bytes`` in MiB (rounded up); 0 when not set (or not a number:
    validate says so)."""
    text = trt.parameters.get(WORKSPACE, "") if trt is not None else ""
    return -(-int(text) // MIB) if text.isdigit() else 0


def _set_workspace(trt: Accelerator, mb: int) -> None:
    if mb == 0:
        trt.parameters.pop(WORKSPACE, None)
    elif _workspace_mb(trt) != mb:
        trt.parameters[WORKSPACE] = str(mb * MIB)


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
        if any(g < 0 for g in group.gpus):
            found.append("instance_group gpus must be GPU ids >= 0")
    trt = _tensorrt(config)
    if trt is not None:
        found += _tensorrt_problems(config, trt)
    return found


def _tensorrt_problems(config: ModelConfig, trt: Accelerator) -> list[str]:
    found: list[str] = []
    if not supports_tensorrt(config):
        found.append(f"TensorRT acceleration is not supported by backend {config.backend!r}")
    if config.instance_group and all(g.kind == mc.ModelInstanceGroup.KIND_CPU for g in config.instance_group):
        found.append("TensorRT is a GPU-only option but every instance is KIND_CPU")
    workspace = trt.parameters.get(WORKSPACE)
    if workspace is not None and not (workspace.isdigit() and int(workspace) > 0):
        found.append(f"tensorrt {WORKSPACE} must be a whole number of bytes > 0, got {workspace!r}")
    return found


def _batching_problems(config: ModelConfig) -> list[str]:
    found: list[str] = []
    if config.max_batch_size == 0:
        found.append("dynamic_batching needs max_batch_size > 0")
    for size in config.dynamic_batching.preferred_batch_size:
        if size <= 0 or size > config.max_batch_size:
            found.append(f"preferred_batch_size {size} not in 1..max_batch_size ({config.max_batch_size})")
    return found
