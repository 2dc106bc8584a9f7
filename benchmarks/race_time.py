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
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))  # the checkout it runs in, not the one it lies in

from autotune.objective import RAW
from autotune.results import Verification, gain
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
    runs = []
    for run in args.runs:
        record = json.loads((run / "run.json").read_text())
        if record.get("finished") and record.get("verifications"):
            study = Study.open(f"sqlite:///{run / 'study.db'}", record["study_name"], None, None)  # type: ignore[arg-type]
            runs.append((run, record, study))
    times(runs, args.window)
    rounds(runs)
    return 0


def times(runs: list[tuple[Path, dict[str, Any], Study]], window_s: float) -> None:
    """Each run's race and check, real against estimated."""
    ratios = []
    for run, record, study in runs:
        whole = datetime.fromisoformat(record["finished"]) - datetime.fromisoformat(record["started"])
        real = whole.total_seconds() - record["searched_s"]
        logs = [p.name for p in (run / "logs").glob("race-*.log")]
        shared = any("+" in name for name in logs)
        racers = len(study.verifications())
        rounds = len(logs) if shared else len(logs) // max(racers, 1)
        checks = CHECK_POINTS if record.get("open_loop") else 0
        estimate = walk.after_search_s(study.results(), racers, rounds, shared, checks, window_s)
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


def rounds(runs: list[tuple[Path, dict[str, Any], Study]]) -> None:
    """How much of a racer's spread from round to round its round's server shares with the other
    racers (throughput and p95), and the gain's interval compared round by round against each
    one's rounds apart. Runs recorded before points named their server are read where every racer
    has as many rounds at one level (round i is the i-th)."""
    # by figure, each run's sums of squares and their degrees of freedom: within rounds, and of
    # the rounds' means (with the racers a mean is over)
    own: dict[str, list[tuple[float, int]]] = {"throughput": [], "p95_ms": []}
    common: dict[str, list[tuple[float, int, int]]] = {"throughput": [], "p95_ms": []}
    widths = []
    for run, record, study in runs:
        named = _named(study.verifications())
        if named is None:
            continue
        stages = set.intersection(*({p.stage for p in v.points} for v in named))
        vs = [replace(v, points=tuple(p for p in v.points if p.stage in stages)) for v in named]
        if len(stages) < 2:
            continue
        for figure in own:
            dev = []
            for v in vs:
                logs = [math.log(getattr(p, figure)) for p in v.points]
                mean = statistics.fmean(logs)
                dev.append([x - mean for x in logs])
            k, n = len(dev), len(dev[0])
            means = [statistics.fmean(d[i] for d in dev) for i in range(n)]
            own[figure].append(
                (sum((d[i] - means[i]) ** 2 for d in dev for i in range(n)), (k - 1) * (n - 1))
            )
            common[figure].append((sum(m * m for m in means), n - 1, k))
        results = study.results()
        won = record["winner"]["trial"] if isinstance(record["winner"], dict) else record["winner"]
        winner = next((r for r in results if r.number == won), None)
        yours = next((r for r in results if r.baseline), None)
        apart = [replace(v, points=tuple(replace(p, stage="") for p in v.points)) for v in named]
        paired, unpaired = (gain(winner, yours, those, 95, RAW) for those in (named, apart))
        if paired and unpaired and paired.high > paired.low and unpaired.high > unpaired.low:
            width = math.log(paired.high / paired.low) / math.log(unpaired.high / unpaired.low)
            widths.append(width)
            print(
                f"{run}: gain {paired.ratio:.2f}x, round by round {paired.low:.2f}-{paired.high:.2f}x, "
                f"apart {unpaired.low:.2f}-{unpaired.high:.2f}x: {width:.2f} as wide"
            )
    for figure in own:
        if not sum(df for _, df in own[figure]):
            continue
        within = sum(ss for ss, _ in own[figure]) / sum(df for _, df in own[figure])
        of_means = sum(ss for ss, _, _ in common[figure]) / sum(df for _, df, _ in common[figure])
        shared = max(of_means - within / statistics.fmean(k for _, _, k in common[figure]), 0.0)
        print(
            f"{figure}: a round's server {math.sqrt(shared):.1%}, each racer's own {math.sqrt(within):.1%} "
            f"(sds); the server's share {shared / (shared + within):.2f}, {len(own[figure])} runs"
        )
    if widths:
        print(
            f"the gain's interval round by round: {statistics.median(widths):.2f} as wide (median, "
            f"{min(widths):.2f}-{max(widths):.2f}), {len(widths)} runs"
        )


def _named(verifications: Sequence[Verification]) -> list[Verification] | None:
    """The verifications, each point naming its round's server. Runs recorded before points named
    theirs are matched where every racer has as many rounds at one level (round i is the i-th);
    None where they cannot be."""
    vs = list(verifications)
    if not vs or not all(v.points for v in vs):
        return None
    if all(p.stage for v in vs for p in v.points):
        return vs
    if any(v.others or v.redone for v in vs) or len({len(v.points) for v in vs}) != 1:
        return None
    return [
        replace(v, points=tuple(replace(p, stage=f"round-{i}") for i, p in enumerate(v.points))) for v in vs
    ]


if __name__ == "__main__":
    raise SystemExit(main())
