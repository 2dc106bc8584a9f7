"""Does our client read the server's tail as perf_analyzer does, and does the server's priority matter?

    .venv/bin/python benchmarks/experiments/server_priority.py MODEL INSTANCES MAX_BATCH CONCURRENCY \
        REPEATS [NICE]

Our load generator is one thread (an asyncio loop); perf_analyzer's is a thread per client. On
two shared cores under a busy server, a single thread that is woken by an answer waits in the
run queue behind the server's threads, and every answer in flight waits with it: our p99 then
counts the client's wait, not the server's. This serves the example model with INSTANCES
instances and dynamic batching at MAX_BATCH (0: the example's own batching) on one warm server
and measures CONCURRENCY clients REPEATS times, interleaved: ours with the server at its normal
priority, ours with every thread of the server reniced to NICE (default 10, as the local
launcher now starts it), and perf_analyzer (gRPC, the benchmark's re-measurement) with the
server at its normal priority. Every plan takes three 2 s windows (no stability pick). Prints
each plan's median and range of p99 and throughput.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402
from vs_model_analyzer import perf_analyzer  # noqa: E402

from autotune.launch.local import LocalLauncher  # noqa: E402
from autotune.loadgen import LoadGenerator  # noqa: E402
from autotune.points import WindowPlan  # noqa: E402

PLAN = WindowPlan(window_s=2.0, warmup_s=0.3, percentile=99, tolerance=1e9)  # three 2 s windows, as taken


def renice(marker: str, nice: int) -> int:
    """Set every thread of every process whose command line holds ``marker`` to ``nice``."""
    done = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
                done += 1
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return done


def _range(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    model, instances, max_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    concurrency, repeats = int(sys.argv[4]), int(sys.argv[5])
    nice = int(sys.argv[6]) if len(sys.argv) > 6 else 10
    pa = _tools.ensure_perf_analyzer()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        _tools.example_variant(model, repo, instances, max_batch)
        plans = ("ours, server nice 0", f"ours, server nice {nice}", "perf_analyzer, nice 0")
        found: dict[str, list[tuple[float, float]]] = {name: [] for name in plans}
        with LocalLauncher().serve(repo, model, repo / "server.log") as server:
            gen = LoadGenerator.connect(
                server.host, server.http_port, server.grpc_port, model, protocol="grpc", plan=PLAN
            )
            gen.with_plan(WindowPlan(window_s=1.0, warmup_s=1.0, percentile=99)).at_concurrency(concurrency)
            for i in range(repeats):
                for name in plans:
                    renice(tmp, nice if name == plans[1] else 0)
                    if name.startswith("ours"):
                        p = gen.at_concurrency(concurrency)
                        thr, p99 = p.throughput, p.p99_ms
                    else:
                        q = perf_analyzer(
                            pa, model, server.grpc_port, concurrency, 2000, repo / "pa.csv", 100
                        )
                        assert q is not None, "perf_analyzer failed"
                        thr, p99 = q.throughput, q.p99_ms
                    found[name].append((thr, p99))
                    print(f"{i + 1:2d} {name:24s} {thr:7.0f} infer/s  p99 {p99:5.1f} ms", flush=True)
            renice(tmp, 0)
        batching = f"max batch {max_batch}, batching" if max_batch else "its own batching"
        print(f"\n{model} {instances} instances, {batching}, {concurrency} clients, {repeats} each")
        print(f"{'plan':24s} {'p99 ms: median (range)':24s} infer/s: median (range)")
        for name, points in found.items():
            p99, thr = _range([p for _, p in points]), _range([t for t, _ in points])
            print(f"{name:24s} {p99:24s} {thr}")


if __name__ == "__main__":
    main()
