"""Two surveys of one model (two evenings, say), or one survey's servers (``survey.py --server 2``):
how far each config's goodput moved, whether the best config and the shape held, and the
servers' spread, throughput and latency each its own (``results/server-spreads-20261205.txt``;
the figures of ``results/bertQA-days-20261129.txt`` before it):

    python benchmarks/compare_surveys.py benchmarks/surveys/bertQA.json.gz \\
        benchmarks/surveys/bertQA-20261129.json.gz
    python benchmarks/compare_surveys.py benchmarks/surveys/bertQA-20261129.json.gz   # its servers
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune import sim


def compare(a: sim.Surveyed, b: sim.Surveyed, names: tuple[str, str]) -> None:
    """Goodput per config of ``b`` over ``a`` (the configs both read), their bests and shapes."""
    space = sim.space_of(a)
    labels = {sim.survey_label(c): c for c in sim.candidates(space)}
    both = [label for label in labels if label in a.windows and label in b.windows]
    ga = {label: sim.true_goodput(a, labels[label], space)[0] for label in both}
    gb = {label: sim.true_goodput(b, labels[label], space)[0] for label in both}
    logs = [math.log(gb[x] / ga[x]) for x in both if ga[x] > 0 and gb[x] > 0]
    print(f"goodput {names[1]}/{names[0]} per config: median {math.exp(statistics.median(logs)):.3f}, "
          f"sd of log {statistics.stdev(logs):.3f}, n {len(logs)}")  # fmt: skip
    base = sim.baseline_of(a)
    if sim.survey_label(base) in both:
        low = min(a.windows[sim.survey_label(base)])
        print(f"your config at {low} client(s): {a.truth(base, low).throughput:.1f} and "
              f"{b.truth(base, low).throughput:.1f} infer/s")  # fmt: skip
    if len(both) < len(labels):
        return  # a sample: its best is not the surface's
    top_a, top_b = max(ga, key=ga.__getitem__), max(gb, key=gb.__getitem__)
    print(f"best {names[0]} {ga[top_a]:.1f} ({top_a}); best {names[1]} {gb[top_b]:.1f} ({top_b})")
    print(f"{names[0]}'s best in {names[1]}: {gb[top_a] / gb[top_b]:.3f}; "
          f"{names[1]}'s best in {names[0]}: {ga[top_b] / ga[top_a]:.3f}")  # fmt: skip
    good_a = {x for x in both if ga[x] >= 0.95 * ga[top_a]}
    good_b = {x for x in both if gb[x] >= 0.95 * gb[top_b]}
    print(f"configs within 0.95 of the best: {len(good_a)}, {len(good_b)}, in both {len(good_a & good_b)}")
    for n in sorted({c.instance_count for c in labels.values()}):
        mine = [x for x in both if labels[x].instance_count == n]
        print(f"  best with {n} instance(s): {max(ga[x] for x in mine) / ga[top_a]:.3f}, "
              f"{max(gb[x] for x in mine) / gb[top_b]:.3f}")  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("surveys", nargs="+", type=Path, metavar="SURVEY", help="one survey file, or two")
    args = parser.parse_args(argv)
    if len(args.surveys) > 2:
        parser.error("give one survey or two")
    missing = [p for p in args.surveys if not p.exists()]
    if missing:
        parser.error(f"{missing[0]}: no such file")
    surveys = [sim.Surveyed.load(p) for p in args.surveys]
    if len(surveys) == 2:
        a, b = (replace(s, again=()) for s in surveys)
        compare(a, b, (args.surveys[0].name.split(".")[0], args.surveys[1].name.split(".")[0]))
        spreads(replace(a, again=(b.windows,)))  # the two as two servers of one survey
        return 0
    (s,) = surveys
    for i, again in enumerate(s.again, 2):
        compare(replace(s, again=()), replace(s, windows=again, again=()), ("server 1", f"server {i}"))
    spreads(s)
    return 0


def spreads(s: sim.Surveyed) -> None:
    """How far one server reads off the truth: its throughput (``server_spread``) and its
    latency beyond what the throughput explains (``tail_spread``), each a relative sd."""

    def shown(x: float | None) -> str:
        return "- (one server)" if x is None else f"{x:.4f}"

    print(
        f"windows' CV {s.cv:.4f} (half: {s.cv / 2:.4f}); one server off the truth: throughput "
        f"{shown(s.server_spread)}, latency beyond it {shown(s.tail_spread)}"
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
