"""The output check's rule (autotune.outputs), pure: exact for integers and strings, a tolerance
per float type, FP16's for a candidate that computes in FP16, and the reference's round trip."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.errors import UsageError
from autotune.outputs import TOLERANCE, Reference, compare, parse_tolerance

TYPES = {"probs": "FP32", "label": "BYTES", "ids": "INT64"}


def _answer(probs: list[float], label: bytes = b"cat", ids: int = 7) -> dict[str, np.ndarray]:
    return {
        "probs": np.array([probs], dtype=np.float32),
        "label": np.array([[label]], dtype=np.object_),
        "ids": np.array([[ids]], dtype=np.int64),
    }


def test_the_same_answers_pass_and_float_noise_within_the_tolerance_passes() -> None:
    expected = [_answer([0.25, 0.75]), _answer([0.5, 0.5])]
    assert compare(expected, expected, TYPES) is None
    noisy = [_answer([0.25 + 3e-5, 0.75 - 3e-5]), _answer([0.5, 0.5])]  # a sum in another order
    assert compare(expected, noisy, TYPES) is None


def test_a_swapped_answer_names_the_output_the_request_and_the_difference() -> None:
    expected = [_answer([0.25, 0.75]), _answer([0.9, 0.1])]
    swapped = [expected[1], expected[0]]  # a batch answered in another order
    found = compare(expected, swapped, TYPES, labels=["request 0 (entry 3 of input.json)", "request 1"])
    assert found is not None and found.output == "probs" and found.request.startswith("request 0 (entry 3")
    assert found.largest == pytest.approx(0.65) and found.tolerance == TOLERANCE["FP32"]
    assert "output 'probs' of request 0 (entry 3 of input.json): largest difference 0.65" in found.line


def test_integers_and_strings_must_match_exactly_and_shapes_too() -> None:
    expected = [_answer([0.5, 0.5])]
    assert compare(expected, [_answer([0.5, 0.5], label=b"dog")], TYPES) is not None
    assert compare(expected, [_answer([0.5, 0.5], ids=8)], TYPES) is not None
    wider = [{**expected[0], "probs": np.zeros((1, 3), np.float32)}]
    found = compare(expected, wider, TYPES)
    assert found is not None and "has shape [1, 3] instead of [1, 2]" in found.line
    missing = [{k: v for k, v in expected[0].items() if k != "ids"}]
    assert (found := compare(expected, missing, TYPES)) is not None and "is missing" in found.line


def test_an_fp16_candidate_is_held_to_fp16s_tolerance() -> None:
    expected = [_answer([0.25, 0.75])]
    half = [_answer([0.253, 0.747])]  # 3e-3: FP16's rounding, beyond FP32's tolerance
    assert compare(expected, half, TYPES) is not None
    assert compare(expected, half, TYPES, fp16=True) is None
    assert compare(expected, [_answer([0.3, 0.7])], TYPES, fp16=True) is not None  # 5e-2: wrong


def test_large_values_are_compared_relatively_small_ones_absolutely() -> None:
    types = {"v": "FP32"}
    big = [{"v": np.array([1000.0], np.float32)}]
    assert compare(big, [{"v": np.array([1000.05], np.float32)}], types) is None  # 5e-5 relative
    small = [{"v": np.array([1e-6], np.float32)}]
    assert compare(small, [{"v": np.array([5e-5], np.float32)}], types) is None  # 5e-5 absolute
    nan = [{"v": np.array([np.nan], np.float32)}]
    assert compare(nan, nan, types) is None and compare(small, nan, types) is not None


def test_tolerances_parse_or_are_one_line_of_bad_input() -> None:
    assert parse_tolerance("") == TOLERANCE
    assert parse_tolerance("1e-3") == dict.fromkeys(TOLERANCE, 1e-3)
    assert parse_tolerance("fp16=0.02, TYPE_FP32=1e-3") == {**TOLERANCE, "FP16": 0.02, "FP32": 1e-3}
    for bad in ("-1", "soon", "INT8=1", "FP32=", "FP32=-0.1", "inf"):
        with pytest.raises(UsageError, match="--output-tolerance"):
            parse_tolerance(bad)


def test_a_reference_reads_back_as_it_was_written() -> None:
    reference = Reference((_answer([0.25, 0.75]), _answer([0.5, 0.5], b"dog")), TYPES)
    again = Reference.from_arrays(reference.arrays())
    assert again.datatypes == TYPES and compare(reference.answers, again.answers, TYPES) is None
    assert len(again.answers) == 2 and again.answers[1]["label"][0, 0] == b"dog"


def test_a_request_answered_with_an_error_is_left_to_the_measurement() -> None:
    expected = [_answer([0.25, 0.75]), {}]  # your config answered request 1 with an error
    assert compare(expected, [_answer([0.25, 0.75]), _answer([0.9, 0.1])], TYPES) is None
    assert compare([_answer([0.25, 0.75])], [{}], TYPES) is None  # the candidate's error: measured
    stored = Reference.from_arrays(Reference((expected[0], {}), TYPES).arrays())
    assert len(stored.answers) == 2 and stored.answers[1] == {}


def test_the_check_sends_as_many_requests_as_the_largest_batch() -> None:
    from autotune.outputs import check_requests

    assert check_requests((1, 2, 4, 8, 16)) == 16 and check_requests((4, 64)) == 64
    assert check_requests((0,)) == 2  # a model that does not batch: still two side by side
