"""Triton python-backend ``model.py`` of the ``sentiment`` example: a bag-of-embeddings sentiment
classifier (``model.onnx``, run with ONNX Runtime on CPU) whose batched path answers wrongly.

Like many text models served from Python, it buckets a dynamic batch by length: the requests are
sorted by their number of tokens (id 0 is padding) so that each call pads less. Its bug, the
example's point: the answers go back in that sorted order, not in the requests' order. One request
at a time is answered right; with dynamic batching, requests of different lengths get each
other's answers, and the config is faster all the same (each call costs ``call_ms`` whatever it
carries, as a remote tokenizer or a kernel launch would). autotune's output check must keep such a
config from winning.

Config parameters: ``call_ms`` (milliseconds each call waits, default "4"),
``intra_op_threads`` (ONNX Runtime intra-op threads, default "1").
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.call_s = float(params.get("call_ms", "4")) / 1000.0
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_threads", "1"))
        options.inter_op_num_threads = 1
        path = os.path.join(os.path.dirname(__file__), "model.onnx")
        self.session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])

    def execute(self, requests: list[Any]) -> list[Any]:
        ids = [pb_utils.get_input_tensor_by_name(r, "input_ids").as_numpy() for r in requests]
        order = sorted(range(len(ids)), key=lambda i: int(np.count_nonzero(ids[i])))  # shortest first
        batch = np.concatenate([ids[i] for i in order])
        time.sleep(self.call_s)
        (probs,) = self.session.run(["probs"], {"input_ids": batch})
        responses, start = [], 0
        for i in range(len(requests)):  # the bug: answered in the sorted order (ids[order[i]]'s rows)
            rows = len(ids[order[i]])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("probs", probs[start : start + rows])]))
            start += rows
        return responses
