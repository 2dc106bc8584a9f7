"""How a finalist's verification reads against its search, at the same level (no server).

    .venv/bin/python benchmarks/experiments/search_vs_verify.py RUN_DIR [RUN_DIR ...]

RUN_DIR is a run folder (``WORK/<model>/autotune*/reports/<model>/<id>``); shell globs do. For
every verification that stood on a level its search had measured (the operating point, or a
level below it that the search measured): the verification's repeats against the search's
point there, as ratios: the median and the slowest repeat's latency at the SLA's percentile,
and the median throughput. Per model, the medians of those ratios and their range, split by
whether the search's point was a single pass, then how many verifications fell back below the
search's operating point. Searches read their points from short windows that must agree
(three in a row within 10%), verifications from three repeats of windows twice as long, each
of which must keep the headroom: a search optimistic against its verification sends the
verification down a level, which costs a level of repeats and, when it lands low, goodput.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.reload import reload_outcome  # noqa: E402


def ratios(run_dir: Path) -> tuple[str, list[tuple[float, float, float, int]], int, int]:
    """(model, [(median p99, slowest p99, median throughput, search passes) as verification /
    search], verifications below their operating point, verifications)."""
    outcome = reload_outcome(run_dir)
    pct = outcome.info.sla.percentile
    trials = {r.number: r for r in outcome.trials}
    found, fell, total = [], 0, 0
    for v in outcome.info.verifications:
        trial = trials.get(v.trial)
        if trial is None or trial.measurement is None or trial.best is None or not v.points:
            continue
        total += 1
        fell += v.level < trial.best.level
        at = [p for p in trial.measurement.points if p.level == v.level]
        if not at or at[0].latency_ms(pct) <= 0 or at[0].throughput <= 0:
            continue
        search = at[0]
        lat = [p.latency_ms(pct) for p in v.points]
        thr = statistics.median(p.throughput for p in v.points)
        found.append(
            (
                statistics.median(lat) / search.latency_ms(pct),
                max(lat) / search.latency_ms(pct),
                thr / search.throughput,
                search.passes,
            )
        )
    return outcome.info.model, found, fell, total


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args()
    per_model: dict[str, list[tuple[float, float, float, int]]] = defaultdict(list)
    fell: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for run_dir in args.run_dirs:
        model, found, down, total = ratios(run_dir)
        per_model[model].extend(found)
        fell[model][0] += down
        fell[model][1] += total
    print("verification / search at the same level: median (range)")
    head = f"{'model':12s} {'n':>3s}  {'median p99':18s} {'slowest p99':18s} {'throughput':18s}"
    print(f"{head} single-pass p99  fell back")
    for model, rows in sorted(per_model.items()):
        single = [r[0] for r in rows if r[3] == 1]
        med, slowest, thr = (_spread([r[i] for r in rows]) for i in range(3))
        print(
            f"{model:12s} {len(rows):3d}  {med:18s} {slowest:18s} {thr:18s} {_spread(single):16s}"
            f" {fell[model][0]}/{fell[model][1]}"
        )


if __name__ == "__main__":
    main()
