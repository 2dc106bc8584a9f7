"""Triton python-backend ``model.py`` of the food classifier example, shaped as the
food-classifier tutorial's: one input ``INPUT_IMAGE`` (``TYPE_STRING``, ``dims: [1]``) holding
a base64-encoded JPEG, decoded here with Pillow, resized and classified by ``model.onnx`` (ONNX
Runtime on CPU); outputs ``FOOD_LABEL`` (``TYPE_STRING [1]``) and ``PROBABILITY``
(``TYPE_FP32 [1]``). Every call to ``execute`` decodes each image of each request, then runs
the whole dynamic batch as ONE ONNX Runtime call. A request whose image does not decode gets
an error response naming it; the others are still answered.

Config parameters: ``intra_op_threads`` (ONNX Runtime intra-op threads, default "1").
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError

MODEL_FILE = "model.onnx"
LABELS = (
    "apple_pie",
    "bibimbap",
    "cannoli",
    "donuts",
    "falafel",
    "gyoza",
    "nachos",
    "pho",
    "ramen",
    "tiramisu",
)


def decode(item: Any, size: int) -> np.ndarray:
    """One base64 JPEG -> float32 [3, size, size] in [0, 1]."""
    raw = item if isinstance(item, bytes) else str(item).encode()
    image = Image.open(io.BytesIO(base64.b64decode(raw, validate=True))).convert("RGB")
    pixels = np.asarray(image.resize((size, size), Image.BILINEAR), dtype=np.float32) / 255.0
    return pixels.transpose(2, 0, 1)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        threads = config.get("parameters", {}).get("intra_op_threads", {}).get("string_value", "1")
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(threads)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = os.path.join(args["model_repository"], args["model_version"], MODEL_FILE)
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
        self.size = int(self.session.get_inputs()[0].shape[-1])

    def execute(self, requests: list[Any]) -> list[Any]:
        images: list[np.ndarray] = []
        spans: list[tuple[int, int] | str] = []
        for request in requests:
            items = pb_utils.get_input_tensor_by_name(request, "INPUT_IMAGE").as_numpy().reshape(-1)
            start = len(images)
            try:
                images.extend(decode(item, self.size) for item in items)
            except (binascii.Error, ValueError, UnidentifiedImageError, OSError) as exc:
                del images[start:]
                spans.append(f"INPUT_IMAGE is not a base64-encoded image: {exc}")
                continue
            spans.append((start, len(images)))
        probs = self.session.run(["probs"], {"image": np.stack(images)})[0] if images else np.zeros((0, 1))
        responses = []
        for span in spans:
            if isinstance(span, str):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(span)))
                continue
            chosen = probs[span[0] : span[1]]
            best = chosen.argmax(axis=1)
            labels = np.array([[LABELS[i % len(LABELS)].encode()] for i in best], dtype=np.object_)
            top = chosen.max(axis=1).astype(np.float32).reshape(-1, 1)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("FOOD_LABEL", labels), pb_utils.Tensor("PROBABILITY", top),
            ]))  # fmt: skip
        return responses

    def finalize(self) -> None:
        self.session = None
