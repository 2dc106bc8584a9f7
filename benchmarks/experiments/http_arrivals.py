"""Why our HTTP figures differ from perf_analyzer's at saturation (docs/loadgen.md).

    .venv/bin/python benchmarks/experiments/http_arrivals.py fairness   # bertQA, c=16 (~2 min)
    .venv/bin/python benchmarks/experiments/http_arrivals.py nobatch    # noop without batching (~3 min)

Both use vs_perf_analyzer's set-up: a tritonserver on the first half of the CPUs, the
clients on the other half.

fairness  bertQA (2 instances, dynamic batching) at concurrency 16, three clients in turn
          for 9 s each, 3 rounds: our load generator's HTTP connections (asyncio), the
          same requests split into headers and body as libcurl sends them, and a thread
          per connection with blocking sockets. Prints p50/p95 and the completions per
          connection (how evenly the server served the 16 connections).
nobatch   noop without dynamic_batching, concurrency 1, 4 and 16, 2 rounds: perf_analyzer
          and our load generator in turn, over HTTP.

``asyncio_client`` opens its connections one after another before sending, so the server
puts them all on one of its HTTP threads (experiments/http_threads.py), where the threaded
client's connections, opened at the same time by 16 threads, spread; its comparisons have
that difference in them too.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402
import vs_perf_analyzer as bench  # noqa: E402

from autotune.launch import Server  # noqa: E402
from autotune.loadgen import LoadGenerator, _inputs  # noqa: E402
from autotune.loadgen import _transport as transport  # noqa: E402
from autotune.loadgen._stats import breakdown  # noqa: E402
from autotune.points import ServerBreakdown, WindowPlan  # noqa: E402
from autotune.settings import Workload  # noqa: E402

RUN_S, WARMUP_S = 12.0, 3.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def show(name: str, latencies: list[float], per_connection: list[int]) -> None:
    print(
        f"{name:9} n={len(latencies)} p50={percentile(latencies, 0.5):.1f} ms "
        f"p95={percentile(latencies, 0.95):.1f} ms per-connection={sorted(per_connection)}",
        flush=True,
    )


Result = tuple[list[float], list[int]]  # latencies (ms), completions per connection


async def asyncio_client(host: str, port: int, request: bytes, concurrency: int) -> Result:
    conns = [await transport.HttpConnection.open(host, port, request) for _ in range(concurrency)]
    latencies: list[float] = []
    per = [0] * concurrency
    start = time.monotonic()
    warm, stop = start + WARMUP_S, start + RUN_S
    finished = asyncio.Event()
    active = [concurrency]

    def go(i: int) -> None:
        sent = time.monotonic()

        def answered(error: transport.InferError | None) -> None:
            now = time.monotonic()
            if error is not None:
                raise error
            if now > warm:
                latencies.append((now - sent) * 1000)
                per[i] += 1
            if now < stop:
                go(i)
                return
            active[0] -= 1
            if not active[0]:
                finished.set()

        conns[i].send(answered)

    for i in range(concurrency):
        go(i)
    await finished.wait()
    for conn in conns:
        await conn.close()
    return latencies, per


def split_send(self: transport._Http1, request: bytes, answer: transport.Answer) -> None:
    """libcurl's way: headers, then body, in two writes."""
    self._answer = answer
    cut = request.index(b"\r\n\r\n") + 4
    assert self.transport is not None
    self.transport.write(request[:cut])
    self.transport.write(request[cut:])


def threaded_client(host: str, port: int, request: bytes, concurrency: int) -> Result:
    latencies: list[float] = []
    per = [0] * concurrency
    lock = threading.Lock()
    start = time.monotonic()
    warm, stop = start + WARMUP_S, start + RUN_S

    def run(i: int) -> None:
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mine: list[float] = []
        while True:
            sent = time.monotonic()
            sock.sendall(request)
            buffer = b""
            while transport._parse_response(buffer) is None:
                buffer += sock.recv(65536)
            now = time.monotonic()
            if now > warm:
                mine.append((now - sent) * 1000)
            if now >= stop:
                break
        sock.close()
        with lock:
            latencies.extend(mine)
            per[i] = len(mine)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, per


def threaded_point(
    server: Server, model: str, request: bytes, concurrency: int
) -> tuple[float, float, float, ServerBreakdown]:
    """A :func:`threaded_client` run: infer/s and p50/p95 ms over its timed part, and the
    server's breakdown (average batch, queue, ...) over the whole run."""
    before = bench._snapshot(server, model)
    latencies, _ = threaded_client(server.host, server.http_port, request, concurrency)
    split = breakdown(before, bench._snapshot(server, model))
    rate = len(latencies) / (RUN_S - WARMUP_S)
    return rate, percentile(latencies, 0.5), percentile(latencies, 0.95), split


def fairness(root: Path) -> None:
    repo = bench.build_repository(root)
    server_cpus, client_cpus = bench.split_cpus(True)
    with bench.serving(repo, root / "server.log", server_cpus, client_cpus) as server:
        gen = LoadGenerator.connect(
            server.host,
            server.http_port,
            server.grpc_port,
            "bertQA",
            protocol="http",
            workload=Workload(str(root / "bertQA.json")),
        )
        request = _inputs.http_request(gen.payloads[0], server.host)
        original = transport._Http1.send
        clients: list[tuple[str, Callable[[], Result]]] = [
            ("ours", lambda: asyncio.run(asyncio_client(server.host, server.http_port, request, 16))),
            ("split", lambda: asyncio.run(asyncio_client(server.host, server.http_port, request, 16))),
            ("threads", lambda: threaded_client(server.host, server.http_port, request, 16)),
        ]
        for _ in range(3):
            for name, client in clients:
                transport._Http1.send = split_send if name == "split" else original  # type: ignore[method-assign]
                try:
                    show(name, *client())
                finally:
                    transport._Http1.send = original  # type: ignore[method-assign]


def nobatch(root: Path) -> None:
    bench.NOOP_CONFIG = bench.NOOP_CONFIG.replace("dynamic_batching { }\n", "")
    repo = bench.build_repository(root)
    pa = _tools.ensure_perf_analyzer()
    server_cpus, client_cpus = bench.split_cpus(True)
    data = root / "noop.json"
    with bench.serving(repo, root / "server.log", server_cpus, client_cpus) as server:
        plan = WindowPlan(window_s=2, warmup_s=2, tolerance=0.1, max_windows=10, percentile=95)
        gen = LoadGenerator.connect(
            server.host,
            server.http_port,
            server.grpc_port,
            "noop",
            protocol="http",
            plan=plan,
            workload=Workload(str(data)),
        )
        for _ in range(2):
            for level in (1, 4, 16):
                out = subprocess.run(
                    [
                        str(pa.binary),
                        "-m",
                        "noop",
                        "-u",
                        server.http_url,
                        "-i",
                        "http",
                        f"--concurrency-range={level}",
                        "--measurement-interval=2000",
                        "--percentile=95",
                        f"--input-data={data}",
                    ],
                    env=pa.env(),
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout

                def field(name: str, text: str = out) -> float:
                    found = re.search(name + r": ([0-9.]+)", text)
                    return float(found.group(1)) if found else float("nan")

                point = gen.at_concurrency(level)
                print(
                    f"c={level:<2} perf_analyzer {field('Throughput'):7.0f}/s p50 "
                    f"{field('p50 latency') / 1000:.3f} p95 {field('p95 latency') / 1000:.3f} ms | "
                    f"ours {point.throughput:7.0f}/s p50 {point.p50_ms:.3f} p95 {point.p95_ms:.3f} ms",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("part", choices=("fairness", "nobatch"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (fairness if args.part == "fairness" else nobatch)(Path(tmp))


if __name__ == "__main__":
    main()
