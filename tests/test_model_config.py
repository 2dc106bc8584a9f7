from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autotune import model_config as mc
from autotune.errors import ConfigError, ModelNotFoundError
from autotune.search_space import Candidate

BASE = Candidate(1, "KIND_CPU", (), 8, False, (), 0, False)


def test_load_reads_the_toy_config(toy_repo: Path) -> None:
    config = mc.load_config(toy_repo, "toy")
    assert config.name == "toy" and config.max_batch_size == 8
    assert mc.candidate_of(config) == BASE


def test_unknown_model_names_what_is_there(toy_repo: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="toy"):
        mc.load_config(toy_repo, "nope")


def test_missing_repository(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="repository not found"):
        mc.load_config(tmp_path / "absent", "toy")


def test_malformed_config_is_a_config_error(toy_repo: Path) -> None:
    (toy_repo / "toy" / "config.pbtxt").write_text("max_batch_size: 8\ninstance_group [ { count: ", "utf-8")
    with pytest.raises(ConfigError, match="malformed"):
        mc.load_config(toy_repo, "toy")


def test_semantically_invalid_config(toy_repo: Path) -> None:
    path = toy_repo / "toy" / "config.pbtxt"
    path.write_text(path.read_text() + "\ndynamic_batching { preferred_batch_size: [ 32 ] }\n", "utf-8")
    with pytest.raises(ConfigError, match="preferred_batch_size 32"):
        mc.load_config(toy_repo, "toy")


def test_apply_copies_and_sets_every_dimension(toy_repo: Path) -> None:
    original = mc.load_config(toy_repo, "toy")
    before = mc.config_text(original)
    cand = Candidate(3, "KIND_CPU", (), 4, True, (2, 4), 500, False)
    out = mc.apply_candidate(original, cand)
    assert mc.config_text(original) == before  # the input is untouched
    assert out.max_batch_size == 4 and out.instance_group[0].count == 3
    assert list(out.dynamic_batching.preferred_batch_size) == [2, 4]
    assert out.dynamic_batching.max_queue_delay_microseconds == 500
    assert mc.candidate_of(out) == cand
    assert dict(out.parameters) == dict(original.parameters)  # the model's own knobs stay (a map: no order)


def test_batching_off_clears_the_message(toy_repo: Path) -> None:
    original = mc.apply_candidate(
        mc.load_config(toy_repo, "toy"), Candidate(1, "KIND_CPU", (), 8, True, (), 0, False)
    )
    out = mc.apply_candidate(original, BASE)
    assert not out.HasField("dynamic_batching")


def test_fp16_on_gpu_for_onnxruntime_only(toy_repo: Path) -> None:
    config = mc.load_config(toy_repo, "toy")
    gpu_fp16 = Candidate(1, "KIND_GPU", (0,), 8, False, (), 0, True)
    with pytest.raises(ConfigError, match="not supported by backend 'python'"):
        mc.apply_candidate(config, gpu_fp16)
    config.backend = "onnxruntime"
    out = mc.apply_candidate(config, gpu_fp16)
    accel = out.optimization.execution_accelerators.gpu_execution_accelerator
    assert accel[0].name == "tensorrt" and accel[0].parameters["precision_mode"] == "FP16"
    assert mc.candidate_of(out) == gpu_fp16
    assert not mc.apply_candidate(out, BASE).HasField("optimization")


def test_gpu_only_options_rejected_for_cpu(toy_repo: Path) -> None:
    config = mc.load_config(toy_repo, "toy")
    config.backend = "onnxruntime"
    with pytest.raises(ConfigError, match="GPU-only"):
        mc.apply_candidate(config, Candidate(1, "KIND_CPU", (0,), 8, False, (), 0, False))
    with pytest.raises(ConfigError, match="KIND_CPU"):
        mc.apply_candidate(config, Candidate(1, "KIND_CPU", (), 8, False, (), 0, True))


def test_batching_needs_max_batch_size(toy_repo: Path) -> None:
    config = mc.load_config(toy_repo, "toy")
    with pytest.raises(ConfigError, match="max_batch_size > 0"):
        mc.apply_candidate(config, Candidate(1, "KIND_CPU", (), 0, True, (), 0, False))


def test_write_is_atomic_and_round_trips(toy_repo: Path, tmp_path: Path) -> None:
    config = mc.load_config(toy_repo, "toy")
    target = tmp_path / "out" / "config.pbtxt"
    mc.write_config(config, target)
    assert mc.parse_config(target.read_text()) == config
    assert [p.name for p in target.parent.iterdir()] == ["config.pbtxt"]


# An onnxruntime model as Triton's tutorials write them: two GPU groups of 2 instances each.
ONNX_TWO_GROUPS = """
name: "resnet"
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]
instance_group [
  { count: 2 kind: KIND_GPU gpus: [ 0 ] },
  { count: 2 kind: KIND_GPU gpus: [ 1 ] }
]
"""


def _round_trip(config: mc.ModelConfig) -> mc.ModelConfig:
    """Through text format, as Triton reads the file, and through validation."""
    again = mc.parse_config(mc.config_text(config))
    mc.validate(again)
    assert again == config
    return again


def test_a_multi_gpu_candidate_is_one_group_with_its_count_on_each_gpu() -> None:
    config = mc.parse_config(ONNX_TWO_GROUPS)
    out = _round_trip(mc.apply_candidate(config, Candidate(3, "KIND_GPU", (0, 1), 16, False, (), 0, False)))
    (group,) = out.instance_group
    assert (group.count, group.kind, list(group.gpus)) == (3, mc.KINDS["KIND_GPU"], [0, 1])
    every = mc.apply_candidate(config, Candidate(1, "KIND_GPU", (), 16, False, (), 0, False))
    assert [list(g.gpus) for g in every.instance_group] == [[]]  # no gpus: every GPU of the server
    assert "gpus" not in mc.config_text(every)


def test_fp16_with_a_workspace_round_trips() -> None:
    config = mc.parse_config(ONNX_TWO_GROUPS)
    cand = Candidate(1, "KIND_GPU", (0,), 16, True, (8, 16), 100, True, 2048)
    out = _round_trip(mc.apply_candidate(config, cand))
    (trt,) = out.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.name == "tensorrt"
    assert dict(trt.parameters) == {
        "precision_mode": "FP16",
        "max_workspace_size_bytes": str(2048 * 1024 * 1024),
    }
    assert mc.candidate_of(out) == cand and mc.uses_tensorrt(out)
    off = mc.apply_candidate(out, replace(cand, trt_fp16=False, trt_workspace_mb=0))
    assert not off.HasField("optimization") and not mc.uses_tensorrt(off)


def test_the_tutorials_two_gpu_groups_read_as_one_candidate() -> None:
    config = mc.parse_config(ONNX_TWO_GROUPS)
    baseline = mc.candidate_of(config)
    assert baseline == Candidate(2, "KIND_GPU", (0, 1), 16, False, (), 0, False)
    assert baseline.instances() == 4
    assert mc.apply_candidate(config, baseline) == config  # the baseline runs as written
    assert mc.instances_of(mc.apply_candidate(config, replace(baseline, instance_count=1))) == (
        1,
        "KIND_GPU",
        (0, 1),
    )


@pytest.mark.parametrize(
    ("groups", "reading"),
    [
        # counts that differ between GPUs: no one group equals it; the largest count, on the GPUs named
        (
            "{ count: 1 kind: KIND_GPU gpus: [ 0 ] }, { count: 2 kind: KIND_GPU gpus: [ 1, 2 ] }",
            (2, (0, 1, 2)),
        ),
        # groups on every GPU add up
        ("{ count: 1 kind: KIND_GPU }, { count: 2 kind: KIND_GPU }", (3, ())),
        # every GPU beside a listed one
        ("{ count: 1 kind: KIND_GPU }, { count: 1 kind: KIND_GPU gpus: [ 1 ] }", (1, (1,))),
        # a rate limiter the one-group form would lose
        ("{ count: 2 kind: KIND_GPU gpus: [ 0 ] rate_limiter { priority: 2 } }", (2, (0,))),
    ],
)
def test_groups_without_a_one_group_equal_stay_exact_as_the_baseline(
    groups: str, reading: tuple[int, tuple[int, ...]]
) -> None:
    head = ONNX_TWO_GROUPS[: ONNX_TWO_GROUPS.index("instance_group")]
    config = mc.parse_config(f"{head}instance_group [ {groups} ]\n")
    baseline = mc.candidate_of(config)
    assert (baseline.instance_count, baseline.gpus) == reading and baseline.kind == "KIND_GPU"
    assert mc.apply_candidate(config, baseline) == config  # kept as written, not rewritten
    other = mc.apply_candidate(config, replace(baseline, instance_count=baseline.instance_count + 1))
    assert len(other.instance_group) == 1  # any other candidate: one group


def test_the_configs_own_tensorrt_parameters_are_kept() -> None:
    """An engine cache (and any other parameter of the config's own accelerator) stays; a
    workspace that reads as the candidate's MiB stays as written, byte for byte."""
    config = mc.parse_config(
        ONNX_TWO_GROUPS
        + """optimization { execution_accelerators { gpu_execution_accelerator [ {
            name: "tensorrt"
            parameters { key: "precision_mode" value: "FP16" }
            parameters { key: "max_workspace_size_bytes" value: "1000000000" }
            parameters { key: "trt_engine_cache_enable" value: "1" } } ] } }"""
    )
    baseline = mc.candidate_of(config)
    assert baseline.trt_fp16 and baseline.trt_workspace_mb == 954  # 1e9 bytes: 953.7 MiB, rounded up
    assert mc.apply_candidate(config, baseline) == config
    bigger = mc.apply_candidate(config, replace(baseline, trt_workspace_mb=2048))
    (trt,) = bigger.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.parameters["trt_engine_cache_enable"] == "1"
    assert trt.parameters["max_workspace_size_bytes"] == str(2048 * 1024 * 1024)
    unset = mc.apply_candidate(config, replace(baseline, trt_workspace_mb=0))  # 0: the backend's default
    (trt,) = unset.optimization.execution_accelerators.gpu_execution_accelerator
    assert "max_workspace_size_bytes" not in trt.parameters and trt.parameters["precision_mode"] == "FP16"


def test_bad_tensorrt_and_gpu_settings_are_config_errors() -> None:
    config = mc.parse_config(ONNX_TWO_GROUPS)
    with pytest.raises(ConfigError, match="max_workspace_size_bytes must be a whole number"):
        mc.validate(
            mc.parse_config(
                ONNX_TWO_GROUPS
                + 'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" '
                'parameters { key: "max_workspace_size_bytes" value: "1G" } } ] } }'
            )
        )
    with pytest.raises(ConfigError, match="GPU ids >= 0"):
        mc.apply_candidate(config, Candidate(1, "KIND_GPU", (-1,), 16, False, (), 0, False))


def test_a_model_needs_a_version_folder_its_policy_serves(tmp_path: Path) -> None:
    from autotune.errors import ConfigError
    from autotune.model_config import check_versions, parse_config

    model = tmp_path / "m"
    model.mkdir()
    config = parse_config('name: "m"\nbackend: "python"\n')
    with pytest.raises(ConfigError, match="No model version was found"):
        check_versions(model, config)
    (model / "1").mkdir()
    check_versions(model, config)
    specific = parse_config('name: "m"\nversion_policy { specific { versions: [2, 3] } }\n')
    with pytest.raises(ConfigError, match=r"asks for version\(s\) 2, 3, its folders hold 1"):
        check_versions(model, specific)
    (model / "3").mkdir()
    check_versions(model, specific)
