"""The race's and the open-loop check's real time against what the search's end says they take.

It reads finished runs' folders (``reports/MODEL/RUN``, as ``make demo`` leaves them). A run's
real time after its search is its whole time less ``searched_s`` (the report included). The
estimate is :func:`autotune.search.walk.after_search_s` on the run's trials, given the rounds the
race really ran (its servers, from the race logs) and its racers:

    .venv/bin/python benchmarks/race_time.py reports/bertQA/*
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the checkout it runs in, not the one it lies in

from autotune.search import walk
from autotune.study import Study
from autotune.traffic import CHECK_POINTS


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path, help="finished runs' folders")
    parser.add_argument(
        "--window", type=float, default=0.5, help="the runs' --window (a first point's warm-up)"
    )
    args = parser.parse_args()
    ratios = []
    for run in args.runs:
        record = json.loads((run / "run.json").read_text())
        if not record.get("finished") or not record.get("verifications"):
            continue
        study = Study.open(f"sqlite:///{run / 'study.db'}", record["study_name"], None, None)  # type: ignore[arg-type]
        whole = datetime.fromisoformat(record["finished"]) - datetime.fromisoformat(record["started"])
        real = whole.total_seconds() - record["searched_s"]
        logs = [p.name for p in (run / "logs").glob("race-*.log")]
        shared = any("+" in name for name in logs)
        racers = len(study.verifications())
        rounds = len(logs) if shared else len(logs) // max(racers, 1)
        checks = CHECK_POINTS if record.get("open_loop") else 0
        estimate = walk.after_search_s(study.results(), racers, rounds, shared, checks, args.window)
        ratios.append(estimate / real)
        print(
            f"{run}: {rounds} rounds of {racers}, real {real:.1f} s, "
            f"estimate {estimate:.1f} s: {estimate / real:.2f}"
        )
    if ratios:
        print(
            f"estimate / real: median {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}), {len(ratios)} runs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
