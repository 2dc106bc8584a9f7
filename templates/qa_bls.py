"""Triton python-backend ``model.py`` of ``bertQA_bls``: the question-answering pipeline as one
BLS model that calls its steps in turn (``bertQA_tokenizer``, ``bertQA``, ``bertQA_answer``,
named by the config parameters ``tokenizer``, ``encoder`` and ``answer``): ``QUESTION`` and
``CONTEXT`` (``TYPE_STRING [1]``) -> ``ANSWER`` (``TYPE_STRING [1]``), as the ensemble
``bertQA_pipeline`` answers. Each request is sent on whole (its batch as it came); a step that
answers an error answers the request with it, naming the step.
"""

from __future__ import annotations

import json
from typing import Any

import triton_python_backend_utils as pb_utils

STEPS = (
    ("tokenizer", ("QUESTION", "CONTEXT"), ("input_ids", "segment_ids", "input_mask")),
    ("encoder", ("input_ids", "segment_ids", "input_mask"), ("start_logits", "end_logits")),
    ("answer", ("QUESTION", "CONTEXT", "start_logits", "end_logits"), ("ANSWER",)),
)


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        defaults = {"tokenizer": "bertQA_tokenizer", "encoder": "bertQA", "answer": "bertQA_answer"}
        self.models = {role: params.get(role, model) for role, model in defaults.items()}

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(request) for request in requests]

    def _one(self, request: Any) -> Any:
        tensors = {n: pb_utils.get_input_tensor_by_name(request, n) for n in ("QUESTION", "CONTEXT")}
        for role, inputs, outputs in STEPS:
            model = self.models[role]
            called = pb_utils.InferenceRequest(
                model_name=model, requested_output_names=list(outputs), inputs=[tensors[n] for n in inputs]
            )
            answer = called.exec()
            if answer.has_error():
                return pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"step {model}: {answer.error().message()}")
                )
            for name in outputs:
                tensors[name] = pb_utils.Tensor(
                    name, pb_utils.get_output_tensor_by_name(answer, name).as_numpy()
                )
        return pb_utils.InferenceResponse([tensors["ANSWER"]])
