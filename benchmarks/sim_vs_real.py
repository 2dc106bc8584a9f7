"""Simulated time against real wall time (issue 81, item 5): the runs a benchmark made, and the
simulator's runs of the same settings on the model's survey.

It reads the autotune runs that ``vs_model_analyzer.py`` left in its work folder
(``WORK/<model>/autotune*/result.json`` and each one's run directory), and simulates the same
command (space, SLA, trials, finalists, repeats, margin) on ``benchmarks/surveys/<model>.json.gz``
with ``--seeds`` sampler seeds. Per model it prints the real runs' wall time, search time and
what came after it (race, open-loop check, report), each a median with its range, beside the
simulator's search time and race time, and the ratio of the medians. A model with no survey is
left out, and said.

    .venv/bin/python benchmarks/sim_vs_real.py --work WORK
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune import sim
from autotune.events import Events
from autotune.objective import Sla
from autotune.search_space import load_search_space

SURVEYS = Path(__file__).resolve().parent / "surveys"


@dataclass(frozen=True)
class Real:
    """One real run: its wall time, its search's, and its record's options."""

    wall_s: float
    searched_s: float
    trials: int
    rounds: int  # race rounds served (race-*.log)
    options: dict[str, Any]
    sla: Sla

    @property
    def after_s(self) -> float:
        """The race, the open-loop check, the report and the start-up: all but the search."""
        return self.wall_s - self.searched_s


def real_runs(work: Path, model: str) -> list[Real]:
    """The finished autotune runs of ``model`` under ``work``, in the order they ran."""
    out = []
    for result in sorted((work / model).glob("autotune*/result.json")):
        data = json.loads(result.read_text())
        if data.get("status") != "finished":
            continue
        run = Path(data["details"]["run_dir"])
        record = json.loads((run / "run.json").read_text())
        out.append(
            Real(
                wall_s=float(data["wall_s"]),
                searched_s=float(record["searched_s"]),
                trials=int(data["details"]["trials"]),
                rounds=len(list((run / "logs").glob("race-*.log"))),
                options=record["options"],
                sla=Sla.from_json(record["sla"]),
            )
        )
    return out


class _Clocked(Events):
    """Events that keep when the search ended, in simulated seconds."""

    searched_s = 0.0

    def search_ended(self, elapsed_s: float, reserve_s: float, budget_s: float | None) -> None:
        self.searched_s = elapsed_s


@dataclass(frozen=True)
class Simulated:
    sim_s: float
    searched_s: float
    trials: int


def simulated(survey: Path, real: Real, seeds: int) -> list[Simulated]:
    """``seeds`` simulated runs of ``real``'s settings on ``survey`` (its SLA, space and options)."""
    surface = sim.Surveyed.load(survey, real.sla)
    o = real.options
    space = load_search_space(Path(o["search_space"])) if o.get("search_space") else sim.space_of(surface)
    space = space.restricted(batching=True, gpu=surface.gpus > 0, tensorrt=False, gpu_count=surface.gpus)
    lacking = surface.missing(space)
    if lacking:
        raise ValueError(f"{lacking} config(s) of its space not surveyed yet")
    given = {k: o[k] for k in ("max_trials", "finalists", "repeats", "margin", "patience") if k in o}
    out = []
    for seed in range(seeds):
        events = _Clocked()
        outcome = sim.simulate(surface, seed, space=space, events=events, **given)
        out.append(Simulated(outcome.sim_s, events.searched_s, len(outcome.results)))
    return out


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):4.0f} ({min(values):.0f}-{max(values):.0f})"


def report(model: str, reals: Sequence[Real], sims: Sequence[Simulated]) -> list[str]:
    """A model's lines: the real runs, the simulated ones, and their medians' ratios."""
    rows = {
        "real": ([r.wall_s for r in reals], [r.searched_s for r in reals], [r.trials for r in reals]),
        "simulated": ([s.sim_s for s in sims], [s.searched_s for s in sims], [s.trials for s in sims]),
    }
    lines = [f"{model}: {len(reals)} real runs, {len(sims)} simulated; seconds, median (range)"]
    lines.append(f"  {'':<10} {'whole':>14} {'search':>14} {'after search':>14} {'trials':>8}")
    medians = {}
    for name, (whole, search, trials) in rows.items():
        after = [w - s for w, s in zip(whole, search, strict=True)]
        medians[name] = [statistics.median(v) for v in (whole, search, after)]
        lines.append(
            f"  {name:<10} {_median(whole):>14} {_median(search):>14} {_median(after):>14} "
            f"{statistics.median(trials):>8.0f}"
        )
    ratios = [
        s / r if r > 0 else float("nan") for s, r in zip(medians["simulated"], medians["real"], strict=True)
    ]
    lines.append(f"  {'sim/real':<10} {ratios[0]:>14.2f} {ratios[1]:>14.2f} {ratios[2]:>14.2f}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, required=True, help="vs_model_analyzer.py's --work folder")
    parser.add_argument("--models", nargs="+", default=["cnn", "bertQA", "embedder", "recommender"])
    parser.add_argument("--seeds", type=int, default=20, help="simulated runs per model (default 20)")
    args = parser.parse_args(argv)
    for model in args.models:
        reals = real_runs(args.work, model)
        survey = SURVEYS / f"{model}.json.gz"
        if not reals or not survey.exists():
            print(f"{model}: left out ({'no finished real run' if not reals else 'no survey'})")
            continue
        try:
            sims = simulated(survey, reals[0], args.seeds)
        except ValueError as exc:  # a survey that stopped part way
            print(f"{model}: left out ({exc})")
            continue
        print("\n".join(report(model, reals, sims)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
