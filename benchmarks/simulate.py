"""The search's decisions against simulated response surfaces (autotune.sim): no server.

Per surface, ``--runs`` tuning runs (the sampler seeded 0, 1, ...) with the CLI's defaults;
per surface it prints the share of runs whose winner's true goodput is at least 0.95 of the
surface's best (``good``), the share whose recommended operating point truly meets the SLA
(``meets``), the median simulated tuning time, the median trials measured, and whether every
run's study was told only what it measured (``honest``). The acceptance of issue 42 reads
``good`` and ``meets`` (at least 95% each, up to a window CV of 10%).

    python benchmarks/simulate.py                      # the synthetic families, 200 runs each
    python benchmarks/simulate.py --runs 50 --cv 0.05  # one noise level, fewer runs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune import sim

CVS = (0.02, 0.05, 0.10, 0.15, 0.20)


def surfaces(args: argparse.Namespace) -> list[sim.Surface]:
    out: list[sim.Surface] = []
    for cv in args.cv or CVS:
        out += sim.synthetic_family(args.per_family, cv, seed=args.family_seed)
    if args.stalls:
        out += sim.synthetic_family(args.per_family, 0.05, seed=args.family_seed, stall=args.stalls)
    return out


def run_surface(surface: sim.Surface, runs: int) -> tuple[sim.Surface, sim.Tally, float]:
    space = sim.default_space()
    best = max(sim.true_goodput(surface, c, space)[0] for c in sim.candidates(space))
    tally = sim.Tally()
    for seed in range(runs):
        tally.judged.append(sim.judge(surface, space, sim.simulate(surface, seed), best))
    return surface, tally, best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200, help="tuning runs per surface (default 200)")
    parser.add_argument("--per-family", type=int, default=6, help="surfaces per noise level (default 6)")
    parser.add_argument("--cv", type=float, action="append", help="a window CV (repeatable; default 2-20%%)")
    parser.add_argument(
        "--stalls", type=float, default=0.05, help="a 5%% family with this stall rate (0: none)"
    )
    parser.add_argument("--family-seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    started = time.monotonic()
    print(
        f"{'surface':<30} {'SLA':<16} {'good':>6} {'meets':>6} {'worst':>6} {'sim s':>6} {'trials':>6} honest"
    )
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_surface, s, args.runs) for s in surfaces(args)]
        for future in futures:
            surface, tally, _ = future.result()
            rows.append((surface, tally))
            trials = statistics.median(j.trials for j in tally.judged)
            worst = min(j.ratio for j in tally.judged)
            print(
                f"{surface.name:<30} {surface.sla.label:<16} {tally.good:>6.1%} {tally.meets:>6.1%} "
                f"{worst:>6.2f} {tally.median_s:>6.0f} {trials:>6.0f} {tally.share(lambda j: j.honest):.0%}",
                flush=True,
            )
    print(f"\n{len(rows)} surfaces x {args.runs} runs in {time.monotonic() - started:.0f} s")
    for label, test in (
        ("good >= 95%", lambda t: t.good >= 0.95),
        ("meets >= 95%", lambda t: t.meets >= 0.95),
    ):
        low = [t for s, t in rows if s.cv <= 0.10]  # type: ignore[attr-defined]
        print(f"{label}: {sum(map(test, low))}/{len(low)} surfaces up to CV 10%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
