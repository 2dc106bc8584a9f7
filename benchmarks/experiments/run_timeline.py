"""Where a tuning run's wall time went, from its run folder alone (no server).

    .venv/bin/python benchmarks/experiments/run_timeline.py RUN_DIR [RUN_DIR ...]

For each trial (Optuna's start and end times, the study's points): the candidate, the levels its
search measured with their passes and windows (``8x2/8w``: two passes, 8 windows in all; a point's
``duration_s`` counts only the windows it kept), the seconds inside points, and the rest (server start and
model load, the first point's warm-up, ramps, the stop). Then the time after the last trial
(verification, open-loop check, report) from the server logs' modification times and run.json.
The last lines sum it up: configs measured, points, passes, seconds in points and outside.
Runs since the record keeps them also show the load generator's stalls (count/ms, see
autotune.loadgen._load) of each trial's points and of each verification repeat, and the levels
a verification measured besides the one it stands on.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.reload import reload_outcome  # noqa: E402


def _short(candidate: object) -> str:
    c = candidate
    if c is None:
        return "-"
    batching = f"mbs{c.max_batch_size} dyn" if c.dynamic_batching else f"mbs{c.max_batch_size} nodyn"  # type: ignore[attr-defined]
    return f"{c.instance_count}x {batching}"  # type: ignore[attr-defined]


def _repeats(points: list[dict[str, float]]) -> str:
    """A level's repeats: p99 ms each, and the client's stalls (count/ms) where the record has them."""

    def one(p: dict[str, float]) -> str:
        stalls = f"({p['client_stalls']}/{p['client_stall_ms']:.0f})" if "client_stalls" in p else ""
        return f"{p['p99_ms']:.1f}{stalls}"

    return " ".join(one(p) for p in points) + " p99 ms (stalls/ms)"


def timeline(run_dir: Path) -> dict[str, float]:
    record = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=record["study_name"], storage=f"sqlite:///{run_dir / 'study.db'}")
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    results = {r.number: r for r in reload_outcome(run_dir).trials}  # the study's, as the report reads them
    started = datetime.fromisoformat(record["started"]).replace(tzinfo=None)
    first = min(t.datetime_start for t in trials if t.datetime_start is not None)
    lead = (first - started).total_seconds()
    print(f"== {run_dir}  (run.json started {record['started']}, first trial +{lead:.1f} s)")
    totals = {"configs": 0, "points": 0, "passes": 0, "in_points_s": 0.0, "outside_s": 0.0}
    last_end = first
    for t in trials:
        r = results.get(t.number)
        if r is None or t.datetime_start is None or t.datetime_complete is None:
            continue
        wall = (t.datetime_complete - t.datetime_start).total_seconds()
        last_end = max(last_end, t.datetime_complete)
        at = (t.datetime_start - first).total_seconds()
        if r.reused_from is not None:
            print(f"  #{t.number:2d} +{at:6.1f}s  {_short(r.candidate):14s} reused #{r.reused_from}")
            continue
        points = r.measurement.points if r.measurement else ()
        inside = sum(p.duration_s for p in points)
        levels = " ".join(f"{p.level:g}{f'x{p.passes}' if p.passes > 1 else ''}/{p.windows}w" for p in points)
        best = f"{r.best.throughput:.0f}@{r.best.level:g}" if r.best else "infeasible"
        print(
            f"  #{t.number:2d} +{at:6.1f}s  {_short(r.candidate):14s} {wall:5.1f}s  points {inside:5.1f}s"
            f"  outside {wall - inside:4.1f}s  levels [{levels}]  best {best}"
            f"  client stalls {sum(p.client_stalls for p in points)}"
            f"/{sum(p.client_stall_ms for p in points):.0f}ms"
        )
        totals["configs"] += 1
        totals["points"] += len(points)
        totals["passes"] += sum(p.passes for p in points)
        totals["in_points_s"] += inside
        totals["outside_s"] += wall - inside
    for log in sorted((run_dir / "logs").glob("*.log")):
        if log.name.startswith(("verify-", "open-loop-")):
            ended = datetime.fromtimestamp(log.stat().st_mtime)
            print(f"  {log.name:20s} log last written +{(ended - first).total_seconds():6.1f}s")
    for v in record.get("verifications", []):
        for other in v.get("others", []):  # the levels it did not stand on (runs since the record kept them)
            print(f"  verifying #{v['trial']} at {other['level']:g}: {_repeats(other['points'])}")
        print(f"  verified #{v['trial']} at {v['concurrency'] or v['request_rate']}: {_repeats(v['points'])}")
    ol = record.get("open_loop")
    if ol:
        print(
            f"  open-loop check #{ol['trial']}: {len(ol['points'])} points,"
            f" {sum(p['duration_s'] for p in ol['points']):.1f}s in points"
        )
    if record.get("finished"):
        end = datetime.fromisoformat(record["finished"]).replace(tzinfo=None)
        totals["after_trials_s"] = (end - last_end).total_seconds()
        totals["before_trials_s"] = (first - started).total_seconds()
        totals["trials_s"] = (last_end - first).total_seconds()
    print("  " + "  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in totals.items()))
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (reports/<model>/<run-id>)")
    for run_dir in parser.parse_args().runs:
        timeline(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
