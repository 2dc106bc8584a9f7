"""A fingerprint of the search's decisions, to hold a change that should not move them.

48 seeded simulated runs (two synthetic families of the held-out seed, six seeds each, every other
one with a time budget), one line each: the winner, the simulated time, the trials, the race's
verifications. It reads autotune from the folder it runs in, so one copy of it reads two commits;
their outputs must be the same:

    git worktree add /tmp/before REV
    (cd /tmp/before && "$OLDPWD/.venv/bin/python" "$OLDPWD/benchmarks/sim_fingerprint.py") > before.txt
    .venv/bin/python benchmarks/sim_fingerprint.py > after.txt && cmp before.txt after.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the checkout it runs in, not the one it lies in

from autotune import sim


def main() -> int:
    for cv in (0.02, 0.1):
        for surface in sim.synthetic_family(4, cv, seed=1001, world="measured"):
            for seed in range(6):
                budget = 150 if seed % 2 else None
                o = sim.simulate(surface, seed, warmup=sim.CPU_WARMUP.warmed(), time_budget_s=budget)
                raced = [(v.trial, v.concurrency, len(v.points)) for v in o.verifications]
                print(surface.name, seed, o.winner, round(o.sim_s, 3), o.measured, len(o.results), raced)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
