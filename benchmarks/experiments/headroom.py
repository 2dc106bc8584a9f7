"""How much latency headroom a winner needs to keep meeting the SLA when re-measured.

For every autotune run of the given ``vs_model_analyzer`` result files whose run folder still
exists (``--work`` or ``--keep-work`` keeps them): the winner's p99 while searching and in its
verification repeats, as fractions of the SLA, beside what perf_analyzer measured at the same
operating point in the benchmark's re-measurements (median p99, repeats that met the SLA).
Sorted by the search p99, so the line where re-measurements start to break the SLA shows.

    python benchmarks/experiments/headroom.py benchmarks/results/vs_model_analyzer-2026112*.json

The last lines count the winners re-measured 10 times by their slowest verification repeat's
band (a fraction of the SLA), and how many of each met perf_analyzer's SLA fewer than 9 times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from autotune.reload import reload_outcome


def rows(result_files: list[Path]) -> list[tuple[float, str, float, int, int]]:
    out = []
    for path in result_files:
        data = json.loads(path.read_text(encoding="utf-8"))
        for model in data["results"]:
            sla = float(model["sla_p99_ms"])
            remeasured = {r["tool"]: r for r in model["remeasured"]}
            for run in model["runs"]:
                run_dir = Path((run.get("details") or {}).get("run_dir", "/nonexistent"))
                pa = remeasured.get(run["tool"])
                if not run["tool"].startswith("autotune") or pa is None or not run_dir.exists():
                    continue
                outcome = reload_outcome(run_dir)
                if outcome.winner is None or outcome.winner.best is None:
                    continue
                verified = [v for v in outcome.info.verifications if v.trial == outcome.winner.number]
                ours = [p.p99_ms / sla for v in verified for p in v.points]
                pa_p99 = [p["p99_ms"] for p in pa["points"]]
                search = outcome.winner.best.p99_ms / sla
                met = sum(x <= sla for x in pa_p99)
                line = (
                    f"{path.stem[-13:]} {model['model']:6} {run['tool']:11} c{pa['concurrency']:<3d}"
                    f" search {search:.2f}  verified {' '.join(f'{x:.2f}' for x in ours) or '-':16}"
                    f"  perf_analyzer median {statistics.median(pa_p99) / sla:.2f}, met {met}/{len(pa_p99)}"
                )
                out.append((search, line, max(ours, default=0.0), met, len(pa_p99)))
    return sorted(out, key=lambda row: row[0])


BANDS = ((0.0, 0.8), (0.8, 0.9), (0.9, 1.0))  # the slowest verification repeat, as a fraction of the SLA


def by_band(found: list[tuple[float, str, float, int, int]]) -> list[str]:
    """Winners re-measured 10 times, by their slowest verification repeat's band: how many met
    perf_analyzer's SLA fewer than 9 times."""
    lines = []
    for lo, hi in BANDS:
        band = [r for r in found if lo < r[2] <= hi and r[4] == 10]
        missed = sum(r[3] < 9 for r in band)
        lines.append(
            f"slowest repeat in ({lo:.1f}, {hi:.1f}] of the SLA: {len(band)} winners, {missed} met it < 9/10"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", type=Path, help="vs_model_analyzer-*.json")
    args = parser.parse_args(argv)
    print(
        "p99 as a fraction of the SLA: the winner's search point, its verification repeats, "
        "and perf_analyzer's re-measurements"
    )
    found = rows(args.results)
    for row in found:
        print(row[1])
    print("\n".join(["", *by_band(found)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
