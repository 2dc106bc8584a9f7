"""Does a server stopping in the background disturb the next server's first point?

    .venv/bin/python benchmarks/experiments/stop_overlap.py MODEL INSTANCES CONCURRENCY REPEATS [MAX_BATCH]

The tuner stops each trial's server in the background (``LocalLauncher(stop_in_background=True)``)
while the next one starts: a python-backend model unloads its instances one after the other,
about 1.2 s each. This serves the example model with INSTANCES instances (and dynamic batching
at MAX_BATCH when given) on one server, stops it in the background, and measures the next
server's first point at CONCURRENCY as a trial does (1 s warm-up, 0.5 s windows, the p99 bands
of a 25 ms SLA), REPEATS times each way, interleaved: with the stop overlapping, and with it
awaited first (``launcher.drain()``). It also prints how long each stop took and how busy the
machine was meanwhile (from /proc/stat).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402

from autotune.launch.local import LocalLauncher  # noqa: E402
from autotune.loadgen import LoadGenerator  # noqa: E402
from autotune.points import Point, WindowPlan  # noqa: E402

PLAN = WindowPlan(window_s=0.5, warmup_s=1.0, percentile=99, fail_ms=37.5, clear_ms=20.25, over_ms=24.75)


def busy_s() -> float:
    """CPU seconds the whole machine has spent busy (all cores)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / 100.0


def main() -> None:
    model, instances, concurrency, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        _tools.example_variant(model, repo, instances, int(sys.argv[5]) if len(sys.argv) > 5 else 0)
        launcher = LocalLauncher(stop_in_background=True)

        def trial(log: str) -> Point:
            with launcher.serve(repo, model, repo / log) as server:
                gen = LoadGenerator.connect(
                    server.host, server.http_port, server.grpc_port, model, protocol="grpc", plan=PLAN
                )
                return gen.at_concurrency(concurrency)

        found: dict[str, list[Point]] = {"overlapping": [], "awaited": []}
        trial("prime.log")
        launcher.drain()
        for _ in range(repeats):
            for mode, points in found.items():
                trial("previous.log")
                start, busy = time.monotonic(), busy_s()
                if mode == "awaited":
                    launcher.drain()
                    took = time.monotonic() - start
                    print(f"  the stop took {took:.1f} s more, {(busy_s() - busy) / took:.2f} cores busy")
                points.append(trial("next.log"))
                p = points[-1]
                infer = f"{p.server.compute_infer_us / 1000:.1f}" if p.server else "-"
                print(f"{mode:12s} {p.throughput:6.0f} infer/s  p99 {p.p99_ms:5.1f} ms  {p.windows} windows  "
                      f"compute {infer} ms", flush=True)  # fmt: skip
        launcher.drain()
        for mode, points in found.items():
            thr = statistics.median(p.throughput for p in points)
            p99 = statistics.median(p.p99_ms for p in points)
            print(f"{mode}: median {thr:.0f} infer/s, p99 {p99:.1f} ms over {len(points)}")


if __name__ == "__main__":
    main()
