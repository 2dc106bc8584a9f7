"""A numpy-only test model whose cost has the shape real models have: a fixed cost per
execution (sleep, so instances overlap like I/O-bound work) plus a cost per batch item.

Parameters (config.pbtxt): fixed_ms, per_item_ms; "crash_on_load" = "1" makes loading fail;
"fail_with_batching" = "1" fails loading a config with dynamic batching;
"hang" = "1" makes every execution block forever (for fault tests).
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        if params.get("crash_on_load") == "1":
            raise RuntimeError("toy model told to fail at load (crash_on_load=1)")
        if params.get("fail_with_batching") == "1" and "dynamic_batching" in config:
            raise RuntimeError("toy model refuses dynamic batching (fail_with_batching=1)")
        self.fixed = float(params.get("fixed_ms", "4")) / 1000.0
        self.per_item = float(params.get("per_item_ms", "0.5")) / 1000.0
        self.hang = params.get("hang") == "1"

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "x").as_numpy() for r in requests]
        batch = np.concatenate(arrays)
        if self.hang:
            time.sleep(3600)
        time.sleep(self.fixed + self.per_item * len(batch))
        out = np.tanh(batch).astype(np.float32)
        responses, start = [], 0
        for a in arrays:
            part = out[start : start + len(a)]
            start += len(a)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", part)]))
        return responses
