"""How many measurement windows a run's points took past the three that a stable pass needs,
and how many of them went to points whose latency lay outside the search's close-call band
(0.9x to 1.1x the SLA less the margin): the windows ``measure.verdict_bands`` would spare, at
most (a point is judged on its merged figures here, not window by window). No server.

    .venv/bin/python benchmarks/experiments/window_bands.py WORK/<model>/autotune*/reports/<model>/*

Verification repeats count twice: their windows are twice as long.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.measure import CLOSE  # noqa: E402
from autotune.points import Point  # noqa: E402
from autotune.reload import reload_outcome  # noqa: E402
from autotune.settings import RunSettings  # noqa: E402

DEFAULT_MARGIN = {f.name: f.default for f in dataclasses.fields(RunSettings)}["margin"]


def extra_windows(points: list[tuple[Point, int]], low: float, high: float) -> tuple[int, int]:
    """(in the band, outside it): windows past 3 a pass, each counted ``weight`` times."""
    inside = outside = 0
    for point, weight in points:
        extra = max(0, point.windows - 3 * point.passes) * weight
        if low <= point.p99_ms <= high:
            inside += extra
        else:
            outside += extra
    return inside, outside


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (reports/<model>/<run-id>)")
    parser.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help=f"the runs' --margin (default: autotune's, {DEFAULT_MARGIN:g})",
    )
    args = parser.parse_args()
    inside = outside = 0
    for run_dir in args.runs:
        outcome = reload_outcome(run_dir)
        limit = outcome.info.sla.tightened(args.margin).limit_ms
        points = [
            (p, 1)
            for t in outcome.trials
            if t.reused_from is None and t.measurement
            for p in t.measurement.points
        ]
        points += [(p, 2) for v in outcome.info.verifications for p in v.points]
        i, o = extra_windows(points, (1 - CLOSE) * limit, (1 + CLOSE) * limit)
        print(f"{run_dir}: {i + o} windows past the third ({i} in the band, {o} outside)")
        inside, outside = inside + i, outside + o
    print(f"all: {inside + outside} windows past the third, {inside} in the band, {outside} outside")
    return 0


if __name__ == "__main__":
    sys.exit(main())
