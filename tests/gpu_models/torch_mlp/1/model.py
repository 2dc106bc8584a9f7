"""A torch model for the GPU path (scripts/gpu_path.py): an MLP classifier (x FP32 [256] -> 2
ReLU layers of 2048 -> logits FP32 [16], of a few units each) run with torch on the instance's
device (KIND_GPU: its CUDA device; KIND_CPU: the CPU), seeded weights, a whole dynamic batch in
one call.

Tensors cross the python backend through DLPack, never numpy: the backend of tritonserver 2.51
returned empty outputs with numpy 2, which the GPU machines carry. Parameter ``precision``:
"fp32" (default) or "fp16" (the same weights, computed in half precision: what a TensorRT FP16
engine would answer, for the output check).
"""

import json

import torch
import triton_python_backend_utils as pb_utils
from torch.utils.dlpack import from_dlpack, to_dlpack

WIDTH, HIDDEN, CLASSES = 256, 2048, 16


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        gpu = args["model_instance_kind"] == "GPU"
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}" if gpu else "cpu")
        self.dtype = torch.float16 if params.get("precision", "fp32") == "fp16" else torch.float32
        g = torch.Generator().manual_seed(0)
        shapes = [(WIDTH, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES)]
        self.weights = [
            (torch.randn(shape, generator=g) / shape[0] ** 0.5).to(self.device, self.dtype)
            for shape in shapes
        ]

    def execute(self, requests):
        parts = [from_dlpack(pb_utils.get_input_tensor_by_name(r, "x").to_dlpack()).clone() for r in requests]
        x = torch.cat(parts).to(self.device, self.dtype)
        with torch.inference_mode():
            for w in self.weights[:-1]:
                x = torch.relu(x @ w)
            logits = (x @ self.weights[-1]).float().cpu().contiguous()
        responses, start = [], 0
        for part in parts:
            rows = part.shape[0]
            out = pb_utils.Tensor.from_dlpack("logits", to_dlpack(logits[start : start + rows].contiguous()))
            responses.append(pb_utils.InferenceResponse([out]))
            start += rows
        return responses
