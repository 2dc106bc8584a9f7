#!/usr/bin/env python3
"""Build the example model repositories: ONNX graphs with random weights, served by
Triton's python backend through ``templates/onnx_model.py``.

    bertQA           a BERT question-answering encoder: input_ids, segment_ids, input_mask
                     INT64 [128] -> start_logits, end_logits FP32 [128]
    bertQA_dynamic   the same encoder as most exported transformers are: dims [-1], any
                     sequence length up to 256; input.json holds entries of several lengths
    cnn              a small image classifier: image FP32 [3, 64, 64] -> probs FP32 [10]
    food_classifier  as the food-classifier tutorial: INPUT_IMAGE TYPE_STRING [1], a base64
                     JPEG that model.py decodes with Pillow, resizes and classifies with a
                     small CNN -> FOOD_LABEL STRING [1], PROBABILITY FP32 [1]; its config asks
                     for KIND_GPU gpus [0] as the tutorial's does; input.json holds JPEGs
    text_recognition as the text recognizer of Triton's tutorial part 2 (concurrent model
                     execution): input.1 FP32 [1, 32, -1], a grayscale text line of any
                     width W -> 308 FP32 [-1, 1, 37], 37 character probabilities for each
                     of W/4 columns, from a small CRNN-like CNN; no input.json (the tutorial
                     measures it with perf_analyzer -b 2 --shape input.1:1,32,100)
    mobilenet        MobileNetV2 (inverted residuals, depthwise convolutions, ReLU6):
                     image FP32 [3, 96, 96] -> probs FP32 [1000]; with one onnxruntime thread
                     per instance, batching buys nothing (a batch of 16 costs more per image)
    recommender      DLRM-like: dense FP32 [13], sparse INT64 [26] (ids into one embedding
                     table) -> score FP32 [1]; its config sets request_wait_ms 4, a feature-store
                     round trip per request that model.py waits: instances pay past the cores
    embedder         a sentence encoder: input_ids INT64 [64] -> 2 BERT layers (hidden 128) ->
                     mean of the non-padding tokens' states -> embedding FP32 [128]; its config
                     sets pad_to 8: model.py pads every call to a multiple of 8 rows, as an
                     engine with fixed batch shapes does, so 1 row costs what 8 do
    sentiment        a bag-of-embeddings sentiment classifier: input_ids INT64 [64] (0 pads) ->
                     mean of the tokens' embeddings -> probs FP32 [2], served by a model.py
                     (templates/sentiment_model.py) that buckets a dynamic batch by length and
                     answers in that order: wrong answers with batching, which is faster (each
                     call waits call_ms 4); input.json holds 16 sentences of 6 to 64 tokens

For each model it writes ``<out>/<name>/1/model.onnx`` (same arguments, same bytes),
copies its model.py template to ``<out>/<name>/1/model.py``, writes the workload's
``<out>/<name>/input.json`` where the model needs one (perf_analyzer's format), and writes
``<out>/<name>/config.pbtxt`` only when there is none (an existing config is the user's,
tuned or not). A stamp beside model.onnx records what it was built from, so a second run
with the same arguments only checks. Nothing is downloaded; weights, token ids and images
come from seeded numpy generators.

Tests import this file by path and call :func:`build`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc import model_config_pb2 as mc

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE.parent / "templates" / "onnx_model.py"
FOOD_TEMPLATE = HERE.parent / "templates" / "food_classifier.py"
SENTIMENT_TEMPLATE = HERE.parent / "templates" / "sentiment_model.py"
QA_STEPS_TEMPLATE = HERE.parent / "templates" / "qa_steps.py"
QA_BLS_TEMPLATE = HERE.parent / "templates" / "qa_bls.py"
INPUT_FILE = "input.json"
DEFAULT_OUT = HERE / "model_repository"
OPSET = 17
IR_VERSION = 8  # the IR of opset 17: loads in onnxruntime >= 1.13
# Bump when the graphs change: it invalidates every stamp.
BUILDER_VERSION = 3
STAMP = "model.onnx.stamp"
MAX_BATCH_SIZE = 16
BERT_INPUTS = ("input_ids", "segment_ids", "input_mask")
BERT_OUTPUTS = ("start_logits", "end_logits")


@dataclass(frozen=True)
class BertSpec:
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    intermediate: int = 0  # 0: 4 * hidden
    seq: int = 128
    vocab: int = 30522
    seed: int = 0
    dynamic: bool = False  # dims [-1]: positions cut to each request's length; seq is the longest

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.seq, self.vocab) < 1:
            raise ValueError(f"bertQA sizes must be positive: {self}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.intermediate == 0:
            object.__setattr__(self, "intermediate", 4 * self.hidden)


@dataclass(frozen=True)
class CnnSpec:
    channels: tuple[int, ...] = (32, 64, 128, 128)
    image: int = 64
    classes: int = 10
    seed: int = 0


@dataclass(frozen=True)
class FoodSpec:
    image: int = 64  # JPEGs are resized to this square (the tutorial's 224 is heavy for 2 cores)
    classes: int = 10
    images: int = 8  # JPEG entries in input.json
    seed: int = 0


@dataclass(frozen=True)
class TextSpec:
    channels: tuple[int, ...] = (48, 96, 192)  # one Conv3x3+Relu+MaxPool block each
    height: int = 32  # pooled 2x2 by each block but the last, which pools what is left of it
    classes: int = 37  # the tutorial's: 10 digits, 26 letters and the blank
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.channels or min(*self.channels, self.height, self.classes) < 1:
            raise ValueError(f"text_recognition sizes must be positive: {self}")
        if self.height % self.stride:
            raise ValueError(f"height ({self.height}) must be a multiple of {self.stride}")

    @property
    def stride(self) -> int:
        """Input columns per output column: W pixels wide gives W // stride columns."""
        return 1 << (len(self.channels) - 1)


# MobileNetV2's inverted residual blocks: (expansion, output channels, repeats, first stride)
MOBILENET_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                    (6, 320, 1, 1))  # fmt: skip


@dataclass(frozen=True)
class MobileNetSpec:
    image: int = 96  # MobileNetV2 takes 224; at 96 one image is a few ms on one core
    width: float = 1.0  # the width multiplier (channels scaled, rounded to multiples of 8)
    classes: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.image < 32 or self.width <= 0 or self.classes < 1:
            raise ValueError(f"mobilenet sizes out of range: {self}")


@dataclass(frozen=True)
class RecommenderSpec:
    dense: int = 13  # DLRM's Criteo features: 13 dense, 26 categorical
    sparse: int = 26
    rows: int = 10000  # rows of the one embedding table the categorical ids index (modulo)
    dim: int = 32
    mlp: tuple[int, ...] = (256, 128)
    wait_ms: float = 4.0  # each request's feature-store round trip (model.py waits it)
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.dense, self.sparse, self.rows, self.dim, *self.mlp) < 1 or self.wait_ms < 0:
            raise ValueError(f"recommender sizes out of range: {self}")


@dataclass(frozen=True)
class EmbedderSpec:
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    seq: int = 64
    vocab: int = 30522
    pad_to: int = 8  # model.py pads each call to a multiple of this many rows: a fixed-shape engine
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.seq, self.vocab, self.pad_to) < 1:
            raise ValueError(f"embedder sizes must be positive: {self}")

    def encoder(self) -> BertSpec:
        """The BERT sizes of its encoder layers."""
        return BertSpec(layers=self.layers, hidden=self.hidden, heads=self.heads, seq=self.seq,
                        vocab=self.vocab, seed=self.seed)  # fmt: skip


@dataclass(frozen=True)
class SentimentSpec:
    vocab: int = 30522
    dim: int = 64
    seq: int = 64
    classes: int = 2
    call_ms: float = 4.0  # what each call of its model.py waits, whatever it carries
    sentences: int = 16  # input.json's entries
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.vocab, self.dim, self.seq, self.classes, self.sentences) < 1 or self.call_ms < 0:
            raise ValueError(f"sentiment sizes out of range: {self}")


Spec = (
    BertSpec | CnnSpec | FoodSpec | TextSpec | MobileNetSpec | RecommenderSpec | EmbedderSpec | SentimentSpec
)
SpecType = (
    type[BertSpec]
    | type[CnnSpec]
    | type[FoodSpec]
    | type[TextSpec]
    | type[MobileNetSpec]
    | type[RecommenderSpec]
    | type[EmbedderSpec]
    | type[SentimentSpec]
)
SPECS: dict[str, SpecType] = {
    "bertQA": BertSpec, "bertQA_dynamic": BertSpec, "cnn": CnnSpec, "food_classifier": FoodSpec,
    "text_recognition": TextSpec, "mobilenet": MobileNetSpec, "recommender": RecommenderSpec,
    "embedder": EmbedderSpec, "sentiment": SentimentSpec,
}  # fmt: skip
TEXT_INPUT, TEXT_OUTPUT = "input.1", "308"  # the names the tutorial's ONNX export gave them
# sizes a model is built with unless given (the BERT of bertQA_dynamic takes any length up to 256)
DEFAULT_SIZES: dict[str, dict[str, Any]] = {"bertQA_dynamic": {"dynamic": True, "seq": 256}}
BERT_LENGTHS = (32, 48, 64, 96, 128, 160, 192, 256)  # bertQA_dynamic's input.json: one entry each


class _Graph:
    """Nodes and initializers of one ONNX graph, with unique names and seeded weights."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self._count = 0

    def _name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def const(self, stem: str, array: npt.ArrayLike, dtype: type[Any] = np.float32) -> str:
        name = self._name(stem)
        self.initializers.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    def weight(self, stem: str, shape: Sequence[int], std: float) -> str:
        return self.const(stem, self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std))

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attrs: Any) -> list[str]:
        names = [self._name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=names[0], **attrs))
        return names

    def op1(self, op_type: str, inputs: Sequence[str], **attrs: Any) -> str:
        return self.op(op_type, inputs, **attrs)[0]

    def linear(self, x: str, n_in: int, n_out: int, std: float) -> str:
        y = self.op1("MatMul", [x, self.weight("w", [n_in, n_out], std)])
        return self.op1("Add", [y, self.const("b", np.zeros(n_out))])

    def layer_norm(self, x: str, width: int) -> str:
        scale, bias = self.const("ln_scale", np.ones(width)), self.const("ln_bias", np.zeros(width))
        return self.op1("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-12)

    def gelu(self, x: str) -> str:
        """0.5 * x * (1 + erf(x / sqrt 2)): opset 17 has no Gelu; onnxruntime fuses this."""
        erf = self.op1("Erf", [self.op1("Div", [x, self.const("sqrt2", math.sqrt(2.0))])])
        half_x = self.op1("Mul", [x, self.const("half", 0.5)])
        return self.op1("Mul", [half_x, self.op1("Add", [erf, self.const("one", 1.0)])])

    def model(self, name: str, inputs: list[Any], outputs: list[Any]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="autotune-examples",
            producer_version=str(BUILDER_VERSION),
        )
        onnx.checker.check_model(model, full_check=True)
        return model


def _attention(g: _Graph, x: str, mask: str, spec: BertSpec) -> str:
    """Multi-head self-attention over [batch, seq, hidden]; mask is [batch, 1, 1, seq]."""
    head = spec.hidden // spec.heads
    split = g.const("heads_shape", [0, 0, spec.heads, head], np.int64)
    merge = g.const("hidden_shape", [0, 0, spec.hidden], np.int64)

    def heads(perm: list[int]) -> str:
        projected = g.linear(x, spec.hidden, spec.hidden, 0.02)
        return g.op1("Transpose", [g.op1("Reshape", [projected, split])], perm=perm)

    q, k, v = heads([0, 2, 1, 3]), heads([0, 2, 3, 1]), heads([0, 2, 1, 3])
    scores = g.op1("Div", [g.op1("MatMul", [q, k]), g.const("sqrt_head", math.sqrt(head))])
    probs = g.op1("Softmax", [g.op1("Add", [scores, mask])], axis=-1)
    context = g.op1("Transpose", [g.op1("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    return g.linear(g.op1("Reshape", [context, merge]), spec.hidden, spec.hidden, 0.02)


def _encoder_layer(g: _Graph, x: str, mask: str, spec: BertSpec) -> str:
    x = g.layer_norm(g.op1("Add", [x, _attention(g, x, mask, spec)]), spec.hidden)
    inner = g.gelu(g.linear(x, spec.hidden, spec.intermediate, 0.02))
    ffn = g.linear(inner, spec.intermediate, spec.hidden, 0.02)
    return g.layer_norm(g.op1("Add", [x, ffn]), spec.hidden)


def bert_model(spec: BertSpec) -> onnx.ModelProto:
    """Embeddings (word + position + token type), encoder layers, a Linear(hidden, 2) head."""
    g = _Graph(spec.seed)
    # Ids are folded into range (ids mod vocab, segments mod 2, mask clipped to 0/1) so that
    # random load-test data is valid input, as it is for perf_analyzer's default random data.
    ids = g.op1("Mod", ["input_ids", g.const("vocab", spec.vocab, np.int64)])
    segments = g.op1("Mod", ["segment_ids", g.const("two", 2, np.int64)])
    words = g.op1("Gather", [g.weight("word_embeddings", [spec.vocab, spec.hidden], 0.02), ids])
    types = g.op1("Gather", [g.weight("type_embeddings", [2, spec.hidden], 0.02), segments])
    positions = g.weight("position_embeddings", [spec.seq, spec.hidden], 0.02)
    if spec.dynamic:  # the first `length` rows of the table, length = input_ids.shape[1]
        one, two, zero = (g.const(n, [v], np.int64) for n, v in (("one", 1), ("two", 2), ("zero", 0)))
        length = g.op1("Slice", [g.op1("Shape", ["input_ids"]), one, two])
        positions = g.op1("Slice", [positions, zero, length, zero])
    x = g.op1("Add", [g.op1("Add", [words, types]), positions])
    x = g.layer_norm(x, spec.hidden)
    unit = g.op1("Min", ["input_mask", g.const("one_id", 1, np.int64)])
    keep = g.op1("Cast", [unit], to=TensorProto.FLOAT)
    blocked = g.op1("Mul", [g.op1("Sub", [g.const("one", 1.0), keep]), g.const("neg", -10000.0)])
    mask = g.op1("Unsqueeze", [blocked, g.const("axes", [1, 2], np.int64)])
    for _ in range(spec.layers):
        x = _encoder_layer(g, x, mask, spec)
    logits = g.linear(x, spec.hidden, 2, 0.02)
    halves = g.op("Split", [logits, g.const("split", [1, 1], np.int64)], outputs=2, axis=-1)
    last = g.const("last_axis", [-1], np.int64)
    for half, name in zip(halves, ["start_logits", "end_logits"], strict=True):
        g.nodes.append(helper.make_node("Squeeze", [half, last], [name], name=name))
    batch_seq: list[str | int] = ["batch", "seq" if spec.dynamic else spec.seq]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, batch_seq) for n in BERT_INPUTS]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, batch_seq) for n in BERT_OUTPUTS]
    return g.model("bertQA_dynamic" if spec.dynamic else "bertQA", inputs, outputs)


def embedder_model(spec: EmbedderSpec) -> onnx.ModelProto:
    """A sentence encoder: word + position embeddings, BERT encoder layers attending to the
    non-zero ids (id 0, modulo the vocabulary, is padding), the mean of those rows' states."""
    g, bert = _Graph(spec.seed), spec.encoder()
    ids = g.op1("Mod", ["input_ids", g.const("vocab", spec.vocab, np.int64)])
    words = g.op1("Gather", [g.weight("word_embeddings", [spec.vocab, spec.hidden], 0.02), ids])
    positions = g.weight("position_embeddings", [spec.seq, spec.hidden], 0.02)
    x = g.layer_norm(g.op1("Add", [words, positions]), spec.hidden)
    zero = g.const("pad_id", 0, np.int64)
    keep = g.op1("Cast", [g.op1("Not", [g.op1("Equal", [ids, zero])])], to=TensorProto.FLOAT)  # [b, s]
    blocked = g.op1("Mul", [g.op1("Sub", [g.const("one", 1.0), keep]), g.const("neg", -10000.0)])
    mask = g.op1("Unsqueeze", [blocked, g.const("axes", [1, 2], np.int64)])
    for _ in range(spec.layers):
        x = _encoder_layer(g, x, mask, bert)
    weights = g.op1("Unsqueeze", [keep, g.const("last", [-1], np.int64)])  # [b, s, 1]
    seq_axis = g.const("seq_axis", [1], np.int64)
    summed = g.op1("ReduceSum", [g.op1("Mul", [x, weights]), seq_axis], keepdims=0)  # [b, hidden]
    count = g.op1("ReduceSum", [weights, seq_axis], keepdims=0)  # [b, 1]
    count = g.op1("Max", [count, g.const("at_least", 1.0)])
    g.nodes.append(helper.make_node("Div", [summed, count], ["embedding"], name="embedding"))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", spec.seq])]
    outputs = [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", spec.hidden])]
    return g.model("embedder", inputs, outputs)


def sentiment_model(spec: SentimentSpec) -> onnx.ModelProto:
    """The mean of the non-padding tokens' embeddings (id 0 pads), a Linear, a Softmax."""
    g = _Graph(spec.seed)
    ids = g.op1("Mod", ["input_ids", g.const("vocab", spec.vocab, np.int64)])
    words = g.op1("Gather", [g.weight("embeddings", [spec.vocab, spec.dim], 0.5), ids])  # [b, s, d]
    keep = g.op1("Cast", [g.op1("Not", [g.op1("Equal", [ids, g.const("pad_id", 0, np.int64)])])],
                 to=TensorProto.FLOAT)  # fmt: skip
    weights = g.op1("Unsqueeze", [keep, g.const("last", [-1], np.int64)])  # [b, s, 1]
    seq_axis = g.const("seq_axis", [1], np.int64)
    summed = g.op1("ReduceSum", [g.op1("Mul", [words, weights]), seq_axis], keepdims=0)
    count = g.op1("Max", [g.op1("ReduceSum", [weights, seq_axis], keepdims=0), g.const("at_least", 1.0)])
    logits = g.linear(g.op1("Div", [summed, count]), spec.dim, spec.classes, 1.0)
    g.nodes.append(helper.make_node("Softmax", [logits], ["probs"], name="probs", axis=1))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", spec.seq])]
    outputs = [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", spec.classes])]
    return g.model("sentiment", inputs, outputs)


def cnn_model(spec: CnnSpec) -> onnx.ModelProto:
    """Conv3x3+Relu+MaxPool blocks, global average pool, Gemm, Softmax."""
    g = _Graph(spec.seed)
    x, width = "image", 3
    for channels in spec.channels:
        x, width = _conv_block(g, x, width, channels, [2, 2]), channels
    pooled = g.op1("Flatten", [g.op1("GlobalAveragePool", [x])], axis=1)
    gemm_w = g.weight("fc_w", [width, spec.classes], math.sqrt(1.0 / width))
    logits = g.op1("Gemm", [pooled, gemm_w, g.const("fc_b", np.zeros(spec.classes))])
    g.nodes.append(helper.make_node("Softmax", [logits], ["probs"], name="probs", axis=1))
    image: list[str | int] = ["batch", 3, spec.image, spec.image]
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, image)]
    outputs = [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", spec.classes])]
    return g.model("cnn", inputs, outputs)


def _conv_block(g: _Graph, x: str, n_in: int, n_out: int, pool: list[int]) -> str:
    """Conv3x3 (same padding) + Relu + MaxPool with kernel and stride ``pool`` ([h, w])."""
    kernel = g.weight("conv_w", [n_out, n_in, 3, 3], math.sqrt(2.0 / (9 * n_in)))
    conv = g.op1("Conv", [x, kernel, g.const("conv_b", np.zeros(n_out))], pads=[1, 1, 1, 1])
    return g.op1("MaxPool", [g.op1("Relu", [conv])], kernel_shape=pool, strides=pool)


def mobilenet_model(spec: MobileNetSpec) -> onnx.ModelProto:
    """MobileNetV2: a strided Conv3x3 stem, inverted residual blocks (Conv1x1 expand + ReLU6,
    depthwise Conv3x3 + ReLU6, Conv1x1 project, a residual Add where the shape allows), a
    Conv1x1 to 1280 channels, global average pool, Gemm and Softmax. Batch norms are folded
    into the convolutions' biases, as an exported inference graph has them."""
    g = _Graph(spec.seed)

    def channels(n: int) -> int:
        return max(8, int(n * spec.width + 4) // 8 * 8)

    def conv(
        x: str, n_in: int, n_out: int, kernel: int, stride: int = 1, group: int = 1, relu6: bool = True
    ) -> str:
        w = g.weight(
            "conv_w",
            [n_out, n_in // group, kernel, kernel],
            math.sqrt(2.0 / (kernel * kernel * n_in // group)),
        )
        pad = kernel // 2
        y = g.op1(
            "Conv",
            [x, w, g.const("conv_b", np.zeros(n_out))],
            pads=[pad] * 4,
            strides=[stride] * 2,
            group=group,
        )
        return g.op1("Clip", [y, g.const("zero", 0.0), g.const("six", 6.0)]) if relu6 else y

    width = channels(32)
    x = conv("image", 3, width, 3, stride=2)
    for expansion, out, repeats, first_stride in MOBILENET_BLOCKS:
        out = channels(out)
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            hidden = width * expansion
            y = conv(x, width, hidden, 1) if expansion != 1 else x
            y = conv(y, hidden, hidden, 3, stride=stride, group=hidden)
            y = conv(y, hidden, out, 1, relu6=False)
            x = g.op1("Add", [x, y]) if stride == 1 and width == out else y
            width = out
    last = max(1280, channels(1280))
    x = conv(x, width, last, 1)
    pooled = g.op1("Flatten", [g.op1("GlobalAveragePool", [x])], axis=1)
    gemm_w = g.weight("fc_w", [last, spec.classes], math.sqrt(1.0 / last))
    logits = g.op1("Gemm", [pooled, gemm_w, g.const("fc_b", np.zeros(spec.classes))])
    g.nodes.append(helper.make_node("Softmax", [logits], ["probs"], name="probs", axis=1))
    image: list[str | int] = ["batch", 3, spec.image, spec.image]
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, image)]
    outputs = [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", spec.classes])]
    return g.model("mobilenet", inputs, outputs)


def recommender_model(spec: RecommenderSpec) -> onnx.ModelProto:
    """DLRM-like: the categorical ids (modulo the table's rows) index one embedding table, the
    dense features go through a Linear + Relu to the embeddings' width; all of them are
    concatenated, then an MLP (Linear + Relu layers) and a Linear(., 1) + Sigmoid: a click
    probability."""
    g = _Graph(spec.seed)
    ids = g.op1("Mod", ["sparse", g.const("rows", spec.rows, dtype=np.int64)])
    table = g.weight("embedding", [spec.rows, spec.dim], 0.1)
    embedded = g.op1(
        "Reshape", [g.op1("Gather", [table, ids], axis=0), g.const("shape", [0, -1], dtype=np.int64)]
    )
    dense = g.op1("Relu", [g.linear("dense", spec.dense, spec.dim, math.sqrt(2.0 / spec.dense))])
    x, width = g.op1("Concat", [dense, embedded], axis=1), spec.dim * (spec.sparse + 1)
    for n in spec.mlp:
        x, width = g.op1("Relu", [g.linear(x, width, n, math.sqrt(2.0 / width))]), n
    logit = g.linear(x, width, 1, math.sqrt(1.0 / width))
    g.nodes.append(helper.make_node("Sigmoid", [logit], ["score"], name="score"))
    inputs = [
        helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["batch", spec.dense]),
        helper.make_tensor_value_info("sparse", TensorProto.INT64, ["batch", spec.sparse]),
    ]
    outputs = [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])]
    return g.model("recommender", inputs, outputs)


def text_model(spec: TextSpec) -> onnx.ModelProto:
    """CRNN-like, without the recurrence: Conv3x3+Relu+MaxPool blocks take [batch, 1, height, W]
    to [batch, C, 1, W // stride]; then each column goes through Linear(C, classes) and Softmax."""
    g = _Graph(spec.seed)
    x, depth, height = TEXT_INPUT, 1, spec.height
    for number, channels in enumerate(spec.channels):
        pool = [height, 1] if number == len(spec.channels) - 1 else [2, 2]
        x, depth, height = _conv_block(g, x, depth, channels, pool), channels, height // pool[0]
    columns = g.op1("Transpose", [x], perm=[0, 3, 2, 1])  # [batch, columns, 1, C]
    logits = g.linear(columns, depth, spec.classes, math.sqrt(1.0 / depth))
    g.nodes.append(helper.make_node("Softmax", [logits], [TEXT_OUTPUT], name="probs", axis=-1))
    line: list[str | int] = ["batch", 1, spec.height, "width"]
    probs: list[str | int] = ["batch", "columns", 1, spec.classes]
    inputs = [helper.make_tensor_value_info(TEXT_INPUT, TensorProto.FLOAT, line)]
    outputs = [helper.make_tensor_value_info(TEXT_OUTPUT, TensorProto.FLOAT, probs)]
    return g.model("text_recognition", inputs, outputs)


def _tensor(name: str, data_type: int, dims: Sequence[int]) -> dict[str, Any]:
    return {"name": name, "data_type": data_type, "dims": list(dims)}


def model_config(name: str, spec: Spec) -> mc.ModelConfig:
    """The untuned default a user starts from: python backend, one instance, no batcher; one CPU
    instance, but the food classifier's asks for GPU 0, as the tutorial's does."""
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=MAX_BATCH_SIZE)
    kind = mc.ModelInstanceGroup.KIND_CPU
    if isinstance(spec, BertSpec):
        seq = -1 if spec.dynamic else spec.seq
        config.input.extend(mc.ModelInput(**_tensor(n, mc.TYPE_INT64, [seq])) for n in BERT_INPUTS)
        config.output.extend(mc.ModelOutput(**_tensor(n, mc.TYPE_FP32, [seq])) for n in BERT_OUTPUTS)
    elif isinstance(spec, FoodSpec):
        config.input.append(mc.ModelInput(**_tensor("INPUT_IMAGE", mc.TYPE_STRING, [1])))
        config.output.append(mc.ModelOutput(**_tensor("FOOD_LABEL", mc.TYPE_STRING, [1])))
        config.output.append(mc.ModelOutput(**_tensor("PROBABILITY", mc.TYPE_FP32, [1])))
        kind = mc.ModelInstanceGroup.KIND_GPU
    elif isinstance(spec, RecommenderSpec):
        config.input.append(mc.ModelInput(**_tensor("dense", mc.TYPE_FP32, [spec.dense])))
        config.input.append(mc.ModelInput(**_tensor("sparse", mc.TYPE_INT64, [spec.sparse])))
        config.output.append(mc.ModelOutput(**_tensor("score", mc.TYPE_FP32, [1])))
        config.parameters["request_wait_ms"].string_value = f"{spec.wait_ms:g}"
    elif isinstance(spec, EmbedderSpec):
        config.input.append(mc.ModelInput(**_tensor("input_ids", mc.TYPE_INT64, [spec.seq])))
        config.output.append(mc.ModelOutput(**_tensor("embedding", mc.TYPE_FP32, [spec.hidden])))
        config.parameters["pad_to"].string_value = str(spec.pad_to)
    elif isinstance(spec, SentimentSpec):
        config.input.append(mc.ModelInput(**_tensor("input_ids", mc.TYPE_INT64, [spec.seq])))
        config.output.append(mc.ModelOutput(**_tensor("probs", mc.TYPE_FP32, [spec.classes])))
        config.parameters["call_ms"].string_value = f"{spec.call_ms:g}"
    elif isinstance(spec, TextSpec):
        config.input.append(mc.ModelInput(**_tensor(TEXT_INPUT, mc.TYPE_FP32, [1, spec.height, -1])))
        config.output.append(mc.ModelOutput(**_tensor(TEXT_OUTPUT, mc.TYPE_FP32, [-1, 1, spec.classes])))
    else:
        config.input.append(mc.ModelInput(**_tensor("image", mc.TYPE_FP32, [3, spec.image, spec.image])))
        config.output.append(mc.ModelOutput(**_tensor("probs", mc.TYPE_FP32, [spec.classes])))
    group = mc.ModelInstanceGroup(count=1, kind=kind)
    if kind == mc.ModelInstanceGroup.KIND_GPU:
        group.gpus.append(0)
    config.instance_group.append(group)
    config.parameters["intra_op_threads"].string_value = "1"
    return config


def food_model(spec: FoodSpec) -> onnx.ModelProto:
    """The food classifier's CNN: the cnn example's graph on ``image`` x ``image`` RGB."""
    return cnn_model(CnnSpec(image=spec.image, classes=spec.classes, seed=spec.seed))


def onnx_model(spec: Spec) -> onnx.ModelProto:
    """The model's ONNX graph."""
    if isinstance(spec, BertSpec):
        return bert_model(spec)
    if isinstance(spec, FoodSpec):
        return food_model(spec)
    if isinstance(spec, MobileNetSpec):
        return mobilenet_model(spec)
    if isinstance(spec, RecommenderSpec):
        return recommender_model(spec)
    if isinstance(spec, EmbedderSpec):
        return embedder_model(spec)
    if isinstance(spec, SentimentSpec):
        return sentiment_model(spec)
    return text_model(spec) if isinstance(spec, TextSpec) else cnn_model(spec)


def input_data(spec: Spec) -> dict[str, Any] | None:
    """The model's workload in perf_analyzer's ``--input-data`` JSON format, or None."""
    if isinstance(spec, BertSpec) and spec.dynamic:
        rng = np.random.default_rng(spec.seed + 1)
        entries = []
        for length in (n for n in BERT_LENGTHS if n <= spec.seq):
            segments = [0] * (length // 2) + [1] * (length - length // 2)
            ids = rng.integers(min(1000, spec.vocab // 2), spec.vocab, size=length).tolist()
            values = {"input_ids": ids, "segment_ids": segments, "input_mask": [1] * length}
            # {"content", "shape"}: perf_analyzer needs each entry's shape for a -1 dimension
            entries.append({name: {"content": v, "shape": [length]} for name, v in values.items()})
        return {"data": entries}
    if isinstance(spec, FoodSpec):
        return {"data": [{"INPUT_IMAGE": [base64.b64encode(_jpeg(spec.seed + i)).decode()]}
                         for i in range(spec.images)]}  # fmt: skip
    if isinstance(spec, SentimentSpec):
        rng = np.random.default_rng(spec.seed + 1)
        lengths = np.linspace(max(1, spec.seq // 10), spec.seq, spec.sentences).astype(int)
        rng.shuffle(lengths)  # sentences of every length, in no order
        rows = [rng.integers(1000, spec.vocab, size=n).tolist() + [0] * (spec.seq - n) for n in lengths]
        return {"data": [{"input_ids": row} for row in rows]}
    return None


# ---------------------------------------------------------------- the question-answering pipeline

# The seed's question answering as a pipeline, around the bertQA encoder: a python step turning
# question and context strings into its token ids, the encoder, a python step turning its logits
# into the answer's words (templates/qa_steps.py); as an ensemble, and as a BLS model calling the
# three (templates/qa_bls.py). Built with the encoder; fed strings through input.json.
PIPELINES = ("bertQA_pipeline", "bertQA_bls")
QA_STEPS = ("bertQA_tokenizer", "bertQA_answer")
QA_TEXT = ("QUESTION", "CONTEXT")
QA_SENTENCE = (
    "the model server batches requests from many clients and runs each batch on the instances "
    "it was given while the queue holds the rest until an instance is free so latency grows "
    "with load and throughput stops growing once every core is busy which is why a tuned "
    "config matters for the users who wait on each answer"
)
QA_WORDS = tuple(QA_SENTENCE.split(" "))
QA_ENTRIES = 16


def qa_configs(seq: int, vocab: int) -> dict[str, mc.ModelConfig]:
    """The pipeline's configs (the encoder's is bertQA's own), untuned: one CPU instance each."""

    def text(kind: type[Any], name: str) -> Any:
        return kind(**_tensor(name, mc.TYPE_STRING, [1]))

    def python(name: str, **params: str) -> mc.ModelConfig:
        config = mc.ModelConfig(name=name, backend="python", max_batch_size=MAX_BATCH_SIZE)
        config.instance_group.append(mc.ModelInstanceGroup(count=1, kind=mc.ModelInstanceGroup.KIND_CPU))
        for key, value in params.items():
            config.parameters[key].string_value = value
        return config

    tokenizer = python("bertQA_tokenizer", step="tokenize", seq=str(seq), vocab=str(vocab))
    tokenizer.input.extend(text(mc.ModelInput, n) for n in QA_TEXT)
    tokenizer.output.extend(mc.ModelOutput(**_tensor(n, mc.TYPE_INT64, [seq])) for n in BERT_INPUTS)
    answer = python("bertQA_answer", step="answer", seq=str(seq), max_answer="16")
    answer.input.extend(text(mc.ModelInput, n) for n in QA_TEXT)
    answer.input.extend(mc.ModelInput(**_tensor(n, mc.TYPE_FP32, [seq])) for n in BERT_OUTPUTS)
    answer.output.append(text(mc.ModelOutput, "ANSWER"))
    bls = python("bertQA_bls")
    ensemble = mc.ModelConfig(name="bertQA_pipeline", platform="ensemble", max_batch_size=MAX_BATCH_SIZE)
    for config in (bls, ensemble):
        config.input.extend(text(mc.ModelInput, n) for n in QA_TEXT)
        config.output.append(text(mc.ModelOutput, "ANSWER"))
    flow = (
        ("bertQA_tokenizer", {n: n for n in QA_TEXT}, {n: n for n in BERT_INPUTS}),
        ("bertQA", {n: n for n in BERT_INPUTS}, {n: n for n in BERT_OUTPUTS}),
        ("bertQA_answer", {n: n for n in (*QA_TEXT, *BERT_OUTPUTS)}, {"ANSWER": "ANSWER"}),
    )
    for model, inputs, outputs in flow:
        ensemble.ensemble_scheduling.step.add(
            model_name=model, model_version=-1, input_map=inputs, output_map=outputs
        )
    return {c.name: c for c in (tokenizer, answer, ensemble, bls)}


def qa_input_data(seed: int = 0) -> dict[str, Any]:
    """Questions and contexts of the pipeline's input.json: words of :data:`QA_WORDS`, seeded."""
    rng = np.random.default_rng(seed + 7)
    entries = []
    for _ in range(QA_ENTRIES):
        question = " ".join(rng.choice(QA_WORDS, size=int(rng.integers(4, 10))).tolist()) + "?"
        context = " ".join(rng.choice(QA_WORDS, size=int(rng.integers(30, 100))).tolist())
        entries.append({"QUESTION": [question], "CONTEXT": [context]})
    return {"data": entries}


def build_pipeline(model: str, out: Path, force: bool = False, **sizes: int) -> Path:
    """``out/model`` (``bertQA_pipeline`` or ``bertQA_bls``) with its steps and the bertQA
    encoder (``sizes``: the encoder's): configs where missing, model.py, input.json."""
    spec = BertSpec(**sizes)
    build("bertQA", out, force, **sizes)
    configs = qa_configs(spec.seq, spec.vocab)
    templates = {
        "bertQA_tokenizer": QA_STEPS_TEMPLATE,
        "bertQA_answer": QA_STEPS_TEMPLATE,
        "bertQA_bls": QA_BLS_TEMPLATE,
    }
    for name in (*QA_STEPS, model):
        _write_config(out / name / "config.pbtxt", configs[name])
        (out / name / "1").mkdir(parents=True, exist_ok=True)  # an ensemble's version folder stays empty
        if name in templates:
            _write_changed(out / name / "1" / "model.py", templates[name].read_bytes())
    _write_changed(
        out / model / INPUT_FILE, json.dumps(qa_input_data(spec.seed), separators=(",", ":")).encode()
    )
    return out / model


def _jpeg(seed: int, size: int = 320) -> bytes:
    """A photo-sized JPEG of smooth colour gradients and noise (Pillow; same seed, same bytes)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    ramp = np.linspace(0.0, 1.0, size, dtype=np.float32)
    base = rng.uniform(40, 215, size=3).astype(np.float32)
    tilt = rng.uniform(-40, 40, size=(2, 3)).astype(np.float32)
    pixels = base + ramp[:, None, None] * tilt[0] + ramp[None, :, None] * tilt[1]
    pixels = pixels + rng.normal(0, 12, size=(size, size, 3)).astype(np.float32)
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB").save(out, format="JPEG", quality=85)
    return out.getvalue()


def _signature(config: mc.ModelConfig) -> list[tuple[str, int, list[int]]]:
    tensors = [*config.input, *config.output]
    return [(t.name, t.data_type, list(t.dims)) for t in tensors]


def _check_existing_config(path: Path, expected: mc.ModelConfig) -> None:
    """An existing config stays, but its tensors must match the model being built."""
    existing = text_format.Parse(path.read_text(encoding="utf-8"), mc.ModelConfig())
    if _signature(existing) != _signature(expected):
        raise ValueError(
            f"{path} declares tensors {_signature(existing)} but the model built here has "
            f"{_signature(expected)}: remove that config.pbtxt or build into another --out"
        )


def _write_config(path: Path, config: mc.ModelConfig) -> None:
    """``config`` written where there is none; an existing one is the user's and stays
    (:func:`_check_existing_config`)."""
    if path.exists():
        _check_existing_config(path, config)
    else:
        _write_atomic(path, text_format.MessageToString(config).encode())


def _write_changed(path: Path, data: bytes) -> None:
    """``data`` written unless the file holds it already."""
    if not path.is_file() or path.read_bytes() != data:
        _write_atomic(path, data)


def _write_atomic(path: Path, data: bytes) -> None:
    """Write beside the target, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp(name: str, spec: Spec) -> dict[str, Any]:
    """What model.onnx is built from, as it reads back from JSON (tuples become lists)."""
    stamp = {"builder": BUILDER_VERSION, "model": name, "spec": asdict(spec)}
    return dict(json.loads(json.dumps(stamp)))


def _up_to_date(version_dir: Path, wanted: dict[str, Any]) -> bool:
    stamp, onnx_path = version_dir / STAMP, version_dir / "model.onnx"
    if not (stamp.is_file() and onnx_path.is_file()):
        return False
    recorded = json.loads(stamp.read_text(encoding="utf-8"))
    digest = recorded.pop("sha256", None)
    return bool(recorded == wanted and digest == _sha256(onnx_path))


def _spec(model: str, sizes: dict[str, Any]) -> Spec:
    if model not in SPECS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(SPECS)}")
    try:
        return SPECS[model](**{**DEFAULT_SIZES.get(model, {}), **sizes})
    except TypeError as exc:
        raise ValueError(f"{model}: unknown size argument: {exc}") from exc


def default_spec(model: str) -> Spec:
    """The spec a model is built with when no size is given."""
    return _spec(model, {})


def build(model: str, out: Path, force: bool = False, **sizes: int) -> Path:
    """Write ``out/model`` (config.pbtxt if missing, 1/model.onnx, 1/model.py, input.json when
    the model has one); return that dir. A pipeline (:data:`PIPELINES`) is built with its steps
    and encoder (:func:`build_pipeline`)."""
    if model in PIPELINES:
        return build_pipeline(model, out, force, **sizes)
    spec = _spec(model, sizes)
    model_dir, version_dir = out / model, out / model / "1"
    config_path = model_dir / "config.pbtxt"
    _write_config(config_path, model_config(model, spec))
    templates = {FoodSpec: FOOD_TEMPLATE, SentimentSpec: SENTIMENT_TEMPLATE}
    _write_changed(version_dir / "model.py", templates.get(type(spec), TEMPLATE).read_bytes())
    data = input_data(spec)
    if data is not None:
        _write_changed(model_dir / INPUT_FILE, json.dumps(data, separators=(",", ":")).encode())
    wanted = _stamp(model, spec)
    if force or not _up_to_date(version_dir, wanted):
        proto = onnx_model(spec)
        _write_atomic(version_dir / "model.onnx", proto.SerializeToString(deterministic=True))
        wanted["sha256"] = _sha256(version_dir / "model.onnx")
        _write_atomic(version_dir / STAMP, json.dumps(wanted, indent=1, sort_keys=True).encode())
    return model_dir


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Build the example Triton model repositories (random weights, no downloads).",
        epilog="Sizes apply to bertQA; the other models have fixed sizes. Same arguments give "
        "byte-identical model.onnx and input.json.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="model repository (%(default)s)")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=[*SPECS, *PIPELINES],
        default=[*SPECS, *PIPELINES],
        help="models to build",
    )
    defaults = BertSpec()
    for size in ("layers", "hidden", "heads", "seq", "vocab"):
        parser.add_argument(f"--{size}", type=int, default=getattr(defaults, size), help="(%(default)s)")
    parser.add_argument("--intermediate", type=int, default=0, help="FFN width (0: 4 * hidden)")
    parser.add_argument("--seed", type=int, default=0, help="weights' RNG seed (%(default)s)")
    parser.add_argument("--force", action="store_true", help="rebuild model.onnx even when up to date")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    bert_sizes = {k: getattr(args, k) for k in ("layers", "hidden", "heads", "intermediate", "seq", "vocab")}
    for model in args.models:
        sizes = {**(bert_sizes if model == "bertQA" or model in PIPELINES else {}), "seed": args.seed}
        started = time.perf_counter()
        try:
            path = build(model, args.out, force=args.force, **sizes)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{model}: {path} ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
