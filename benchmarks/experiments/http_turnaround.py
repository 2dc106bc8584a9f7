"""Does the moment our HTTP client sends its next request change the batches the server forms?

    .venv/bin/python benchmarks/experiments/http_turnaround.py            # noop and bertQA, c=16 (~10 min)
    .venv/bin/python benchmarks/experiments/http_turnaround.py --rounds 4

At concurrency 16 over HTTP the server forms batches of about 2 under our load generator and
4-6 under perf_analyzer's clients; over gRPC the batches are the same (docs/loadgen.md,
results/vs_perf_analyzer-20261122-2242-http-c16-batch.*). Here our load generator measures
noop and bertQA at c=16 over HTTP (vs_perf_analyzer's set-up: server on the first half of the
CPUs) with its request send replaced, in turn, by:

immediate   the product's send (written as soon as the answer is read)
deferred    written at the end of the event loop's iteration (all answers read first)
after-200us written 200 us after the answer (asyncio's timer: at least that)
after-1ms   written 1 ms after the answer
split       headers and body in two writes, as libcurl sends them (two segments)
split-poll  headers at once, the body at the end of the loop iteration (libcurl polls between)

and prints throughput, p50/p95, the server's average batch and queue time per request. Then
``threads``: http_arrivals.py's client with a thread and a blocking socket per connection
(12 s, the first 3 s not timed; its batch and queue figures cover the whole run). An
experiment, not a product option: the product sends at once.

The answer came later (experiments/http_threads.py): not the moment of the send, but which
of the server's HTTP threads serve the connections. Opened one after another on an idle
server, all 16 landed on one thread; the product now opens them while requests flow, and
this script's variants all inherit that (before that change, c406ad3, they ran with the
connections on one thread).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "benchmarks" / "experiments")]

import http_arrivals  # noqa: E402
import vs_perf_analyzer as bench  # noqa: E402

from autotune.loadgen import LoadGenerator, _inputs  # noqa: E402
from autotune.loadgen import _transport as transport  # noqa: E402
from autotune.settings import Workload  # noqa: E402

IMMEDIATE = transport._Http1.send


def _later(schedule: Callable[[Any, bytes], None]) -> Callable[..., None]:
    def send(self: transport._Http1, request: bytes, answer: transport.Answer) -> None:
        if self._lost is not None:
            IMMEDIATE(self, request, answer)
            return
        self._answer = answer
        schedule(self, request)

    return send


def _deferred(conn: Any, request: bytes) -> None:
    asyncio.get_running_loop().call_soon(conn.transport.write, request)


def _after(delay_s: float) -> Callable[[Any, bytes], None]:
    def schedule(conn: Any, request: bytes) -> None:
        asyncio.get_running_loop().call_later(delay_s, conn.transport.write, request)

    return schedule


def _split_poll(conn: Any, request: bytes) -> None:
    cut = request.index(b"\r\n\r\n") + 4
    conn.transport.write(request[:cut])
    asyncio.get_running_loop().call_soon(conn.transport.write, request[cut:])


SENDS: dict[str, Callable[..., None]] = {
    "immediate": IMMEDIATE,
    "deferred": _later(_deferred),
    "after-200us": _later(_after(200e-6)),
    "after-1ms": _later(_after(1e-3)),
    "split": http_arrivals.split_send,
    "split-poll": _later(_split_poll),
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every send (default 2)")
    args = parser.parse_args()
    settings = bench.settings_from(bench._parser().parse_args([]))
    server_cpus, client_cpus = bench.split_cpus(True)
    with tempfile.TemporaryDirectory(prefix="turnaround-") as tmp:
        work = Path(tmp)
        repo = bench.build_repository(work)
        with bench.serving(repo, work / "server.log", server_cpus, client_cpus) as server:
            for model in ("noop", "bertQA"):
                gen = LoadGenerator.connect(
                    server.host, server.http_port, server.grpc_port, model, protocol="http",
                    plan=settings.plan, workload=Workload(str(work / f"{model}.json")),
                )  # fmt: skip
                for round_ in range(args.rounds):
                    for name, send in SENDS.items():
                        transport._Http1.send = send  # type: ignore[method-assign]
                        try:
                            p = gen.at_concurrency(16)
                        finally:
                            transport._Http1.send = IMMEDIATE  # type: ignore[method-assign]
                        print(
                            f"{model:6} round {round_ + 1} {name:11} {p.throughput:6.0f} infer/s  "
                            f"p50 {p.p50_ms:7.2f} ms  p95 {p.p95_ms:7.2f} ms  "
                            f"batch {p.server.avg_batch:4.2f}  queue {p.server.queue_us:7.0f} us",
                            flush=True,
                        )
                    request = _inputs.http_request(gen.payloads[0], server.host)
                    rate, p50, p95, split = http_arrivals.threaded_point(server, model, request, 16)
                    print(
                        f"{model:6} round {round_ + 1} {'threads':11} {rate:6.0f} infer/s  "
                        f"p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  "
                        f"batch {split.avg_batch:4.2f}  queue {split.queue_us:7.0f} us",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
