"""How the stopping rule (``--patience``, ``IMPROVEMENT``) trades configs measured for goodput.

Two parts, both from the ``trials.csv`` files that ``autotune run`` writes (no server needed):

- ``replay``: each recorded run, stopped where each patience would have stopped it: configs
  measured, seconds of trials, and the best goodput found by then.
- ``simulate``: the tuner's own search (``Study``, ``heuristic_seeds``, ``converged``) on a
  table of goodputs averaged over the recorded runs, each measurement drawn with Gaussian
  noise, many seeds: configs measured and the true goodput of the config it picks, as a
  fraction of the best in the table. Configs no run measured get their group's mean (same
  instance count and batching).

    python benchmarks/experiments/search_replay.py replay benchmarks/results/search_replay-20261122/*.csv
    python benchmarks/experiments/search_replay.py simulate --space search_spaces/model_analyzer.yaml \\
        --sla cnn=20 bertQA=50 --seeds 200 benchmarks/results/search_replay-20261122/*.csv

The simulation picks the config with the best noisy search goodput; the tuner verifies up to
two finalists before it picks, so it picks better than this.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import optuna
import pandas as pd

from autotune import decide
from autotune import model_config as mcfg
from autotune.objective import Sla
from autotune.points import Measurement, Point
from autotune.search_space import Candidate, SearchSpace, load_search_space, params_of
from autotune.study import Study

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
Key = tuple[int, int, bool]  # instance count, max batch size, dynamic batching


def load_runs(files: list[Path]) -> dict[str, list[tuple[str, pd.DataFrame]]]:
    """Per model (the file name up to the first '-'), each run's trials in order."""
    runs: dict[str, list[tuple[str, pd.DataFrame]]] = {}
    for path in sorted(files):
        runs.setdefault(path.name.split("-")[0], []).append((path.stem, pd.read_csv(path)))
    return runs


# ---------------------------------------------------------------- replay


@dataclass
class _Recorded:
    """Just what ``decide.converged`` reads from a trial."""

    number: int
    state: str
    reused_from: int | None
    reason: str
    value: float
    interrupted: bool = False

    def goodput(self) -> float:
        return self.value


def _recorded(df: pd.DataFrame) -> list[_Recorded]:
    return [
        _Recorded(
            number=int(row.trial),
            state=str(row.state),
            reused_from=None if pd.isna(row.reused_from) else int(row.reused_from),
            reason="" if pd.isna(row.reason) else str(row.reason),
            value=float(row.goodput) if row.state == "COMPLETE" and row.feasible else 0.0,
        )
        for row in df.itertuples()
    ]


def replay(runs: dict[str, list[tuple[str, pd.DataFrame]]], patiences: list[int]) -> None:
    for recorded in runs.values():
        for name, df in recorded:
            trials = _recorded(df)
            cells = []
            for patience in patiences:
                stop = next(
                    (n for n in range(1, len(trials) + 1) if decide.converged(trials[:n], patience)),  # type: ignore[arg-type]
                    len(trials),
                )
                kept = df.iloc[:stop]
                measured = kept[kept.reused_from.isna() & (kept.state == "COMPLETE")]
                best = measured.loc[measured.goodput.idxmax()]
                cells.append(
                    f"patience {patience}: {len(measured):2d} configs {kept.duration_s.sum():4.0f} s, "
                    f"best {best.label.replace('batching ', '')[:24]:24} {best.goodput:6.0f}"
                )
            print(f"{name:28} " + " | ".join(cells))


# ---------------------------------------------------------------- simulation


def goodput_table(recorded: list[tuple[str, pd.DataFrame]]) -> dict[Key, tuple[float, float, int]]:
    """Mean goodput, mean p99 and median concurrency per config over the recorded runs."""
    df = pd.concat([d for _, d in recorded])
    df = df[df.reused_from.isna() & (df.state == "COMPLETE") & df.feasible]
    table = {}
    for (count, mbs, batching), group in df.groupby(["instance_count", "max_batch_size", "dynamic_batching"]):
        table[(int(count), int(mbs), bool(batching))] = (
            float(group.goodput.mean()),
            float(group.p99_ms.mean()),
            int(group.concurrency.median()),
        )
    return table


def _truth(table: dict[Key, tuple[float, float, int]], key: Key) -> tuple[float, float, int]:
    if key in table:
        return table[key]
    group = [v for k, v in table.items() if k[0] == key[0] and k[2] == key[2]]
    group = group or [v for k, v in table.items() if k[0] == key[0]]
    return (statistics.mean(v[0] for v in group), statistics.mean(v[1] for v in group), 8)


def _point(throughput: float, p99: float, concurrency: int) -> Point:
    return Point(
        concurrency=concurrency,
        request_rate=0.0,
        throughput=throughput,
        avg_ms=p99 / 2,
        p50_ms=p99 / 2,
        p90_ms=p99 * 0.8,
        p95_ms=p99 * 0.9,
        p99_ms=p99,
        requests=1000,
        errors=0,
        duration_s=1.5,
        windows=3,
        stable=True,
    )


def simulate_once(
    model: str,
    sla: Sla,
    space: SearchSpace,
    baseline: Candidate,
    table: dict[Key, tuple[float, float, int]],
    seed: int,
    noise: float,
    patience: int,
    cores: int,
    max_trials: int = 40,
    levers: frozenset[str] = frozenset(),
) -> tuple[int, float]:
    """One search: (configs measured, true goodput of the config with the best noisy goodput).
    ``space`` already holds ``baseline``, as the tuner's does. ``levers``: "seeds" (the first seed
    is the baseline with one instance per core), "neighbours" (no convergence while a one-step
    neighbour of the best config is untried), "ideas" (those neighbours queued as soon as the
    sampler proposes a config measured before: ``decide.out_of_ideas``), as the tuner has them;
    without them, the search as it was before issue 16."""
    study = Study.open(None, f"{model}-{seed}", space, sla, seed=seed)  # type: ignore[arg-type]
    study.enqueue(params_of(baseline), baseline=True)
    for params in decide.heuristic_seeds(space, cores, baseline if "seeds" in levers else None):
        study.enqueue(params)
    rng = random.Random(seed)
    measured: list[tuple[Key, float]] = []

    def go_on() -> bool:  # the tuner's _go_on, the time budget left out
        results = study.results()
        if decide.finished(results) >= max_trials:
            return False
        converged = decide.converged(results, patience)
        if not converged and not ("ideas" in levers and decide.out_of_ideas(results)):
            return True
        untried = decide.unexplored(results, space) if "neighbours" in levers else []
        for candidate in untried:
            study.enqueue(params_of(candidate))
        return bool(untried) or not converged

    while go_on():
        asked = study.ask()
        c = asked.candidate
        earlier = decide.measured_before(study.results(), c)
        if earlier is not None and earlier.measurement is not None:
            study.tell_measured(asked, earlier.measurement, 0.0, reused_from=earlier.number)
            continue
        key = (c.instance_count, c.max_batch_size, c.dynamic_batching)
        goodput, p99, concurrency = _truth(table, key)
        seen = goodput * rng.gauss(1.0, noise)
        point = _point(seen, p99 * rng.gauss(1.0, noise), concurrency)
        study.tell_measured(asked, Measurement(points=(point,), best=point), 1.0)
        measured.append((key, seen))
    picked = max(measured, key=lambda m: m[1])[0]
    return len(measured), _truth(table, picked)[0]


def simulate(runs: dict[str, list[tuple[str, pd.DataFrame]]], args: argparse.Namespace) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    space = load_search_space(args.space)
    slas = dict(item.split("=") for item in args.sla)
    for model, recorded in runs.items():
        table = goodput_table(recorded)
        baseline = mcfg.candidate_of(mcfg.load_config(EXAMPLES, model))
        model_space = space.including(baseline)
        best = max(v[0] for v in table.values())
        sla = Sla(percentile=99, limit_ms=float(slas[model]))
        for patience in args.patience:
            for improvement in args.improvement:
                decide.IMPROVEMENT = improvement
                outcomes = [
                    simulate_once(
                        model,
                        sla,
                        model_space,
                        baseline,
                        table,
                        seed,
                        args.noise,
                        patience,
                        args.cores,
                        levers=frozenset(args.levers),
                    )
                    for seed in range(args.seeds)
                ]
                configs = [o[0] for o in outcomes]
                found = [o[1] / best for o in outcomes]
                print(
                    f"{model:7} levers {','.join(args.levers) or '-'} patience {patience} "
                    f"improvement {improvement:.2f}: configs median "
                    f"{statistics.median(configs):4.1f} mean {statistics.mean(configs):4.1f} "
                    f"max {max(configs):2d}, "
                    f">= {args.many} in {sum(c >= args.many for c in configs) / len(configs):4.0%} of runs | "
                    f"picked goodput / best: mean {statistics.mean(found):.3f} min {min(found):.3f}, "
                    f">= 0.95 in {sum(f >= 0.95 for f in found) / len(found):4.0%} of runs",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("part", choices=["replay", "simulate"])
    parser.add_argument("trials", nargs="+", type=Path, help="trials.csv files named MODEL-RUN.csv")
    parser.add_argument("--patience", type=int, nargs="+", default=[5, 4, 3])
    parser.add_argument("--improvement", type=float, nargs="+", default=[0.08])
    parser.add_argument("--space", type=Path, default=Path("search_spaces/model_analyzer.yaml"))
    parser.add_argument("--sla", nargs="+", default=["cnn=20", "bertQA=50"], help="MODEL=p99 ms")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--noise", type=float, default=0.04, help="relative sd of one measurement")
    parser.add_argument("--cores", type=int, default=2, help="what heuristic_seeds is told")
    parser.add_argument(
        "--levers",
        nargs="*",
        default=["seeds", "neighbours", "ideas"],
        choices=["seeds", "neighbours", "ideas"],
        help="the search's levers of issue 16 to simulate (none: the search before it)",
    )
    parser.add_argument("--many", type=int, default=11, help="report how often a run measures this many")
    args = parser.parse_args(argv)
    runs = load_runs(args.trials)
    if args.part == "replay":
        replay(runs, args.patience)
    else:
        simulate(runs, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
