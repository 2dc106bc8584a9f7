"""config.pbtxt edited in place: the fields a candidate changes are rewritten, every other byte
(comments, order, layout) stays as the user wrote it."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.config_edit import edit_in_place, text_diff, try_edit_in_place
from autotune.model_config import (
    ModelConfig,
    apply_candidate,
    candidate_of,
    config_text,
    parse_config,
    supports_tensorrt,
)
from autotune.search_space import Candidate

ROOT = Path(__file__).resolve().parents[1]

# A config as people write it: comments, backend first, version_policy late, an input on one line,
# dims as lists, parameters not in key order.
HAND = """\
# The toy model, tuned by hand (see docs/toy.md).
backend: "python"
name: "toy"
max_batch_size: 8  # the client never sends more

input [ { name: "x", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [
  {
    name: "y"
    data_type: TYPE_FP32
    dims: [ 16 ]
  }
]

instance_group [
  {
    # one per core of the test box
    count: 1
    kind: KIND_CPU
  }
]

parameters {
  key: "per_item_ms"  # the cost of each item
  value { string_value: "0.5" }
}
parameters {
  key: "fixed_ms"
  value { string_value: "4" }
}
version_policy: { latest { num_versions: 1 } }
# keep this line last
"""

# The same model with batching on, its own comments inside dynamic_batching.
BATCHED = """\
name: "toy"  # batched
backend: "python"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 16 ] } ]
instance_group [ { count: 2, kind: KIND_CPU } ]  # two fit in memory
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100  # 0.1 ms
}
parameters { key: "fixed_ms", value { string_value: "4" } }
"""

# An ONNX model on a GPU: TensorRT is an option.
ONNX = """\
# resnet, exported by tools/export.py
name: "resnet"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [
  {
    name: "image"
    data_type: TYPE_FP32
    dims: [ 3, 224, 224 ]
  }
]
output [
  {
    name: "probs"
    data_type: TYPE_FP32
    dims: [ 1000 ]
  }
]
instance_group [
  {
    count: 1
    kind: KIND_GPU  # the only GPU
  }
]
"""

BASE = Candidate(1, "KIND_CPU", (), 8, False, (), 0, False)
BATCHING = replace(
    BASE, instance_count=2, dynamic_batching=True, preferred_batch_sizes=(4, 8), max_queue_delay_us=100
)
GPU = Candidate(1, "KIND_GPU", (), 16, False, (), 0, False)


def _comments(text: str) -> list[str]:
    return re.findall(r"#[^\n]*", text)


def _edited(text: str, candidate: Candidate) -> tuple[ModelConfig, str]:
    """The candidate's config of ``text``, and ``text`` edited in place to it (never the fallback)."""
    new = apply_candidate(parse_config(text), candidate)
    result = try_edit_in_place(text, new)
    assert result is not None, "the edit fell back to writing the whole config"
    assert parse_config(result) == new
    assert edit_in_place(text, new) == result
    return new, result


def _changed(before: str, after: str) -> list[str]:
    """The lines a diff removes (``-``) and adds (``+``), in order."""
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line.startswith(("+", "-")) and line[:3] not in ("---", "+++")]


@pytest.mark.parametrize(
    "candidate",
    [
        replace(BASE, instance_count=3),
        replace(BASE, kind="KIND_GPU"),
        replace(BASE, kind="KIND_GPU", gpus=(0, 1)),
        replace(BASE, max_batch_size=4),
        replace(BASE, dynamic_batching=True),
        replace(BASE, dynamic_batching=True, preferred_batch_sizes=(2, 4), max_queue_delay_us=500),
        replace(BASE, instance_count=4, max_batch_size=4, dynamic_batching=True, preferred_batch_sizes=(4,)),
    ],
)
def test_every_comment_and_every_unchanged_line_stays(candidate: Candidate) -> None:
    _, result = _edited(HAND, candidate)
    assert _comments(result) == _comments(HAND)
    removed = {line[1:] for line in _changed(HAND, result) if line.startswith("-")}
    assert removed <= {
        "max_batch_size: 8  # the client never sends more",
        "    count: 1",
        "    kind: KIND_CPU",
    }


def test_the_instance_count_changes_its_number_alone() -> None:
    _, result = _edited(HAND, replace(BASE, instance_count=3))
    assert _changed(HAND, result) == ["-    count: 1", "+    count: 3"]
    assert result == HAND.replace("count: 1", "count: 3")


def test_the_kind_changes_its_name_alone_and_gpus_come_after_it() -> None:
    _, result = _edited(HAND, replace(BASE, kind="KIND_GPU"))
    assert _changed(HAND, result) == ["-    kind: KIND_CPU", "+    kind: KIND_GPU"]
    _, result = _edited(HAND, replace(BASE, kind="KIND_GPU", gpus=(0, 1)))
    assert _changed(HAND, result) == ["-    kind: KIND_CPU", "+    kind: KIND_GPU", "+    gpus: [ 0, 1 ]"]


def test_max_batch_size_keeps_its_comment() -> None:
    _, result = _edited(HAND, replace(BASE, max_batch_size=4))
    assert _changed(HAND, result) == [
        "-max_batch_size: 8  # the client never sends more",
        "+max_batch_size: 4  # the client never sends more",
    ]


def test_dynamic_batching_added_goes_at_the_end_written_as_the_file_writes_lists() -> None:
    _, result = _edited(
        HAND, replace(BASE, dynamic_batching=True, preferred_batch_sizes=(2, 4), max_queue_delay_us=500)
    )
    assert result == HAND + (
        "dynamic_batching {\n  preferred_batch_size: [ 2, 4 ]\n  max_queue_delay_microseconds: 500\n}\n"
    )
    _, result = _edited(HAND, replace(BASE, dynamic_batching=True))
    assert result == HAND + "dynamic_batching {\n}\n"


def test_dynamic_batching_removed_loses_its_lines_only() -> None:
    _, result = _edited(
        BATCHED, replace(BATCHING, dynamic_batching=False, preferred_batch_sizes=(), max_queue_delay_us=0)
    )
    assert _changed(BATCHED, result) == [
        "-dynamic_batching {",
        "-  preferred_batch_size: [ 4, 8 ]",
        "-  max_queue_delay_microseconds: 100  # 0.1 ms",
        "-}",
    ]


def test_the_queue_delay_and_preferred_sizes_change_in_place() -> None:
    _, result = _edited(BATCHED, replace(BATCHING, preferred_batch_sizes=(8,), max_queue_delay_us=2000))
    assert _changed(BATCHED, result) == [
        "-  preferred_batch_size: [ 4, 8 ]",
        "-  max_queue_delay_microseconds: 100  # 0.1 ms",
        "+  preferred_batch_size: [ 8 ]",
        "+  max_queue_delay_microseconds: 2000  # 0.1 ms",
    ]
    _, result = _edited(BATCHED, replace(BATCHING, preferred_batch_sizes=(2, 8)))
    assert _changed(BATCHED, result) == [
        "-  preferred_batch_size: [ 4, 8 ]",
        "+  preferred_batch_size: [ 2, 8 ]",
    ]


def test_an_instance_group_on_one_line_stays_on_one_line() -> None:
    _, result = _edited(BATCHED, replace(BATCHING, instance_count=3))
    assert _changed(BATCHED, result) == [
        "-instance_group [ { count: 2, kind: KIND_CPU } ]  # two fit in memory",
        "+instance_group [ { count: 3, kind: KIND_CPU } ]  # two fit in memory",
    ]


def test_tensorrt_fp16_added_to_an_onnx_model() -> None:
    new, result = _edited(ONNX, replace(GPU, trt_fp16=True, trt_workspace_mb=1024))
    assert supports_tensorrt(new)
    assert result.startswith(ONNX) and _comments(result) == _comments(ONNX)
    assert result[len(ONNX) :] == (
        "optimization {\n"
        "  execution_accelerators {\n"
        "    gpu_execution_accelerator {\n"
        '      name: "tensorrt"\n'
        "      parameters {\n"
        '        key: "max_workspace_size_bytes"\n'
        '        value: "1073741824"\n'
        "      }\n"
        "      parameters {\n"
        '        key: "precision_mode"\n'
        '        value: "FP16"\n'
        "      }\n"
        "    }\n"
        "  }\n"
        "}\n"
    )
    # then its workspace changed, by key in the map, and FP16 taken off again
    _, smaller = _edited(result, replace(GPU, trt_fp16=True, trt_workspace_mb=512))
    assert _changed(result, smaller) == ['-        value: "1073741824"', '+        value: "536870912"']
    _, off = _edited(result, GPU)
    assert off == ONNX


def test_map_entries_are_matched_by_key() -> None:
    config = parse_config(HAND)
    config.parameters["per_item_ms"].string_value = "0.25"
    del config.parameters["fixed_ms"]
    config.parameters["extra_ms"].string_value = "1"
    result = try_edit_in_place(HAND, config)
    assert result is not None and parse_config(result) == config
    assert _changed(HAND, result) == [  # the new entry where the one deleted stood (difflib pairs them)
        '-  value { string_value: "0.5" }',
        '+  value { string_value: "0.25" }',
        '-  key: "fixed_ms"',
        '-  value { string_value: "4" }',
        '+  key: "extra_ms"',
        "+  value {",
        '+    string_value: "1"',
        "+  }",
    ]
    assert result.index('"per_item_ms"') < result.index('"extra_ms"') < result.index("version_policy")


def test_a_oneof_swapped_on_one_line() -> None:
    config = parse_config(HAND)
    config.version_policy.all.SetInParent()
    result = try_edit_in_place(HAND, config)
    assert result is not None and parse_config(result) == config
    assert _changed(HAND, result) == [
        "-version_policy: { latest { num_versions: 1 } }",
        "+version_policy: { all { } }",
    ]


def test_an_unchanged_config_is_the_same_text() -> None:
    same = apply_candidate(parse_config(HAND), BASE)
    assert try_edit_in_place(HAND, same) == HAND
    assert text_diff(HAND, HAND) == ""


def test_windows_line_endings_stay() -> None:
    text = HAND.replace("\n", "\r\n")
    _, result = _edited(text, replace(BASE, instance_count=2, dynamic_batching=True))
    assert result.count("\r\n") == result.count("\n")
    assert result.startswith(text.replace("count: 1", "count: 2"))


def test_a_file_without_a_final_newline_gets_one_after_a_new_field() -> None:
    text = 'name: "toy"\nbackend: "python"\nmax_batch_size: 8'
    _, result = _edited(text, replace(BASE, dynamic_batching=True, max_queue_delay_us=100))
    added = "instance_group {\n  count: 1\n  kind: KIND_CPU\n}\n"
    added += "dynamic_batching {\n  max_queue_delay_microseconds: 100\n}\n"
    assert result == text + "\n" + added


def test_a_layout_beyond_the_editor_is_written_whole() -> None:
    """A map key written twice (the last one counts) is not edited in place: the whole config is
    written, as text_format writes it, and it still parses to the new config."""
    text = 'name: "toy"\nparameters { key: "a" value { string_value: "1" } }\n'
    text += 'parameters { key: "a" value { string_value: "2" } }\n'
    config = parse_config(text)
    config.parameters["a"].string_value = "3"
    assert try_edit_in_place(text, config) is None
    assert edit_in_place(text, config) == config_text(config)


def test_the_diff_labels_and_a_last_line_without_newline() -> None:
    assert text_diff("a: 1", "a: 2") == "--- a/config.pbtxt\n+++ b/config.pbtxt\n@@ -1 +1 @@\n-a: 1\n+a: 2\n"


def _repository_configs() -> list[Path]:
    folders = [
        ROOT / "tests" / "models",
        ROOT / "tests" / "gpu_models",
        ROOT / "examples" / "model_repository",
    ]
    return sorted(p for folder in folders if folder.is_dir() for p in folder.glob("*/config.pbtxt"))


def _variants(config: ModelConfig) -> list[Candidate]:
    """A few candidates the tuner could make of ``config``: more instances, the other kind,
    batching switched, a smaller max batch, and FP16 where TensorRT runs it."""
    own = candidate_of(config)
    out = [replace(own, instance_count=own.instance_count + 2)]
    out.append(
        replace(own, kind="KIND_GPU", gpus=(0,))
        if own.kind == "KIND_CPU"
        else replace(own, kind="KIND_CPU", gpus=())
    )
    if config.max_batch_size > 1:
        half = config.max_batch_size // 2
        batching = not own.dynamic_batching
        sizes, delay = ((half,), 200) if batching else ((), 0)
        out.append(
            replace(
                own,
                max_batch_size=half,
                dynamic_batching=batching,
                preferred_batch_sizes=sizes,
                max_queue_delay_us=delay,
            )
        )
    if supports_tensorrt(config):
        out.append(replace(own, kind="KIND_GPU", trt_fp16=True, trt_workspace_mb=256))
    return out


def test_the_repository_configs_are_edited_in_place() -> None:
    configs = _repository_configs()
    assert len(configs) >= 3
    for path in configs:
        text = path.read_text(encoding="utf-8")
        config = parse_config(text, str(path))
        for candidate in _variants(config):
            new, result = _edited(text, candidate)
            kept = set(text.splitlines()) - {line[1:] for line in _changed(text, result) if line[:1] == "-"}
            assert kept, path
            if text != config_text(config):  # a layout of the user's own: a full rewrite would show
                assert result != config_text(new), (path, candidate)
