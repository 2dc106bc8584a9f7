#!/usr/bin/env python3
"""The users' workloads: each example tuned with its own data, then its winner measured by
perf_analyzer and by us with the same workload flags.

    .venv/bin/python benchmarks/workloads_vs_perf_analyzer.py             # three examples (~25 min)
    .venv/bin/python benchmarks/workloads_vs_perf_analyzer.py --models text_recognition --repeats 3

For each example (``--models``):

bertQA_dynamic   dims [-1]: ``--input-data input.json`` (8 entries, lengths 32 to 256)
food_classifier  TYPE_STRING base64 JPEGs: ``--input-data input.json`` (8 JPEGs); its config
                 asks for GPU 0, so on a machine without one the baseline fails and its CPU
                 twin is tuned
text_recognition a client batch of 2 of a variable-width input, as the tutorial measures it:
                 ``--shape input.1:1,32,100 -b 2`` (random data)

1. ``autotune run`` with the default budget and search space, plus the workload's flags, over
   gRPC (what perf_analyzer is compared over), in a fresh work folder: its wall time.
2. The winner's config served alone (a local tritonserver), measured at the operating point
   autotune recommends (the verified concurrency) by perf_analyzer and by our load generator in
   turn (after one measurement of ours that warms the server up; each side goes first in turn),
   same window, stability rule (p95) and max windows, ``--repeats`` times: perf_analyzer,
   ours in perf_analyzer's order of entries (``--data-order perf-analyzer``: the same traffic),
   then, for a workload of several requests, ours in the default order (``spread``: every
   client sends every entry). Both share the machine's cores with the server, as in a tuning run.

Prints, per model: the tuning's wall time and winner, then the medians and spreads of each side
and the ratios to perf_analyzer (throughput and p95): ours in its order is the agreement that
counts (the same requests); the spread order shows what the order of entries alone changes.
perf_analyzer comes from the tritonclient 2.41.0 wheel (``_tools.ensure_perf_analyzer``). Two
shared cores are noisy: compare figures of one run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import _tools

from autotune.launch.local import LocalLauncher
from autotune.loadgen import LoadGenerator
from autotune.points import WindowPlan
from autotune.reload import reload_outcome
from autotune.results import recommendation
from autotune.settings import Workload, add_workload_arguments, workload_from_args

ROOT = Path(__file__).resolve().parents[1]
# model -> (workload flags, relative to the model's folder; SLA p95 in ms)
EXAMPLES: dict[str, tuple[tuple[str, ...], float]] = {
    "bertQA_dynamic": (("--input-data", "input.json"), 150.0),
    "food_classifier": (("--input-data", "input.json"), 60.0),
    "text_recognition": (("--shape", "input.1:1,32,100", "-b", "2"), 30.0),
}


@dataclass(frozen=True)
class Sample:
    tool: str
    throughput: float
    p95_ms: float
    stable: bool


@dataclass
class Result:
    model: str
    flags: list[str]
    sla_ms: float
    tune_s: float
    exit_code: int
    winner: str = ""
    concurrency: int = 0
    samples: list[Sample] | None = None
    note: str = ""


def tune(
    model: str, repo: Path, reports: Path, flags: Sequence[str], sla_ms: float, log: Path
) -> tuple[int, float]:
    cmd = [
        sys.executable,
        "-m",
        "autotune.cli",
        "run",
        "--model",
        model,
        "--model-repository",
        str(repo),
        "--sla-p95-ms",
        f"{sla_ms:g}",
        "--reports-dir",
        str(reports),
        "--protocol",
        "grpc",
        "--fresh",
        *flags,
    ]
    _tools.log(f"{model}: {shlex.join(cmd[3:])} (log {log})")
    start = time.monotonic()
    env = {**os.environ, "TERM": "dumb", "NO_COLOR": "1", "COLUMNS": "120"}
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False, timeout=3600)
    return proc.returncode, time.monotonic() - start


def perf_analyzer(
    pa: _tools.PerfAnalyzer,
    model: str,
    url: str,
    concurrency: int,
    flags: Sequence[str],
    window_s: float,
    max_windows: int,
    out: Path,
) -> Sample | None:
    """One perf_analyzer run with the workload flags (ours are theirs: --input-data, --shape, -b)."""
    for stability in (10, 100):
        out.unlink(missing_ok=True)
        cmd = pa.command(model, url, "grpc", f"--concurrency-range={concurrency}", window_s, stability,
                         max_windows, out, *flags)  # fmt: skip
        proc = subprocess.run(cmd, env=pa.env(), capture_output=True, text=True, check=False, timeout=600)
        if proc.returncode == 0 and out.is_file():
            with out.open(encoding="utf-8") as handle:
                row = next(csv.DictReader(handle))
            return Sample(
                "perf_analyzer",
                float(row["Inferences/Second"]),
                float(row["p95 latency"]) / 1000,
                stability == 10,
            )
        _tools.log(f"perf_analyzer exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-300:]}")
    return None


SIDES = ("perf_analyzer", "perf-analyzer", "spread")  # the tool, then our two orders of entries


def ours(gen: LoadGenerator, concurrency: int) -> Sample:
    point = gen.at_concurrency(concurrency)
    return Sample(gen.data.order, point.throughput, point.p95_ms, point.stable)


def compare(
    pa: _tools.PerfAnalyzer,
    model: str,
    run_dir: Path,
    tuned_repo: Path,
    flags: Sequence[str],
    work: Path,
    repeats: int,
    window_s: float,
    max_windows: int,
) -> tuple[str, int, list[Sample]]:
    outcome = reload_outcome(run_dir)
    if outcome.winner is None:
        return "", 0, []
    chosen = recommendation(outcome.winner, outcome.info.verifications, 95)
    assert chosen is not None
    repo = work / "winner-repo"
    _tools.copy_model(tuned_repo, model, repo)
    (repo / model / "config.pbtxt").write_text(outcome.info.winner_config, encoding="utf-8")
    workload = _workload(flags, "perf-analyzer")
    plan = WindowPlan(
        window_s=window_s, warmup_s=window_s, tolerance=0.10, max_windows=max_windows, percentile=95
    )
    samples: list[Sample] = []
    with LocalLauncher().serve(repo, model, work / "winner-server.log") as server:
        gen = LoadGenerator.connect(
            server.host,
            server.http_port,
            server.grpc_port,
            model,
            protocol="grpc",
            plan=plan,
            workload=workload,
        )
        # one request (random data): both orders send the same thing
        spread = None if len(gen.payloads) == 1 else replace(gen, data=replace(gen.data, order="spread"))

        def measure(side: str) -> Sample | None:
            if side == "perf_analyzer":
                url, level = server.grpc_url, chosen.concurrency
                return perf_analyzer(pa, model, url, level, flags, window_s, max_windows, work / "pa.csv")
            return ours(gen if side == "perf-analyzer" else spread or gen, chosen.concurrency)

        _tools.log(f"{model}: warming the server up at concurrency {chosen.concurrency} (not counted)")
        ours(gen, chosen.concurrency)  # a python backend's first minute runs slower (drift, not tools)
        sides = [side for side in SIDES if side != "spread" or spread is not None]
        for repeat in range(repeats):
            _tools.log(f"{model}: repeat {repeat + 1}/{repeats} at concurrency {chosen.concurrency}")
            turn = repeat % len(sides)  # each side goes first in turn: a drift favours none
            for side in sides[turn:] + sides[:turn]:
                sample = measure(side)
                if sample is not None:
                    samples.append(sample)
    candidate = outcome.winner.candidate
    label = f"trial {outcome.winner.number}: {candidate.label() if candidate else '?'}"
    return label, chosen.concurrency, samples


def _workload(flags: Sequence[str], order: str) -> Workload:
    """Our Workload from the flags both tools are given, read as `autotune run` reads them."""
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    return workload_from_args(parser.parse_args([*flags, "--data-order", order]))


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _spread(values: Sequence[float]) -> str:
    if len(values) < 2:
        return "-"
    middle = statistics.median(values)
    return f"{(max(values) - min(values)) / middle * 100:.0f}%" if middle else "-"


def report(results: Sequence[Result], repeats: int) -> list[str]:
    lines = [
        f"Winners measured at their operating point, gRPC, {repeats} repeats alternating; medians (spread).",
        "ours/PA: our load generator in perf_analyzer's order of entries (the same requests);",
        "spread/PA: in our default order (each client sends every entry), for workloads of several requests.",
    ]
    columns = f"{'side':<14} {'infer/s':>16} {'/PA':>6}  {'p95 ms':>13} {'/PA':>6}"
    lines.append(f"{'model':<16} {'tune':>5} {'conc':>4}  {columns}")
    for r in results:
        if not r.samples:
            lines.append(f"{r.model:<16} {r.tune_s:>4.0f}s  exit {r.exit_code} {r.note}")
            continue
        sides = {side: [s for s in r.samples if s.tool == side] for side in SIDES}
        pa_t = _median([s.throughput for s in sides["perf_analyzer"]])
        pa_l = _median([s.p95_ms for s in sides["perf_analyzer"]])
        head = f"{r.model:<16} {r.tune_s:>4.0f}s {r.concurrency:>4}"
        for side, samples in sides.items():
            if not samples:
                continue
            t, lat = [s.throughput for s in samples], [s.p95_ms for s in samples]
            name = {"perf_analyzer": "perf_analyzer", "perf-analyzer": "ours", "spread": "ours spread"}[side]
            lines.append(
                f"{head:<27}  {name:<14} {_median(t):>9.1f} ({_spread(t):>4}) {_median(t) / pa_t:>6.3f}  "
                f"{_median(lat):>6.1f} ({_spread(lat):>4}) {_median(lat) / pa_l:>6.3f}"
            )
            head = ""
        lines.append(
            f"{'':<16} flags {' '.join(r.flags)}; winner {r.winner}; unstable samples: "
            f"{sum(not s.stable for s in r.samples)} of {len(r.samples)}"
        )
    lines.append("acceptance: tuning <= 300 s; ours/PA throughput within 0.95-1.05, p95 within 0.90-1.10")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=list(EXAMPLES), default=list(EXAMPLES))
    parser.add_argument("--repeats", type=int, default=5, help="alternating repeats per side (default 5)")
    parser.add_argument("--window", type=float, default=2.0, help="window seconds, both tools (default 2)")
    parser.add_argument("--max-windows", type=int, default=8, help="max windows, both tools (default 8)")
    parser.add_argument("--work", type=Path, help="keep the work folders here (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    args = parser.parse_args(argv)
    _tools.stop_on_sigint()
    pa = _tools.ensure_perf_analyzer()
    models = _tools.example_models(args.models)
    work_root = args.work or Path(tempfile.mkdtemp(prefix="workloads-"))
    results = []
    for model in args.models:
        relative, sla_ms = EXAMPLES[model]
        work = work_root / model
        shutil.rmtree(work, ignore_errors=True)
        repo = work / "repo"
        _tools.copy_model(models, model, repo)
        if (models / model / "input.json").is_file():
            shutil.copy2(models / model / "input.json", repo / model / "input.json")
        flags = [str(repo / model / f) if f.endswith(".json") else f for f in relative]
        code, wall = tune(model, repo, work / "reports", flags, sla_ms, work / "autotune.log")
        result = Result(model, list(relative), sla_ms, wall, code)
        run_dirs = sorted((work / "reports" / model).glob("*/run.json"))
        if code == 0 and run_dirs:
            result.winner, result.concurrency, result.samples = compare(
                pa, model, run_dirs[-1].parent, repo, flags, work, args.repeats, args.window, args.max_windows
            )
        else:
            result.note = " ".join(
                (work / "autotune.log").read_text(errors="replace").strip().splitlines()[-1:]
            )
        results.append(result)
    print("\n".join(report(results, args.repeats)))
    if args.json:
        args.json.write_text(
            json.dumps([asdict(r) for r in results], indent=1, default=str), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
