"""A fresh server warmed before its first window: Triton's ``model_warmup`` in a staged config.

A fresh server is slow at first: each instance meets each batch shape for the first time
(CUDA contexts, kernel selection, lazy loading on a GPU; caches on a CPU). Triton's
``model_warmup`` runs samples on every instance, at the batch sizes they name, before the
model is ready. A staged candidate gets a sample per batch size of the doubling ladder up to its
largest (:func:`batch_sizes`), each the workload's first entry (its real data, so a model that
checks its input is warmed as it will be used; :func:`samples`). Your config's own
``model_warmup`` is kept as it is. The warm-up's time is part of the server's start, which each
trial records. Measured (``benchmarks/results/first-window-20261204.txt``, 20 fresh servers each
way): bertQA's first window read p99 1.73x its steady windows cold, 1.05x warmed at 1, 2, 4, 8
and 16 (1.08x warmed at every size 1-16, for 4x the warm-up's time).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from autotune.model_config import ModelConfig

FOLDER = "warmup"  # Triton reads input_data_file from this folder of the model's
SAMPLE = "autotune batch"  # the start of each sample's name
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_REFUSED = re.compile(r"failed to run warmup sample '" + SAMPLE + r" (\d+)': (.*)")


def batch_sizes(config: ModelConfig, client_batch: int) -> list[int]:
    """The batch sizes the config's instances warm at: with dynamic batching the client's batch
    times each power of two up to ``max_batch_size``, and that; without, the client's batch
    alone; a model that does not batch, one request (1)."""
    if config.max_batch_size <= 0:
        return [1]
    step, top = max(1, client_batch), config.max_batch_size
    if not config.HasField("dynamic_batching"):
        return [min(step, top)]
    doubling = [step << k for k in range(top.bit_length()) if step << k <= top]
    return sorted({*doubling, top - top % step or top})


def samples(
    config: ModelConfig, entry: Sequence[NDArray[Any] | None], names: Sequence[str], client_batch: int
) -> tuple[ModelConfig, dict[str, bytes]]:
    """``config`` with a warm-up sample per batch size (:func:`batch_sizes`) of the workload's
    ``entry`` (one sample of each input, by ``names``, no batch dimension; an optional input it
    leaves out is left out), and the files they read (name -> bytes, for :data:`FOLDER`). A
    config with a ``model_warmup`` of its own comes back as it is, with no files."""
    if config.model_warmup:
        return config, {}
    types = {t.name: t.data_type for t in config.input}
    files = {
        _file_name(name): encode(array) for name, array in zip(names, entry, strict=True) if array is not None
    }
    out = ModelConfig()
    out.CopyFrom(config)
    for size in batch_sizes(config, client_batch):
        sample = out.model_warmup.add(name=f"{SAMPLE} {size}", batch_size=size, count=1)
        for name, array in zip(names, entry, strict=True):
            if array is None or name not in types:
                continue
            given = sample.inputs[name]
            given.data_type = types[name]
            given.dims.extend(int(d) for d in array.shape)
            given.input_data_file = _file_name(name)
    return out, files


def refused(log_text: str, client_batch: int) -> str | None:
    """What the model said when it failed our warm-up sample at the client's own batch (the
    workload's first request as sent: the data's fault, not the config's), from a server's log;
    None if it did not (a larger batch that fails is the config's)."""
    found = _REFUSED.search(log_text)
    if found is None or int(found.group(1)) > max(1, client_batch):
        return None
    return found.group(2).split("\\n")[0].strip().rstrip('";').strip()


def encode(array: NDArray[Any]) -> bytes:
    """A tensor as Triton reads a warm-up file: raw row-major values, or for strings each
    element's length (4 bytes, little-endian) then its bytes."""
    if array.dtype.kind in "OSU":
        parts = []
        for value in array.reshape(-1):
            data = value.encode() if isinstance(value, str) else bytes(value)
            parts.append(struct.pack("<I", len(data)) + data)
        return b"".join(parts)
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()


def _file_name(input_name: str) -> str:
    return "autotune-" + (_UNSAFE.sub("_", input_name) or "input")
