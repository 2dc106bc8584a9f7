"""Which operating points the knee rule of 6609a00 moved, from run folders alone (no server).

    .venv/bin/python benchmarks/experiments/knee_replay.py RUN_DIR [RUN_DIR ...]

Before 6609a00 a config's operating point was the lowest level whose throughput was within
``measure.KNEE`` of its best under the search's SLA; since, it is the highest such level whose
latency lies below the close-call band (:func:`autotune.measure.best_point`). For every trial
measured (not reused) this prints the trials whose operating point the two rules put apart, as
``#N[d] old(throughput, latency) -> new(...)`` (``d``: dynamic batching), each judged against the
SLA its search kept (:func:`autotune.decide.headroom`, at ``--margin``, 0.10 unless given), and
the run's winner.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune import decide  # noqa: E402
from autotune.measure import KNEE, best_point  # noqa: E402
from autotune.objective import Sla  # noqa: E402
from autotune.points import Point  # noqa: E402
from autotune.reload import reload_outcome  # noqa: E402


def lowest_within_knee(points: Sequence[Point], sla: Sla) -> Point | None:
    """The rule before 6609a00."""
    feasible = [p for p in points if sla.met_by(p)]
    if not feasible:
        return None
    top = max(p.throughput for p in feasible)
    return min((p for p in feasible if p.throughput >= top * (1 - KNEE)), key=lambda p: p.level)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--margin", type=float, default=0.10)
    args = parser.parse_args()
    for run_dir in args.run_dirs:
        outcome = reload_outcome(run_dir)
        sla, moved = outcome.info.sla, []
        for r in outcome.trials:
            if r.measurement is None or r.reused_from is not None or r.candidate is None:
                continue
            searched = decide.headroom(sla, args.margin, r.candidate)
            points = r.measurement.points
            before, after = lowest_within_knee(points, searched), best_point(points, searched)
            if before is not None and after is not None and before.level != after.level:
                pct = searched.percentile
                moved.append(
                    f"#{r.number}{'d' if r.candidate.dynamic_batching else ''} "
                    f"{before.level:g}({before.throughput:.0f}, {before.latency_ms(pct):.1f})"
                    f" -> {after.level:g}({after.throughput:.0f}, {after.latency_ms(pct):.1f})"
                )
        print(f"{run_dir}  winner #{outcome.info.winner}  moved: {'; '.join(moved) or 'none'}")


if __name__ == "__main__":
    main()
