"""Draw one tuning run's decisions as an SVG: every point it measured, in order, and the race.

    python scripts/search_picture.py RUN_DIR docs/search-run.svg

Each measured point is a dot at its concurrency (x) and throughput (y), with its interval's
whiskers where its windows were recorded: green where it met the SLA, red where it broke it,
amber where it stayed undecided; the points of one trial are joined in the order the search
measured them; each race round of a finalist is a diamond. A plain SVG, no libraries.
"""

from __future__ import annotations

import sys
from html import escape
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.noise import breaks
from autotune.points import Point
from autotune.reload import reload_outcome
from autotune.rundir import RunDir

WIDTH, HEIGHT, PAD = 760, 420, 56
COLOURS = {"meets": "#15803d", "breaks": "#b91c1c", "undecided": "#d97706"}


def verdict(point: Point, limit_ms: float, percentile: int) -> str:
    if point.errors == 0 and point.latency_bound(percentile) <= limit_ms:
        return "meets"
    estimate = point.latency_estimate(percentile)
    return "breaks" if point.errors or breaks(estimate, limit_ms) or not estimate.n else "undecided"


def draw(run_dir: Path) -> str:
    outcome = reload_outcome(run_dir)
    sla = outcome.info.sla
    limit = sla.tightened(RunDir.load(run_dir).record.options.margin).limit_ms
    trials = [t for t in outcome.trials if t.measurement is not None]
    points = [p for t in trials for p in t.measurement.points]  # type: ignore[union-attr]
    rounds = [(v, p) for v in outcome.info.verifications for p in v.points]
    every = points + [p for _, p in rounds]
    if not every:
        raise SystemExit(f"{run_dir}: no point measured")
    top_x = max(p.level for p in every) * 1.05
    top_y = max(p.throughput_estimate().high if p.window_throughputs else p.throughput for p in every) * 1.1

    def x(level: float) -> float:
        return PAD + (WIDTH - 2 * PAD) * level / top_x

    def y(value: float) -> float:
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * max(value, 0.0) / top_y

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
        'font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>',
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 16}" text-anchor="middle">concurrency</text>',
        f'<text x="16" y="{HEIGHT / 2}" transform="rotate(-90 16 {HEIGHT / 2})" text-anchor="middle">'
        "throughput (infer/s)</text>",
        f'<text x="{PAD}" y="20">{escape(outcome.info.model)}: {len(trials)} configs measured, '
        f"{len(points)} points, {len(rounds)} race rounds; p{sla.percentile} limit {limit:.3g} ms "
        "(SLA less the margin)</text>",
    ]
    for frac in (0.25, 0.5, 0.75, 1.0):
        value = top_y / 1.1 * frac
        out.append(f'<text x="{PAD - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.0f}</text>')
    for level in sorted({int(p.level) for p in every}):
        out.append(f'<text x="{x(level):.1f}" y="{HEIGHT - PAD + 14}" text-anchor="middle">{level}</text>')
    for trial in trials:
        assert trial.measurement is not None
        path = " ".join(f"{x(p.level):.1f},{y(p.throughput):.1f}" for p in trial.measurement.points)
        out.append(f'<polyline points="{path}" fill="none" stroke="#cbd5e1" stroke-width="1"/>')
    for point in points:
        colour = COLOURS[verdict(point, limit, sla.percentile)]
        cx, cy = x(point.level), y(point.throughput)
        if point.window_throughputs:
            estimate = point.throughput_estimate()
            out.append(
                f'<line x1="{cx:.1f}" y1="{y(estimate.low):.1f}" x2="{cx:.1f}" y2="{y(estimate.high):.1f}" '
                f'stroke="{colour}" stroke-width="1"/>'
            )
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{colour}" fill-opacity="0.8"/>')
    for v, point in rounds:
        cx, cy = x(point.level), y(point.throughput)
        colour = COLOURS[verdict(point, limit, sla.percentile)]
        winner = v.trial == outcome.info.winner
        out.append(
            f'<path d="M{cx:.1f},{cy - 6:.1f} L{cx + 6:.1f},{cy:.1f} L{cx:.1f},{cy + 6:.1f} '
            f'L{cx - 6:.1f},{cy:.1f} Z" '
            f'fill="none" stroke="{"#111" if winner else colour}" stroke-width="{2 if winner else 1}"/>'
        )
    legend = [("meets the SLA", "meets"), ("breaks it", "breaks"), ("undecided", "undecided")]
    for i, (text, key) in enumerate(legend):
        out.append(f'<circle cx="{WIDTH - 170}" cy="{PAD + 14 * i}" r="4" fill="{COLOURS[key]}"/>')
        out.append(f'<text x="{WIDTH - 160}" y="{PAD + 4 + 14 * i}">{text}</text>')
    out.append(f'<text x="{WIDTH - 160}" y="{PAD + 46}">◇ a race round (bold: the winner)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    Path(args[1]).write_text(draw(Path(args[0])), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
