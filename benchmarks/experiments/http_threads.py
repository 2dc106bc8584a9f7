"""Which of the server's HTTP threads serve our connections, and what it does to its batches.

    .venv/bin/python benchmarks/experiments/http_threads.py            # noop, c=16, 2 rounds (~3 min)
    .venv/bin/python benchmarks/experiments/http_threads.py --strace   # also count connections per thread

Triton's HTTP server (libevhtp) hands each new connection to the first of its HTTP threads
with no work pending. Connections opened one after another on an idle server therefore
all land on one thread, which then reads and answers every request; at saturation the
batcher gets requests one or two at a time. This measures noop at concurrency 16 over
HTTP (vs_perf_analyzer's set-up: the server on the first half of the CPUs) with:

idle-open   the connections opened first, then every slot sends (the product before this
            experiment)
busy-open   each slot sends as soon as its connection is open, so later connections open
            while requests flow (the product now)
threads     http_arrivals.py's client: a thread and a blocking socket per connection, each
            connecting on its own, as perf_analyzer's threads do

For each: throughput, p50/p95, the server's average batch, and the CPU time (clock ticks)
of each of the server's busy threads, busiest first; the HTTP threads are the ones that
multiply. With ``--strace``, 1 s of strace on the server during each run counts the
connections whose requests each thread read (needs strace and ptrace rights).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

import http_arrivals  # noqa: E402
import vs_perf_analyzer as bench  # noqa: E402

from autotune.loadgen import LoadGenerator, _inputs, _load  # noqa: E402
from autotune.settings import Workload  # noqa: E402

BUSY_OPEN = _load.Load.prepare, _load.Load.start


async def _idle_prepare(self: _load.Load, job: _load.Job) -> None:
    for _ in range(job.concurrency):
        self._slots.append(_load._Slot(self, await self._open()))


def _idle_start(self: _load.Load, job: _load.Job, start_ns: int) -> None:
    self.running = True
    self.recorder = _load.Recorder()
    for slot in self._slots:
        slot.resume()


def _thread_ticks(pid: int) -> dict[str, int]:
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


def _busiest(before: dict[str, int], after: dict[str, int]) -> list[int]:
    spent = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
    return [n for n in spent if n > 0]


def _strace_later(pid: int, delay_s: float, out: list[str]) -> threading.Thread:
    """After ``delay_s``, 1 s of strace on the server: connections read per thread, appended to out."""

    def run() -> None:
        time.sleep(delay_s)
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as log:
            subprocess.run(
                ["timeout", "-s", "INT", "1", "strace", "-f", "-qq", "-p", str(pid), "-e", "trace=readv",
                 "-o", log.name],
                stderr=subprocess.DEVNULL, check=False,
            )  # fmt: skip
            fds: dict[str, set[str]] = collections.defaultdict(set)
            for line in log:
                match = re.match(r"(\d+)\s+readv\((\d+),", line)
                if match:
                    fds[match[1]].add(match[2])
        out.append(str(sorted((len(f) for f in fds.values()), reverse=True)))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every client (default 2)")
    parser.add_argument(
        "--strace", action="store_true", help="count connections per server thread with strace"
    )
    args = parser.parse_args()
    if args.strace and not shutil.which("strace"):
        parser.error("--strace needs strace on PATH")
    settings = bench.settings_from(bench._parser().parse_args([]))
    server_cpus, client_cpus = bench.split_cpus(True)
    print(f"# {' '.join(sys.argv)}  ({time.strftime('%Y-%m-%d %H:%M')}, load average "
          f"{os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="http-threads-") as tmp:
        work = Path(tmp)
        repo = bench.build_repository(work)
        with bench.serving(repo, work / "server.log", server_cpus, client_cpus) as server:
            pid = int(re.search(r"pid (\d+)", server.description)[1])  # type: ignore[index]
            gen = LoadGenerator.connect(
                server.host, server.http_port, server.grpc_port, "noop", protocol="http",
                plan=settings.plan, workload=Workload(str(work / "noop.json")),
            )  # fmt: skip
            request = _inputs.http_request(gen.payloads[0], server.host)
            for round_ in range(args.rounds):
                for name in ("idle-open", "busy-open", "threads"):
                    traced: list[str] = []
                    tracer = _strace_later(pid, 3.0, traced) if args.strace else None
                    ticks = _thread_ticks(pid)
                    if name == "threads":
                        rate, p50, p95, split = http_arrivals.threaded_point(server, "noop", request, 16)
                        batch = split.avg_batch
                    else:
                        if name == "idle-open":
                            _load.Load.prepare, _load.Load.start = _idle_prepare, _idle_start  # type: ignore[method-assign]
                        try:
                            point = gen.at_concurrency(16)
                        finally:
                            _load.Load.prepare, _load.Load.start = BUSY_OPEN  # type: ignore[method-assign]
                        rate, p50, p95 = point.throughput, point.p50_ms, point.p95_ms
                        batch = point.server.avg_batch
                    busiest = _busiest(ticks, _thread_ticks(pid))
                    if tracer is not None:
                        tracer.join()
                    line = (
                        f"round {round_ + 1} {name:9} {rate:6.0f} infer/s  p50 {p50:5.2f} ms  "
                        f"p95 {p95:5.2f} ms  batch {batch:4.2f}  server thread ticks {busiest[:8]}"
                    )
                    if args.strace:
                        line += f"  connections read per thread {traced[0] if traced else '?'}"
                    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
