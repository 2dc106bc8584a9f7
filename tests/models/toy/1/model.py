"""A numpy-only test model whose cost has the shape real models have: a fixed cost per
execution (sleep, so instances overlap like I/O-bound work) plus a cost per batch item.

Parameters (config.pbtxt): fixed_ms, per_item_ms; "crash_on_load" = "1" makes loading fail;
"fail_with_batching" = "1" fails loading a config with dynamic batching;
"hang" = "1" makes every execution block forever (for fault tests);
"fault" = "hang" | "crash" with "fault_when" = "batching" | "instances>1" | "always" and
"fault_after" = N executions: hang, or kill the whole server (as an OOM kill would);
"fault" = "crash_once" with "fault_marker" = a path crashes as "crash" does, only while that
file does not exist (it creates it first): a server that crashes now and then, not every time.
"error_every" = N answers every Nth request with an error (a model that errs under load).
"needs_module" = a module the model imports at load, from the folders TOY_MODULE_PATH names (a
machine without it cannot serve the model).
"""

import importlib
import json
import os
import signal
import sys
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        if params.get("needs_module"):  # found where TOY_MODULE_PATH says (the stub's PYTHONPATH is its own)
            sys.path[:0] = [p for p in os.environ.get("TOY_MODULE_PATH", "").split(os.pathsep) if p]
            importlib.import_module(params["needs_module"])
        if params.get("crash_on_load") == "1":
            raise RuntimeError("toy model told to fail at load (crash_on_load=1)")
        if params.get("fail_with_batching") == "1" and "dynamic_batching" in config:
            raise RuntimeError("toy model refuses dynamic batching (fail_with_batching=1)")
        self.fixed = float(params.get("fixed_ms", "4")) / 1000.0
        self.per_item = float(params.get("per_item_ms", "0.5")) / 1000.0
        self.hang = params.get("hang") == "1"
        self.fault = params.get("fault", "") if _fault_applies(params.get("fault_when", ""), config) else ""
        self.fault_after = int(params.get("fault_after", "0"))
        self.marker = params.get("fault_marker", "")
        self.executions = 0
        self.error_every = int(params.get("error_every", "0"))
        self.requests = 0

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "x").as_numpy() for r in requests]
        batch = np.concatenate(arrays)
        self.executions += 1
        if self.hang or (self.fault == "hang" and self.executions > self.fault_after):
            time.sleep(3600)
        if self.fault == "crash_once" and self.executions > self.fault_after and _first(self.marker):
            self.fault = "crash"
        if self.fault == "crash" and self.executions > self.fault_after:
            os.kill(os.getppid(), signal.SIGKILL)  # the stub's parent is tritonserver
            time.sleep(3600)
        time.sleep(self.fixed + self.per_item * len(batch))
        out = np.tanh(batch).astype(np.float32)
        responses, start = [], 0
        for a in arrays:
            part = out[start : start + len(a)]
            start += len(a)
            self.requests += 1
            if self.error_every and self.requests % self.error_every == 0:
                error = pb_utils.TritonError(f"toy model told to fail every {self.error_every}th request")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", part)]))
        return responses


def _first(marker):
    """Whether this is the first call for ``marker`` (of any process): it creates the file."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def _fault_applies(when, config):
    if when == "always":
        return True
    if when == "batching":
        return "dynamic_batching" in config
    if when == "instances>1":
        return sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) > 1
    return False
