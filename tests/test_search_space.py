from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.errors import SearchSpaceError
from autotune.prepare import default_space_path
from autotune.search_space import Candidate, load_search_space, params_of, parse_search_space


class Fixed:
    """A trial that answers from a dict and records what was asked (pure-logic fake)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params, self.asked = params, []

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        self.asked.append(name)
        assert self.params[name] in choices
        return self.params[name]


def test_default_space_parses() -> None:
    space = load_search_space(default_space_path())
    assert space.kind == ("KIND_CPU",)  # auto without a GPU
    assert space.instance_count == (1, 2, 3, 4) and space.concurrency_max == 32
    assert space.size() > 50


def test_conditional_dimensions_are_only_asked_when_they_apply() -> None:
    space = parse_search_space({"dynamic_batching": {"enabled": [False, True]}})
    off = Fixed({"instance_count": 1, "kind": "KIND_CPU", "max_batch_size": 4, "dynamic_batching": False})
    assert space.suggest(off) == Candidate(1, "KIND_CPU", (), 4, False, (), 0, False)
    assert "preferred_batch_size" not in off.asked and "trt_fp16" not in off.asked


@pytest.mark.parametrize(
    "candidate",
    [
        Candidate(2, "KIND_CPU", (), 8, True, (8,), 100, False),
        Candidate(1, "KIND_GPU", (0, 1), 16, True, (4, 8), 0, True),
        Candidate(3, "KIND_GPU", (), 0, False, (), 0, False),
    ],
)
def test_params_of_round_trips_through_suggest(candidate: Candidate) -> None:
    space = parse_search_space({}).including(candidate)
    assert space.suggest(Fixed(params_of(candidate))) == candidate


def test_preferred_sizes_are_clipped_to_the_candidate() -> None:
    space = parse_search_space(
        {"max_batch_size": [2, 8], "dynamic_batching": {"preferred_batch_size": [[2, 8]]}}
    )
    params = {
        "instance_count": 1,
        "kind": "KIND_CPU",
        "max_batch_size": 2,
        "dynamic_batching": True,
        "preferred_batch_size": "2,8",
        "max_queue_delay_us": 0,
    }
    assert space.suggest(Fixed(params)).preferred_batch_sizes == (2,)


def test_restricted_drops_what_the_model_cannot_take() -> None:
    space = parse_search_space(
        {
            "instance_group": {"kind": ["KIND_CPU", "KIND_GPU"]},
            "optimization": {"tensorrt_fp16": [True, False]},
        }
    )
    narrow = space.restricted(batching=False, gpu=False, tensorrt=False)
    assert narrow.max_batch_size == (0,) and narrow.kind == ("KIND_CPU",) and narrow.trt_fp16 == (False,)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"bogus": 1}, "unknown key 'bogus'"),
        ({"instance_group": {"count": []}}, "empty"),
        ({"instance_group": {"count": {"min": 4, "max": 2}}}, "min 4 > max 2"),
        ({"instance_group": {"count": [0]}}, ">= 1"),
        ({"instance_group": {"kind": ["KIND_TPU"]}}, "KIND_TPU"),
        ({"max_batch_size": ["big"]}, "expected an integer"),
        ({"max_batch_size": [4], "dynamic_batching": {"preferred_batch_size": [8]}}, "8 > the largest"),
        ({"dynamic_batching": {"enabled": ["yes"]}}, "true/false"),
        ({"instance_group": {"gpus": ["first"]}}, "GPU ids"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_malformed_spaces_say_why(doc: Any, message: str) -> None:
    with pytest.raises(SearchSpaceError, match=message):
        parse_search_space(doc)


def test_unreadable_or_invalid_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(SearchSpaceError, match="not found"):
        load_search_space(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("instance_group: [unclosed", "utf-8")
    with pytest.raises(SearchSpaceError, match="not valid YAML"):
        load_search_space(bad)


ROOT = Path(__file__).resolve().parents[1]


def test_tensorrt_workspace_is_asked_only_with_fp16_and_round_trips() -> None:
    space = parse_search_space(
        {
            "instance_group": {"kind": ["KIND_GPU"], "gpus": [[0], [0, 1]]},
            "max_batch_size": [0],
            "optimization": {"tensorrt_fp16": [False, True], "tensorrt_workspace_mb": [512, 2048]},
        }
    )
    assert space.trt_workspace_mb == (512, 2048) and space.gpus == ("0", "0,1")
    base = {"instance_count": 1, "kind": "KIND_GPU", "gpus": "0,1", "max_batch_size": 0}
    off = Fixed({**base, "trt_fp16": False})
    assert space.suggest(off).trt_workspace_mb == 0 and "trt_workspace_mb" not in off.asked
    on = space.suggest(Fixed({**base, "trt_fp16": True, "trt_workspace_mb": 2048}))
    assert on == Candidate(1, "KIND_GPU", (0, 1), 0, False, (), 0, True, 2048)
    assert space.suggest(Fixed(params_of(on))) == on and space.holds(on)
    assert not space.holds(replace(on, trt_workspace_mb=1024))
    assert space.including(replace(on, trt_workspace_mb=1024)).trt_workspace_mb == (512, 2048, 1024)
    # counts (1, 2) x gpus (2) x (fp16 off, or on with 2 workspaces); max_batch_size 0: no batching
    assert space.size() == 2 * 2 * 3
    assert parse_search_space({}).trt_workspace_mb == (1024,)  # the default


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"optimization": {"tensorrt_workspace_mb": [0]}}, ">= 1"),
        ({"optimization": {"tensorrt_workspace_mb": ["1G"]}}, "expected an integer"),
        ({"optimization": {"tensorrt_workspace_mb": [4_000_000]}}, "more than any GPU has"),
        ({"optimization": {"tensorrt_workspace_mb": []}}, "empty"),
        ({"optimization": {"tensorrt_workspace": [1024]}}, "unknown key 'tensorrt_workspace'"),
        ({"optimization": {"tensorrt_fp16": ["yes"]}}, "optimization.tensorrt_fp16: expected true/false"),
        ({"instance_group": {"gpus": [[0, -1]]}}, "GPU ids"),
        ({"instance_group": {"gpus": [[]]}}, "GPU ids"),
    ],
)
def test_bad_gpu_and_tensorrt_options_are_one_line_errors(doc: Any, message: str) -> None:
    with pytest.raises(SearchSpaceError, match=message) as info:
        parse_search_space(doc)
    assert "\n" not in str(info.value)


def test_gpu_lists_the_server_lacks_are_dropped() -> None:
    space = parse_search_space(
        {"instance_group": {"kind": ["KIND_GPU"], "gpus": ["all", [0], [0, 1], [2, 3]]}}
    )
    assert space.restricted(batching=True, gpu=True, tensorrt=True, gpu_count=2).gpus == ("all", "0", "0,1")
    assert space.restricted(batching=True, gpu=True, tensorrt=True).gpus == space.gpus  # count unknown
    only_far = parse_search_space({"instance_group": {"kind": ["KIND_GPU"], "gpus": [[3]]}})
    assert only_far.restricted(batching=True, gpu=True, tensorrt=True, gpu_count=1).gpus == ("all",)


def test_gpu_counts_are_per_gpu_in_labels_and_totals() -> None:
    cpu = Candidate(2, "KIND_CPU", (), 8, False, (), 0, False)
    assert cpu.instances() == 2 and cpu.label() == "2xcpu mbs 8 batching off"
    listed = replace(cpu, kind="KIND_GPU", gpus=(0, 1))
    assert listed.instances() == 4 and listed.label().startswith("2/gpu on gpus 0,1 (4 in all) mbs 8")
    every = replace(cpu, kind="KIND_GPU")
    assert every.instances() is None and every.label().startswith("2/gpu on all gpus mbs 8")
    assert every.instances(server_gpus=4) == 8 and "2/gpu on all gpus (8 in all)" in every.label(4)
    one = replace(listed, gpus=(1,), trt_fp16=True, trt_workspace_mb=1024)
    assert one.label() == "2/gpu on gpus 1 mbs 8 batching off trt-fp16 ws 1024MiB"


def test_the_bundled_gpu_space_parses() -> None:
    space = load_search_space(ROOT / "search_spaces" / "gpu.yaml", gpu_available=True)
    assert space.kind == ("KIND_GPU",) and space.instance_count == (1, 2, 3, 4)
    assert space.trt_fp16 == (False, True) and space.trt_workspace_mb == (1024,)
    assert load_search_space(ROOT / "search_spaces" / "gpu.yaml").kind == ("KIND_CPU",)  # no GPU: auto is CPU


def test_a_bundled_space_is_found_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no file of that name here
    assert load_search_space(Path("model_analyzer")).dynamic_batching == (True,)
    with pytest.raises(SearchSpaceError, match="bundled, by name: default"):
        load_search_space(Path("no_such_space"))


def test_a_model_section_replaces_the_top_level_for_that_model_only(tmp_path: Path) -> None:
    """``models:`` holds a section for some models (a pipeline's steps, models on one server):
    for that model its keys replace the top level's, key by key within a section; any other
    model gets the top level; a section for a model the run does not serve is an error."""
    doc = {
        "instance_group": {"count": [1, 2], "kind": ["KIND_CPU"]},
        "max_batch_size": [4, 8],
        "models": {"tokenizer": {"instance_group": {"count": [1]}, "max_batch_size": [8]}, "empty": None},
    }
    pinned = parse_search_space(doc, model="tokenizer")
    assert pinned.instance_count == (1,) and pinned.kind == ("KIND_CPU",) and pinned.max_batch_size == (8,)
    other = parse_search_space(doc, model="encoder")
    assert other.instance_count == (1, 2) and other.max_batch_size == (4, 8)
    assert parse_search_space(doc, model="empty") == other
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert (
        load_search_space(path, model="tokenizer", served=["qa", "tokenizer", "encoder", "empty"]) == pinned
    )
    with pytest.raises(SearchSpaceError, match=r"a section for model 'empty' under models:, which this run"):
        load_search_space(path, model="tokenizer", served=["qa", "tokenizer", "encoder"])


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"load": {"concurrency": [1]}}, r"unknown key 'load' in models\.tok"),
        ({"instance_group": {"cnt": [1]}}, r"unknown key 'cnt' in models\.tok\.instance_group"),
        ([1], r"models\.tok must be a mapping"),
    ],
)
def test_a_bad_model_section_says_where(section: Any, message: str) -> None:
    with pytest.raises(SearchSpaceError, match=message):
        parse_search_space({"models": {"tok": section}})
