"""The example models (examples/build_models.py) and the python-backend ONNX wrapper
(templates/onnx_model.py), without a server: builds are deterministic, the graphs run in
onnxruntime, and batching several requests into one call gives each its own answer.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "build_models.py"
TEMPLATE = ROOT / "templates" / "onnx_model.py"
TINY = {"layers": 1, "hidden": 32, "heads": 2, "seq": 16, "vocab": 100}
SEQ = TINY["seq"]
TINY_EMBEDDER = {"layers": 1, "hidden": 32, "heads": 2, "seq": 16, "vocab": 100}
MODELS = [
    "bertQA",
    "bertQA_dynamic",
    "cnn",
    "food_classifier",
    "text_recognition",
    "mobilenet",
    "recommender",
    "embedder",
    "sentiment",
]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def builder() -> ModuleType:
    return _load("autotune_examples_build_models", SCRIPT)


@pytest.fixture(scope="module")
def wrapper() -> Iterator[ModuleType]:
    """templates/onnx_model.py, importing the real triton_python_backend_utils from pytriton."""
    pytriton = importlib.util.find_spec("pytriton")
    if pytriton is None or not pytriton.submodule_search_locations:
        pytest.skip("needs nvidia-pytriton for triton_python_backend_utils.py")
    utils = Path(pytriton.submodule_search_locations[0]) / "tritonserver/backends/python"
    _load("triton_python_backend_utils", utils / "triton_python_backend_utils.py")
    yield _load("autotune_templates_onnx_model", TEMPLATE)
    del sys.modules["triton_python_backend_utils"]


@pytest.fixture(scope="module")
def tiny_bert(builder: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(builder.build("bertQA", tmp_path_factory.mktemp("repo"), **TINY)) / "1" / "model.onnx"


def _session(path: Path) -> Any:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _bert_feeds(batch: int, seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, SEQ), np.int64)
    mask[:, SEQ - 3 :] = 0
    return {
        "input_ids": rng.integers(0, TINY["vocab"], (batch, SEQ), dtype=np.int64),
        "segment_ids": np.tile((np.arange(SEQ) >= SEQ // 2).astype(np.int64), (batch, 1)),
        "input_mask": mask,
    }


def test_same_arguments_give_identical_bytes(builder: ModuleType, tmp_path: Path) -> None:
    first = builder.build("bertQA", tmp_path / "a", **TINY)
    second = builder.build("bertQA", tmp_path / "b", **TINY)
    other_seed = builder.build("bertQA", tmp_path / "c", seed=1, **TINY)
    onnx_bytes = (first / "1/model.onnx").read_bytes()
    assert onnx_bytes == (second / "1/model.onnx").read_bytes()
    assert onnx_bytes != (other_seed / "1/model.onnx").read_bytes()
    assert (first / "1/model.py").read_bytes() == TEMPLATE.read_bytes()
    assert (first / "config.pbtxt").read_text() == (second / "config.pbtxt").read_text()


def test_every_model_is_listed_here(builder: ModuleType) -> None:
    assert list(builder.SPECS) == MODELS  # the parametrised tests below cover each one


@pytest.mark.parametrize("name", MODELS)
def test_every_model_builds_the_same_bytes_twice(builder: ModuleType, tmp_path: Path, name: str) -> None:
    sizes = TINY if name.startswith("bertQA") else {}
    first, second = (builder.build(name, tmp_path / d, **sizes) for d in ("a", "b"))
    built = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert built == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert Path("1/model.onnx") in built and Path("config.pbtxt") in built
    for path in built:
        assert (first / path).read_bytes() == (second / path).read_bytes(), path


def test_second_build_only_checks_and_force_rebuilds(builder: ModuleType, tmp_path: Path) -> None:
    onnx_path = builder.build("bertQA", tmp_path, **TINY) / "1/model.onnx"
    built = onnx_path.stat().st_ino
    builder.build("bertQA", tmp_path, **TINY)
    assert onnx_path.stat().st_ino == built
    builder.build("bertQA", tmp_path, force=True, **TINY)
    assert onnx_path.stat().st_ino != built


def test_changed_onnx_is_rebuilt(builder: ModuleType, tmp_path: Path) -> None:
    onnx_path = builder.build("bertQA", tmp_path, **TINY) / "1/model.onnx"
    original = onnx_path.read_bytes()
    onnx_path.write_bytes(b"not a model")
    builder.build("bertQA", tmp_path, **TINY)
    assert onnx_path.read_bytes() == original


def test_existing_config_is_kept(builder: ModuleType, tmp_path: Path) -> None:
    config_path = builder.build("bertQA", tmp_path, **TINY) / "config.pbtxt"
    tuned = text_format.Parse(config_path.read_text(), mc.ModelConfig())
    tuned.dynamic_batching.max_queue_delay_microseconds = 500
    config_path.write_text(text_format.MessageToString(tuned))
    builder.build("bertQA", tmp_path, force=True, **TINY)
    assert text_format.Parse(config_path.read_text(), mc.ModelConfig()) == tuned


def test_config_that_disagrees_with_the_model_is_an_error(builder: ModuleType, tmp_path: Path) -> None:
    builder.build("bertQA", tmp_path, **TINY)
    with pytest.raises(ValueError, match=r"remove that config\.pbtxt"):
        builder.build("bertQA", tmp_path, **{**TINY, "seq": 8})


def test_unknown_model_or_size_is_an_error(builder: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown model"):
        builder.build("resnet", tmp_path)
    with pytest.raises(ValueError, match="unknown size"):
        builder.build("cnn", tmp_path, layers=2)
    with pytest.raises(ValueError, match="multiple of heads"):
        builder.build("bertQA", tmp_path, **{**TINY, "heads": 3})
    with pytest.raises(ValueError, match="multiple of 4"):
        builder.build("text_recognition", tmp_path, height=30)


def test_default_config_is_the_untuned_starting_point(builder: ModuleType) -> None:
    config = builder.model_config("bertQA", builder.BertSpec())
    assert (config.backend, config.max_batch_size) == ("python", 16)
    assert not config.HasField("dynamic_batching")
    assert [(g.count, g.kind) for g in config.instance_group] == [(1, mc.ModelInstanceGroup.KIND_CPU)]
    assert config.parameters["intra_op_threads"].string_value == "1"
    assert [(i.name, list(i.dims)) for i in config.input] == [
        ("input_ids", [128]),
        ("segment_ids", [128]),
        ("input_mask", [128]),
    ]
    assert [(o.name, o.data_type) for o in config.output] == [
        ("start_logits", mc.TYPE_FP32),
        ("end_logits", mc.TYPE_FP32),
    ]


@pytest.mark.parametrize("name", MODELS)
def test_committed_config_is_what_the_builder_writes(builder: ModuleType, name: str) -> None:
    committed = ROOT / "examples/model_repository" / name / "config.pbtxt"
    expected = builder.model_config(name, builder.default_spec(name))
    assert text_format.Parse(committed.read_text(), mc.ModelConfig()) == expected


def test_dynamic_bert_takes_every_length_of_its_input_file(builder: ModuleType, tmp_path: Path) -> None:
    model_dir = builder.build("bertQA_dynamic", tmp_path, **{**TINY, "seq": 64})
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [list(i.dims) for i in config.input] == [[-1]] * 3
    entries = json.loads((model_dir / "input.json").read_text())["data"]
    lengths = [e["input_ids"]["shape"][0] for e in entries]
    assert lengths == [32, 48, 64]  # the lengths up to the longest the position table holds
    session = _session(model_dir / "1" / "model.onnx")
    for entry in entries:
        start, _ = session.run(None, {k: np.array([v["content"]], np.int64) for k, v in entry.items()})
        assert start.shape == (1, len(entry["input_ids"]["content"])) and np.isfinite(start).all()
    again = builder.build("bertQA_dynamic", tmp_path / "again", **{**TINY, "seq": 64})
    assert (again / "input.json").read_bytes() == (model_dir / "input.json").read_bytes()


def test_food_classifier_input_is_base64_jpegs_its_model_py_decodes(
    builder: ModuleType, tmp_path: Path
) -> None:
    pytest.importorskip("PIL")
    model_dir = builder.build("food_classifier", tmp_path)
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    assert config.input[0].data_type == mc.TYPE_STRING and list(config.input[0].dims) == [1]
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU  # as the tutorial's
    entries = json.loads((model_dir / "input.json").read_text())["data"]
    sys.modules.setdefault("triton_python_backend_utils", ModuleType("triton_python_backend_utils"))
    food = _load("autotune_templates_food", ROOT / "templates" / "food_classifier.py")
    images = np.stack([food.decode(e["INPUT_IMAGE"][0], 64) for e in entries])
    assert images.shape == (len(entries), 3, 64, 64) and len({im.tobytes() for im in images}) == len(entries)
    (probs,) = _session(model_dir / "1" / "model.onnx").run(["probs"], {"image": images})
    assert probs.shape == (len(entries), 10) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-4)
    with pytest.raises(ValueError):
        food.decode(b"not an image", 64)


def test_bert_runs_a_batch_of_three(tiny_bert: Path) -> None:
    start, end = _session(tiny_bert).run(["start_logits", "end_logits"], _bert_feeds(3))
    assert start.shape == end.shape == (3, SEQ)
    assert np.isfinite(start).all() and np.isfinite(end).all()
    assert not np.allclose(start, end)


def test_concatenated_batch_equals_per_item_runs(tiny_bert: Path) -> None:
    session, feeds = _session(tiny_bert), _bert_feeds(3)
    batched = session.run(None, feeds)
    for row in range(3):
        single = session.run(None, {name: array[row : row + 1] for name, array in feeds.items()})
        for together, alone in zip(batched, single, strict=True):
            np.testing.assert_allclose(together[row : row + 1], alone, rtol=1e-5, atol=1e-5)


def test_wrapper_runs_requests_as_one_call(wrapper: ModuleType, tiny_bert: Path) -> None:
    session = wrapper.make_session(str(tiny_bert))
    calls: list[int] = []

    def run(feeds: dict[str, Any]) -> list[Any]:
        calls.append(len(feeds["input_ids"]))
        return list(session.run(["start_logits", "end_logits"], feeds))

    requests = [
        _bert_feeds(1, seed=1),
        _bert_feeds(2, seed=2),
        "missing input 'input_mask'",
        _bert_feeds(3, seed=3),
    ]
    results = wrapper.run_batched(run, requests)
    assert calls == [6]
    assert results[2] == "missing input 'input_mask'"
    for request, result in zip(requests, results, strict=True):
        if isinstance(request, dict):
            alone = session.run(["start_logits", "end_logits"], request)
            for got, want in zip(result, alone, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_wrapper_failure_answers_each_request_with_an_error(wrapper: ModuleType, tiny_bert: Path) -> None:
    session = wrapper.make_session(str(tiny_bert))
    bad = _bert_feeds(1)
    bad["input_ids"][0, 0] = -7  # a marker: the session below fails on any batch holding it

    def run(feeds: dict[str, Any]) -> list[Any]:
        if (feeds["input_ids"] == -7).any():
            raise RuntimeError("INVALID_ARGUMENT: the session refused this batch")
        return list(session.run(None, feeds))

    uneven = {**_bert_feeds(2), "input_mask": np.ones((1, SEQ), np.int64)}
    results = wrapper.run_batched(run, [bad, _bert_feeds(1), uneven])
    assert all(isinstance(r, str) for r in results)
    assert "onnxruntime failed on a batch of 2" in results[0] and results[0] == results[1]
    assert "one batch dimension" in results[2]
    assert wrapper.run_each(run, [bad, "missing"])[1] == "missing"
    assert [len(r) for r in wrapper.run_each(run, [_bert_feeds(1)])] == [2]


def test_wrapper_session_options(wrapper: ModuleType, tiny_bert: Path) -> None:
    options = wrapper.make_session(str(tiny_bert), intra_op_threads=2).get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    config = {"parameters": {"intra_op_threads": {"string_value": "2"}}}
    assert wrapper.config_parameter(config, "intra_op_threads", "1") == "2"
    assert wrapper.config_parameter(config, "allow_spinning", "0") == "0"


def test_cnn_gives_probabilities(builder: ModuleType, tmp_path: Path) -> None:
    session = _session(builder.build("cnn", tmp_path) / "1/model.onnx")
    image = np.random.default_rng(0).standard_normal((2, 3, 64, 64), dtype=np.float32)
    (probs,) = session.run(["probs"], {"image": image})
    assert probs.shape == (2, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert (probs >= 0).all()


def test_mobilenet_classifies_each_image_of_a_batch_as_alone(builder: ModuleType, tmp_path: Path) -> None:
    model_dir = builder.build("mobilenet", tmp_path, image=32, width=0.25, classes=7)
    session = _session(model_dir / "1/model.onnx")
    ops = {n.op_type for n in onnx.load(str(model_dir / "1/model.onnx")).graph.node}
    assert {"Conv", "Clip", "Add", "GlobalAveragePool", "Gemm", "Softmax"} <= ops  # ReLU6, residuals
    images = np.random.default_rng(0).standard_normal((3, 3, 32, 32), dtype=np.float32)
    (probs,) = session.run(["probs"], {"image": images})
    assert probs.shape == (3, 7)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    for row in range(3):
        (alone,) = session.run(["probs"], {"image": images[row : row + 1]})
        np.testing.assert_allclose(probs[row : row + 1], alone, rtol=1e-4, atol=1e-6)


def test_recommender_scores_any_ids_and_its_model_py_waits_per_request(
    builder: ModuleType, wrapper: ModuleType, tmp_path: Path
) -> None:
    model_dir = builder.build("recommender", tmp_path, rows=50, wait_ms=2.5)
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("dense", mc.TYPE_FP32, [13]),
        ("sparse", mc.TYPE_INT64, [26]),
    ]
    session = _session(model_dir / "1/model.onnx")
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((2, 13), dtype=np.float32)
    ids = rng.integers(0, 50, (2, 26), dtype=np.int64)
    (score,) = session.run(["score"], {"dense": dense, "sparse": ids})
    assert score.shape == (2, 1) and ((score > 0) & (score < 1)).all()
    (wrapped,) = session.run(["score"], {"dense": dense, "sparse": ids + 50 * 7})  # ids index modulo rows
    np.testing.assert_allclose(wrapped, score, rtol=1e-6)
    model = wrapper.TritonPythonModel()
    model.initialize({"model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
                      "model_repository": str(model_dir), "model_version": "1"})  # fmt: skip
    assert model.wait_s == pytest.approx(0.0025)  # config parameter request_wait_ms


def test_wrapper_pads_each_call_to_a_multiple_of_pad_to(wrapper: ModuleType) -> None:
    calls: list[int] = []

    def run(feeds: dict[str, Any]) -> list[Any]:  # a stand-in engine: rows in, rows out
        calls.append(len(feeds["x"]))
        return [feeds["x"] * 2.0, feeds["x"].sum(axis=1)]

    rows = np.arange(30, dtype=np.float32).reshape(10, 3)
    requests = [{"x": rows[:1]}, {"x": rows[1:3]}, "missing input 'x'", {"x": rows[3:10]}]
    results = wrapper.run_batched(run, requests, pad_to=8)
    assert calls == [16]  # 10 rows padded to 16
    assert results[2] == "missing input 'x'"
    for request, result in zip(requests, results, strict=True):
        if isinstance(request, dict):
            np.testing.assert_array_equal(result[0], request["x"] * 2.0)
            np.testing.assert_array_equal(result[1], request["x"].sum(axis=1))
    wrapper.run_batched(run, [{"x": rows[:8]}], pad_to=8)
    wrapper.run_batched(run, [{"x": rows[:3]}])
    assert calls[1:] == [8, 3]  # a full tile is not padded; pad_to 1 (the default) never is
    padded = wrapper.pad_rows({"x": rows[:3], "y": rows[:3, 0]}, 4)
    np.testing.assert_array_equal(padded["x"], rows[[0, 1, 2, 2]])  # the last row repeated
    np.testing.assert_array_equal(padded["y"], rows[[0, 1, 2, 2], 0])


def test_embedder_embeds_each_row_as_alone_and_its_model_py_pads_to_8(
    builder: ModuleType, wrapper: ModuleType, tmp_path: Path
) -> None:
    model_dir = builder.build("embedder", tmp_path, **TINY_EMBEDDER)
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [("input_ids", mc.TYPE_INT64, [16])]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [("embedding", mc.TYPE_FP32, [32])]
    assert not config.HasField("dynamic_batching") and config.instance_group[0].count == 1
    session = _session(model_dir / "1/model.onnx")
    ids = np.random.default_rng(0).integers(1, 1000, (3, SEQ), dtype=np.int64)  # ids index modulo vocab
    ids[1, 10:] = 0  # padding: left out of the attention and of the mean
    (embedding,) = session.run(["embedding"], {"input_ids": ids})
    assert embedding.shape == (3, 32) and np.isfinite(embedding).all()
    for row in range(3):
        (alone,) = session.run(["embedding"], {"input_ids": ids[row : row + 1]})
        np.testing.assert_allclose(embedding[row : row + 1], alone, rtol=1e-4, atol=1e-6)
    (empty,) = session.run(["embedding"], {"input_ids": np.zeros((1, SEQ), np.int64)})
    assert np.isfinite(empty).all()  # all padding: no division by zero
    model = wrapper.TritonPythonModel()
    model.initialize({"model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
                      "model_repository": str(model_dir), "model_version": "1"})  # fmt: skip
    assert model.pad_to == 8  # config parameter pad_to
    (served,) = wrapper.run_batched(model._run, [{"input_ids": ids}], model.pad_to)
    np.testing.assert_allclose(served[0], embedding, rtol=1e-4, atol=1e-6)


def test_sentiment_classifies_each_sentence_as_alone_and_its_data_has_every_length(
    builder: ModuleType, tmp_path: Path
) -> None:
    """The graph is right (a batch classifies each row as it would alone; padding is left out);
    only its model.py's batched path is wrong (tests/test_output_check.py serves it)."""
    model_dir = builder.build("sentiment", tmp_path)
    data = json.loads((model_dir / "input.json").read_text())["data"]
    ids = np.array([entry["input_ids"] for entry in data], dtype=np.int64)
    lengths = np.count_nonzero(ids, axis=1)
    assert ids.shape == (16, 64) and len(set(lengths.tolist())) == 16 and lengths.min() >= 6
    session = _session(model_dir / "1/model.onnx")
    (probs,) = session.run(["probs"], {"input_ids": ids})
    assert probs.shape == (16, 2) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    for row in range(16):
        (alone,) = session.run(["probs"], {"input_ids": ids[row : row + 1]})
        np.testing.assert_allclose(probs[row : row + 1], alone, rtol=1e-5, atol=1e-6)
    shorter = ids[:1].copy()
    shorter[0, lengths[0] // 2 :] = 0  # half the tokens: another mean, another answer
    (cut,) = session.run(["probs"], {"input_ids": shorter})
    assert not np.allclose(cut, probs[:1])
    template = ROOT / "templates" / "sentiment_model.py"
    assert (model_dir / "1" / "model.py").read_bytes() == template.read_bytes()


def test_text_recognition_gives_probabilities_per_column_of_any_width(
    builder: ModuleType, tmp_path: Path
) -> None:
    model_dir = builder.build("text_recognition", tmp_path)
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    assert [(i.name, list(i.dims)) for i in config.input] == [("input.1", [1, 32, -1])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("308", [-1, 1, 37])]
    session = _session(model_dir / "1/model.onnx")
    rng = np.random.default_rng(0)
    for width, columns in ((100, 25), (64, 16)):  # perf_analyzer --shape input.1:1,32,100 -b 2
        (probs,) = session.run(["308"], {"input.1": rng.random((2, 1, 32, width), dtype=np.float32)})
        assert probs.shape == (2, columns, 1, 37)
        np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)
        assert not np.allclose(probs[:, 0], probs[:, -1])  # each column is its own prediction


def test_wrapper_serves_the_tutorials_tensor_names(
    wrapper: ModuleType, builder: ModuleType, tmp_path: Path
) -> None:
    """``input.1`` and ``308``, names no Python identifier could be, from config to response."""
    model_dir = builder.build("text_recognition", tmp_path)
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    model = wrapper.TritonPythonModel()
    as_triton_gives_it = json_format.MessageToJson(config, preserving_proto_field_name=True)
    model.initialize({"model_config": as_triton_gives_it, "model_repository": str(model_dir),
                      "model_version": "1"})  # fmt: skip
    assert (model.inputs, list(model.outputs)) == (["input.1"], ["308"])
    rng = np.random.default_rng(0)
    requests = [{"input.1": rng.random((b, 1, 32, w), dtype=np.float32)} for b, w in ((2, 100), (1, 64))]
    results = wrapper.run_batched(model._run, requests)
    assert [[a.shape for a in r] for r in results] == [[(2, 25, 1, 37)], [(1, 16, 1, 37)]]


def test_script_help() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "--models" in result.stdout and "--seq" in result.stdout


# ---------------------------------------------------------------- the question-answering pipeline


def test_the_qa_pipeline_builds_the_same_bytes_twice_and_checks_as_triton_would(
    builder: ModuleType, tmp_path: Path
) -> None:
    from autotune.pipeline import read_pipeline

    for out in (tmp_path / "a", tmp_path / "b"):
        for name in builder.PIPELINES:
            builder.build(name, out, **TINY)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and all(
        (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files
    )
    found = read_pipeline(tmp_path / "a", "bertQA_pipeline")
    assert found is not None and found.members == ("bertQA_tokenizer", "bertQA", "bertQA_answer")
    bls = read_pipeline(tmp_path / "a", "bertQA_bls", found.members)
    assert bls is not None and bls.kind == "bls"
    data = json.loads((tmp_path / "a" / "bertQA_pipeline" / "input.json").read_text())
    assert len(data["data"]) == builder.QA_ENTRIES and all(
        set(e) == {"QUESTION", "CONTEXT"} for e in data["data"]
    )


def test_committed_pipeline_configs_are_what_the_builder_writes(builder: ModuleType) -> None:
    spec = builder.default_spec("bertQA")
    for name, expected in builder.qa_configs(spec.seq, spec.vocab).items():
        committed = ROOT / "examples/model_repository" / name / "config.pbtxt"
        assert text_format.Parse(committed.read_text(), mc.ModelConfig()) == expected, name


def test_the_qa_steps_tokenize_and_answer_with_the_contexts_words(wrapper: ModuleType) -> None:
    """templates/qa_steps.py's rules: [CLS] question [SEP] context [SEP] padded and cut at seq;
    the answer is the context's words where the start and end logits peak, end not before start."""
    steps = _load("autotune_templates_qa_steps", ROOT / "templates" / "qa_steps.py")
    ids, segments, mask = steps.encode(b"Who waits?", "the users wait here", 12, 100)
    q, c = (
        [steps.token_id(w, 100) for w in ("who", "waits?")],
        [steps.token_id(w, 100) for w in ("the", "users", "wait", "here")],
    )
    assert ids.tolist() == [101, *q, 102, *c, 102, 0, 0, 0]
    assert segments.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0] and mask.tolist() == [1] * 9 + [0] * 3
    assert steps.encode("a b", "c " * 40, 8, 100)[2].tolist() == [1] * 8  # cut at seq
    start, end = np.zeros(12), np.zeros(12)
    start[5], end[6], end[2] = 3.0, 2.0, 9.0  # context words 1-2; position 2 is the question's
    assert steps.answer(b"who waits?", b"the users wait here", start, end, 16) == "users wait"
    assert steps.answer(b"who waits?", b"the users wait here", start, end, 1) != "users wait"  # too long
