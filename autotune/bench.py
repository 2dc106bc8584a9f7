"""`autotune bench`: measure one running server like perf_analyzer does.

    autotune bench --model bertQA --concurrency 1:16:3
    autotune bench --model bertQA --protocol grpc --request-rate 50:400:50 --distribution poisson
    autotune bench --model bertQA --concurrency 64 --workers 2 --csv out.csv --json out.json
    autotune bench --model bertQA --request-intervals intervals.txt

Each level is measured to stability (windows, tolerance, max windows as perf_analyzer's
``--measurement-interval``, ``--stability-percentage``, ``--max-trials``) and reported with
the same figures: throughput, average and p50/p90/p95/p99 latency, the server's queue and
compute times per request, and the average batch. Data first (:func:`rows`), then the
renderings (table, CSV, JSON).
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import hostlock
from autotune.errors import UsageError
from autotune.points import WARNING_TEXT, Point
from autotune.settings import Workload, add_workload_arguments, workload_from_args

EPILOG = """examples:
  autotune bench --model bertQA --concurrency 1:16:3
  autotune bench --model bertQA --protocol grpc --request-rate 50:400:50 --distribution poisson
  autotune bench --model bertQA --concurrency 64 --workers 2 --csv out.csv --json out.json
  autotune bench --model bertQA --request-intervals intervals.txt

Ranges are START:END[:STEP] with an additive step, as perf_analyzer's --concurrency-range.
Open-loop latency (--request-rate) runs from each request's scheduled send time; see
docs/loadgen.md. exit codes: 0 ok, 2 bad input, 4 measurement failed."""

COLUMNS = (
    "concurrency", "request_rate", "throughput", "avg_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms",
    "server_queue_us", "server_compute_input_us", "server_compute_infer_us", "server_compute_output_us",
    "avg_batch", "send_rate", "send_late_p99_ms", "requests", "errors", "windows", "stable", "warnings",
)  # fmt: skip


def add_parser(sub: Any) -> None:
    bench = sub.add_parser(
        "bench",
        help="measure a running Triton server (like perf_analyzer)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure throughput and latency of one model on a running Triton server, "
        "level by level, closed loop (--concurrency) or open loop (--request-rate).",
    )
    bench.add_argument("--model", required=True, help="the model's name on the server")
    bench.add_argument("--url", default="127.0.0.1:8000", help="HOST:HTTP_PORT (default 127.0.0.1:8000)")
    bench.add_argument("--grpc-url", default="", help="HOST:GRPC_PORT (default: the HTTP host, port + 1)")
    bench.add_argument(
        "--protocol",
        choices=("http", "grpc"),
        default="http",
        help="http (default, as perf_analyzer) or grpc; at saturation the two can "
        "differ, see docs/loadgen.md",
    )
    level = bench.add_mutually_exclusive_group()
    level.add_argument("--concurrency", help="N or START:END[:STEP] requests in flight (default 1)")
    level.add_argument("--request-rate", help="R or START:END[:STEP] requests per second (open loop)")
    level.add_argument(
        "--request-intervals",
        type=Path,
        metavar="FILE",
        help="open loop on a recorded arrival pattern: one gap in microseconds per line, looped "
        "(perf_analyzer's format); its rate is the gaps' mean",
    )
    bench.add_argument(
        "--distribution",
        choices=("constant", "poisson"),
        default="constant",
        help="open loop: gaps between sends (default constant)",
    )
    bench.add_argument("--seed", type=int, default=0, help="open loop: seed of the Poisson schedule")
    bench.add_argument("--window", type=float, default=2.0, help="measurement window in seconds (default 2)")
    bench.add_argument("--warmup", type=float, help="seconds discarded first (default: one window)")
    bench.add_argument(
        "--stability-percentage",
        type=float,
        default=10.0,
        help="windows agree within this %% of their mean (default 10)",
    )
    bench.add_argument(
        "--max-windows", type=int, default=8, help="windows before giving up on stability (default 8)"
    )
    bench.add_argument(
        "--percentile",
        type=int,
        choices=(50, 90, 95, 99),
        default=95,
        help="latency the stability rule watches (default 95)",
    )
    bench.add_argument("--workers", type=int, default=1, help="load generator processes (default 1)")
    bench.add_argument("--csv", type=Path, help="write the levels as CSV here")
    bench.add_argument("--json", type=Path, help="write the levels as JSON here")
    bench.add_argument(
        "--wait",
        action="store_true",
        help="if another autotune command is measuring on this machine, wait for it (default: refuse)",
    )
    add_workload_arguments(bench)
    bench.set_defaults(handler=run)


@dataclass(frozen=True)
class BenchSettings:
    model: str
    host: str
    http_port: int
    grpc_port: int
    protocol: str
    mode: str  # "concurrency", "request_rate" or "request_intervals"
    levels: tuple[float, ...]  # request_intervals: the pattern's mean rate
    distribution: str
    seed: int
    workload: Workload
    intervals_us: tuple[int, ...]  # request_intervals: the gaps
    window_s: float
    warmup_s: float
    tolerance: float
    max_windows: int
    percentile: int
    workers: int
    csv: Path | None
    json: Path | None


def settings_from(args: argparse.Namespace) -> BenchSettings:
    """Check every flag before anything is measured; bad input is one UsageError."""
    host, http_port = _address(args.url, "--url")
    grpc_host, grpc_port = _address(args.grpc_url, "--grpc-url") if args.grpc_url else (host, http_port + 1)
    if grpc_host != host:
        raise UsageError("--grpc-url must name the same host as --url")
    intervals: tuple[int, ...] = ()
    levels: tuple[float, ...]
    if args.request_intervals is not None:
        from autotune.loadgen import Schedule, read_intervals

        intervals = read_intervals(args.request_intervals)
        mode, levels = "request_intervals", (Schedule.replay(intervals).rate,)
    elif args.request_rate is not None:
        mode, levels = "request_rate", _levels(args.request_rate, "--request-rate", float)
    else:
        mode, levels = "concurrency", _levels(args.concurrency or "1", "--concurrency", int)
    _positive(args.window, "--window")
    _positive(args.stability_percentage, "--stability-percentage")
    _positive(args.workers, "--workers")
    if args.max_windows < 3:
        raise UsageError(f"--max-windows must be >= 3 (stability needs 3 windows), got {args.max_windows}")
    if args.warmup is not None and args.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {args.warmup}")
    return BenchSettings(
        model=args.model, host=host, http_port=http_port, grpc_port=grpc_port, protocol=args.protocol,
        mode=mode, levels=levels, distribution=args.distribution, seed=args.seed,
        workload=workload_from_args(args), intervals_us=intervals,
        window_s=args.window, warmup_s=args.window if args.warmup is None else args.warmup,
        tolerance=args.stability_percentage / 100.0, max_windows=args.max_windows,
        percentile=args.percentile, workers=args.workers, csv=args.csv, json=args.json,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from autotune._console import for_people

    settings = settings_from(args)
    err = Console(stderr=True, highlight=False)
    with hostlock.measuring(
        "autotune bench", wait=args.wait, waiting=lambda h: err.print(hostlock.waiting(h))
    ):
        points = _measure(settings, err)
    _write_outputs(settings, points)
    out = for_people()  # a pipe or a file: the table's rows on one line each
    out.print(render_table(settings, points))
    for name in sorted({w for p in points for w in p.warnings}):
        err.print(f"[yellow]warning[/] {name}: {WARNING_TEXT.get(name, '')}")
    return 0


def _measure(settings: BenchSettings, err: Any) -> list[Point]:
    """Every level, in turn, each reported on ``err`` as it is measured."""
    from autotune.loadgen import LoadGenerator, WindowPlan

    plan = WindowPlan(
        window_s=settings.window_s,
        warmup_s=settings.warmup_s,
        tolerance=settings.tolerance,
        max_windows=settings.max_windows,
        percentile=settings.percentile,
    )
    gen = LoadGenerator.connect(
        settings.host, settings.http_port, settings.grpc_port, settings.model, protocol=settings.protocol,
        plan=plan, workload=settings.workload,
        workers=settings.workers, seed=settings.seed,
    )  # fmt: skip
    points = []
    for level in settings.levels:
        if settings.mode == "concurrency":
            point = gen.at_concurrency(int(level))
        elif settings.mode == "request_intervals":
            point = gen.at_intervals(settings.intervals_us)
        else:
            point = gen.at_rate(float(level), settings.distribution)
        err.print(_progress_line(point))
        points.append(point)
    return points


# ---------------------------------------------------------------- data


def rows(points: Sequence[Point]) -> list[dict[str, Any]]:
    """One plain record per level, in COLUMNS order (CSV, JSON and the table read these)."""
    out = []
    for p in points:
        values: dict[str, Any] = {
            "concurrency": p.concurrency, "request_rate": p.request_rate, "throughput": p.throughput,
            "avg_ms": p.avg_ms, "p50_ms": p.p50_ms, "p90_ms": p.p90_ms, "p95_ms": p.p95_ms,
            "p99_ms": p.p99_ms,
            "server_queue_us": p.server.queue_us, "server_compute_input_us": p.server.compute_input_us,
            "server_compute_infer_us": p.server.compute_infer_us,
            "server_compute_output_us": p.server.compute_output_us, "avg_batch": p.server.avg_batch,
            "send_rate": p.send_rate, "send_late_p99_ms": p.send_late_p99_ms, "requests": p.requests,
            "errors": p.errors, "windows": p.windows, "stable": p.stable, "warnings": " ".join(p.warnings),
        }  # fmt: skip
        out.append({column: values[column] for column in COLUMNS})
    return out


def write_csv(path: Path, points: Sequence[Point]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows(points))


def write_json(path: Path, settings: BenchSettings, points: Sequence[Point]) -> None:
    doc = {
        "model": settings.model, "protocol": settings.protocol, "mode": settings.mode,
        "distribution": {"request_rate": settings.distribution, "request_intervals": "intervals"}.get(
            settings.mode
        ),
        "batch_size": settings.workload.batch_size, "input_data": settings.workload.input_data,
        "shapes": settings.workload.to_json()["shapes"], "workers": settings.workers,
        "window_s": settings.window_s, "stability_percentage": settings.tolerance * 100,
        "max_windows": settings.max_windows, "percentile": settings.percentile,
        "levels": rows(points), "points": [p.to_dict() for p in points],
    }  # fmt: skip
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def _write_outputs(settings: BenchSettings, points: Sequence[Point]) -> None:
    try:
        if settings.csv is not None:
            write_csv(settings.csv, points)
        if settings.json is not None:
            write_json(settings.json, settings, points)
    except OSError as exc:
        raise UsageError(f"cannot write the results: {exc}") from exc


# ---------------------------------------------------------------- render


def render_table(settings: BenchSettings, points: Sequence[Point]) -> Any:
    from rich.table import Table

    open_loop = settings.mode != "concurrency"
    title = f"{settings.model} over {settings.protocol}, {settings.workload.label}"
    table = Table(title=title)
    headers = [
        "req/s asked" if open_loop else "concurrency",
        "infer/s",
        "avg ms",
        "p50 ms",
        "p90 ms",
        "p95 ms",
        "p99 ms",
        "queue us",
        "c.input us",
        "c.infer us",
        "c.output us",
        "avg batch",
    ]
    headers += ["sent/s", "late p99 ms"] if open_loop else []
    for header in [*headers, "warnings"]:
        table.add_column(header, justify="left" if header == "warnings" else "right")
    for row in rows(points):
        level = f"{row['request_rate']:g}" if open_loop else str(row["concurrency"])
        cells = [level, f"{row['throughput']:.1f}"]
        cells += [f"{row[k]:.2f}" for k in ("avg_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms")]
        cells += [
            f"{row[k]:.0f}"
            for k in (
                "server_queue_us",
                "server_compute_input_us",
                "server_compute_infer_us",
                "server_compute_output_us",
            )
        ]
        cells.append(f"{row['avg_batch']:.2f}")
        cells += [f"{row['send_rate']:.1f}", f"{row['send_late_p99_ms']:.2f}"] if open_loop else []
        table.add_row(*cells, row["warnings"])
    return table


def _progress_line(p: Point) -> str:
    level = f"rate {p.request_rate:g}/s" if p.request_rate else f"concurrency {p.concurrency}"
    flags = f" [yellow]({', '.join(p.warnings)})[/]" if p.warnings else ""
    return (
        f"{level}: {p.throughput:.1f} infer/s, p50 {p.p50_ms:.2f} ms, p95 {p.p95_ms:.2f} ms, "
        f"p99 {p.p99_ms:.2f} ms{flags}"
    )


# ---------------------------------------------------------------- parsing


def _address(text: str, flag: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{flag} must be HOST:PORT, got {text!r}")
    return host, int(port)


def _levels(text: str, flag: str, kind: type[int] | type[float]) -> tuple[float, ...]:
    parts = text.split(":")
    try:
        nums = [kind(p) for p in parts]
    except ValueError as exc:
        raise UsageError(f"{flag}: expected N or START:END[:STEP], got {text!r}") from exc
    if len(nums) > 3 or any(n <= 0 for n in nums):
        raise UsageError(f"{flag}: expected positive N or START:END[:STEP], got {text!r}")
    if len(nums) == 1:
        return (nums[0],)
    start, end = nums[0], nums[1]
    step = nums[2] if len(nums) == 3 else kind(1)
    if end < start:
        raise UsageError(f"{flag}: END {end:g} is below START {start:g}")
    count = int((end - start) / step + 1e-9) + 1
    if count > 1000:
        raise UsageError(f"{flag}: {count} levels is too many")
    return tuple(kind(start + i * step) for i in range(count))


def _positive(value: float, flag: str) -> None:
    if not value > 0:
        raise UsageError(f"{flag} must be > 0, got {value}")
