#!/usr/bin/env python3
"""autotune's load generator side by side with perf_analyzer, on one running tritonserver.

    .venv/bin/python benchmarks/vs_perf_analyzer.py                 # the full comparison (~35 min)
    .venv/bin/python benchmarks/vs_perf_analyzer.py --quick         # every part once, short (~6 min)
    .venv/bin/python benchmarks/vs_perf_analyzer.py --parts agreement --protocols grpc --repeats 5

Three parts, each against a tritonserver started with autotune's LocalLauncher on a temporary
repository holding ``noop`` (a python model that returns its input; written here) and the
example ``bertQA`` (built by examples/build_models.py; 2 CPU instances, dynamic batching), and
with ``--models cnn`` the example ``cnn`` (2 CPU instances, dynamic batching, max batch 16: a
winner of the issue's benchmark that perf_analyzer read 1.30x our p99 one evening), with
``--models embedder`` the example ``embedder`` (the same, max batch 8: the best known config of
the issue's benchmark at 32 clients, whose p99 our race read 1.3-2x perf_analyzer's one morning):

agreement   both models, both protocols, concurrency 1, 4 and 16: the tools alternate (PA, us,
            PA, us, ...) with the same window, stability percentage, max windows and p95 as the
            watched percentile, ``--repeats`` times; medians and spreads. The server runs on the
            first half of the CPUs and the load generators on the other half (``--no-pin``
            shares them): a load generator that shares cores with the server it measures makes
            its own CPU cost part of the figures (docs/loadgen.md). ``--pa-async`` adds
            perf_analyzer ``--async`` as a second reference at every point (PA, PA --async,
            us, ...): its asynchronous client against its default of a thread per request.
capacity    noop, both protocols, unpinned: the highest throughput each tool drives over
            concurrency ``--capacity-levels`` (ours with 1 and 2 worker processes).
rate        noop, both protocols, unpinned, open loop (constant schedule) at fractions of our
            capacity: the achieved send rate against the asked rate, and whether the
            ``behind-schedule`` warning is raised when it is not held.

The same perf_analyzer --input-data JSON feeds both tools. perf_analyzer comes from the
tritonclient 2.41.0 wheel, set up idempotently by ``_tools.ensure_perf_analyzer`` (own venv
under ~/.cache/autotune-bench, Debian's libb64-0d, pip's CUDA runtime). Prints tables and the
ratios last; ``--json FILE`` keeps every sample. Two shared cores are noisy: compare only
figures of one run, and look at the spreads and the machine load printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _tools
from google.protobuf import text_format
from rich.console import Console
from rich.table import Table
from tritonclient.grpc import model_config_pb2 as mc

from autotune.control import ServerControl
from autotune.launch import Server, wait_model_ready
from autotune.launch.local import LocalLauncher
from autotune.loadgen import LoadGenerator, StatsSnapshot, WindowPlan, breakdown
from autotune.points import BEHIND_SCHEDULE, Point
from autotune.settings import Workload

MODELS = ("noop", "bertQA", "cnn", "embedder")
DEFAULT_MODELS = ("noop", "bertQA")
LEVELS = (1, 4, 16)
THROUGHPUT_TOLERANCE, LATENCY_TOLERANCE, CAPACITY_FLOOR, RATE_TOLERANCE = 0.05, 0.10, 0.8, 0.02
console = Console(highlight=False, width=160)

NOOP_CONFIG = """name: "noop"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
NOOP_MODEL = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Returns its input: what is left is the server's and the client's own cost."""

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
'''
INPUT_DATA = {
    "noop": {"INPUT0": {"content": [float(i) for i in range(16)], "shape": [16]}},
    "bertQA": {"input_ids": [101 + (i * 7) % 97 for i in range(128)], "segment_ids": [0] * 64 + [1] * 64,
               "input_mask": [1] * 128},
    "cnn": {"image": {"content": [((i * 37) % 255) / 255 for i in range(3 * 64 * 64)], "shape": [3, 64, 64]}},
    "embedder": {"input_ids": [1 + (i * 13) % 997 for i in range(64)]},
}  # fmt: skip
MAX_BATCH = {"bertQA": 0, "cnn": 16, "embedder": 8}  # the examples' max batch here (0: the example's own)


@dataclass(frozen=True)
class Settings:
    window_s: float
    stability: float  # percent
    max_windows: int
    repeats: int
    capacity_levels: tuple[int, ...]
    rate_fractions: tuple[float, ...]
    protocols: tuple[str, ...]
    parts: tuple[str, ...]
    models: tuple[str, ...]
    levels: tuple[int, ...]
    pin: bool
    pa_async: bool = False

    @property
    def plan(self) -> WindowPlan:
        return WindowPlan(
            window_s=self.window_s,
            warmup_s=self.window_s,
            tolerance=self.stability / 100,
            max_windows=self.max_windows,
            percentile=95,
        )


@dataclass(frozen=True)
class Sample:
    throughput: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    stable: bool
    send_rate: float = 0.0
    late_p99_ms: float = 0.0
    warnings: tuple[str, ...] = ()
    # where a request's time goes, per request in us: the average latency, the server's queue +
    # compute (its statistics), and perf_analyzer's own client time (its Client Send + Recv)
    avg_us: float = float("nan")
    server_us: float = float("nan")
    client_us: float = float("nan")
    avg_batch: float = float("nan")  # the batches the server executed (ours: kept windows; PA: its run)


@dataclass
class Series:
    """The repeated samples of one tool at one operating point."""

    tool: str
    samples: list[Sample] = field(default_factory=list)
    failures: int = 0

    def median(self, name: str) -> float:
        values = [getattr(s, name) for s in self.samples]
        return statistics.median(values) if values else float("nan")

    def spread(self, name: str) -> float:
        """(max - min) / median, in percent."""
        values = [getattr(s, name) for s in self.samples]
        middle = self.median(name)
        return 100 * (max(values) - min(values)) / middle if values and middle else float("nan")


# ---------------------------------------------------------------- set-up


def build_repository(root: Path, models: Sequence[str] = DEFAULT_MODELS) -> Path:
    """``noop`` and ``bertQA`` (the capacity and rate parts use noop), and ``cnn`` and
    ``embedder`` where ``models`` names them, each with 2 CPU instances and dynamic batching."""
    repo = root / "repo"
    (repo / "noop" / "1").mkdir(parents=True)
    (repo / "noop" / "config.pbtxt").write_text(NOOP_CONFIG)
    (repo / "noop" / "1" / "model.py").write_text(NOOP_MODEL)
    max_batch = {m: b for m, b in MAX_BATCH.items() if m == "bertQA" or m in models}
    built = _tools.example_models(list(max_batch))  # one build for all
    for model, batch in max_batch.items():
        target = _tools.copy_model(built, model, repo)
        config = text_format.Parse((target / "config.pbtxt").read_text(), mc.ModelConfig())
        del config.instance_group[:]
        config.instance_group.add(count=2, kind=mc.ModelInstanceGroup.KIND_CPU)
        config.max_batch_size = batch or config.max_batch_size
        config.dynamic_batching.SetInParent()
        (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    for model, entry in INPUT_DATA.items():
        (root / f"{model}.json").write_text(json.dumps({"data": [entry]}))
    return repo


@contextlib.contextmanager
def serving(repo: Path, log: Path, server_cpus: set[int], client_cpus: set[int]) -> Iterator[Server]:
    """A tritonserver on ``server_cpus`` with every model of ``repo`` ready; this process (and
    what it starts) on ``client_cpus``."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, server_cpus)
    try:
        with LocalLauncher().serve(repo, "noop", log) as server:
            for model in sorted(p.name for p in repo.iterdir() if p.is_dir()):
                wait_model_ready(server, model)
            os.sched_setaffinity(0, client_cpus)
            yield server
    finally:
        os.sched_setaffinity(0, before)


def split_cpus(pin: bool) -> tuple[set[int], set[int]]:
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return set(cpus), set(cpus)
    half = len(cpus) // 2
    return set(cpus[:half]), set(cpus[half:])


# ---------------------------------------------------------------- one measurement each


def perf_analyzer(
    pa: _tools.PerfAnalyzer,
    server: Server,
    model: str,
    protocol: str,
    level: str,
    settings: Settings,
    data: Path,
    out: Path,
    async_calls: bool = False,
) -> Sample | None:
    """One perf_analyzer run (``level`` is --concurrency-range=N or --request-rate-range=R ...;
    ``async_calls`` adds --async); one that never settles is taken again with the rule relaxed
    and marked unstable."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    for stability in (settings.stability, 100.0):
        out.unlink(missing_ok=True)
        cmd = pa.command(model, url, protocol, level, settings.window_s, stability, settings.max_windows, out,
                         f"--input-data={data}", "--verbose-csv")  # fmt: skip
        if async_calls:
            cmd.append("--async")
        if level.startswith("--request-rate"):
            cmd.append("--max-threads=64")  # sync calls, one in flight per thread: room for the rate
        limit = 60 + 3 * settings.window_s * (settings.max_windows + 2)  # perf_analyzer can hang (HTTP, c=64)
        before = _snapshot(server, model)
        try:
            proc = subprocess.run(
                cmd, env=pa.env(), capture_output=True, text=True, check=False, timeout=limit
            )
        except subprocess.TimeoutExpired:
            _tools.log(f"perf_analyzer did not finish in {limit:.0f} s: stopped")
            continue
        if proc.returncode == 0 and out.is_file():
            with out.open(encoding="utf-8") as handle:
                row = next(csv.DictReader(handle))
            sent = re.search(r"Avg send request rate: ([0-9.]+)", proc.stdout)
            behind = "not able to keep up" in proc.stdout
            return Sample(
                float(row["Inferences/Second"]),
                float(row["p50 latency"]) / 1000,
                float(row["p95 latency"]) / 1000,
                float(row["p99 latency"]) / 1000,
                stable=stability == settings.stability,
                send_rate=float(sent.group(1)) if sent else 0.0,
                warnings=(BEHIND_SCHEDULE,) if behind else (),
                avg_us=_average_us(row),
                server_us=sum(
                    _column(row, f"Server {part}")
                    for part in ("Queue", "Compute Input", "Compute Infer", "Compute Output")
                ),
                client_us=_column(row, "Client Send") + _column(row, "Client Recv"),
                avg_batch=breakdown(before, _snapshot(server, model)).avg_batch,
            )
        _tools.log(f"perf_analyzer exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-300:]}")
    return None


def _snapshot(server: Server, model: str) -> StatsSnapshot:
    with ServerControl(server.host, server.http_port) as control:
        return StatsSnapshot.parse(control.statistics(model))


def _column(row: dict[str, str], name: str) -> float:
    """A number of perf_analyzer's --verbose-csv row, nan where its version lacks the column."""
    try:
        return float(row[name])
    except (KeyError, ValueError):
        return float("nan")


def _average_us(row: dict[str, str]) -> float:
    """perf_analyzer's average latency; with --percentile its CSV has no "Avg latency" column,
    and the average is the sum of its breakdown (checked on a run that has both: 461 vs 464 us)."""
    average = _column(row, "Avg latency")
    if not math.isnan(average):
        return average
    parts = ("Client Send", "Network+Server Send/Recv", "Server Queue", "Server Compute Input",
             "Server Compute Infer", "Server Compute Output", "Client Recv")  # fmt: skip
    return sum(_column(row, part) for part in parts)


def ours(point: Point) -> Sample:
    server = point.server
    return Sample(
        point.throughput,
        point.p50_ms,
        point.p95_ms,
        point.p99_ms,
        point.stable,
        point.send_rate,
        point.send_late_p99_ms,
        point.warnings,
        avg_us=point.avg_ms * 1000,
        server_us=server.queue_us
        + server.compute_input_us
        + server.compute_infer_us
        + server.compute_output_us,
        avg_batch=server.avg_batch,
    )


# ---------------------------------------------------------------- the parts


def agreement(pa: _tools.PerfAnalyzer, repo: Path, work: Path, settings: Settings) -> list[dict[str, Any]]:
    rows = []
    server_cpus, client_cpus = split_cpus(settings.pin)
    with serving(repo, work / "agreement-server.log", server_cpus, client_cpus) as server:
        for model in settings.models:
            for protocol in settings.protocols:
                gen = LoadGenerator.connect(
                    server.host,
                    server.http_port,
                    server.grpc_port,
                    model,
                    protocol=protocol,
                    plan=settings.plan,
                    workload=Workload(str(work / f"{model}.json")),
                )
                for level in settings.levels:
                    references = {"pa": Series("perf_analyzer")}
                    if settings.pa_async:
                        references["pa_async"] = Series("perf_analyzer --async")
                    our_series = Series("autotune")
                    for repeat in range(settings.repeats):
                        _tools.log(f"agreement {model} {protocol} concurrency {level} repeat {repeat + 1}")
                        for key, series in references.items():
                            _add(
                                series,
                                perf_analyzer(
                                    pa,
                                    server,
                                    model,
                                    protocol,
                                    f"--concurrency-range={level}",
                                    settings,
                                    work / f"{model}.json",
                                    work / "pa.csv",
                                    async_calls=key == "pa_async",
                                ),
                            )
                        _add(our_series, ours(gen.at_concurrency(level)))
                    rows.append(
                        {"model": model, "protocol": protocol, "concurrency": level, **references}
                        | {"ours": our_series}
                    )
    return rows


def capacity(pa: _tools.PerfAnalyzer, repo: Path, work: Path, settings: Settings) -> list[dict[str, Any]]:
    rows = []
    everything = set(os.sched_getaffinity(0))
    with serving(repo, work / "capacity-server.log", everything, everything) as server:
        for protocol in settings.protocols:
            gen = LoadGenerator.connect(
                server.host,
                server.http_port,
                server.grpc_port,
                "noop",
                protocol=protocol,
                plan=settings.plan,
                workload=Workload(str(work / "noop.json")),
            )
            for level in settings.capacity_levels:
                tools = {
                    "perf_analyzer": Series("perf_analyzer"),
                    "autotune w1": Series("autotune w1"),
                    "autotune w2": Series("autotune w2"),
                }
                for repeat in range(settings.repeats):
                    _tools.log(f"capacity {protocol} concurrency {level} repeat {repeat + 1}")
                    _add(
                        tools["perf_analyzer"],
                        perf_analyzer(
                            pa,
                            server,
                            "noop",
                            protocol,
                            f"--concurrency-range={level}",
                            settings,
                            work / "noop.json",
                            work / "pa.csv",
                        ),
                    )
                    _add(tools["autotune w1"], ours(gen.with_workers(1).at_concurrency(level)))
                    _add(tools["autotune w2"], ours(gen.with_workers(2).at_concurrency(level)))
                rows.append({"protocol": protocol, "concurrency": level, "series": tools})
    return rows


def rates(
    pa: _tools.PerfAnalyzer, repo: Path, work: Path, settings: Settings, capacity_rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Open loop at fractions of our closed-loop capacity; perf_analyzer's request-rate mode
    at the same rates for reference (sync calls, 64 threads)."""
    rows = []
    everything = set(os.sched_getaffinity(0))
    with serving(repo, work / "rate-server.log", everything, everything) as server:
        for protocol in settings.protocols:
            top, workers = _our_capacity(capacity_rows, protocol)
            if not top:
                continue
            gen = LoadGenerator.connect(
                server.host, server.http_port, server.grpc_port, "noop", protocol=protocol,
                plan=settings.plan, workload=Workload(str(work / "noop.json")), workers=workers,
            )  # fmt: skip
            for fraction in settings.rate_fractions:
                asked = round(top * fraction, -1)
                _tools.log(f"rate {protocol} {asked:.0f}/s ({fraction:.0%} of capacity, {workers} worker(s))")
                sample = ours(gen.at_rate(asked, "constant"))
                level = f"--request-rate-range={asked:g}"
                reference = perf_analyzer(
                    pa, server, "noop", protocol, level, settings, work / "noop.json", work / "pa.csv"
                )
                rows.append({"protocol": protocol, "fraction": fraction, "asked": asked, "workers": workers,
                             "sample": sample, "pa": reference})  # fmt: skip
    return rows


def _add(series: Series, sample: Sample | None) -> None:
    if sample is None:
        series.failures += 1
    else:
        series.samples.append(sample)


def _our_capacity(capacity_rows: list[dict[str, Any]], protocol: str) -> tuple[float, int]:
    """Our highest median throughput for ``protocol`` and the worker count that reached it."""
    best, workers = 0.0, 1
    for row in capacity_rows:
        if row["protocol"] != protocol:
            continue
        for name, series in row["series"].items():
            if name.startswith("autotune") and series.samples and series.median("throughput") > best:
                best, workers = series.median("throughput"), int(name[-1])
    return best, workers


# ---------------------------------------------------------------- tables and verdicts


def _cell(series: Series, name: str, digits: int) -> str:
    if not series.samples:
        return "failed"
    unstable = sum(not s.stable for s in series.samples)
    flag = f" ({unstable} unst.)" if unstable else ""
    return f"{series.median(name):.{digits}f} ±{series.spread(name) / 2:.0f}%{flag}"


def _tools_in(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(column label, row key) of the tools measured: PA is perf_analyzer (its default, a thread
    per request), PAa perf_analyzer --async; ours last."""
    with_async = any("pa_async" in r for r in rows)
    return [("PA", "pa"), *([("PAa", "pa_async")] if with_async else []), ("our", "ours")]


def agreement_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="agreement: medians ± half the spread (max-min)/median over repeats")
    tools = _tools_in(rows)
    columns = [
        ("infer/s", "throughput", 0),
        ("p50 ms", "p50_ms", 2),
        ("p95 ms", "p95_ms", 2),
        ("p99 ms", "p99_ms", 2),
    ]
    for header in ("model", "proto", "conc"):
        table.add_column(header, justify="right")
    for label, _, _ in columns:
        for tool, _ in tools:
            table.add_column(f"{tool} {label}", justify="right")
    for row in rows:
        cells = [_cell(row[key], name, digits) for _, name, digits in columns for _, key in tools]
        table.add_row(row["model"], row["protocol"], str(row["concurrency"]), *cells)
    return table


def time_table(rows: list[dict[str, Any]]) -> Table:
    """Where a request's time goes at each point: the same server time under both tools means
    a difference in latency is the clients' (perf_analyzer reports its own client time)."""
    table = Table(
        title="agreement, per request (us, medians): average latency, server queue + compute, the rest; "
        "perf_analyzer's own client send + receive; the server's average batch"
    )
    tools = _tools_in(rows)
    for header in ("model", "proto", "conc"):
        table.add_column(header, justify="right")
    for tool, _ in tools:
        for label in ("avg", "server", "rest"):
            table.add_column(f"{tool} {label}", justify="right")
    for tool, _ in tools[:-1]:
        table.add_column(f"{tool} client", justify="right")
    for tool, _ in tools:
        table.add_column(f"{tool} batch", justify="right")
    for row in rows:
        cells = []
        for _, key in tools:
            avg, server = row[key].median("avg_us"), row[key].median("server_us")
            cells += [f"{avg:.0f}", f"{server:.0f}", f"{avg - server:.0f}"]
        cells += [f"{row[key].median('client_us'):.0f}" for _, key in tools[:-1]]
        cells += [f"{row[key].median('avg_batch'):.2f}" for _, key in tools]
        table.add_row(row["model"], row["protocol"], str(row["concurrency"]), *cells)
    return table


def capacity_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="capacity (noop, unpinned): median infer/s ± half the spread")
    for header in ("proto", "conc", "perf_analyzer", "autotune w1", "autotune w2"):
        table.add_column(header, justify="right")
    for row in rows:
        table.add_row(
            row["protocol"],
            str(row["concurrency"]),
            *(
                _cell(row["series"][name], "throughput", 0)
                for name in ("perf_analyzer", "autotune w1", "autotune w2")
            ),
        )
    return table


def rate_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="open loop (noop, constant schedule, unpinned): asked vs sent vs answered")
    for header in (
        "proto",
        "of our capacity",
        "asked/s",
        "our sent/s",
        "our done/s",
        "our late p99 ms",
        "our p50 ms",
        "our warnings",
        "PA sent/s",
        "PA done/s",
        "PA p50 ms",
        "PA warned",
    ):
        table.add_column(header, justify="right")
    for row in rows:
        s, pa = row["sample"], row["pa"]
        theirs = (
            [
                f"{pa.send_rate:.0f}" if pa.send_rate else "(not shown)",
                f"{pa.throughput:.0f}",
                f"{pa.p50_ms:.2f}",
                "yes" if pa.warnings else "",
            ]
            if pa
            else ["failed", "", "", ""]
        )
        table.add_row(row["protocol"], f"{row['fraction']:.0%} (w{row['workers']})", f"{row['asked']:.0f}",
                      f"{s.send_rate:.0f}", f"{s.throughput:.0f}", f"{s.late_p99_ms:.2f}", f"{s.p50_ms:.2f}",
                      " ".join(s.warnings), *theirs)  # fmt: skip
    return table


def verdicts(
    agreement_rows: list[dict[str, Any]],
    capacity_rows: list[dict[str, Any]],
    rate_rows: list[dict[str, Any]],
    protocols: Sequence[str],
) -> list[str]:
    """A line a verdict: the agreement at each point, the capacity on each protocol, each rate."""
    return [
        *_agreement_verdicts(agreement_rows),
        *_capacity_verdicts(capacity_rows, protocols),
        *_rate_verdicts(rate_rows),
    ]


def _agreement_verdicts(agreement_rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    # (measured, reference, what the line says after the ratios); the last compares perf_analyzer's
    # two clients with each other: how far apart two implementations of one tool land at a point
    comparisons = (
        ("ours", "pa", ""),
        ("ours", "pa_async", "  (vs perf_analyzer --async)"),
        ("pa_async", "pa", "  (perf_analyzer --async vs perf_analyzer: the reference against itself)"),
    )
    for key, ref, against in comparisons:
        for row in agreement_rows:
            if key not in row or ref not in row:
                continue
            measured, reference = row[key], row[ref]
            if not measured.samples or not reference.samples:
                point = f"{row['model']} {row['protocol']} c={row['concurrency']}"
                lines.append(f"agreement {point}: no figures{against}")
                continue
            names = ("throughput", "p50_ms", "p95_ms", "p99_ms")  # p99 is told, not judged
            ratios = {name: measured.median(name) / reference.median(name) for name in names}
            ok = abs(ratios["throughput"] - 1) <= THROUGHPUT_TOLERANCE and all(
                abs(ratios[n] - 1) <= LATENCY_TOLERANCE for n in ("p50_ms", "p95_ms")
            )
            verdict = ("PASS" if ok else "FAIL") if key == "ours" else ("ref-in" if ok else "ref-OUT")
            lines.append(
                f"{verdict} agreement {row['model']:6} {row['protocol']:4} "
                f"c={row['concurrency']:<2}  throughput x{ratios['throughput']:.3f}  "
                f"p50 x{ratios['p50_ms']:.3f}  p95 x{ratios['p95_ms']:.3f}  "
                f"p99 x{ratios['p99_ms']:.3f}{against}"
            )
    return lines


def _capacity_verdicts(capacity_rows: list[dict[str, Any]], protocols: Sequence[str]) -> list[str]:
    lines = []
    for protocol in protocols:
        theirs = max(
            (
                r["series"]["perf_analyzer"].median("throughput")
                for r in capacity_rows
                if r["protocol"] == protocol and r["series"]["perf_analyzer"].samples
            ),
            default=0.0,
        )
        top, workers = _our_capacity(capacity_rows, protocol)
        if theirs and top:
            ratio = top / theirs
            lines.append(
                f"{'PASS' if ratio >= CAPACITY_FLOOR else 'FAIL'} capacity  {protocol:4} ours {top:.0f} "
                f"(workers={workers}) / perf_analyzer {theirs:.0f} infer/s = x{ratio:.3f}"
            )
    return lines


def _rate_verdicts(rate_rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in rate_rows:
        s = row["sample"]
        held = abs(s.send_rate / row["asked"] - 1) <= RATE_TOLERANCE
        warned = BEHIND_SCHEDULE in s.warnings
        kept_up = abs(s.throughput / row["asked"] - 1) <= RATE_TOLERANCE
        verdict = "PASS" if held and not warned else ("WARNED" if warned else "FAIL")
        lines.append(
            f"{verdict} rate      {row['protocol']:4} {row['fraction']:>5.0%} of capacity: sent "
            f"{s.send_rate:.0f} of {row['asked']:.0f}/s = x{s.send_rate / row['asked']:.3f}, "
            f"answered x{s.throughput / row['asked']:.3f}{'' if kept_up else ' (server behind)'}"
        )
    return lines


# ---------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="every part once with short windows (a smoke run)"
    )
    parser.add_argument("--window", type=float, help="window seconds, both tools (default 2; quick 1)")
    parser.add_argument("--stability", type=float, default=10.0, help="stability percentage (default 10)")
    parser.add_argument(
        "--max-windows", type=int, default=10, help="max windows / PA --max-trials (default 10)"
    )
    parser.add_argument("--repeats", type=int, help="repeats per point (default 3; quick 1)")
    parser.add_argument("--protocols", nargs="+", choices=("http", "grpc"), default=["http", "grpc"])
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=("agreement", "capacity", "rate"),
        default=["agreement", "capacity", "rate"],
    )
    parser.add_argument(
        "--capacity-levels", type=int, nargs="+", help="concurrency (default 16 32 64; quick 32)"
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        default=list(DEFAULT_MODELS),
        help="agreement: models (default noop bertQA)",
    )
    parser.add_argument("--levels", type=int, nargs="+", default=list(LEVELS), help="agreement: concurrency")
    parser.add_argument("--no-pin", action="store_true", help="agreement: share all CPUs (server and tools)")
    parser.add_argument(
        "--pa-async", action="store_true", help="agreement: perf_analyzer --async as a second reference"
    )
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="print the tables and ratios of a run written by --json; no measuring",
    )
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(
        window_s=args.window or (1.0 if args.quick else 2.0), stability=args.stability,
        max_windows=args.max_windows, repeats=args.repeats or (1 if args.quick else 3),
        capacity_levels=tuple(args.capacity_levels or ((32,) if args.quick else (16, 32, 64))),
        rate_fractions=(0.25, 0.5, 1.0) if args.quick else (0.1, 0.25, 0.4, 0.5, 0.75, 1.0, 1.3),
        protocols=tuple(args.protocols),
        models=tuple(args.models),
        levels=tuple(args.levels), parts=tuple(args.parts), pin=not args.no_pin, pa_async=args.pa_async,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.render:
        return _status(show(_load(args.render)))
    _tools.stop_on_sigint()
    settings = settings_from(args)
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    load_before, started = os.getloadavg()[0], time.monotonic()
    pa = _tools.ensure_perf_analyzer()
    with tempfile.TemporaryDirectory(prefix="vs-pa-") as tmp:
        work = Path(tmp)
        repo = build_repository(work, settings.models)
        agreement_rows = agreement(pa, repo, work, settings) if "agreement" in settings.parts else []
        capacity_rows = (
            capacity(pa, repo, work, settings) if {"capacity", "rate"} & set(settings.parts) else []
        )
        rate_rows = rates(pa, repo, work, settings, capacity_rows) if "rate" in settings.parts else []
    run: dict[str, Any] = {
        "command": command,
        "settings": settings,
        "minutes": (time.monotonic() - started) / 60,
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "agreement": agreement_rows,
        "capacity": capacity_rows,
        "rate": rate_rows,
    }
    run["verdicts"] = show(run)
    if args.json:
        args.json.write_text(json.dumps(run, default=_plain, indent=1))
    return _status(run["verdicts"])


def _status(lines: list[str]) -> int:
    """1 when a ratio is outside its bar."""
    return 0 if not any(line.startswith("FAIL") for line in lines) else 1


def show(run: dict[str, Any]) -> list[str]:
    """Print a run's set-up, tables and ratios; the ratio lines."""
    settings: Settings = run["settings"]
    console.print(f"command: {run['command']}")
    load = (
        f"load average {run['load_before']:.2f} before, {run['load_after']:.2f} after, "
        if "load_before" in run
        else ""
    )
    console.print(
        f"{run.get('cpus', '?')} CPUs, {load}{run['minutes']:.1f} min; window {settings.window_s:g} s, "
        f"stability {settings.stability:g}%, max windows {settings.max_windows}, {settings.repeats} "
        f"repeat(s), agreement {'pinned: server and tools on separate CPUs' if settings.pin else 'unpinned'}"
    )
    for rows, render in (
        (run["agreement"], agreement_table),
        (
            [r for r in run["agreement"] if not math.isnan(r["ours"].median("avg_us"))],
            time_table,
        ),  # older runs: nan
        (run["capacity"], capacity_table),
        (run["rate"], rate_table),
    ):
        if rows:
            console.print(render(rows))
    lines = verdicts(run["agreement"], run["capacity"], run["rate"], settings.protocols)
    console.print(
        "ratios (ours / perf_analyzer; bars: throughput 5%, p50/p95 10%, capacity >= 0.8x, rate 2%; "
        "rate: PASS = sent within 2%, no warning; WARNED = behind-schedule reported; FAIL = off, silent; "
        "ref-in / ref-OUT: perf_analyzer --async against perf_analyzer, within / outside the same bars):"
    )
    for line in lines:
        console.print(line)
    return lines


def _load(path: Path) -> dict[str, Any]:
    """A run written by --json, with its samples as objects again (for --render)."""
    run: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))

    def sample(d: dict[str, Any]) -> Sample:
        return Sample(**(d | {"warnings": tuple(d.get("warnings", ()))}))

    def series(d: dict[str, Any]) -> Series:
        return Series(d["tool"], [sample(x) for x in d["samples"]], d.get("failures", 0))

    fields: dict[str, Any] = {f: tuple(v) if isinstance(v, list) else v for f, v in run["settings"].items()}
    run["settings"] = Settings(**fields)
    for row in run["agreement"]:
        for key in ("pa", "pa_async", "ours"):
            if key in row:
                row[key] = series(row[key])
    for row in run["capacity"]:
        row["series"] = {name: series(d) for name, d in row["series"].items()}
    for row in run["rate"]:
        row["sample"] = sample(row["sample"])
        row["pa"] = sample(row["pa"]) if row.get("pa") else None
    return run


def _plain(value: object) -> Any:
    if isinstance(value, Series | Sample | Settings):
        return asdict(value)
    raise TypeError(f"cannot write {type(value).__name__}")


if __name__ == "__main__":
    sys.exit(main())
