"""Where a run's search windows went, from run folders alone (no server).

    .venv/bin/python benchmarks/experiments/pass_windows.py RUN_DIR [RUN_DIR ...]

For every trial measured (not reused), each point's windows past the third of each of its passes
(a pass settles on three windows at best: ``WindowPlan.stable_windows``), split between points
measured in one pass and points measured in more (close calls and low readings, which the median
of their passes decides: :data:`autotune.measure.PASS_WINDOWS`), in seconds of windows at the
run's screening window (``--window``, 0.5 s unless given). Per run, then the median of the runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.reload import reload_outcome  # noqa: E402

STABLE = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--window", type=float, default=0.5)
    args = parser.parse_args()
    rows = []
    for run_dir in args.run_dirs:
        outcome = reload_outcome(run_dir)
        single = repeated = every = 0
        for r in outcome.trials:
            if r.measurement is None or r.reused_from is not None:
                continue
            for p in r.measurement.points:
                every += p.windows
                if p.passes > 1:
                    repeated += p.windows - STABLE * p.passes
                else:
                    single += p.windows - STABLE
        row = (single * args.window, repeated * args.window, every * args.window)
        rows.append(row)
        print(f"{run_dir}: past the 3rd: single {row[0]:.1f} s, repeated {row[1]:.1f} s; all {row[2]:.0f} s")
    if len(rows) > 1:
        med = [statistics.median(r[i] for r in rows) for i in range(3)]
        print(f"median, {len(rows)} runs: single {med[0]:.1f} s, repeated {med[1]:.1f} s, all {med[2]:.1f} s")


if __name__ == "__main__":
    main()
