"""Frozen settings, parsed once from the command line (and an optional YAML file).

Each launcher's options are a group of their own (:class:`LocalOptions`,
:class:`DockerOptions`, :class:`RemoteOptions`), held together by :class:`Launch`, which
names the one in use; the run directory records that group, so that a later ``autotune
apply`` verifies the written config on the same kind of server.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from autotune.errors import UsageError
from autotune.objective import Sla
from autotune.outputs import parse_tolerance
from autotune.pipeline import TunedStep
from autotune.points import WindowPlan

LAUNCHERS = ("local", "docker", "remote")
# How long a config with TensorRT may take to get ready (its engine is built while it loads):
# builds of the models in Triton's examples take one to ten minutes on one GPU, longer with
# FP16 (more kernels to try); 15 minutes leaves room without waiting forever.
TRT_BUILD_TIMEOUT_S = 900.0
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*$")
_UNITS = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """'90', '90s', '10m', '1.5h' -> seconds; anything else is a UsageError."""
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise UsageError(f"cannot read time budget {text!r}: use e.g. 90s, 10m or 1h")
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class LocalOptions:
    tritonserver: Path | None = None  # None: on PATH, else the nvidia-pytriton wheel's


@dataclass(frozen=True)
class DockerOptions:
    image: str = "nvcr.io/nvidia/tritonserver:24.10-py3"
    gpus: str = ""  # "", "all" or "0,1"
    shm_size: str = "1g"
    pull: bool = False


@dataclass(frozen=True)
class RemoteOptions:
    url: str = ""  # host:http_port
    grpc_url: str = ""  # host:grpc_port; default the HTTP port + 1
    metrics_url: str = ""  # the server's Prometheus /metrics; default http://<url's host>:8002/metrics


LauncherOptions = LocalOptions | DockerOptions | RemoteOptions


@dataclass(frozen=True)
class Launch:
    """Which launcher runs the servers, and the options of each."""

    kind: str = "local"
    local: LocalOptions = field(default_factory=LocalOptions)
    docker: DockerOptions = field(default_factory=DockerOptions)
    remote: RemoteOptions = field(default_factory=RemoteOptions)

    def __post_init__(self) -> None:
        if self.kind not in LAUNCHERS:
            raise UsageError(f"unknown launcher {self.kind!r} (choose from {', '.join(LAUNCHERS)})")

    @property
    def options(self) -> LauncherOptions:
        options: LauncherOptions = getattr(self, self.kind)
        return options

    def to_json(self) -> dict[str, Any]:
        """The launcher in use and its options (what a run directory records)."""
        options = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.options).items()}
        return {"kind": self.kind, "options": options}

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> Launch:
        """Read :meth:`to_json` back; a bare kind (run directories made before 0.2) gets that
        launcher's default options."""
        if isinstance(data, str):
            return cls(data if data in LAUNCHERS else "local")
        kind, raw = str(data.get("kind", "local")), dict(data.get("options", {}))
        if kind == "docker":
            return cls(kind, docker=DockerOptions(**raw))
        if kind == "remote":
            return cls(kind, remote=RemoteOptions(**raw))
        path = raw.get("tritonserver")
        return cls("local", local=LocalOptions(Path(path) if path else None))


INPUT_KINDS = ("random", "zero")
# How a closed loop's clients go through the entries: "spread", each client every entry from
# its own start; "perf-analyzer", every client from entry 0 in steps of the concurrency, as
# perf_analyzer 2.41 does (each of its threads starts at data step 0 and adds the thread count).
DATA_ORDERS = ("spread", "perf-analyzer")


@dataclass(frozen=True)
class Workload:
    """What each request carries, as perf_analyzer's ``--input-data``, ``--shape`` and ``-b``:
    ``input_data`` is ``random``, ``zero``, a JSON file (perf_analyzer's format; its entries are
    sent in turn) or a directory (one file per input); ``shapes`` fix variable dimensions
    (without the batch dimension); each request carries ``batch_size`` samples. ``order``: how
    the concurrent clients of a closed loop go through the entries (:data:`DATA_ORDERS`)."""

    input_data: str = "random"
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    batch_size: int = 1
    order: str = "spread"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UsageError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.order not in DATA_ORDERS:
            raise UsageError(f"--data-order must be one of {', '.join(DATA_ORDERS)}, got {self.order!r}")
        names = [name for name, _ in self.shapes]
        if len(set(names)) != len(names):
            raise UsageError(f"--shape given twice for one input: {', '.join(names)}")

    @property
    def path(self) -> Path | None:
        """The data's file or directory; None for random or zero data."""
        return None if self.input_data in INPUT_KINDS else Path(self.input_data)

    @property
    def shape_map(self) -> dict[str, tuple[int, ...]]:
        return dict(self.shapes)

    @property
    def label(self) -> str:
        """One line for people: ``input.json, batch 2, INPUT0:16``."""
        path = self.path
        parts = [path.name if path else f"{self.input_data} data"]
        if self.batch_size > 1:
            parts.append(f"batch {self.batch_size}")
        parts += [f"{name}:{','.join(map(str, dims))}" for name, dims in self.shapes]
        parts += [f"{self.order} order"] if self.order != "spread" else []
        return ", ".join(parts)

    @property
    def flags(self) -> str:
        """The command-line flags that give this workload ("" for the default)."""
        parts = [] if self.input_data == "random" else [f"--input-data {shlex.quote(self.input_data)}"]
        parts += [f"--shape {name}:{','.join(map(str, dims))}" for name, dims in self.shapes]
        parts += [f"--batch-size {self.batch_size}"] if self.batch_size > 1 else []
        parts += [f"--data-order {self.order}"] if self.order != "spread" else []
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "input_data": self.input_data,
            "shapes": {n: list(d) for n, d in self.shapes},
            "batch_size": self.batch_size,
            "order": self.order,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Workload:
        """Read :meth:`to_json` back; a run directory made before workloads were recorded: random data."""
        if not data:
            return cls()
        shapes = tuple(
            (str(n), tuple(int(d) for d in dims)) for n, dims in dict(data.get("shapes", {})).items()
        )
        batch, order = int(data.get("batch_size", 1)), str(data.get("order", "spread"))
        return cls(str(data.get("input_data", "random")), shapes, batch, order)


LOADS = ("concurrency", "rate")
ARRIVALS = ("poisson", "constant")  # --distribution; a --request-intervals file is the third kind


@dataclass(frozen=True)
class Traffic:
    """How every candidate is loaded while it is measured. ``concurrency`` (the default): a
    closed loop, N clients each waiting for its answer before it sends again; the search looks
    for the best N. ``rate``: an open loop, requests arriving on a schedule whatever the answers
    (``distribution`` poisson or constant, or ``intervals``: a recorded pattern, perf_analyzer's
    ``--request-intervals`` file, scaled to each rate tried); the search looks for the highest
    arrival rate, latency counted from each request's scheduled send."""

    load: str = "concurrency"
    distribution: str = "poisson"  # rate: poisson, constant or intervals
    intervals: str = ""  # distribution "intervals": the file (recorded absolute)

    def __post_init__(self) -> None:
        if self.load not in LOADS:
            raise UsageError(f"--load must be one of {', '.join(LOADS)}, got {self.load!r}")
        if self.distribution not in (*ARRIVALS, "intervals"):
            known = ", ".join(ARRIVALS)
            raise UsageError(f"--distribution must be one of {known}, got {self.distribution!r}")
        if (self.distribution == "intervals") != bool(self.intervals):
            raise UsageError("a request-intervals file and its distribution go together")

    @property
    def open_loop(self) -> bool:
        return self.load == "rate"

    @property
    def label(self) -> str:
        """One line for people: ``open loop, poisson arrivals``."""
        if not self.open_loop:
            return "closed loop (concurrency)"
        if self.intervals:
            return f"open loop, the arrivals of {Path(self.intervals).name} (scaled to each rate)"
        return f"open loop, {self.distribution} arrivals"

    @property
    def flags(self) -> str:
        """The command-line flags that give this traffic ("" for the default)."""
        if not self.open_loop:
            return ""
        if self.intervals:
            return f"--load rate --request-intervals {shlex.quote(self.intervals)}"
        shape = f" --distribution {self.distribution}" if self.distribution != "poisson" else ""
        return f"--load rate{shape}"

    def to_json(self) -> dict[str, Any]:
        return {"load": self.load, "distribution": self.distribution, "intervals": self.intervals}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Traffic:
        """Read :meth:`to_json` back; a run directory made before rate mode: concurrency."""
        if not data:
            return cls()
        return cls(
            str(data.get("load", "concurrency")),
            str(data.get("distribution", "poisson")),
            str(data.get("intervals", "")),
        )


def add_traffic_arguments(parser: argparse.ArgumentParser) -> None:
    """``autotune run``'s load flags."""
    group = parser.add_argument_group(
        "traffic", "how candidates are loaded: busy clients (closed loop) or arrivals at a rate (open loop)"
    )
    group.add_argument(
        "--load",
        choices=LOADS,
        help="concurrency (default): N clients each wait for an answer before sending again; the "
        "search finds the best N. rate: requests arrive at a rate whatever the answers, as production "
        "traffic does; the search finds the highest arrival rate whose latency, counted from each "
        "request's scheduled send, meets the SLA (queueing included)",
    )
    group.add_argument(
        "--distribution",
        choices=ARRIVALS,
        help="--load rate: the gaps between arrivals, poisson (default; random, as independent users "
        "send) or constant",
    )
    group.add_argument(
        "--request-intervals",
        metavar="FILE",
        help="--load rate: replay a recorded arrival pattern instead (perf_analyzer's format: one gap in "
        "microseconds per line, looped), scaled to each rate tried; implies --load rate",
    )


def traffic_given(args: argparse.Namespace) -> bool:
    """Was any traffic flag given? (``--resume`` without them continues the run's own.)"""
    return any(v is not None for v in (args.load, args.distribution, args.request_intervals))


def traffic_from_args(args: argparse.Namespace) -> Traffic:
    """The traffic flags checked against each other (the intervals file is read by the tuner)."""
    if args.request_intervals is not None:
        if args.load == "concurrency":
            raise UsageError(
                "--request-intervals replays arrivals at a rate: "
                "it goes with --load rate, not --load concurrency"
            )
        if args.distribution is not None:
            raise UsageError("give either --distribution or --request-intervals, not both")
        path = Path(args.request_intervals)
        if not path.is_file():
            raise UsageError(f"--request-intervals: no such file: {path}")
        return Traffic("rate", "intervals", str(path.resolve()))
    if args.distribution is not None and args.load == "concurrency":
        raise UsageError("--distribution shapes arrivals at a rate: it goes with --load rate")
    load = args.load or ("rate" if args.distribution else "concurrency")
    return Traffic(load, args.distribution or "poisson")


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME:D1,D2,...`` (perf_analyzer's ``--shape``) -> (name, dims)."""
    name, _, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not name or not shape or any(d <= 0 for d in shape):
        raise UsageError(f"--shape must be NAME:D1,D2,... with positive dims, got {text!r}")
    return name, shape


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload flags, the same for ``autotune run`` and ``autotune bench``."""
    group = parser.add_argument_group(
        "workload", "what each request carries, as perf_analyzer's --input-data, --shape and -b"
    )
    group.add_argument(
        "--input-data",
        metavar="random|zero|PATH",
        help='random (default) or zero data, a JSON file in perf_analyzer\'s format ({"data": [...]}: '
        'plain values, {"content", "shape"} or {"b64"}; its entries are sent in turn, one '
        "per request), or a directory with one binary file per input (BYTES: one string per line)",
    )
    group.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="dimensions of a variable-sized input, without the batch dimension (repeatable)",
    )
    group.add_argument(
        "--batch-size",
        "-b",
        type=int,
        help="samples per request (default 1); throughput counts inferences, "
        "latency is per request, as perf_analyzer counts them",
    )
    group.add_argument(
        "--data-order",
        choices=DATA_ORDERS,
        help="how N concurrent clients go through the entries of --input-data. spread (default): "
        "each client sends every entry in turn, each from another one, so entries of different "
        "shapes are in flight together, as independent users send them. perf-analyzer: every client "
        "starts at the first entry and steps by N, as perf_analyzer does; its figures then match "
        "perf_analyzer's, but when N shares a factor with the number of entries only some entries "
        "are sent (4 clients, 8 entries: entries 0 and 4)",
    )


def workload_given(args: argparse.Namespace) -> bool:
    """Was any workload flag given? (``--resume`` without them continues the run's own.)"""
    given = (args.input_data, args.batch_size, args.data_order)
    return any(v is not None for v in given) or bool(args.shape)


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The workload flags checked (the data's path must exist; it is recorded absolute)."""
    data = "random" if args.input_data is None else str(args.input_data)
    if data not in INPUT_KINDS:
        path = Path(data)
        if not path.is_file() and not path.is_dir():
            raise UsageError(f"--input-data: no such file or directory: {path}")
        data = str(path.resolve())
    batch = 1 if args.batch_size is None else int(args.batch_size)
    order = args.data_order or "spread"
    return Workload(data, tuple(parse_shape(t) for t in args.shape), batch, order)


# the race's budget, its rounds at most (--repeats; docs/search.md)
RACE_ROUNDS = 6


@dataclass(frozen=True)
class RunOptions:
    """How a run searches and measures, as ``autotune run``'s flags gave it: what a run directory
    records, and what ``--resume`` keeps of the run it continues unless a flag is given again.
    Each field's default is the one source of that flag's default."""

    search_space: str = ""  # a YAML file (recorded absolute) or a bundled space's name; "": the default
    max_trials: int = 20
    time_budget_s: float | None = 12 * 60.0  # None: no limit
    # Stop after this many measured configs in a row without a better goodput; 0: off
    patience: int = 4
    finalists: int = 2
    repeats: int = RACE_ROUNDS
    # The search keeps this fraction of headroom under the SLA. 0.10, not 0.05: every winner of
    # benchmarks/vs_model_analyzer.py whose search p99 lay within 10% of the SLA broke it in
    # 1 to 8 of 10 re-measurements by perf_analyzer (benchmarks/results/headroom-20261122.txt).
    margin: float = 0.10
    window: float = 0.5  # seconds a window lasts
    seed: int | None = None
    # A concurrency run's winner is measured under Poisson arrivals at the end (finals.check_open_loop).
    open_loop_check: bool = True
    trt_build_timeout_s: float = TRT_BUILD_TIMEOUT_S  # autotune.trt_build
    write_back: bool = False
    output_check: bool = True  # each candidate's answers against your config's (autotune.outputs)
    output_tolerance: str = ""  # --output-tolerance as given ("": each float type's default)
    rules: str = "intervals"  # what decided; runs recorded before 72e5a7e may read "stability"

    @classmethod
    def of(cls, settings: RunSettings) -> RunOptions:
        """The options ``settings`` were made from (a search space file recorded absolute)."""
        space = settings.search_space
        return cls(
            search_space="" if space is None else str(space.resolve() if space.is_file() else space),
            max_trials=settings.max_trials, time_budget_s=settings.time_budget_s,
            patience=settings.patience, finalists=settings.finalists, repeats=settings.repeats,
            margin=settings.margin, window=settings.plan.window_s, seed=settings.seed,
            open_loop_check=settings.open_loop_check, trt_build_timeout_s=settings.trt_build_timeout_s,
            write_back=settings.write_back, output_check=settings.output_check,
            output_tolerance=settings.output_tolerance,
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> RunOptions:
        """Read :meth:`to_json` back; a run recorded before its options were: the defaults, and
        one recorded before ``rules`` was (all made by the stability rules): "stability"."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in (data or {}).items() if k in known}
        return cls(**{"rules": "stability", **values})


_DEFAULT = RunOptions()


@dataclass(frozen=True)
class CoModel:
    """A model served on the same server as the tuned one (several models on one server):
    loaded at the same time by its own load generator with its own workload, held to its own
    SLA, its throughput counted with ``weight`` in the objective."""

    model: str
    sla: Sla
    weight: float = 1.0
    workload: Workload = field(default_factory=Workload)

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise UsageError(f"{self.model}: a model's weight must be > 0, got {self.weight:g}")

    @property
    def label(self) -> str:
        weight = f", weight {self.weight:g}" if self.weight != 1.0 else ""
        return f"{self.model} ({self.sla.label}{weight}; {self.workload.label})"

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "sla": self.sla.to_json(), "weight": self.weight,
                "workload": self.workload.to_json()}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CoModel:
        workload = Workload.from_json(data.get("workload"))
        return cls(str(data["model"]), Sla.from_json(data["sla"]), float(data.get("weight", 1.0)), workload)


SLA_KEYS = {f"sla_p{p}_ms": p for p in (50, 90, 95, 99)}
MODELS_KEYS = ("model", "weight", "input_data", "shape", "batch_size", *SLA_KEYS)


def read_models(path: Path, sla: Sla | None, workload: Workload) -> tuple[CoModel, ...]:
    """``--models FILE``: a YAML list of the models one server serves, the first tuned first::

        - model: bertQA
          sla_p95_ms: 50
          weight: 2               # its throughput counts twice (default 1)
          input_data: questions.json
        - model: cnn
          sla_p99_ms: 20
          shape: ["input:3,224,224"]
          batch_size: 1

    An entry without an SLA or a workload takes the command line's (``sla``, ``workload``); a
    relative ``input_data`` is read from the file's folder; anything else is a UsageError of
    one line."""
    import yaml

    where = f"--models {path}"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{where}: cannot read it ({exc.__class__.__name__})") from exc
    if not isinstance(data, list) or len(data) < 2 or not all(isinstance(e, dict) for e in data):
        raise UsageError(f"{where}: a YAML list of at least two models, each a mapping with 'model'")
    out = [
        _co_model(entry, f"{where}: entry {i}", path.parent, sla, workload) for i, entry in enumerate(data, 1)
    ]
    names = [m.model for m in out]
    if len(set(names)) != len(names):
        raise UsageError(f"{where}: a model is listed twice: {', '.join(names)}")
    return tuple(out)


def _co_model(
    entry: dict[str, Any], where: str, folder: Path, sla: Sla | None, workload: Workload
) -> CoModel:
    unknown = sorted(set(entry) - set(MODELS_KEYS))
    if unknown or not entry.get("model"):
        what = f"unknown key {unknown[0]!r}" if unknown else "no 'model'"
        raise UsageError(f"{where} has {what} (keys: {', '.join(MODELS_KEYS)})")
    where = f"{where} ({entry['model']})"
    try:
        slas = [Sla(p, float(entry[key])) for key, p in SLA_KEYS.items() if key in entry]
        weight = float(entry.get("weight", 1.0))
        batch = int(entry.get("batch_size", workload.batch_size))
        shapes = tuple(parse_shape(str(t)) for t in entry["shape"]) if "shape" in entry else workload.shapes
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from exc
    if len(slas) > 1 or (not slas and sla is None):
        raise UsageError(f"{where} needs one SLA, e.g. sla_p95_ms: 50")
    data = workload.input_data
    if entry.get("input_data") is not None:
        data = str(entry["input_data"])
        if data not in INPUT_KINDS:
            found = folder / data
            if not found.exists():
                raise UsageError(f"{where}: no such input data {found}")
            data = str(found.resolve())
    chosen = slas[0] if slas else sla
    assert chosen is not None
    return CoModel(str(entry["model"]), chosen, weight, Workload(data, shapes, batch, workload.order))


def serving(settings: RunSettings, tuned: CoModel, beside: tuple[CoModel, ...]) -> RunSettings:
    """``settings`` for tuning ``tuned`` with ``beside`` served on the same server: its name,
    SLA (holding theirs: :attr:`Sla.others`), workload and weight."""
    sla = replace(tuned.sla, others=tuple((c.model, c.sla) for c in beside))
    return replace(settings, model=tuned.model, sla=sla, workload=tuned.workload, weight=tuned.weight,
                   beside=beside)  # fmt: skip


@dataclass(frozen=True)
class RunSettings:
    model: str
    repository: Path
    sla: Sla
    # --step: an ensemble's step (or a model a BLS model calls) whose config is tuned, measured
    # through the --model; "": the model's own
    step: str = ""
    composing: tuple[str, ...] = ()  # --composing-models: the models a BLS --model calls, served with it
    # a pipeline without --step, and several models on one server, are tuned in rounds (one run
    # each, one after another: autotune.cli): ``rounds`` marks such a run, ``tuned_steps`` the
    # models earlier rounds tuned (served with their winners)
    rounds: bool = False
    tuned_steps: tuple[TunedStep, ...] = ()
    # several models on one server (--models): those served beside the tuned one, and the
    # tuned one's weight in the objective (autotune.loadgen.Beside); a round tunes each in turn
    beside: tuple[CoModel, ...] = ()
    weight: float = 1.0
    search_space: Path | None = None  # None: the packaged default
    max_trials: int = _DEFAULT.max_trials
    time_budget_s: float | None = _DEFAULT.time_budget_s
    patience: int = _DEFAULT.patience
    launch: Launch = field(default_factory=Launch)
    workload: Workload = field(default_factory=Workload)
    traffic: Traffic = field(default_factory=Traffic)
    write_back: bool = False
    reports_dir: Path = Path("reports")
    run_dir: Path | None = None  # set for --resume
    protocol: str = "http"
    seed: int | None = None
    storage: str | None = None  # an Optuna RDB URL; default SQLite in the run directory
    study_name: str | None = None
    ray: str | None = None  # a Ray cluster's address: trials run there, several at once (autotune.fleet)
    trials_at_once: int | None = None  # with ray: at most this many (None: as many as its nodes offer)
    plan: WindowPlan = field(default_factory=WindowPlan)
    finalists: int = _DEFAULT.finalists
    repeats: int = _DEFAULT.repeats
    margin: float = _DEFAULT.margin
    open_loop_check: bool = _DEFAULT.open_loop_check
    trt_build_timeout_s: float = _DEFAULT.trt_build_timeout_s
    output_check: bool = _DEFAULT.output_check
    output_tolerance: str = _DEFAULT.output_tolerance  # checked: autotune.outputs.parse_tolerance
    command: str = ""  # the command line that made the run, as the report shows it ("": a library call)

    @property
    def search_sla(self) -> Sla:
        """The SLA every search and race round holds points to, and the race's winner is read at:
        the SLA less ``--margin``."""
        return self.sla.tightened(self.margin)

    @property
    def beside_names(self) -> tuple[str, ...]:
        return tuple(c.model for c in self.beside)

    def __post_init__(self) -> None:
        if self.max_trials < 1:
            raise UsageError(f"--max-trials must be >= 1, got {self.max_trials}")
        if self.patience < 0:
            raise UsageError(f"--patience must be >= 0, got {self.patience}")
        if self.trt_build_timeout_s <= 0:
            raise UsageError(f"--trt-build-timeout-s must be > 0, got {self.trt_build_timeout_s:g}")
        if not 0.0 <= self.margin < 0.5:
            raise UsageError(f"--margin must be in [0, 0.5), got {self.margin}")
        if self.trials_at_once is not None and (self.ray is None or self.trials_at_once < 1):
            raise UsageError(
                f"--trials-at-once must be >= 1 and needs --ray (one machine measures one trial at a "
                f"time), got {self.trials_at_once}"
            )
        if self.protocol not in ("http", "grpc"):
            raise UsageError(f"--protocol must be http or grpc, got {self.protocol!r}")
        parse_tolerance(self.output_tolerance)  # a UsageError now, not at the first candidate
        if self.launch.kind == "remote" and not self.launch.remote.url:
            raise UsageError("--launcher remote needs --url HOST:PORT of a running tritonserver")
