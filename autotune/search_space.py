"""Search space: the dimensions of a Triton config to try, and the Candidate they yield.

Pure logic, no I/O but :func:`load_search_space`. A search space is a YAML mapping; every
dimension is a list of choices (or ``{min: A, max: B}`` for integers). See
``search_spaces/README.md`` for the format::

    instance_group:
      count: {min: 1, max: 4}
      kind: [KIND_CPU]                 # KIND_GPU needs a GPU; "auto" picks by the machine
      gpus: [all]                      # or lists of GPU ids: [[0], [0, 1]]
    max_batch_size: [1, 2, 4, 8, 16, 32]
    dynamic_batching:
      enabled: [true, false]
      preferred_batch_size: [none, max, [4, 8]]
      max_queue_delay_microseconds: [0, 500, 2000]
    optimization:
      tensorrt_fp16: [false, true]     # GPU kinds with onnxruntime/tensorflow only
      tensorrt_workspace_mb: [1024]    # TensorRT's max_workspace_size_bytes, in MiB
    load:
      concurrency: {min: 1, max: 32}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

import yaml

from autotune.errors import SearchSpaceError

KIND_CHOICES = ("KIND_CPU", "KIND_GPU")
MIB = 1024 * 1024
WORKSPACE_MAX_MB = 1024 * 1024  # 1 TiB: more than any GPU has; a larger value is a typo


@dataclass(frozen=True)
class Candidate:
    """One point of the space: everything a config.pbtxt variant differs by.

    ``instance_count`` is what Triton's instance group ``count`` means: for KIND_CPU the
    instances in all; for KIND_GPU the instances on *each* GPU of ``gpus`` (empty: every GPU
    the server has), so the server runs ``instance_count x (len(gpus) or its GPU count)``
    (:meth:`instances`). ``trt_workspace_mb`` is TensorRT's ``max_workspace_size_bytes`` in
    MiB, with ``trt_fp16`` only; 0: not set (the backend's default)."""

    instance_count: int
    kind: str
    gpus: tuple[int, ...]
    max_batch_size: int
    dynamic_batching: bool
    preferred_batch_sizes: tuple[int, ...]
    max_queue_delay_us: int
    trt_fp16: bool
    trt_workspace_mb: int = 0  # a field added later: run files without it read as 0

    def changes_from(self, other: Candidate) -> int:
        """How many of its fields differ from ``other``'s: how far a config written back from it
        lies from that one (the race prefers the nearest to yours among ties)."""
        return sum(getattr(self, f.name) != getattr(other, f.name) for f in fields(self))

    def refuses(self, yours: Candidate) -> str:
        """The client batch sizes your config takes and this one refuses (its max_batch_size is
        lower), as people read them (``9-16``); "" when none."""
        low, high = self.max_batch_size + 1, yours.max_batch_size
        if high <= self.max_batch_size:
            return ""
        return f"{low}" if low == high else f"{low}-{high}"

    def gpus_used(self, server_gpus: int = 0) -> int:
        """GPUs its instances run on: none for KIND_CPU; its ``gpus`` list, else (no list: Triton
        puts ``count`` instances on every GPU) all ``server_gpus`` of the server."""
        if self.kind != "KIND_GPU":
            return 0
        return len(self.gpus) or server_gpus

    def instances(self, server_gpus: int = 0) -> int | None:
        """How many instances the server runs; None for KIND_GPU on every GPU when the server's
        GPU count is not known (``server_gpus`` 0)."""
        if self.kind != "KIND_GPU":
            return self.instance_count
        gpus = self.gpus_used(server_gpus)
        return self.instance_count * gpus if gpus else None

    def label(self, server_gpus: int = 0) -> str:
        """One line for people: ``2xcpu mbs 8 batching off``, ``2/gpu on gpus 0,1 (4 in all) ...``."""
        batching = "off"
        if self.dynamic_batching:
            pref = ",".join(map(str, self.preferred_batch_sizes)) or "-"
            batching = f"on(pref {pref}, delay {self.max_queue_delay_us}us)"
        fp16 = ""
        if self.trt_fp16:
            fp16 = f" trt-fp16 ws {self.trt_workspace_mb}MiB" if self.trt_workspace_mb else " trt-fp16"
        return f"{self._instances_label(server_gpus)} mbs {self.max_batch_size} batching {batching}{fp16}"

    def _instances_label(self, server_gpus: int) -> str:
        if self.kind != "KIND_GPU":
            return f"{self.instance_count}x{self.kind.removeprefix('KIND_').lower()}"
        where = f"gpus {','.join(map(str, self.gpus))}" if self.gpus else "all gpus"
        total = self.instances(server_gpus)
        in_all = f" ({total} in all)" if total is not None and total != self.instance_count else ""
        return f"{self.instance_count}/gpu on {where}{in_all}"


class Suggester(Protocol):
    """What the search needs of a trial (optuna.Trial has it)."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


@dataclass(frozen=True)
class SearchSpace:
    instance_count: tuple[int, ...]
    kind: tuple[str, ...]
    gpus: tuple[str, ...]  # "all" or "0,1"
    max_batch_size: tuple[int, ...]
    dynamic_batching: tuple[bool, ...]
    preferred_batch_size: tuple[str, ...]  # "none", "max" or "4,8"
    max_queue_delay_us: tuple[int, ...]
    trt_fp16: tuple[bool, ...]
    trt_workspace_mb: tuple[int, ...] = (1024,)
    concurrency_min: int = 1
    concurrency_max: int = 32
    rate_min: float = 1.0  # --load rate: requests per second
    rate_max: float = 100_000.0

    def suggest(self, trial: Suggester) -> Candidate:
        """Ask ``trial`` for each dimension; conditional ones only where they apply."""
        count = trial.suggest_categorical("instance_count", self.instance_count)
        kind = _pick(trial, "kind", self.kind)
        gpus = _pick(trial, "gpus", self.gpus) if kind == "KIND_GPU" else "all"
        mbs = _pick(trial, "max_batch_size", self.max_batch_size)
        batching = mbs > 0 and _pick(trial, "dynamic_batching", self.dynamic_batching)
        pref, delay = "none", 0
        if batching:
            pref = _pick(trial, "preferred_batch_size", self.preferred_batch_size)
            delay = _pick(trial, "max_queue_delay_us", self.max_queue_delay_us)
        fp16 = kind == "KIND_GPU" and _pick(trial, "trt_fp16", self.trt_fp16)
        workspace = _pick(trial, "trt_workspace_mb", self.trt_workspace_mb) if fp16 else 0
        return Candidate(
            instance_count=int(count),
            kind=str(kind),
            gpus=decode_gpus(str(gpus)),
            max_batch_size=int(mbs),
            dynamic_batching=bool(batching),
            preferred_batch_sizes=decode_preferred(str(pref), int(mbs)),
            max_queue_delay_us=int(delay),
            trt_fp16=bool(fp16),
            trt_workspace_mb=int(workspace),
        )

    def holds(self, candidate: Candidate) -> bool:
        """Whether the space makes ``candidate`` (every parameter one of its choices)."""
        try:
            return self.suggest(_Fixed(params_of(candidate))) == candidate
        except KeyError:
            return False

    def nearest(self, candidate: Candidate) -> Candidate:
        """``candidate`` with each parameter the space lacks replaced by its nearest choice (a
        number's closest, the smaller on a tie; otherwise the first choice): a seed made from
        your config stays inside the space."""
        return self.suggest(_Nearest(params_of(candidate)))

    def including(self, candidate: Candidate) -> SearchSpace:
        """A space that also holds ``candidate`` (so the baseline can be a trial)."""
        params = params_of(candidate)
        return replace(
            self,
            instance_count=_with(self.instance_count, params["instance_count"]),
            kind=_with(self.kind, params["kind"]),
            gpus=_with(self.gpus, params.get("gpus")),
            max_batch_size=_with(self.max_batch_size, params["max_batch_size"]),
            dynamic_batching=_with(self.dynamic_batching, params.get("dynamic_batching")),
            preferred_batch_size=_with(self.preferred_batch_size, params.get("preferred_batch_size")),
            max_queue_delay_us=_with(self.max_queue_delay_us, params.get("max_queue_delay_us")),
            trt_fp16=_with(self.trt_fp16, params.get("trt_fp16")),
            trt_workspace_mb=_with(self.trt_workspace_mb, params.get("trt_workspace_mb")),
        )

    def restricted(
        self, *, batching: bool, gpu: bool, tensorrt: bool, min_batch: int = 1, gpu_count: int = 0
    ) -> SearchSpace:
        """Drop choices the model, the machine or the workload cannot take (no batching, no GPU,
        no TensorRT, a max_batch_size below the requests' batch size, GPU ids the server lacks:
        with ``gpu_count`` known, a gpus list naming an id >= it; none left: all GPUs)."""
        space = self
        if not batching:
            space = replace(space, max_batch_size=(0,), dynamic_batching=(False,))
        elif min_batch > 1:
            space = replace(
                space, max_batch_size=tuple(m for m in space.max_batch_size if m >= min_batch) or (min_batch,)
            )
        if not gpu:
            space = replace(space, kind=("KIND_CPU",))
        elif gpu_count > 0:
            fits = tuple(g for g in space.gpus if max(decode_gpus(g), default=0) < gpu_count)
            space = replace(space, gpus=fits or ("all",))
        if not tensorrt:
            space = replace(space, trt_fp16=(False,))
        return space

    def size(self) -> int:
        """How many distinct candidates the space holds (conditional dimensions counted)."""
        batching = sum(
            len(self.preferred_batch_size) * len(self.max_queue_delay_us) if on else 1
            for on in self.dynamic_batching
        )
        trt = sum(len(self.trt_workspace_mb) if fp16 else 1 for fp16 in self.trt_fp16)
        per_kind = sum(len(self.gpus) * trt if kind == "KIND_GPU" else 1 for kind in self.kind)
        mbs = sum(batching if m > 0 else 1 for m in self.max_batch_size)
        return len(self.instance_count) * per_kind * mbs


class _Fixed:
    """A :class:`Suggester` answering from fixed parameters; KeyError for one the choices lack."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        value = self.params[name]
        if value not in choices:
            raise KeyError(name)
        return value


class _Nearest:
    """A :class:`Suggester` answering from parameters, each one the choices lack (or a missing
    one) replaced by the nearest choice (:meth:`SearchSpace.nearest`)."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        value = self.params.get(name)
        if value in choices:
            return value
        numbers = [c for c in choices if isinstance(c, int) and not isinstance(c, bool)]
        if isinstance(value, int) and not isinstance(value, bool) and numbers:
            return min(numbers, key=lambda c: (abs(c - value), c))
        return choices[0]


def _pick(trial: Suggester, name: str, choices: tuple[Any, ...]) -> Any:
    return trial.suggest_categorical(name, choices)


def _with(choices: tuple[Any, ...], value: Any) -> tuple[Any, ...]:
    if value is None or value in choices:
        return choices
    return (*choices, value)


def params_of(candidate: Candidate) -> dict[str, Any]:
    """The trial parameters that make :meth:`SearchSpace.suggest` return ``candidate``."""
    params: dict[str, Any] = {
        "instance_count": candidate.instance_count,
        "kind": candidate.kind,
        "max_batch_size": candidate.max_batch_size,
    }
    if candidate.kind == "KIND_GPU":
        params["gpus"] = ",".join(map(str, candidate.gpus)) or "all"
        params["trt_fp16"] = candidate.trt_fp16
    if candidate.trt_fp16:
        params["trt_workspace_mb"] = candidate.trt_workspace_mb
    if candidate.max_batch_size > 0:
        params["dynamic_batching"] = candidate.dynamic_batching
    if candidate.dynamic_batching:
        params["preferred_batch_size"] = encode_preferred(
            candidate.preferred_batch_sizes, candidate.max_batch_size
        )
        params["max_queue_delay_us"] = candidate.max_queue_delay_us
    return params


def decode_gpus(text: str) -> tuple[int, ...]:
    return () if text == "all" else tuple(int(x) for x in text.split(","))


def decode_preferred(text: str, max_batch_size: int) -> tuple[int, ...]:
    if text == "none" or max_batch_size <= 0:
        return ()
    if text == "max":
        return (max_batch_size,)
    return tuple(s for s in (int(x) for x in text.split(",")) if s <= max_batch_size)


def encode_preferred(sizes: tuple[int, ...], max_batch_size: int) -> str:
    if not sizes:
        return "none"
    if sizes == (max_batch_size,):
        return "max"
    return ",".join(map(str, sizes))


# ---------------------------------------------------------------- parsing (YAML -> SearchSpace)

_TOP = {"instance_group", "max_batch_size", "dynamic_batching", "optimization", "load"}
_SECTIONS = {
    "instance_group": {"count", "kind", "gpus"},
    "dynamic_batching": {"enabled", "preferred_batch_size", "max_queue_delay_microseconds"},
    "optimization": {"tensorrt_fp16", "tensorrt_workspace_mb"},
    "load": {"concurrency", "request_rate"},
}


def bundled(name: str = "default") -> Path:
    """A search space that ships with autotune: ``search_spaces/<name>.yaml``."""
    from importlib.resources import files

    return Path(str(files("autotune.search_spaces").joinpath(f"{name}.yaml")))


def bundled_names() -> list[str]:
    return sorted(p.stem for p in bundled().parent.glob("*.yaml"))


def load_search_space(
    path: Path, *, gpu_available: bool = False, model: str = "", served: Sequence[str] = ()
) -> SearchSpace:
    """Read and check a search space file, or a bundled one by its name (``gpu``: a bare name
    that is no file here); every problem is a SearchSpaceError. ``model``: the space of that
    model, its section of ``models:`` over the rest (:func:`parse_search_space`); ``served``:
    the models the run serves, every section's model must be one (:func:`check_sections`)."""
    if served:
        check_sections(path, served)
    raw = _read(path)
    try:
        return parse_search_space(raw, gpu_available=gpu_available, model=model)
    except SearchSpaceError as exc:
        raise SearchSpaceError(f"{_resolved(path)}: {exc}") from exc


def space_document(path: Path) -> Any:
    """The YAML document of a search space file, or of a bundled one by its name (what a survey
    records of the space it measured)."""
    return _read(path)


def check_sections(path: Path, served: Sequence[str]) -> None:
    """A SearchSpaceError when the file has a section (``models:``) for a model the run does not
    serve (``served``: the tuned model, a pipeline's members, the models beside it)."""
    raw = _read(path)
    models = raw.get("models") if isinstance(raw, Mapping) else None
    for name in models if isinstance(models, Mapping) else ():
        if str(name) not in served:
            raise SearchSpaceError(
                f"{_resolved(path)}: a section for model {str(name)!r} under models:, which this run "
                f"does not serve (it serves {', '.join(served)})"
            )


def _resolved(path: Path) -> Path:
    if not path.exists() and path.name in bundled_names() and str(path) == path.name:
        return bundled(path.name)
    return path


def _read(path: Path) -> Any:
    path = _resolved(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        names = ", ".join(bundled_names())
        raise SearchSpaceError(f"search space file not found: {path} (bundled, by name: {names})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SearchSpaceError(f"{path}: cannot read: {exc}") from exc
    except yaml.YAMLError as exc:
        raise SearchSpaceError(f"{path}: not valid YAML: {_one_line(exc)}") from exc
    return raw


def parse_search_space(raw: Any, *, gpu_available: bool = False, model: str = "") -> SearchSpace:
    """The space a YAML document describes. A ``models:`` mapping holds sections of their own
    for some models (a pipeline's steps, models on one server), each with the keys of the top
    level but ``load``: for ``model``, its section's keys replace the top level's, key by key
    within ``instance_group``, ``dynamic_batching`` and ``optimization`` (e.g. to pin one step:
    ``models: {tokenizer: {instance_group: {count: [1]}}}``)."""
    doc = _mapping(raw, "search space")
    _known(doc, _TOP | {"models"}, "search space")
    sections = _mapping(doc.get("models"), "models")
    for name, raw_section in sections.items():
        where = f"models.{name}"
        section = _mapping(raw_section, where)
        _known(section, _TOP - {"load"}, where)
        for key in set(_SECTIONS) & set(section):
            _known(_mapping(section[key], f"{where}.{key}"), _SECTIONS[key], f"{where}.{key}")
    if model in sections:
        doc = _over(doc, sections[model] or {})
    sections = {key: _mapping(doc.get(key, {}), key) for key in _SECTIONS}
    for key, allowed in _SECTIONS.items():
        _known(sections[key], allowed, key)
    group, batching, opt = sections["instance_group"], sections["dynamic_batching"], sections["optimization"]
    mbs = _ints(doc.get("max_batch_size", [1, 2, 4, 8, 16]), "max_batch_size", minimum=0)
    kinds = _kinds(group.get("kind", ["KIND_CPU"]), gpu_available)
    conc = _ints(sections["load"].get("concurrency", {"min": 1, "max": 32}), "load.concurrency", 1)
    rate_min, rate_max = _rates(sections["load"].get("request_rate", {}))
    return SearchSpace(
        instance_count=_ints(group.get("count", {"min": 1, "max": 2}), "instance_group.count", 1),
        kind=kinds,
        gpus=_gpus(group.get("gpus", ["all"])),
        max_batch_size=mbs,
        dynamic_batching=_bools(batching.get("enabled", [True, False]), "dynamic_batching.enabled"),
        preferred_batch_size=_preferred(batching.get("preferred_batch_size", ["none"]), max(mbs)),
        max_queue_delay_us=_ints(
            batching.get("max_queue_delay_microseconds", [0]),
            "dynamic_batching.max_queue_delay_microseconds",
            0,
        ),
        trt_fp16=_bools(opt.get("tensorrt_fp16", [False]), "optimization.tensorrt_fp16"),
        trt_workspace_mb=_workspace(opt.get("tensorrt_workspace_mb", [1024])),
        concurrency_min=min(conc),
        concurrency_max=max(conc),
        rate_min=rate_min,
        rate_max=rate_max,
    )


def _over(doc: Mapping[str, Any], section: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with a model's ``section`` over it: a mapping section key by key, anything else whole."""
    out = dict(doc)
    for key, value in section.items():
        out[key] = {**_mapping(doc.get(key), key), **value} if key in _SECTIONS else value
    return out


def _rates(value: Any) -> tuple[float, float]:
    """``load.request_rate: {min, max}`` (requests per second, for --load rate)."""
    where = "load.request_rate"
    _known(_mapping(value, where), {"min", "max"}, where)
    bounds = []
    for key, default in (("min", SearchSpace.rate_min), ("max", SearchSpace.rate_max)):
        raw = value.get(key, default) if value else default
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not raw > 0:
            raise SearchSpaceError(f"{where}.{key}: expected a rate > 0 requests per second, got {raw!r}")
        bounds.append(float(raw))
    if bounds[0] > bounds[1]:
        raise SearchSpaceError(f"{where}: min {bounds[0]:g} > max {bounds[1]:g}")
    return bounds[0], bounds[1]


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SearchSpaceError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _known(doc: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise SearchSpaceError(
            f"unknown key {unknown[0]!r} in {where} (allowed: {', '.join(sorted(allowed))})"
        )


def _choices(value: Any, where: str) -> list[Any]:
    items = list(value) if isinstance(value, list | tuple) else [value]
    if not items:
        raise SearchSpaceError(f"{where} is empty: give at least one choice")
    return items


def _ints(value: Any, where: str, minimum: int) -> tuple[int, ...]:
    if isinstance(value, Mapping):
        _known(value, {"min", "max", "step"}, where)
        low, high = _int(value.get("min", minimum), where), _int(value.get("max"), where)
        step = _int(value.get("step", 1), where)
        if low > high:
            raise SearchSpaceError(f"{where}: min {low} > max {high}")
        if step < 1:
            raise SearchSpaceError(f"{where}: step must be >= 1")
        items = list(range(low, high + 1, step))
    else:
        items = [_int(v, where) for v in _choices(value, where)]
    if any(v < minimum for v in items):
        raise SearchSpaceError(f"{where}: values must be >= {minimum}")
    return tuple(sorted(set(items)))


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SearchSpaceError(f"{where}: expected an integer, got {value!r}")
    return value


def _workspace(value: Any) -> tuple[int, ...]:
    where = "optimization.tensorrt_workspace_mb"
    sizes = _ints(value, where, 1)
    if max(sizes) > WORKSPACE_MAX_MB:
        top = max(sizes)
        raise SearchSpaceError(f"{where}: {top} MiB is more than any GPU has (at most {WORKSPACE_MAX_MB})")
    return sizes


def _bools(value: Any, where: str) -> tuple[bool, ...]:
    items = _choices(value, where)
    if not all(isinstance(v, bool) for v in items):
        raise SearchSpaceError(f"{where}: expected true/false, got {items!r}")
    return tuple(dict.fromkeys(items))


def _kinds(value: Any, gpu_available: bool) -> tuple[str, ...]:
    items = [str(v).upper() for v in _choices(value, "instance_group.kind")]
    resolved = [("KIND_GPU" if gpu_available else "KIND_CPU") if v == "AUTO" else v for v in items]
    bad = [v for v in resolved if v not in KIND_CHOICES]
    if bad:
        raise SearchSpaceError(f"instance_group.kind: {bad[0]!r} is not KIND_CPU, KIND_GPU or auto")
    return tuple(dict.fromkeys(resolved))


def _gpus(value: Any) -> tuple[str, ...]:
    out = []
    for item in _choices(value, "instance_group.gpus"):
        if item == "all":
            out.append("all")
            continue
        ids = item if isinstance(item, list) else [item]
        if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise SearchSpaceError(f"instance_group.gpus: {item!r} is not 'all' or a list of GPU ids")
        out.append(",".join(map(str, sorted(set(ids)))))
    return tuple(dict.fromkeys(out))


def _preferred(value: Any, max_batch: int) -> tuple[str, ...]:
    out = []
    for item in _choices(value, "dynamic_batching.preferred_batch_size"):
        if item in ("none", "max", None):
            out.append(item or "none")
            continue
        sizes = item if isinstance(item, list) else [item]
        ints = [_int(s, "dynamic_batching.preferred_batch_size") for s in sizes]
        if not ints or min(ints) < 1:
            raise SearchSpaceError(f"dynamic_batching.preferred_batch_size: {item!r} must be >= 1")
        if max(ints) > max_batch:
            where = "dynamic_batching.preferred_batch_size"
            raise SearchSpaceError(f"{where}: {max(ints)} > the largest max_batch_size ({max_batch})")
        out.append(",".join(map(str, sorted(set(ints)))))
    return tuple(dict.fromkeys(out))
