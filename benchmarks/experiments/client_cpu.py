"""The load generator's own CPU cost beside perf_analyzer's, on one server at one level.

    .venv/bin/python benchmarks/experiments/client_cpu.py                       # text_recognition, c=4
    .venv/bin/python benchmarks/experiments/client_cpu.py --concurrency 8 --repeats 5
    .venv/bin/python benchmarks/experiments/client_cpu.py --model mobilenet --config c.pbtxt --concurrency 10

Client and server share this machine's cores: a client that costs more CPU leaves the server
less. Serves the example model with its original config (a local tritonserver), then
alternates perf_analyzer and our generator at the same concurrency over gRPC, with the same
window and max windows and no stability rule (every window is taken), ``--repeats`` times.
Prints, per run: throughput and p95 as each tool measured them, and the client's CPU time
(user + system: perf_analyzer's process by getrusage of children, ours by getrusage of this
process, which runs the generator) per second of wall time and per request.
"""

from __future__ import annotations

import argparse
import csv
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402

from autotune.launch.local import LocalLauncher  # noqa: E402
from autotune.loadgen import LoadGenerator  # noqa: E402
from autotune.points import WindowPlan  # noqa: E402
from autotune.settings import Workload  # noqa: E402

# model -> (perf_analyzer's workload flags, ours)
WORKLOADS = {
    "text_recognition": (
        ["-b", "2", "--shape", "input.1:1,32,100"],
        Workload("random", (("input.1", (1, 32, 100)),), 2),
    ),
    "cnn": ([], Workload()),
    "mobilenet": ([], Workload()),
}


def cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(WORKLOADS), default="text_recognition")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--config", type=Path, help="serve this config.pbtxt instead of the example's own")
    args = parser.parse_args()
    _tools.stop_on_sigint()
    pa = _tools.ensure_perf_analyzer()
    pa_flags, workload = WORKLOADS[args.model]
    work = Path(tempfile.mkdtemp(prefix="client-cpu-"))
    repo = work / "repo"
    _tools.copy_model(_tools.example_models([args.model]), args.model, repo)
    if args.config:
        text = args.config.read_text(encoding="utf-8")
        (repo / args.model / "config.pbtxt").write_text(text, encoding="utf-8")
    windows, batch = 3, workload.batch_size
    plan = WindowPlan(window_s=args.window, warmup_s=args.window, tolerance=1.0, max_windows=windows)
    with LocalLauncher().serve(repo, args.model, work / "server.log") as server:
        gen = LoadGenerator.connect(server.host, server.http_port, server.grpc_port, args.model,
                                    protocol="grpc", plan=plan, workload=workload)  # fmt: skip
        gen.at_concurrency(args.concurrency)  # warm-up, not counted
        print(f"{args.model} at concurrency {args.concurrency}, gRPC")
        for _ in range(args.repeats):
            for tool in ("perf_analyzer", "autotune"):
                if tool == "perf_analyzer":
                    out = work / "pa.csv"
                    out.unlink(missing_ok=True)
                    level = f"--concurrency-range={args.concurrency}"
                    cmd = pa.command(args.model, server.grpc_url, "grpc", level, args.window, 100, windows,
                                     out, *pa_flags)  # fmt: skip
                    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
                    subprocess.run(cmd, env=pa.env(), capture_output=True, check=True)
                    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - start
                    with out.open(encoding="utf-8") as handle:
                        row = next(csv.DictReader(handle))
                    throughput, p95 = float(row["Inferences/Second"]), float(row["p95 latency"]) / 1000
                    p99 = float(row["p99 latency"]) / 1000
                else:
                    before, start = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
                    point = gen.at_concurrency(args.concurrency)
                    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - start
                    throughput, p95, p99 = point.throughput, point.p95_ms, point.p99_ms
                cpu = cpu_seconds(after) - cpu_seconds(before)
                requests = throughput / batch * wall  # approximate: the warm-up runs at the same rate
                share, each = cpu / wall * 100, cpu / requests * 1e6
                print(f"{tool:<14} {throughput:7.1f} infer/s  p95 {p95:5.1f} p99 {p99:5.1f} ms  "
                      f"client CPU {cpu:5.2f} s in {wall:4.1f} s = {share:3.0f}% of a core, "
                      f"{each:4.0f} us/request",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
