"""The workload (pure logic): perf_analyzer's input data formats read once and checked against
the model's inputs, entries sent in turn, the client batch size, and the run's record of it."""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

import numpy as np
import pytest

from autotune.errors import UsageError
from autotune.loadgen._inputs import ModelIO, TensorSpec, read_workload
from autotune.loadgen._transport import Requests
from autotune.model_config import parse_config
from autotune.settings import Workload, add_workload_arguments, workload_from_args

# a BERT-like encoder: variable sequence length, two inputs
BERT = ModelIO(
    "bert", 8,
    (TensorSpec("input_ids", "INT64", (-1,)), TensorSpec("mask", "INT64", (-1,))),
    (TensorSpec("logits", "FP32", (-1,)),),
)  # fmt: skip
IMAGE = ModelIO("food", 4, (TensorSpec("IMAGE", "BYTES", (1,)),), (TensorSpec("LABEL", "BYTES", (1,)),))


def _json(tmp_path: Path, entries: list[dict[str, object]]) -> Workload:
    path = tmp_path / "input.json"
    path.write_text(json.dumps({"data": entries}))
    return Workload(str(path))


def _seq(n: int) -> dict[str, object]:
    return {"input_ids": list(range(n)), "mask": [1] * n}


def test_entries_of_several_lengths_are_sent_in_turn_one_per_request(tmp_path: Path) -> None:
    data = read_workload(BERT, _json(tmp_path, [_seq(32), _seq(128), _seq(384)]))
    payloads = data.payloads()
    assert [p.tensors[0][1].shape for p in payloads] == [(1, 32), (1, 128), (1, 384)]
    assert payloads[1].tensors[0][1][0, :3].tolist() == [0, 1, 2]


def test_a_batch_takes_consecutive_entries_and_wraps(tmp_path: Path) -> None:
    entries = [{"input_ids": [i] * 4, "mask": [1] * 4} for i in range(3)]
    _json(tmp_path, entries)
    data = read_workload(BERT, Workload(str(tmp_path / "input.json"), (), 2))
    firsts = [p.tensors[0][1][:, 0].tolist() for p in data.payloads()]
    assert firsts == [[0, 1], [2, 0], [1, 2]]  # then it repeats: 3 requests cover every pairing
    assert all(p.batch_size == 2 for p in data.payloads())


def test_a_batch_of_entries_of_different_shapes_is_refused(tmp_path: Path) -> None:
    _json(tmp_path, [_seq(32), _seq(64)])
    with pytest.raises(UsageError, match=r"different shapes.*entry 0: \[32\], entry 1: \[64\]"):
        read_workload(BERT, Workload(str(tmp_path / "input.json"), (), 2))  # when read, not mid-run


def test_shape_flag_gives_the_variable_dims_of_random_and_zero_data() -> None:
    data = read_workload(BERT, Workload("zero", (("input_ids", (16,)), ("mask", (16,))), 4))
    (payload,) = data.payloads()
    assert payload.tensors[0][1].shape == (4, 16) and not payload.tensors[0][1].any()
    with pytest.raises(UsageError, match="give --shape input_ids:D1,D2"):
        read_workload(BERT, Workload("random"))


def test_b64_jpeg_bytes_reach_the_request_unchanged(tmp_path: Path) -> None:
    jpeg = b"\xff\xd8\xff\xe0fake-jpeg\xff\xd9"
    data = read_workload(IMAGE, _json(tmp_path, [{"IMAGE": {"b64": base64.b64encode(jpeg).decode()}}]))
    (payload,) = data.payloads()
    assert payload.tensors[0][1].shape == (1, 1) and payload.tensors[0][1][0, 0] == jpeg


def test_directory_format_one_file_per_input(tmp_path: Path) -> None:
    model = ModelIO("m", 0, (TensorSpec("a", "FP32", (2, 2)), TensorSpec("s", "BYTES", (2,))), ())
    (tmp_path / "a").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (tmp_path / "s").write_bytes(b"hello\nworld\n")  # BYTES: one string per line, as perf_analyzer reads it
    (payload,) = read_workload(model, Workload(str(tmp_path))).payloads()
    arrays = {spec.name: array for spec, array in payload.tensors}
    assert arrays["a"].tolist() == [[0.0, 1.0], [2.0, 3.0]] and arrays["s"].tolist() == [b"hello", b"world"]
    (tmp_path / "a").write_bytes(b"\x00" * 12)
    with pytest.raises(UsageError, match="12 bytes are not the 4 FP32 values"):
        read_workload(model, Workload(str(tmp_path)))


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (Workload("random", (("input_ids", (8,)), ("mask", (8,))), 9), "exceeds model 'bert''s max_batch"),
        (Workload("zero", (("input_ids", (8, 2)),)), "does not fit the model's dims \\[-1\\]"),
        (Workload("zero", (("ids", (8,)),)), "model 'bert' has no input 'ids'"),
    ],
)
def test_workloads_that_do_not_fit_the_model(workload: Workload, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        read_workload(BERT, workload)


def test_a_fixed_dimension_cannot_be_chosen_and_an_unbatched_model_takes_no_batch() -> None:
    fixed = ModelIO("m", 0, (TensorSpec("x", "FP32", (16,)),), ())
    with pytest.raises(UsageError, match="only -1 dimensions can be chosen"):
        read_workload(fixed, Workload("zero", (("x", (8,)),)))
    with pytest.raises(UsageError, match="does not batch"):
        read_workload(fixed, Workload("zero", (), 2))


def test_requests_are_taken_in_turn_from_each_connection_s_start() -> None:
    items = (b"a", b"b", b"c")
    first, second = Requests(items, 0), Requests(items, 1)
    assert [first.next() for _ in range(4)] == [b"a", b"b", b"c", b"a"]
    assert [second.next() for _ in range(3)] == [b"b", b"c", b"a"]
    assert [Requests((b"x",), 5).next() for _ in range(2)] == [b"x", b"x"]


def test_in_perf_analyzers_order_every_client_starts_at_the_first_request_and_steps_by_n() -> None:
    items = tuple(bytes([c]) for c in b"abcdefgh")  # 8 entries
    spread = [Requests.for_connection(items, number, 0) for number in range(4)]
    assert [r.next() for r in spread] == [b"a", b"b", b"c", b"d"]
    assert {spread[3].next() for _ in range(8)} == set(items)  # each client sends every entry
    # perf_analyzer 2.41 at concurrency 4: every thread at step 0, adding 4: only 0 and 4 are sent
    in_step = [Requests.for_connection(items, number, 4) for number in range(4)]
    assert [[r.next() for _ in range(3)] for r in in_step] == [[b"a", b"e", b"a"]] * 4
    three = Requests.for_connection(items, 2, 3)  # concurrency 3: 0, 3, 6, 1, 4, 7, 2, ...
    assert [three.next() for _ in range(6)] == [b"a", b"d", b"g", b"b", b"e", b"h"]


def test_the_data_order_sets_the_stride_of_a_closed_loop_only(tmp_path: Path) -> None:
    workload = _json(tmp_path, [_seq(4), _seq(8)])
    spread = read_workload(BERT, workload)
    in_step = read_workload(BERT, Workload(workload.input_data, order="perf-analyzer"))
    assert [spread.stride(c) for c in (0, 1, 4)] == [0, 0, 0]
    assert [in_step.stride(c) for c in (0, 1, 4)] == [0, 1, 4]
    assert in_step.for_model(BERT).order == "perf-analyzer"


def test_a_request_of_one_entry_holds_a_view_of_it_not_a_copy(tmp_path: Path) -> None:
    data = read_workload(BERT, _json(tmp_path, [_seq(4), _seq(8)]))
    for entry, payload in zip(data.entries, data.payloads(), strict=True):
        assert all(np.shares_memory(a, e) for (_, a), e in zip(payload.tensors, entry, strict=True))


def test_a_malformed_file_is_named_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "input.json"
    path.write_text('{"data": [{"input_ids": [1], "mask": [1]}, {"input_ids": [1,,2]}]}')
    with pytest.raises(UsageError, match="not perf_analyzer input data: parse error") as caught:
        read_workload(BERT, Workload(str(path)))
    assert "\n" not in str(caught.value)


def test_model_io_from_config_pbtxt() -> None:
    config = parse_config(
        'name: "food" max_batch_size: 4 input { name: "IMAGE" data_type: TYPE_STRING dims: [1] } '
        'output { name: "PROBABILITY" data_type: TYPE_FP32 dims: [1] }'
    )
    io = ModelIO.from_config("food", config)
    assert io is not None and io.max_batch_size == 4
    assert io.inputs == (TensorSpec("IMAGE", "BYTES", (1,)),)
    assert io.outputs == (TensorSpec("PROBABILITY", "FP32", (1,)),)
    assert ModelIO.from_config("auto", parse_config('name: "auto" backend: "onnxruntime"')) is None


def test_workload_flags_round_trip(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    data = tmp_path / "input.json"
    data.write_text('{"data": [{}]}')
    args = parser.parse_args(["--input-data", str(data), "--shape", "input_ids:64", "-b", "2"])
    workload = workload_from_args(args)
    assert workload == Workload(str(data.resolve()), (("input_ids", (64,)),), 2)
    assert workload.label == "input.json, batch 2, input_ids:64"
    assert workload.flags == f"--input-data {data.resolve()} --shape input_ids:64 --batch-size 2"
    assert Workload.from_json(workload.to_json()) == workload
    args = parser.parse_args(["--input-data", str(data), "--data-order", "perf-analyzer"])
    in_step = workload_from_args(args)
    assert in_step.order == "perf-analyzer" and in_step.label == "input.json, perf-analyzer order"
    assert in_step.flags.endswith("--data-order perf-analyzer")
    assert Workload.from_json(in_step.to_json()) == in_step
    assert Workload.from_json({"input_data": "random"}).order == "spread"  # a record of before orders
    assert Workload.from_json(None) == Workload() and Workload().flags == ""
    with pytest.raises(UsageError, match="--shape given twice"):
        Workload("random", (("a", (1,)), ("a", (2,))))


def test_an_optional_input_may_be_left_out_of_an_entry(tmp_path: Path) -> None:
    model = ModelIO(
        "m", 4, (TensorSpec("x", "FP32", (2,)), TensorSpec("hint", "INT32", (1,), optional=True)), ()
    )
    data = read_workload(model, _json(tmp_path, [{"x": [1, 2]}, {"x": [3, 4], "hint": [7]}]))
    first, second = data.payloads()
    assert [s.name for s, _ in first.tensors] == ["x"] and [s.name for s, _ in second.tensors] == [
        "x",
        "hint",
    ]
    with pytest.raises(UsageError, match="no data for input 'x'"):
        read_workload(model, _json(tmp_path, [{"hint": [7]}]))


def test_entries_follow_the_model_as_the_server_serves_it(tmp_path: Path) -> None:
    data = read_workload(BERT, _json(tmp_path, [_seq(4)]))
    served = ModelIO(
        "bert", 8, (BERT.inputs[1], BERT.inputs[0]), (*BERT.outputs, TensorSpec("extra", "FP32", (1,)))
    )
    (payload,) = data.for_model(served).payloads()
    assert [s.name for s, _ in payload.tensors] == ["mask", "input_ids"]
    assert payload.outputs == ("logits", "extra") and payload.tensors[1][1].tolist() == [[0, 1, 2, 3]]
    more = ModelIO("bert", 8, (*BERT.inputs, TensorSpec("token_type", "INT64", (-1,))), BERT.outputs)
    with pytest.raises(UsageError, match="no data for the served model's input 'token_type'"):
        data.for_model(more)


def test_requests_are_encoded_once_per_protocol(tmp_path: Path) -> None:
    data = read_workload(BERT, _json(tmp_path, [_seq(4), _seq(8)]))
    http = data.encoded("http", "127.0.0.1")
    assert len(http) == 2 and http[0].startswith(b"POST /v2/models/bert/infer HTTP/1.1")
    assert data.encoded("http", "127.0.0.1") is http and len(data.encoded("grpc", "x")) == 2


def test_the_preflight_sends_every_shape_then_a_spread_not_every_entry(tmp_path: Path) -> None:
    from autotune.loadgen import preflight_requests

    lengths = [8] * 50 + [16] + [8] * 49 + [32]  # 101 entries, three shapes
    payloads = read_workload(BERT, _json(tmp_path, [_seq(n) for n in lengths])).payloads()
    chosen = preflight_requests(payloads, most=10)
    assert len(chosen) == 10 and chosen == sorted(set(chosen))
    assert {0, 50, 100} <= set(chosen)  # the first of each shape
    assert max(chosen) - min(chosen) > 80  # the others spread over the file
    assert preflight_requests(payloads[:3], most=10) == [0, 1, 2]
