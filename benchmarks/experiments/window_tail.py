"""Does the tail a point reads depend on its windows: their length, and the stability rule's pick?

    .venv/bin/python benchmarks/experiments/window_tail.py MODEL INSTANCES MAX_BATCH CONCURRENCY REPEATS

A search reads each point from 0.5 s windows, kept once three in a row agree within 10%; a
verification repeat from 1 s windows on the same rule; perf_analyzer from 2 s windows. A
finalist's verification reads a higher p99 than its search did at the same level (the median
repeat 1.04-1.09x on mobilenet, cnn, bertQA and recommender, the slowest 1.07-1.18x:
``search_vs_verify.py``), and perf_analyzer higher still. This serves the example model with
INSTANCES instances and dynamic batching at MAX_BATCH (0: without batching) on one server and
measures CONCURRENCY clients REPEATS times with each plan, interleaved: the search's, the
search's without the stability pick (the first three windows, whatever they read), the
verification's and 2 s windows. It prints each plan's median and range of p99 and throughput,
and the windows each took.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402

from autotune.launch.local import LocalLauncher  # noqa: E402
from autotune.loadgen import LoadGenerator  # noqa: E402
from autotune.points import Point, WindowPlan  # noqa: E402

RAMP_S = 0.3  # as the tuner ramps between points on a warm server
PLANS = {
    "search 0.5s": WindowPlan(window_s=0.5, warmup_s=RAMP_S, percentile=99),
    "0.5s no pick": WindowPlan(window_s=0.5, warmup_s=RAMP_S, percentile=99, tolerance=1e9),
    "verify 1s": WindowPlan(window_s=1.0, warmup_s=RAMP_S, percentile=99),
    "2s windows": WindowPlan(window_s=2.0, warmup_s=RAMP_S, percentile=99),
}


def _range(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    model, instances, max_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    concurrency, repeats = int(sys.argv[4]), int(sys.argv[5])
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        _tools.example_variant(model, repo, instances, max_batch)
        found: dict[str, list[Point]] = {name: [] for name in PLANS}
        with LocalLauncher().serve(repo, model, repo / "server.log") as server:
            plan = PLANS["verify 1s"]
            gen = LoadGenerator.connect(
                server.host, server.http_port, server.grpc_port, model, protocol="grpc", plan=plan
            )
            gen.with_plan(WindowPlan(window_s=1.0, warmup_s=1.0, percentile=99)).at_concurrency(concurrency)
            for i in range(repeats):
                for name, plan in PLANS.items():
                    p = gen.with_plan(plan).at_concurrency(concurrency)
                    found[name].append(p)
                    line = f"{i + 1:2d} {name:13s} {p.throughput:7.0f} infer/s  p99 {p.p99_ms:5.1f} ms"
                    print(f"{line}  {p.windows} windows", flush=True)
        batching = f"max batch {max_batch}, batching" if max_batch else "no batching"
        print(f"\n{model} {instances} instances, {batching}, {concurrency} clients, {repeats} each")
        print(f"{'plan':13s} {'p99 ms: median (range)':24s} {'infer/s: median (range)':26s} windows")
        for name, points in found.items():
            p99, thr = _range([p.p99_ms for p in points]), _range([p.throughput for p in points])
            print(f"{name:13s} {p99:24s} {thr:26s} {statistics.median(p.windows for p in points):.0f}")


if __name__ == "__main__":
    main()
