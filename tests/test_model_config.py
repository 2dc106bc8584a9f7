from __future__ import annotations

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


def test_diff_shows_changed_lines(toy_repo: Path) -> None:
    config = mc.load_config(toy_repo, "toy")
    out = mc.apply_candidate(config, Candidate(2, "KIND_CPU", (), 8, False, (), 0, False))
    diff = mc.config_diff(config, out)
    assert "-  count: 1" in diff and "+  count: 2" in diff
