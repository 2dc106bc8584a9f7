"""Replay a verification rule on recorded benchmark runs: which winners would it have sent one
level down, against what perf_analyzer re-measured there. No server; it reads results.

    .venv/bin/python benchmarks/experiments/headroom_replay.py benchmarks/results/vs_model_analyzer-*.json

For each autotune winner: its verification repeats' p99 (from the JSON's ``p99_ms``, recorded
since 2026-11-25 16:40; for older files from the run folder, while a kept ``--work`` folder has
it), whether the rule "every repeat within the search's headroom (0.9 x the SLA)" rejects the
level, where autotune today asks it of the repeats' median only (``decide.level_settled``), and
how many of perf_analyzer's repeats met the SLA there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.reload import reload_outcome  # noqa: E402

HEADROOM = 0.9  # the search's SLA: --margin 10%


def repeats_p99(run: dict[str, Any]) -> list[float] | None:
    """The winner's verification repeats' p99, from the record or else the run folder."""
    details, trial = run["details"], int(run["winner"]["source"].split()[1])
    recorded = [v for v in details.get("verifications", []) if v["trial"] == trial and "p99_ms" in v]
    if recorded:
        return sorted(recorded[0]["p99_ms"])
    if not Path(details["run_dir"]).is_dir():
        return None
    outcome = reload_outcome(Path(details["run_dir"]))
    found = [v for v in outcome.info.verifications if v.trial == trial]
    return sorted(p.p99_ms for p in found[0].points) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="vs_model_analyzer-*.json")
    args = parser.parse_args()
    rows = caught = short = false_alarms = 0
    for path in args.results:
        for model in json.loads(path.read_text(encoding="utf-8"))["results"]:
            sla = model["sla_p99_ms"]
            measured = {m["tool"]: m for m in model["remeasured"]}
            for run in model["runs"]:
                if not run["tool"].startswith("autotune") or run["winner"] is None:
                    continue
                p99 = repeats_p99(run)
                m = measured.get(run["tool"])
                if p99 is None or m is None or not m["points"]:
                    continue
                rejects = max(p99) > HEADROOM * sla
                below_nine = m["met"] * 10 < 9 * len(m["points"])  # under 9 in 10
                rows += 1
                short += below_nine
                caught += rejects and below_nine
                false_alarms += rejects and not below_nine
                level = run["winner"]["concurrency"]
                print(
                    f"{path.stem[-13:]} {model['model']:10s} {run['tool']:22s} c={level:<3d} "
                    f"verified p99 {' '.join(f'{x:.1f}' for x in p99):17s} "
                    f"{'REJECTED' if rejects else '        '} perf_analyzer p99 {m['median_p99_ms']:.1f} "
                    f"met {m['met']}/{len(m['points'])}"
                )
    print(
        f"\n{rows} winners; {short} met the SLA in fewer than 9 of 10 re-measurements; "
        f"the rule rejects {caught} of them and {false_alarms} of the others"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
