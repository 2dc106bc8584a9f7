"""`autotune bench`: measure one running server like perf_analyzer does."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help="measure a running Triton server (like perf_analyzer)")
    bench.add_argument("--model", required=True)
    bench.add_argument("--url", default="127.0.0.1:8000", help="HOST:HTTP_PORT (default 127.0.0.1:8000)")
    bench.add_argument("--grpc-url", default="", help="HOST:GRPC_PORT (default: HTTP port + 1)")
    bench.add_argument("--protocol", choices=("http", "grpc"), default="http")
    bench.add_argument("--concurrency", default="1", help="N or START:END[:STEP] (default 1)")
    bench.add_argument("--window", type=float, default=2.0, help="window seconds (default 2)")
    bench.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from autotune.errors import UsageError
    from autotune.loadgen import LoadGenerator, WindowPlan

    host, _, port = args.url.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--url must be HOST:PORT, got {args.url!r}")
    grpc_port = int(args.grpc_url.rpartition(":")[2]) if args.grpc_url else int(port) + 1
    gen = LoadGenerator.connect(host, int(port), grpc_port, args.model, protocol=args.protocol,
                                plan=WindowPlan(window_s=args.window, warmup_s=args.window))
    for c in _levels(args.concurrency):
        p = gen.at_concurrency(c)
        print(f"concurrency {c}: {p.throughput:.1f} infer/s, avg {p.avg_ms:.2f} ms, p50 {p.p50_ms:.2f}, "
              f"p90 {p.p90_ms:.2f}, p95 {p.p95_ms:.2f}, p99 {p.p99_ms:.2f} ms")
    return 0


def _levels(text: str) -> list[int]:
    from autotune.errors import UsageError

    parts = text.split(":")
    try:
        nums = [int(p) for p in parts]
    except ValueError as exc:
        raise UsageError(f"--concurrency: expected N or START:END[:STEP], got {text!r}") from exc
    if len(nums) == 1:
        return nums
    step = nums[2] if len(nums) > 2 else 1
    return list(range(nums[0], nums[1] + 1, step))
