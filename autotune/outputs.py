"""Right answers first: a candidate's outputs against the original config's, on the same requests.

A faster config that answers differently is no winner: TensorRT FP16 changes a model's outputs,
and so can dynamic batching or a larger max batch size when a model handles a batch wrongly. So
before a candidate is measured, a fixed sample of the workload's requests goes to it, all at
once (:func:`check_requests` of them, so that a batching config batches them), and each answer
is compared with the answer the original config gave to the same request (:class:`Reference`,
recorded once per run).

The rule (:func:`compare`): integer, boolean and string outputs must match exactly; a float
output may differ by its data type's tolerance (:data:`TOLERANCE`, ``--output-tolerance``) times
``max(1, |expected|)``, absolute for small values and relative for large ones. A candidate that
computes in FP16 (TensorRT) is held to FP16's tolerance whatever type its outputs are. A
candidate that differs is infeasible, with the output, the request and the largest difference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from autotune.errors import UsageError

# The largest difference each float type may show, times max(1, |expected|): FP32 leaves room
# for a batched kernel that sums in another order (a few ulps over a long sum), FP16 for TensorRT's
# half precision (10 bits of mantissa), BF16 for its 7.
TOLERANCE: dict[str, float] = {"FP64": 1e-9, "FP32": 1e-4, "FP16": 1e-2, "BF16": 5e-2}

Answer = dict[str, NDArray[Any]]  # one request's outputs by name


def check_requests(max_batch_sizes: Sequence[int]) -> int:
    """How many requests the check sends at once: as many as the largest batch the search space
    allows (a candidate at that batch size can then fill one), and at least 2 (a model that does
    not batch still runs requests side by side in its instances)."""
    return max(2, *max_batch_sizes)


def parse_tolerance(text: str) -> dict[str, float]:
    """``--output-tolerance``: one number for every float type (``1e-3``), or some types'
    (``FP16=1e-2,FP32=1e-3``; the others keep their default). A UsageError on anything else."""
    text = text.strip()
    if not text:
        return dict(TOLERANCE)
    pairs = [p.strip() for p in text.split(",") if p.strip()]
    if len(pairs) == 1 and "=" not in pairs[0]:
        value = _number(pairs[0], text)
        return dict.fromkeys(TOLERANCE, value)
    out = dict(TOLERANCE)
    for pair in pairs:
        name, _, given = pair.partition("=")
        kind = name.strip().upper().removeprefix("TYPE_")
        if kind not in TOLERANCE:
            raise UsageError(
                f"--output-tolerance {text!r}: {name.strip()!r} is not a float type ({', '.join(TOLERANCE)})"
            )
        out[kind] = _number(given, text)
    return out


def _number(value: str, text: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not re.fullmatch(r"\s*[0-9.eE+-]+\s*", value) or not number >= 0 or number == float("inf"):
        raise UsageError(
            f"--output-tolerance {text!r}: expected a number >= 0, or TYPE=number pairs "
            "like FP16=1e-2,FP32=1e-4"
        )
    return number


@dataclass(frozen=True)
class Mismatch:
    """Where a candidate's answer differs: the output, the request, the largest difference."""

    output: str
    request: str  # which request of the sample: "request 3 (entry 12 of input.json)"
    what: str  # "has shape [2, 3] instead of [2, 4]", ... ("" for values over the tolerance)
    largest: float = 0.0  # the largest absolute difference (floats)
    relative: float = 0.0  # that difference over max(1, |expected|)
    tolerance: float = 0.0

    @property
    def line(self) -> str:
        """The reason a person reads."""
        where = f"output {self.output!r} of {self.request}"
        if self.tolerance:
            return (
                f"answers differ from your config's: {where}: largest difference {self.largest:.3g} "
                f"(relative {self.relative:.3g}) over the tolerance {self.tolerance:g} "
                "(--output-tolerance; --output-check off for outputs that are random by design)"
            )
        return f"answers differ from your config's: {where} {self.what}"


def compare(
    expected: Sequence[Answer],
    got: Sequence[Answer],
    datatypes: Mapping[str, str],
    tolerance: Mapping[str, float] | None = None,
    fp16: bool = False,
    labels: Sequence[str] = (),
) -> Mismatch | None:
    """The first difference beyond the tolerance between each request's answers (``datatypes``:
    each output's, as the server names them: FP32, INT64, BYTES...); None when they agree.
    ``fp16``: the candidate computes in half precision (held to FP16's tolerance at least);
    ``labels``: each request's name for people. A request answered with an error on either side
    (an empty answer) is left out: errors are the measurement's verdict, not this one's."""
    limits = dict(TOLERANCE if tolerance is None else tolerance)
    for request, (want, have) in enumerate(zip(expected, got, strict=True)):
        if not want or not have:
            continue
        label = labels[request] if request < len(labels) else f"request {request}"
        for name, reference in want.items():
            found = _differs(name, label, reference, have.get(name), datatypes.get(name, ""), limits, fp16)
            if found is not None:
                return found
    return None


def _differs(
    name: str,
    request: str,
    want: NDArray[Any],
    have: NDArray[Any] | None,
    datatype: str,
    limits: Mapping[str, float],
    fp16: bool,
) -> Mismatch | None:
    if have is None:
        return Mismatch(name, request, "is missing")
    if want.shape != have.shape:
        return Mismatch(name, request, f"has shape {list(have.shape)} instead of {list(want.shape)}")
    if datatype not in limits:  # integers, booleans, strings: exactly
        equal = np.array_equal(want, have)
        return (
            None if equal else Mismatch(name, request, f"differs ({datatype or 'exact'} values must match)")
        )
    limit = max(limits[datatype], limits["FP16"]) if fp16 else limits[datatype]
    a, b = want.astype(np.float64), have.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return Mismatch(name, request, "has NaN where your config's has a number, or the other way")
    diff = np.where(np.isnan(a), 0.0, np.abs(a - b))
    scaled = diff / np.maximum(1.0, np.abs(np.nan_to_num(a)))
    worst = int(np.argmax(scaled)) if scaled.size else 0
    if scaled.size and scaled.flat[worst] > limit:
        return Mismatch(name, request, "", float(diff.flat[worst]), float(scaled.flat[worst]), limit)
    return None


@dataclass(frozen=True)
class Reference:
    """The original config's answers to the check's requests, and each output's data type."""

    answers: tuple[Answer, ...]
    datatypes: dict[str, str]

    def arrays(self) -> dict[str, NDArray[Any]]:
        """As named arrays (``<request>/<output>``, ``datatype/<output>``, ``requests``), for a
        .npz file."""
        arrays = {
            f"{i}/{name}": array for i, answer in enumerate(self.answers) for name, array in answer.items()
        }
        arrays["requests"] = np.array(len(self.answers))
        return arrays | {f"datatype/{name}": np.array(kind) for name, kind in self.datatypes.items()}

    @classmethod
    def from_arrays(cls, stored: Mapping[str, NDArray[Any]]) -> Reference:
        """Read :meth:`arrays` back."""
        datatypes = {k.split("/", 1)[1]: str(v) for k, v in stored.items() if k.startswith("datatype/")}
        numbered = [k for k in stored if "/" in k and not k.startswith("datatype/")]
        count = int(stored["requests"])
        answers = tuple(
            {k.split("/", 1)[1]: stored[k] for k in numbered if k.split("/", 1)[0] == str(i)}
            for i in range(count)
        )
        return cls(answers, datatypes)
