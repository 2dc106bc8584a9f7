"""Trials at once against one at a time (issue 79), in the simulator: no server.

Per surface, the runs of ``simulate.py`` (the same options) at each ``--at-once N``: the median
simulated wall time over N=1's, and ``good``, ``meets`` read 1.08x slower and ``users`` (see
simulate.py), each beside N=1's 95% Wilson interval (``ok``: at or above its low end).
``--phases``: where each N's wall goes, medians in simulated seconds: the trials' own time over
the workers (the wall if they packed without a gap), the search's end (its last trial told), the
race after it, and the open-loop check; and the wall ratio a check that cost nothing would give.
``--tail``: per N, the longest run and the runs over twice their surface's median wall.

    .venv/bin/python benchmarks/at_once.py --set tuning --per-family 4 --jobs 2 --warm-up warmed
    .venv/bin/python benchmarks/at_once.py --set held-out --per-family 4 --jobs 2 --warm-up warmed
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simulate import build_parser, family_seed, run_seed, run_surface, surfaces

from autotune import sim

Share = Callable[[sim.Tally], float]
SHARES: dict[str, Share] = {
    "good": lambda t: t.good,
    "meets*1.08": lambda t: t.meets_read_by(sim.READER),
    "users": lambda t: t.users_point,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(several_at_once=True)
    parser.description = __doc__
    parser.add_argument(
        "--max-trials-at-once", type=int, metavar="M",
        help="the runs of N > 1 with --max-trials M (default: --max-trials, as N=1's)",
    )  # fmt: skip
    parser.add_argument("--phases", action="store_true", help="also print where each N's wall goes")
    parser.add_argument("--tail", action="store_true", help="also print each N's longest runs")
    args = parser.parse_args(argv)
    counts = sorted(set(args.at_once) | {1})
    started = time.monotonic()
    chosen = surfaces(args)
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = {
            (s.name, n): pool.submit(run_surface, s, **options(args, n)) for s in chosen for n in counts
        }
        tallies = {key: future.result()[1] for key, future in futures.items()}
    print(header(counts))
    ratios: dict[int, list[float]] = {n: [] for n in counts}
    within: dict[tuple[int, str], int] = {}
    for s in chosen:
        alone = tallies[(s.name, 1)]
        cells = [f"{s.name:<28}"]
        for n in counts:
            tally = tallies[(s.name, n)]
            ratio = tally.median_s / alone.median_s
            ratios[n].append(ratio)
            cells.append(f"{tally.median_s:>6.0f} {ratio:>5.2f}")
            for name, share in SHARES.items():
                low = sim.wilson(share(alone), args.runs)[0]
                ok = share(tally) >= low
                within[(n, name)] = within.get((n, name), 0) + ok
                cells.append(f"{share(tally):>6.1%}{'' if ok else '!'}")
        print(" ".join(cells), flush=True)
    print(
        f"\n{len(chosen)} surfaces x {args.runs} runs x N in {counts} in {time.monotonic() - started:.0f} s "
        f"(set {args.set or 'as given'}, {args.world} world: family seed {family_seed(args)}, run seeds "
        f"{run_seed(args)}-{run_seed(args) + args.runs - 1}; '!': under N=1's 95% interval)"
    )
    for n in counts[1:]:
        shares = ", ".join(f"{name} on {within[(n, name)]}/{len(chosen)}" for name in SHARES)
        print(
            f"N={n}: wall {statistics.median(ratios[n]):.2f}x N=1's (median of the surfaces; "
            f"{min(ratios[n]):.2f}-{max(ratios[n]):.2f}); within N=1's interval: {shares}"
        )
    if args.phases:
        print(phases(chosen, counts, tallies))
    if args.tail:
        print(tail(chosen, counts, tallies))
    return 0


def phases(chosen: list[Any], counts: list[int], tallies: dict[tuple[str, int], sim.Tally]) -> str:
    """Per surface and N, medians in simulated seconds: the trials' own time over N (``work/N``),
    the search's end (``search``), the race after it (``race``), the check and the wall."""
    head = " ".join(f"{f'N={n}: work/N search race check wall':>37}" for n in counts)
    lines = [f"\n{'surface':<28} {head}"]
    for s in chosen:
        cells = [f"{s.name:<28}"]
        for n in counts:
            t = tallies[(s.name, n)]
            searched, checked = t.median(lambda j: j.searched_s), t.median(lambda j: j.checked_s)
            race = t.median(lambda j: j.sim_s - j.checked_s - j.searched_s)
            work = t.median(lambda j: j.trial_s) / n
            cells.append(f"{work:>14.1f} {searched:>6.1f} {race:>4.1f} {checked:>5.1f} {t.median_s:>4.0f}")
        lines.append(" ".join(cells))
    for n in counts[1:]:
        free = [
            (tallies[(s.name, n)].median_s - tallies[(s.name, n)].median(lambda j: j.checked_s))
            / tallies[(s.name, 1)].median_s
            for s in chosen
        ]  # fmt: skip
        lines.append(f"N={n}: with a check that cost nothing, wall {statistics.median(free):.2f}x N=1's")
    return "\n".join(lines)


def tail(chosen: list[Any], counts: list[int], tallies: dict[tuple[str, int], sim.Tally]) -> str:
    """Per N, over every surface's runs: the longest and the runs over twice their surface's
    median simulated wall."""
    lines = [""]
    for n in counts:
        walls = {s.name: [j.sim_s for j in tallies[(s.name, n)].judged] for s in chosen}
        longest = max(((w, name) for name, ws in walls.items() for w in ws), default=(0.0, "-"))
        over = sum(w > 2 * statistics.median(ws) for ws in walls.values() if ws for w in ws)
        runs = sum(map(len, walls.values()))
        lines.append(
            f"N={n}: runs {runs}, longest {longest[0]:.0f} s ({longest[1]}), "
            f"runs over twice their surface's median wall: {over}"
        )
    return "\n".join(lines)


def options(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """run_surface's options for the runs of ``n`` at once."""
    trials = args.max_trials if n == 1 or args.max_trials_at_once is None else args.max_trials_at_once
    return dict(
        runs=args.runs, max_trials=trials, repeats=args.repeats, finalists=args.finalists,
        warmup=args.warm_up, first_seed=run_seed(args), at_once=n, margin=args.margin,
    )  # fmt: skip


def header(counts: list[int]) -> str:
    """The table's header: per N, the median simulated s, its ratio to N=1, and the shares."""
    cells = [f"{'surface':<28}"]
    for n in counts:
        cells.append(f"{f'N={n} s':>6} {'x':>5}")
        cells += [f"{name[:6]:>6}" for name in SHARES]
    return " ".join(cells)


if __name__ == "__main__":
    raise SystemExit(main())
