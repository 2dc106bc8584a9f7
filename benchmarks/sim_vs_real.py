"""Simulated time against real wall time (issue 81, item 5): the runs a benchmark made, and the
simulator's runs of the same settings on the model's survey, step by step.

It reads the autotune runs that ``vs_model_analyzer.py`` left in its work folder
(``WORK/<model>/autotune*/result.json`` and each one's run directory), and simulates the same
command (space, SLA, trials, finalists, repeats, margin) on ``benchmarks/surveys/<model>.json.gz``
with ``--seeds`` sampler seeds. Of a model's surveys (``<model>*.json.gz``), it takes the one
whose truth for your config is nearest what the real runs measured of it (trial 0): the machine's
speed moves from day to day (bertQA's surveys read 160 and 230 infer/s at 4 clients), and a
surface of another day puts the SLA between other levels. ``--speed`` scales the survey to the
real runs' speed (``sim.Surveyed.speed``). A server's start costs the simulator
what the real runs' servers took to be ready (their trials' median ``ready_s``, the warm-up
included), where the survey did not time its own; its fresh servers warm up as ``model_warmup``
leaves a real one (``sim.WarmUp.warmed``).

Per model it prints, each a median with its range, the real runs' and the simulated runs' time in
each step: the search, the race (to the open-loop check's server), the open-loop check (to the
record's end), and the rest (the process's start-up, and the report written after the record's
end); and the trials and race rounds. The simulator runs the open-loop check on the survey as an
open loop (:func:`sim.open_loop_truth`); it neither starts a process nor writes a report, so its
whole is set beside the real runs' less the rest. A model with no survey, or one that lacks configs of the
space, is left out, and said.

    .venv/bin/python benchmarks/sim_vs_real.py --work WORK

``--run N`` first makes N real runs of each model in ``WORK`` (``WORK/<model>/autotune-http-K``),
as ``vs_model_analyzer.py`` runs autotune (its space, the p99 SLA, the default budget) but over
the CLI's default protocol, HTTP, which the surveys use too; runs made before are kept.

    .venv/bin/python benchmarks/sim_vs_real.py --work WORK --run 4 --models cnn embedder
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune import sim
from autotune.events import Events
from autotune.objective import Sla
from autotune.search_space import load_search_space

SURVEYS = Path(__file__).resolve().parent / "surveys"
ROOT = Path(__file__).resolve().parent.parent
# how far the simulator's fresh servers read apart: as the real runs' race rounds read (rounds),
# as a measured-world surface draws them (measured: sim.measured_spreads), or as the survey did
SPREADS = ("rounds", "measured", "survey")
SPACE = ROOT / "search_spaces" / "model_analyzer.yaml"  # vs_model_analyzer.py's
SLA_MS = {"bertQA": 50.0, "cnn": 20.0, "mobilenet": 25.0, "recommender": 25.0, "embedder": 50.0}
STAMP = re.compile(r"^[IWE]\d{4} (\d\d):(\d\d):(\d\d\.\d+)", re.MULTILINE)  # Triton's log lines


@dataclass(frozen=True)
class Real:
    """One real run: its wall time and its steps' (seconds), and its record's settings."""

    wall_s: float
    searched_s: float
    raced_s: float  # from the search's end to the open-loop check's server (the whole rest without one)
    checked_s: float  # the open-loop check: from its server's log's first line to the record's end
    trials: int
    measured: int  # trials measured (not pruned, not failed)
    rounds: int  # race rounds served (race-*.log)
    ready_s: float  # the median of its trials' servers' start until ready
    yours: tuple[tuple[int, float], ...]  # your config's points (trial 0): clients, throughput
    options: dict[str, Any]
    sla: Sla
    run_dir: Path
    record: dict[str, Any] = field(repr=False, compare=False)  # its run.json
    study: tuple[Any, ...] = field(repr=False, compare=False)  # its study's trials (none: no study.db)

    @property
    def simulated_s(self) -> float:
        """What the simulator simulates: the search, the race and the open-loop check."""
        return self.searched_s + self.raced_s + self.checked_s


def make_runs(work: Path, model: str, runs: int) -> None:
    """``runs`` real runs of ``model`` under ``work`` (each ``autotune-http-K``), each timed, its
    ``result.json`` as ``vs_model_analyzer.py`` writes one (the fields :func:`real_run` reads)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _tools

    source = _tools.example_models([model])
    for k in range(1, runs + 1):
        folder = work / model / f"autotune-http-{k}"
        if (folder / "result.json").exists():
            continue
        repo, reports = folder / "repo", folder / "reports"
        if repo.exists():  # a run that stopped part way: again from the start
            import shutil

            shutil.rmtree(folder)
        _tools.copy_model(source, model, repo)
        cmd = [
            sys.executable, "-m", "autotune.cli", "run", "--model", model, "--model-repository", str(repo),
            "--sla-p99-ms", f"{SLA_MS[model]:g}", "--search-space", str(SPACE), "--reports-dir", str(reports),
            "--fresh",
        ]  # fmt: skip
        began = time.monotonic()
        with (folder / "autotune.log").open("w") as log:
            done = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                env={**os.environ, "TERM": "dumb", "NO_COLOR": "1", "COLUMNS": "120"},
            )  # fmt: skip
        wall = time.monotonic() - began
        found = sorted((reports / model).glob("*/run.json"))
        run_dir = found[-1].parent if found else folder
        trials = len(_trials_of(run_dir)) if found else 0
        status = "finished" if done.returncode == 0 and found else f"failed ({done.returncode})"
        result = {"status": status, "wall_s": wall, "details": {"run_dir": str(run_dir), "trials": trials}}
        (folder / "result.json").write_text(json.dumps(result, indent=1))
        print(f"{model} run {k}: {status}, {wall:.0f} s, {trials} trials", flush=True)


def _trials_of(run: Path, record: dict[str, Any] | None = None) -> list[Any]:
    """The run's trials, as its study holds them (``record``: its run.json, read already)."""
    import optuna

    record = record if record is not None else json.loads((run / "run.json").read_text())
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.load_study(study_name=record["study_name"], storage=f"sqlite:///{run / 'study.db'}").trials


def _stamp(log: Path, day: datetime) -> datetime | None:
    """The time of the log's first Triton line, on ``day``."""
    seconds = _seconds(log) if log.exists() else None
    if seconds is None:
        return None
    return day.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(seconds=seconds)


def real_run(result: Path) -> Real | None:
    """The run ``result.json`` describes, or None when it did not finish."""
    data = json.loads(result.read_text())
    if data.get("status") != "finished":
        return None
    run = Path(data["details"]["run_dir"])
    record = json.loads((run / "run.json").read_text())
    started, finished = datetime.fromisoformat(record["started"]), datetime.fromisoformat(record["finished"])
    searched = float(record["searched_s"])
    logs = sorted((run / "logs").glob("open-loop-*.log"))
    check = _stamp(logs[-1], started) if logs else None
    ended = (finished - started).total_seconds()
    checked = (finished - check).total_seconds() if check is not None else 0.0
    study = tuple(_trials_of(run, record)) if (run / "study.db").exists() else ()
    measured = [{**t.user_attrs, "number": t.number} for t in study if t.user_attrs.get("measurement")]
    readies = [t["measurement"]["ready_s"] for t in measured]
    first = next((t["measurement"] for t in measured if t.get("number") == 0), None)
    points = first["points"] if first else []
    return Real(
        wall_s=float(data["wall_s"]), searched_s=searched, raced_s=ended - checked - searched,
        checked_s=checked, trials=int(data["details"]["trials"]), measured=len(measured),
        rounds=len(list((run / "logs").glob("race-*.log"))),
        ready_s=statistics.median(readies) if readies else 0.0,
        yours=tuple((int(p["concurrency"]), float(p["throughput"])) for p in points),
        options=record["options"],
        sla=Sla.from_json(record["sla"]), run_dir=run, record=record, study=study,
    )  # fmt: skip


def real_runs(work: Path, model: str, pattern: str = "autotune*") -> list[Real]:
    """The finished autotune runs of ``model`` under ``work`` (``pattern``: their folders), in
    the order they ran."""
    found = (real_run(result) for result in sorted((work / model).glob(f"{pattern}/result.json")))
    return [r for r in found if r is not None]


class _Clocked(Events):
    """Events that keep when the search ended, in simulated seconds."""

    searched_s = 0.0

    def search_ended(
        self, elapsed_s: float, reserve_s: float, budget_s: float | None, most_s: float, what: str
    ) -> None:  # fmt: skip
        self.searched_s = elapsed_s


class _Counted(sim.SimServers):
    """Simulated servers that count the race's servers, as the real runs' race logs count them:
    one a round where the racers share one, else one a racer."""

    made: ClassVar[list[_Counted]] = []  # every instance, the last one the run's

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.race_servers = 0
        _Counted.made.append(self)

    def serve(self, candidate: Any, log: Path, stage_name: str) -> Any:
        self.race_servers += stage_name.startswith("race-")
        return super().serve(candidate, log, stage_name)

    def serve_all(self, candidates: Any, log: Path, stage_name: str) -> Any:
        self.race_servers += 1
        return super().serve_all(candidates, log, stage_name)


@dataclass(frozen=True)
class Simulated:
    sim_s: float
    searched_s: float
    checked_s: float  # the open-loop check's
    trials: int
    measured: int
    rounds: int  # race servers: each race round of the racers that shared one


def round_spreads(reals: Sequence[Real]) -> tuple[float, float]:
    """How far a fresh server read off another in the real runs' race rounds: the throughput's
    relative sd, and the latency's (at the SLA's percentile) beyond what the throughput explains.
    Each is pooled over every contender's rounds at its level, less the rounds' own windows'
    error (the simulator draws that itself)."""

    def server_part(figure: str, windows: str) -> float:
        squares, df, within = 0.0, 0, []
        for real in reals:
            for verification in real.record.get("verifications", []):
                points = verification["points"]
                if len(points) < 2:
                    continue
                logs = [math.log(p[figure]) for p in points]
                mean = statistics.fmean(logs)
                squares, df = squares + sum((x - mean) ** 2 for x in logs), df + len(logs) - 1
                for p in points:
                    own = [math.log(x) for x in p[windows] if x > 0]
                    if len(own) >= 2:
                        within.append(statistics.variance(own) / len(own))
        if not df:
            return 0.0
        return math.sqrt(max(0.0, squares / df - (statistics.fmean(within) if within else 0.0)))

    percentile = f"p{reals[0].sla.percentile}_ms"
    throughput, latency = (
        server_part("throughput", "window_throughputs"),
        server_part(percentile, "window_latencies_ms"),
    )
    return throughput, math.sqrt(max(0.0, latency**2 - throughput**2))


def overheads(reals: Sequence[Real]) -> sim.Overheads | None:
    """What the real runs spent beyond their servers' starts and their points' warm-ups and
    windows, as the simulator charges it (:func:`fit_overheads` of their trials' cycles); None
    without enough trials."""
    cycles = [cycle for real in reals for cycle in trial_cycles(real)]
    return fit_overheads(cycles, float(reals[0].options.get("window", 0.5))) if reals else None


def trial_cycles(real: Real) -> list[tuple[int, float]]:
    """Each measured trial's points, and the time its cycle left beyond the server's ready time
    and the points' windows. A cycle runs from the trial's Triton log's first line to the next
    log's."""
    trials = {t.number: t.user_attrs.get("measurement") for t in real.study}
    logs = sorted((stamp, log) for log in (real.run_dir / "logs").glob("*.log") if (stamp := _seconds(log)))
    out = []
    for (began, log), (following, _) in itertools.pairwise(logs):
        m = trials.get(int(log.stem.split("-")[1])) if log.stem.startswith("trial-") else None
        if m and m["points"]:
            windows = sum(p["duration_s"] for p in m["points"])
            out.append((len(m["points"]), following - began - m["ready_s"] - windows))
    return out


def fit_overheads(cycles: Sequence[tuple[int, float]], window_s: float) -> sim.Overheads | None:
    """:class:`sim.Overheads` from trials' cycles (points, time left), fit as ``a + b points`` by
    least squares. The simulator already charges a trial its first point's warm-up (a window)
    and :data:`RAMP_S` before each later point, so a server's own is ``a - window_s + RAMP_S``
    and a point's ``b - RAMP_S``. None without two trials of different points."""
    from autotune.search.noise import RAMP_S

    if len({n for n, _ in cycles}) < 2:
        return None
    slope, intercept = statistics.linear_regression([float(n) for n, _ in cycles], [x for _, x in cycles])
    return sim.Overheads(max(0.0, intercept - window_s + RAMP_S), max(0.0, slope - RAMP_S))


def _seconds(log: Path) -> float | None:
    """The time of day of the log's first Triton line, in seconds (None: no such line)."""
    found = STAMP.search(log.read_text("utf-8", "replace"))
    return int(found[1]) * 3600 + int(found[2]) * 60 + float(found[3]) if found else None


def speed(surface: sim.Surveyed, reals: Sequence[Real]) -> float:
    """How fast the real runs' machine served your config against ``surface``'s truth: the median
    over their trial 0's points of measured over true throughput (1.0 without such points)."""
    yours = sim.baseline_of(surface)
    ratios = [t / surface.truth(yours, level).throughput for r in reals for level, t in r.yours]
    return statistics.median(ratios) if ratios else 1.0


def nearest_survey(model: str, reals: Sequence[Real]) -> tuple[Path, float] | None:
    """Of ``model``'s surveys, the one whose truth for your config is nearest the real runs'
    (:func:`speed`), and that speed; None without a survey."""
    found = sorted(SURVEYS.glob(f"{model}.json.gz")) + sorted(SURVEYS.glob(f"{model}-*.json.gz"))
    rated = []
    for path in found:
        try:
            rated.append((path, speed(sim.Surveyed.load(path, reals[0].sla), reals)))
        except (KeyError, ValueError):  # a survey without your config (one that stopped part way)
            continue
    return min(rated, key=lambda pair: abs(math.log(pair[1]))) if rated else None


def simulated(
    survey: Path, reals: Sequence[Real], seeds: int, fast: float = 1.0, spreads: str = "rounds",
    drift: sim.Drift | None = None,
) -> tuple[list[Simulated], float]:  # fmt: skip
    """``seeds`` simulated runs of the real runs' settings on ``survey`` (their SLA, space and
    options) on a machine ``fast`` times the survey's (:attr:`sim.Surveyed.speed`), its fresh
    servers as far apart as ``spreads`` says (:data:`SPREADS`), the machine drifting by ``drift``,
    and the start it charged a server (the survey's, else the real servers')."""
    real = reals[0]
    surface = replace(sim.Surveyed.load(survey, real.sla), speed=fast)
    if spreads == "rounds":
        server, tail = round_spreads(reals)
        surface = replace(surface, server_cv=server, tail_cv=tail)
    elif spreads == "measured":
        surface = sim.measured_spreads(surface)
    measured = statistics.median(r.ready_s for r in reals)
    if not surface.timed and measured > 0:
        surface = replace(surface, start_s=measured)
    o = real.options
    space = load_search_space(Path(o["search_space"])) if o.get("search_space") else sim.space_of(surface)
    space = space.restricted(batching=True, gpu=surface.gpus > 0, tensorrt=False, gpu_count=surface.gpus)
    lacking = surface.missing(space)
    if lacking:
        raise ValueError(f"{lacking} config(s) of its space not surveyed yet")
    warmed = (sim.GPU_WARMUP if surface.gpus else sim.CPU_WARMUP).warmed()  # as real servers start
    given = {k: o[k] for k in ("max_trials", "finalists", "repeats", "margin", "patience") if k in o}
    spent = overheads(reals)  # as the real runs spent it
    out = []
    for seed in range(seeds):
        events = _Clocked()
        outcome = sim.simulate(
            surface, seed, space=space, events=events, servers_type=_Counted, warmup=warmed,
            overheads=spent, drift=drift, **given,
        )  # fmt: skip
        rounds = _Counted.made[-1].race_servers
        out.append(
            Simulated(
                outcome.sim_s,
                events.searched_s,
                outcome.checked_s,
                len(outcome.results),
                outcome.measured,
                rounds,
            )
        )
    return out, surface.start_s


def check_points(survey: Path, reals: Sequence[Real]) -> list[str]:
    """Each real run's open-loop check, point by point, beside the simulator's open loop
    (:func:`sim.open_loop_truth`) of its winner at the same rate, on ``survey`` at the speed the
    run's race read the winner: rate / credited, measured / limit, simulated / limit. Then the
    points' median and spread of log(simulated / measured), and the verdicts (over the limit or
    not) the two agree on."""
    from autotune.study import candidate_from_json

    if not reals:
        return []
    lines, logs, agree, points = [], [], 0, 0
    surveyed = sim.Surveyed.load(survey, reals[0].sla)
    for real in reals:
        record = real.record
        check = record.get("open_loop")
        if not check or not real.study:
            continue
        trial = next(t for t in real.study if t.number == check["trial"])
        candidate = candidate_from_json(trial.user_attrs["candidate"])
        raced = [v for v in record["verifications"] if v["trial"] == check["trial"]]
        surface = replace(surveyed, sla=real.sla)
        try:
            level, found = (
                raced[0]["concurrency"],
                statistics.median(p["throughput"] for p in raced[0]["points"]),
            )
            surface = replace(surface, speed=found / surface.truth(candidate, level).throughput)
        except (IndexError, KeyError):  # not raced, or not surveyed
            continue
        figure, limit, row = f"p{real.sla.percentile}_ms", real.sla.limit_ms, []
        window_s = float(real.options.get("window", 0.5))
        for point in check["points"]:
            truth, _ = sim.open_loop_truth(
                surface, candidate, point["request_rate"], real.sla.percentile, window_s
            )
            ours, theirs = truth.latency_ms(real.sla.percentile), point[figure]
            logs.append(math.log(ours / theirs))
            agree, points = agree + ((ours > limit) == (theirs > limit)), points + 1
            share = point["request_rate"] / check["credited_rate"]
            row.append(f"{share:.2f}: {theirs / limit:.2f}/{ours / limit:.2f}")
        lines.append(f"  {real.run_dir.name} {candidate.label()}: " + ", ".join(row))
    if logs:
        lines.append(
            f"  {points} points: log(simulated / measured) median {statistics.median(logs):+.2f}, sd "
            f"{statistics.stdev(logs) if len(logs) > 1 else 0.0:.2f}; over the limit or not, alike on {agree}"
        )
    return lines


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):4.0f} ({min(values):.0f}-{max(values):.0f})"


def ratio_interval(
    sims: Sequence[float], reals: Sequence[float], draws: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """The 90% bootstrap interval of median(sims) / median(reals): both resampled. Four real runs
    leave the real median loose, and this says how loose."""
    rng = random.Random(seed)

    def resampled(values: Sequence[float]) -> float:
        return statistics.median(rng.choices(values, k=len(values)))

    ratios = sorted(resampled(sims) / resampled(reals) for _ in range(draws))
    return ratios[int(0.05 * draws)], ratios[int(0.95 * draws) - 1]


def report(model: str, reals: Sequence[Real], sims: Sequence[Simulated], start_s: float) -> list[str]:
    """A model's lines: each step of the real runs and of the simulated ones, and the ratio of
    their medians."""
    real_steps = {
        "whole": [r.simulated_s for r in reals], "search": [r.searched_s for r in reals],
        "race": [r.raced_s for r in reals], "check": [r.checked_s for r in reals],
        "start, report": [r.wall_s - r.simulated_s for r in reals],
        "search / measured": [r.searched_s / max(r.measured, 1) for r in reals],
        "race / round": [r.raced_s / max(r.rounds, 1) for r in reals],
    }  # fmt: skip
    sim_steps = {
        "whole": [s.sim_s for s in sims], "search": [s.searched_s for s in sims],
        "race": [s.sim_s - s.searched_s - s.checked_s for s in sims], "check": [s.checked_s for s in sims],
        "search / measured": [s.searched_s / max(s.measured, 1) for s in sims],
        "race / round": [(s.sim_s - s.searched_s - s.checked_s) / max(s.rounds, 1) for s in sims],
    }  # fmt: skip
    lines = [
        f"{model}: {len(reals)} real runs, {len(sims)} simulated (a server's start {start_s:.2f} s); "
        "seconds, median (range)",
        f"  {'step':<17} {'real':>14} {'simulated':>14} {'sim/real':>9}",
    ]
    for step, real in real_steps.items():
        simmed = sim_steps.get(step)
        ratio = (
            statistics.median(simmed) / statistics.median(real)
            if simmed and statistics.median(real)
            else None
        )
        lines.append(
            f"  {step:<17} {_median(real):>14} {_median(simmed) if simmed else '-':>14} "
            f"{f'{ratio:.2f}' if ratio is not None else '-':>9}"
        )
    lines.append(
        f"  {'trials':<17} {statistics.median(r.trials for r in reals):>14.0f} "
        f"{statistics.median(s.trials for s in sims):>14.0f}"
    )
    lines.append(
        f"  {'measured':<17} {statistics.median(r.measured for r in reals):>14.0f} "
        f"{statistics.median(s.measured for s in sims):>14.0f}"
    )
    rounds = _median([r.rounds for r in reals]), _median([s.rounds for s in sims])
    lines.append(f"  {'race rounds':<17} {rounds[0]:>14} {rounds[1]:>14}")
    low, high = ratio_interval([s.sim_s for s in sims], [r.simulated_s for r in reals])
    lines.append(
        f"  whole (less the start and the report), sim/real: 90% interval {low:.2f}-{high:.2f} "
        "(medians bootstrapped)"
    )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, required=True, help="vs_model_analyzer.py's --work folder")
    parser.add_argument("--models", nargs="+", default=["cnn", "bertQA", "embedder", "recommender"])
    parser.add_argument("--seeds", type=int, default=20, help="simulated runs per model (default 20)")
    parser.add_argument(
        "--run", type=int, default=0, metavar="N",
        help="first make N real runs of each model over HTTP in --work (those made before are kept)",
    )  # fmt: skip
    parser.add_argument(
        "--spreads", choices=SPREADS, default="rounds",
        help="the simulator's fresh servers: as far apart as the real runs' race rounds read "
        "(default), as a measured-world surface draws them (sim.measured_spreads), or as the survey",
    )  # fmt: skip
    parser.add_argument(
        "--speed", action="store_true",
        help="simulate the survey at the real runs' speed (sim.Surveyed.speed: your config's measured "
        "throughput over its truth), for a machine that ran slower or faster than on the survey's day",
    )  # fmt: skip
    parser.add_argument(
        "--drift",
        type=float,
        nargs=2,
        metavar=("SD", "HOLD_S"),
        help="the simulated machine's speed wandering within a run (sim.Drift; default: none)",
    )
    parser.add_argument(
        "--glob", default="autotune*", help="the real runs read: WORK/<model>/GLOB (default autotune*)"
    )
    args = parser.parse_args(argv)
    for model in args.models:
        if args.run:
            make_runs(args.work, model, args.run)
        reals = real_runs(args.work, model, args.glob)
        chosen = nearest_survey(model, reals) if reals else None
        if chosen is None:
            print(f"{model}: left out ({'no finished real run' if not reals else 'no survey'})")
            continue
        survey, fast = chosen
        server, tail = round_spreads(reals)
        spent = overheads(reals) or sim.Overheads()
        print(
            f"{model}: survey {survey.name}, the real runs served your config at {fast:.2f}x its truth"
            f"{'; simulated at that speed' if args.speed else ''}; their race rounds' fresh servers read "
            f"apart by {server:.1%} in throughput and {tail:.1%} in latency beyond it "
            f"(--spreads {args.spreads}); beyond starts, warm-ups and windows they spent "
            f"{spent.server_s:.2f} s a server and {spent.point_s:.2f} s a point"
        )
        try:
            drift = sim.Drift(*args.drift) if args.drift else None
            sims, start_s = simulated(
                survey, reals, args.seeds, fast if args.speed else 1.0, args.spreads, drift
            )
        except ValueError as exc:  # a survey that stopped part way
            print(f"{model}: left out ({exc})")
            continue
        print("\n".join(report(model, reals, sims, start_s)))
        print(f"{model}: the open-loop checks' points, rate / credited: measured / simulated latency / limit")
        print("\n".join(check_points(survey, reals)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
