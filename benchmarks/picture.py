"""One simulated run's decisions as an SVG (``benchmarks/simulate.py --picture PATH``): each
trial's goodput with its interval in the order measured, marked by where it came from (your
config, a seed, a step of the walk, TPE, pruned unmeasured), the config's true goodput beside
it, the finalists' race rounds, the winner, and the surface's true best and the 0.95 bar.
Everything is relative to the surface's true best goodput under the SLA."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from autotune import sim
from autotune.results import TrialResult, Verification
from autotune.search import racing, ranking, walk
from autotune.search_space import SearchSpace

W, H = 820, 380
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 56, 60
LOW, HIGH = 0.2, 1.2  # the y axis, in goodput / the true best
COLOURS = {"your config": "#444", "seed": "#8c564b", "walk": "#1f77b4", "TPE": "#ff7f0e", "pruned": "#bbb"}


def origin(i: int, results: Sequence[TrialResult], space: SearchSpace, seeds: int) -> str:
    """Where trial ``i`` came from: the first is your config, the next ``seeds`` the seeds; a
    later one is a step of the walk when it is the first step
    :func:`autotune.search.walk.unexplored` takes from
    the trials before it, else the sampler's."""
    result = results[i]
    if result.measurement is None:
        return "pruned"
    if i == 0:
        return "your config"
    if i <= seeds:
        return "seed"
    steps = walk.unexplored(results[:i], space, n=1)[:1]
    same = result.candidate is not None and any(walk.equivalent(s, result.candidate) for s in steps)
    return "walk" if same else "TPE"


@dataclass(frozen=True)
class _Frame:
    """Where a column and a goodput ratio land on the picture."""

    step: float  # a column's width

    def x(self, col: float) -> float:
        return LEFT + (col + 0.5) * self.step

    def y(self, ratio: float) -> float:
        ratio = min(max(ratio, LOW), HIGH)
        return TOP + (HIGH - ratio) / (HIGH - LOW) * (H - TOP - BOTTOM)


def draw(surface: sim.Surface, outcome: sim.SimOutcome) -> str:
    """The SVG of ``outcome``, one run on ``surface``."""
    space = sim.space_of(surface)
    best = max(sim.true_goodput(surface, c, space)[0] for c in sim.candidates(space))
    results = sorted(outcome.results, key=lambda r: r.number)
    races = list(outcome.verifications)
    frame = _Frame((W - LEFT - RIGHT) / max(len(results) + 1 + 2 * len(races), 1))
    out = _axes(surface, outcome, frame)
    out += _trials(surface, space, results, best, frame)
    out += _races(surface, results, races, outcome.winner, best, frame)
    out += _winner(results, outcome.winner, best, frame)
    out += _legend()
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _axes(surface: sim.Surface, outcome: sim.SimOutcome, frame: _Frame) -> list[str]:
    """The title, the goodput ticks, the true best and its 0.95 line, the y axis's label."""
    y = frame.y
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
        'font-size="11">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{LEFT}" y="18" font-size="13">{escape(surface.name)}, {escape(surface.sla.label)}, '
        f"seed {outcome.seed}: {outcome.sim_s:.0f} s simulated</text>",
    ]
    for tick in (0.2, 0.4, 0.6, 0.8, 1.0, 1.2):
        out.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>'
        )
        out.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.1f}</text>')
    for ratio, label, dash in ((1.0, "true best", ""), (0.95, "0.95", "4 3")):
        out.append(
            f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(ratio):.1f}" y2="{y(ratio):.1f}" stroke="#2ca02c" '
            f'stroke-dasharray="{dash}"/>'
        )
        out.append(
            f'<text x="{W - RIGHT}" y="{y(ratio) - 3:.1f}" text-anchor="end" fill="#2ca02c">{label}</text>'
        )
    middle = (TOP + H - BOTTOM) / 2
    out.append(
        f'<text x="18" y="{middle:.0f}" transform="rotate(-90 18 {middle:.0f})" '
        'text-anchor="middle">goodput / the true best</text>'
    )
    return out


def _trials(
    surface: sim.Surface, space: SearchSpace, results: Sequence[TrialResult], best: float, frame: _Frame
) -> list[str]:
    """Each trial in the order measured: its true goodput (a ring), its measured one with its
    bounds (or an x), its number, coloured by where it came from (:func:`origin`)."""
    x, y, out = frame.x, frame.y, []
    seeds = len(walk.heuristic_seeds(space, surface.cores, sim.baseline_of(surface)))
    for col, result in enumerate(results):
        colour = COLOURS[origin(col, results, space, seeds)]
        true = sim.true_goodput(surface, result.candidate, space)[0] / best if result.candidate else 0.0
        out.append(f'<circle cx="{x(col):.1f}" cy="{y(true):.1f}" r="4" fill="none" stroke="{colour}"/>')
        found = ranking.trial_estimate(result)
        if found is not None and found.mean > 0:
            low, high = found.low / best, found.high / best
            out.append(
                f'<line x1="{x(col):.1f}" x2="{x(col):.1f}" y1="{y(high):.1f}" y2="{y(low):.1f}" '
                f'stroke="{colour}" stroke-width="2"/>'
            )
            out.append(f'<circle cx="{x(col):.1f}" cy="{y(found.mean / best):.1f}" r="3" fill="{colour}"/>')
        else:  # pruned unmeasured, or measured without a level meeting the SLA (or able to win)
            out.append(
                f'<text x="{x(col):.1f}" y="{y(LOW) - 3:.1f}" text-anchor="middle" fill="{colour}">x</text>'
            )
        out.append(f'<text x="{x(col):.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">{col}</text>')
    out.append(
        f'<text x="{x((len(results) - 1) / 2):.1f}" y="{H - BOTTOM + 30}" text-anchor="middle">trials</text>'
    )
    return out


def _races(
    surface: sim.Surface, results: Sequence[TrialResult], races: Sequence[Verification], winner: int | None,
    best: float, frame: _Frame,
) -> list[str]:  # fmt: skip
    """Each racer's rounds, carried to the search's limit, after the trials."""
    x, y, out = frame.x, frame.y, []
    by_number = {r.number: r for r in results}
    for k, verification in enumerate(races):
        at = len(results) + 1 + 2 * k + 0.5
        carry = racing.to_limit(by_number[verification.trial], verification.limit_ms, surface.sla.percentile)
        rounds = [carry(p) / best for p in verification.points]
        for i, ratio in enumerate(rounds):
            dx = (i - (len(rounds) - 1) / 2) * min(4.0, frame.step / max(len(rounds), 1))
            out.append(f'<circle cx="{x(at) + dx:.1f}" cy="{y(ratio):.1f}" r="2.5" fill="#9467bd"/>')
        label = f"#{verification.trial}" + (" won" if verification.trial == winner else "")
        out.append(f'<text x="{x(at):.1f}" y="{H - BOTTOM + 14}" text-anchor="middle">{label}</text>')
    if races:
        middle = len(results) + len(races)
        out.append(f'<text x="{x(middle):.1f}" y="{H - BOTTOM + 30}" text-anchor="middle">race rounds</text>')
    return out


def _winner(results: Sequence[TrialResult], winner: int | None, best: float, frame: _Frame) -> list[str]:
    """A red ring around the winner's trial."""
    won_at = (
        next((i for i, r in enumerate(results) if r.number == winner), None) if winner is not None else None
    )
    found = ranking.trial_estimate(results[won_at]) if won_at is not None else None
    if won_at is None or found is None:
        return []
    return [
        f'<circle cx="{frame.x(won_at):.1f}" cy="{frame.y(found.mean / best):.1f}" r="7" fill="none" '
        'stroke="#d62728" stroke-width="2"/>'
    ]


def _legend() -> list[str]:
    """The colours, and two lines on how to read the picture."""
    out = []
    legend = [*COLOURS.items(), ("race round", "#9467bd"), ("the winner", "#d62728")]
    for i, (name, colour) in enumerate(legend):
        lx = LEFT + i * 100
        out.append(f'<circle cx="{lx + 5}" cy="{H - 12}" r="4" fill="{colour}"/>')
        out.append(f'<text x="{lx + 13}" y="{H - 8}">{escape(name)}</text>')
    notes = (
        "a trial: its measured goodput at the search's limit (the SLA less the margin) with one-sided 95% "
        "bounds across servers; x: no level met it or could win",
        "ring: the config's true goodput under the SLA; a race round: its throughput carried to the "
        "search's limit",
    )
    for i, note in enumerate(notes):
        out.append(f'<text x="{LEFT}" y="{32 + 14 * i}" fill="#555">{escape(note)}</text>')
    return out
