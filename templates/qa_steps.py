"""Triton python-backend ``model.py`` of the question-answering pipeline's two python steps
(examples ``bertQA_tokenizer`` and ``bertQA_answer``), chosen by the config parameter ``step``.

- ``tokenize``: ``QUESTION`` and ``CONTEXT`` (``TYPE_STRING [1]``) -> ``input_ids``,
  ``segment_ids``, ``input_mask`` (``TYPE_INT64 [seq]``) as the bertQA encoder takes them:
  ``[CLS] question [SEP] context [SEP]``, padded with 0, cut at ``seq``.
- ``answer``: ``QUESTION``, ``CONTEXT`` and the encoder's ``start_logits``, ``end_logits``
  (``TYPE_FP32 [seq]``) -> ``ANSWER`` (``TYPE_STRING [1]``): the context's words of the span
  whose start and end logits sum highest (at most ``max_answer`` words).

Words are the lowercased whitespace-separated parts of the text; a word's id is
``FIRST_ID + crc32(word) % (vocab - FIRST_ID)``: deterministic, nothing to download (a stand-in
for a WordPiece vocabulary). Config parameters: ``step``, ``seq`` (default "128"), ``vocab``
(default "30522"), ``max_answer`` (default "16"). Each request of a dynamic batch is answered
row by row; a request whose text does not decode as UTF-8 gets an error naming it.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

PAD, CLS, SEP, FIRST_ID = 0, 101, 102, 1000


def words(text: bytes | str) -> list[str]:
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return text.lower().split()


def token_id(word: str, vocab: int) -> int:
    return FIRST_ID + zlib.crc32(word.encode("utf-8")) % (vocab - FIRST_ID)


def encode(question: bytes | str, context: bytes | str, seq: int, vocab: int) -> tuple[np.ndarray, ...]:
    """input_ids, segment_ids, input_mask of one question and context (each ``[seq]``)."""
    q = [token_id(w, vocab) for w in words(question)]
    c = [token_id(w, vocab) for w in words(context)]
    ids = ([CLS, *q, SEP, *c] + [SEP])[:seq]
    segments = ([0] * (len(q) + 2) + [1] * (len(c) + 1))[:seq]
    out = np.zeros((3, seq), np.int64)
    out[0, : len(ids)] = ids
    out[1, : len(segments)] = segments
    out[2, : len(ids)] = 1
    return out[0], out[1], out[2]


def answer(
    question: bytes | str, context: bytes | str, start: np.ndarray, end: np.ndarray, max_answer: int
) -> str:
    """The context's words of the best span (start and end logits summed, end not before start)."""
    c = words(context)
    offset = len(words(question)) + 2  # [CLS] question [SEP]
    last = min(len(start), offset + len(c)) - 1
    if last < offset:
        return ""
    s = np.asarray(start[offset : last + 1], np.float64)
    e = np.asarray(end[offset : last + 1], np.float64)
    n = len(s)
    score = s[:, None] + e[None, :]
    i, j = np.indices((n, n))
    score[(j < i) | (j - i >= max_answer)] = -np.inf
    first, stop = np.unravel_index(int(np.argmax(score)), score.shape)
    return " ".join(c[first : stop + 1])


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.step = params.get("step", "tokenize")
        self.seq = int(params.get("seq", "128"))
        self.vocab = int(params.get("vocab", "30522"))
        self.max_answer = int(params.get("max_answer", "16"))

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except UnicodeDecodeError as exc:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"not UTF-8 text: {exc}"))
                )
        return responses

    def _one(self, request: Any) -> Any:
        def tensor(name: str) -> np.ndarray:
            return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

        questions, contexts = tensor("QUESTION").reshape(-1), tensor("CONTEXT").reshape(-1)
        if self.step == "tokenize":
            rows = [encode(q, c, self.seq, self.vocab) for q, c in zip(questions, contexts, strict=True)]
            names = ("input_ids", "segment_ids", "input_mask")
            return pb_utils.InferenceResponse(
                [pb_utils.Tensor(n, np.stack([r[i] for r in rows])) for i, n in enumerate(names)]
            )
        starts, ends = tensor("start_logits"), tensor("end_logits")
        found = [
            answer(q, c, s, e, self.max_answer)
            for q, c, s, e in zip(questions, contexts, starts, ends, strict=True)
        ]
        out = np.array([[a.encode("utf-8")] for a in found], dtype=np.object_)
        return pb_utils.InferenceResponse([pb_utils.Tensor("ANSWER", out)])
