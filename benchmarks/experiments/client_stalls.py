"""How much of our p99 is our own client waiting for a core?

    .venv/bin/python benchmarks/experiments/client_stalls.py MODEL INSTANCES MAX_BATCH CONCURRENCY REPEATS

Our load generator is one thread: an asyncio loop that reads every answer. On two shared cores
under a busy server, that thread is sometimes runnable and not running for tens of
milliseconds (its run-queue wait, /proc/self/task/TID/schedstat), and every answer in flight
waits with it: at C clients one such stall delays C requests at once, about 1% of a window's
requests at the embedder's 1100 infer/s and 30 clients, which is what a p99 counts.
perf_analyzer reads each answer on a thread of its own, so one thread's wait delays one request.

This serves the example model with INSTANCES instances and dynamic batching at MAX_BATCH (0: the
example's own batching) on one warm server and measures CONCURRENCY clients REPEATS times with
ours and with perf_analyzer (gRPC, as the benchmark re-measures), interleaved, three 2 s windows
each. While ours measures, a watcher task wakes every 5 ms and notes each time it woke over
15 ms late (a stall) with the thread's run-queue wait over that time. Prints per repeat: our p99,
our p99 without the requests answered in the loop's first 5 ms after a stall (those a stall
delayed), the stalls (count, longest, run-queue share of their time) and perf_analyzer's p99;
then the medians and ranges.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402
from vs_model_analyzer import perf_analyzer  # noqa: E402

from autotune.launch.local import LocalLauncher  # noqa: E402
from autotune.loadgen import LoadGenerator, _load  # noqa: E402
from autotune.points import WindowPlan  # noqa: E402

PLAN = WindowPlan(window_s=2.0, warmup_s=0.3, percentile=99, tolerance=1e9)  # three 2 s windows, as taken
TICK_S, LATE_NS, AFTER_NS = 0.005, 15_000_000, 5_000_000

answers: list[tuple[int, int]] = []  # (answered at, latency), ns, while ours measures
stalls: list[tuple[int, int, int]] = []  # (woke at, late by, run-queue wait), ns


def _record(answered: Any) -> Any:
    def wrapped(self: Any, error: Any) -> None:
        if self.load.running and error is None:
            now = _load.clock()
            answers.append((now, now - self.start))
        answered(self, error)

    return wrapped


def _watching(measure: Any) -> Any:
    async def wrapped(self: Any, job: Any, **kw: Any) -> Any:
        tid = threading.get_native_id()

        def waited() -> int:
            return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[1])

        async def watch() -> None:
            while True:
                w0, t0 = waited(), _load.clock()
                await asyncio.sleep(TICK_S)
                t1 = _load.clock()
                if t1 - t0 - TICK_S * 1e9 > LATE_NS:
                    stalls.append((t1, t1 - t0, waited() - w0))

        task = asyncio.ensure_future(watch())
        try:
            return await measure(self, job, **kw)
        finally:
            task.cancel()

    return wrapped


def _p99(values: list[int]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1e6 if ordered else 0.0


def _range(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    model, instances, max_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    concurrency, repeats = int(sys.argv[4]), int(sys.argv[5])
    _load._Conn.answered = _record(_load._Conn.answered)  # type: ignore[method-assign]
    LoadGenerator._measure = _watching(LoadGenerator._measure)  # type: ignore[method-assign]
    pa = _tools.ensure_perf_analyzer()
    found: dict[str, list[float]] = {"ours": [], "ours, stalled answers out": [], "perf_analyzer": []}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        _tools.example_variant(model, repo, instances, max_batch)
        with LocalLauncher().serve(repo, model, repo / "server.log") as server:
            gen = LoadGenerator.connect(
                server.host, server.http_port, server.grpc_port, model, protocol="grpc", plan=PLAN
            )
            gen.with_plan(WindowPlan(window_s=1.0, warmup_s=1.0, percentile=99)).at_concurrency(concurrency)
            for i in range(repeats):
                answers.clear()
                stalls.clear()
                start = time.monotonic()
                p = gen.at_concurrency(concurrency)
                span = time.monotonic() - start
                hit = [(woke, woke + AFTER_NS) for woke, _, _ in stalls]
                clean = [lat for at, lat in answers if not any(a <= at <= b for a, b in hit)]
                q = perf_analyzer(pa, model, server.grpc_port, concurrency, 2000, repo / "pa.csv", 100)
                assert q is not None, "perf_analyzer failed"
                late = sum(d for _, d, _ in stalls)
                queued = sum(w for _, _, w in stalls) / late if late else 0.0
                longest = max((d for _, d, _ in stalls), default=0) / 1e6
                found["ours"].append(p.p99_ms)
                found["ours, stalled answers out"].append(_p99(clean))
                found["perf_analyzer"].append(q.p99_ms)
                print(
                    f"{i + 1:2d} ours p99 {p.p99_ms:5.1f} ms ({p.throughput:.0f} infer/s), without"
                    f" {len(answers) - len(clean)} stalled answers {_p99(clean):5.1f};"
                    f" {len(stalls)} stalls in {span:.1f} s, longest {longest:.0f} ms,"
                    f" {queued:.0%} of their time in the run queue | perf_analyzer p99 {q.p99_ms:5.1f}"
                    f" ({q.throughput:.0f} infer/s)",
                    flush=True,
                )
    batching = f"max batch {max_batch}, batching" if max_batch else "its own batching"
    print(f"\n{model} {instances} instances, {batching}, {concurrency} clients, {repeats} each")
    for name, values in found.items():
        print(f"{name:26s} p99 ms {_range(values)}")


if __name__ == "__main__":
    main()
