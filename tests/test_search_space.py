from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.errors import SearchSpaceError
from autotune.search_space import Candidate, load_search_space, params_of, parse_search_space
from autotune.tuner import default_space_path


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
