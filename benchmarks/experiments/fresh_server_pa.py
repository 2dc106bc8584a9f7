"""perf_analyzer on one config, the way ``vs_model_analyzer.py`` re-measures a winner: a fresh
server each time, a 1 s warm-up, then 3 windows of 2 s (stability 100%), ``--repeats`` times.
Shows the spread a fresh server adds beside a long-warmed one (``client_cpu.py``).

    .venv/bin/python benchmarks/experiments/fresh_server_pa.py --model mobilenet \\
        --config WORK/mobilenet/remeasure/autotune-#4/repo/mobilenet/config.pbtxt --concurrency 10

Several ``--concurrency`` levels are measured round-robin (each repeat measures every level, each
on a fresh server), so that a drift of the machine reaches them alike.

With ``--sla-ms`` it then asks what the acceptance of issue 16 can tell about this one point
(``summary``): drawing sets of 10 of its repeats (with replacement, seeded), how often such a
set meets the SLA 9 or more times, and how often, of 6 sets (as many as the tools a model's
best known goodput is the best of: Model Analyzer and 5 autotune runs), the lowest median
throughput is at least 0.95 of the highest: how often 6 runs that all chose this very point
would pass the goodput bar against each other.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import _tools  # noqa: E402
import vs_model_analyzer as vsma  # noqa: E402

SET = 10  # re-measurements per winner in the acceptance
TOOLS = 6  # Model Analyzer brute and 5 autotune runs
DRAWS = 20000


def summary(readings: Sequence[tuple[float, float]], sla_ms: float, seed: int = 16) -> list[str]:
    """What sets of ``SET`` of these (throughput, p99 ms) readings say, drawn with replacement:
    the share that meet ``sla_ms`` at least 9 times, the spread of their median throughput, and
    the share of ``TOOLS`` such sets whose lowest median is within 0.95 of their highest."""
    rng = random.Random(seed)
    met_9 = 0
    medians = []
    for _ in range(DRAWS):
        drawn = [rng.choice(readings) for _ in range(SET)]
        met_9 += sum(p99 <= sla_ms for _, p99 in drawn) >= 9
        medians.append(statistics.median(t for t, _ in drawn))
    groups = [medians[i : i + TOOLS] for i in range(0, len(medians) - TOOLS + 1, TOOLS)]
    within = sum(min(g) >= 0.95 * max(g) for g in groups)
    q = statistics.quantiles(medians, n=20)
    thr = [t for t, _ in readings]
    p99 = [p for _, p in readings]
    return [
        f"{len(readings)} readings: throughput median {statistics.median(thr):.1f} "
        f"(min {min(thr):.1f}, max {max(thr):.1f}); p99 median {statistics.median(p99):.1f} ms "
        f"(min {min(p99):.1f}, max {max(p99):.1f}); {sum(p <= sla_ms for p in p99)} met p99 <= {sla_ms:g} ms",
        f"sets of {SET} drawn from them ({DRAWS}, seed {seed}):",
        f"  met the SLA >= 9 times: {met_9 / DRAWS:.2f} of the sets",
        f"  median throughput: 5th-95th percentile {q[0]:.1f}-{q[-1]:.1f} ({q[-1] / q[0] - 1:.0%} apart)",
        f"  of {TOOLS} sets, lowest median >= 0.95 of the highest: {within / len(groups):.2f}"
        f" of {len(groups)}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mobilenet")
    parser.add_argument("--config", type=Path, required=True, help="the config.pbtxt to serve")
    parser.add_argument("--concurrency", type=int, nargs="+", required=True)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--warmup-ms", type=int, default=1000)
    parser.add_argument("--sla-ms", type=float, default=0.0, help="p99 SLA: summarise what sets of 10 tell")
    args = parser.parse_args()
    _tools.stop_on_sigint()
    pa = _tools.ensure_perf_analyzer()
    models = _tools.example_models([args.model])
    work = Path(tempfile.mkdtemp(prefix="fresh-pa-"))
    config_text = args.config.read_text(encoding="utf-8")
    readings: dict[int, list[tuple[float, float]]] = {c: [] for c in args.concurrency}
    for repeat in range(args.repeats):
        for concurrency in args.concurrency:
            folder = work / f"c{concurrency}-repeat-{repeat}"
            point = vsma.measure_fresh(
                pa, models, args.model, config_text, concurrency, folder, 2000, 100, args.warmup_ms
            )
            if point is None:
                print(f"concurrency {concurrency}, repeat {repeat + 1}: perf_analyzer failed ({folder})")
                continue
            readings[concurrency].append((point.throughput, point.p99_ms))
            print(
                f"concurrency {concurrency}, repeat {repeat + 1}: {point.throughput:.0f} infer/s,"
                f" p99 {point.p99_ms:.1f} ms",
                flush=True,
            )
    for concurrency, found in readings.items():
        if args.sla_ms > 0 and found:
            print(f"\nconcurrency {concurrency}:")
            print("\n".join(summary(found, args.sla_ms)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
