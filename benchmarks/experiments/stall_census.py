"""Our client's stalls in tuning runs: how often they could have made a point's tail, and what
the verifications did with them.

    .venv/bin/python benchmarks/experiments/stall_census.py RUN_DIR [RUN_DIR ...]

Reads run folders (reports/<model>/<run-id>) of runs since the load generator counts its
stalls (each point's ``client_stalls`` and ``client_stall_ms``: the loop woken over 15 ms
late) and the record keeps every level a verification measured and every repeat it set aside
(``Verification.others``, ``Verification.redone``). A point's stalls "could make its tail"
when the answers they held at once (stalls x answers in flight) reach the SLA percentile's
share of its requests, as :func:`autotune.decide.client_decided` asks of a repeat over the
headroom. For each verification: every level it measured, in order, each repeat's p99 as a
fraction of the SLA with its stalls, and the repeats set aside; then per run and in all: the
search points and verification repeats whose stalls could make the tail, the repeats set aside
and how their second measurement read, and the verifications that fell back.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune import decide  # noqa: E402
from autotune.points import Point  # noqa: E402
from autotune.reload import reload_outcome  # noqa: E402

MARGIN = 0.10  # the default --margin, as the benchmark runs autotune


def census(run_dir: Path, totals: dict[str, int]) -> None:
    outcome = reload_outcome(run_dir)
    sla = outcome.info.sla
    pct = sla.percentile
    trials = {t.number: t for t in outcome.trials}
    measured = [t.measurement for t in outcome.trials if t.measurement and t.reused_from is None]
    search = [p for m in measured for p in m.points]
    made = sum(decide.stalls_could_make_tail(p, pct) for p in search)
    print(f"== {run_dir}: {len(search)} search points, {made} with stalls that could make the tail")
    totals["search"] += len(search)
    totals["search_made"] += made

    def marked(p: Point) -> str:
        star = "*" if decide.stalls_could_make_tail(p, pct) else ""
        return f"[{p.client_stalls}/{p.client_stall_ms:.0f}ms{star}]" if p.client_stalls else ""

    def repeats(points: tuple[Point, ...]) -> str:
        return " ".join(f"{p.latency_ms(pct) / sla.limit_ms:.2f}{marked(p)}" for p in points)

    for v in outcome.info.verifications:
        trial = trials.get(v.trial)
        head = decide.headroom(sla, MARGIN, trial.candidate if trial else None)
        fell = decide.fell_back(v, outcome.trials)
        print(f"  verification #{v.trial} (headroom {head.limit_ms / sla.limit_ms:.2f} of the SLA)"
              f"{', fell back' if fell else ''}:")  # fmt: skip
        for level, points in v.others:
            print(f"    at {level:g}: {repeats(points)}")
        print(f"    at {v.level:g} (stands): {repeats(v.points)}")
        for level, p in v.redone:
            print(f"    set aside at {level:g}: {repeats((p,))}")
        every = [p for _, pts in v.others for p in pts] + list(v.points)
        totals["repeats"] += len(every)
        totals["repeats_made"] += sum(decide.stalls_could_make_tail(p, pct) for p in every)
        totals["redone"] += len(v.redone)
        totals["verifications"] += 1
        totals["fell_back"] += fell


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (reports/<model>/<run-id>)")
    totals = dict.fromkeys(
        ("search", "search_made", "verifications", "fell_back", "repeats", "repeats_made", "redone"), 0
    )
    for run_dir in parser.parse_args().runs:
        census(run_dir, totals)
    print(
        f"\nin all: {totals['search_made']} of {totals['search']} search points and {totals['repeats_made']}"
        f" of {totals['repeats']} verification repeats had stalls that could make their tail (*);"
        f" {totals['redone']} repeats set aside and measured again; {totals['fell_back']} of"
        f" {totals['verifications']} verifications fell back below their search's level"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
