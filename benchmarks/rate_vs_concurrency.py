"""Tuning for arrivals (``--load rate``) against tuning for busy clients (``--load concurrency``).

    .venv/bin/python benchmarks/rate_vs_concurrency.py                 # bertQA and cnn, 2 runs each
    .venv/bin/python benchmarks/rate_vs_concurrency.py --models bertQA --runs 3 --remeasure 5
    .venv/bin/python benchmarks/rate_vs_concurrency.py --smoke         # a quick check of the script

For each example model and run, ``autotune run`` tunes it twice, once per mode (the order
alternates between runs, so that drift of the machine favours neither), each run timed from
start to exit. Each winner is then served again and re-measured ``--remeasure`` times in an
open loop with Poisson arrivals (a different seed each time) at the rate it was credited
with: the concurrency winner at its verified throughput (requests per second), the rate
winner at its verified rate. Printed per model: each run's wall time, winner, queue delay,
operating point, credited and (concurrency runs) open-loop-check rates, the re-measured p95
and how many repeats broke the SLA; then the wall-time ratio rate/concurrency, how often
each mode's winner broke the SLA at its credited rate, and whether the modes chose different
configs. Results go to ``benchmarks/results/rate_vs_concurrency-<time>.{txt,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import _tools

from autotune import model_config as mcfg
from autotune.launch.local import LocalLauncher
from autotune.loadgen import LoadGenerator
from autotune.points import WindowPlan
from autotune.reload import reload_outcome
from autotune.results import recommendation
from autotune.staging import stage_model

SLA_MS = {"bertQA": 50.0, "cnn": 20.0}  # p95, as benchmarks/vs_model_analyzer.py's p99 figures
MODES = ("concurrency", "rate")
REPOSITORY = _tools.ROOT / "examples/model_repository"
REMEASURE_PLAN = WindowPlan(window_s=1.0, warmup_s=1.0, percentile=95)  # the verification's windows


@dataclass
class Tuned:
    """One ``autotune run`` and its winner re-measured."""

    model: str
    run: int
    mode: str
    exit_code: int
    wall_s: float
    trials: int = 0
    winner: str = ""
    queue_delay_us: int = 0
    where: str = ""
    credited_rate: float = 0.0  # requests per second the run credited its winner with
    checked_rate: float | None = None  # a concurrency run's open-loop check: its rate met or at the limit
    p95_ms: list[float] = field(default_factory=list)  # the Poisson re-measurements
    broke: int = 0  # of them, over the SLA (or with errors, or behind schedule)

    def p95_text(self) -> str:
        if not self.p95_ms:
            return "-"
        return f"{statistics.median(self.p95_ms):.1f} [{min(self.p95_ms):.1f}-{max(self.p95_ms):.1f}]"


def tune(model: str, run: int, mode: str, args: argparse.Namespace, work: Path) -> tuple[Tuned, Path | None]:
    reports = work / f"{model}-{mode}-{run}"
    cmd = [
        str(Path(sys.executable).with_name("autotune")), "run", "--model", model,
        "--sla-p95-ms", f"{SLA_MS[model]:g}", "--model-repository", str(REPOSITORY),
        "--reports-dir", str(reports), "--fresh", "--seed", str(args.seed + run), *args.autotune_args,
    ]  # fmt: skip
    if mode == "rate":
        cmd += ["--load", "rate"]
    _tools.log(f"{model} run {run} {mode}: {' '.join(cmd[1:])}")
    start = time.monotonic()
    with (work / f"{model}-{mode}-{run}.log").open("w") as log:
        code = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=False).returncode
    tuned = Tuned(model, run, mode, code, round(time.monotonic() - start, 1))
    dirs = sorted((reports / model).glob("*/run.json"))
    if code != 0 or not dirs:
        return tuned, None
    return tuned, dirs[-1].parent


def read_winner(tuned: Tuned, run_dir: Path) -> Any:
    """Fill ``tuned`` from the run directory; the winner's candidate (None: no winner)."""
    outcome = reload_outcome(run_dir)
    info, winner = outcome.info, outcome.winner
    tuned.trials = len(outcome.trials)
    if winner is None or winner.candidate is None:
        return None
    rec = recommendation(winner, info.verifications, info.sla.percentile)
    assert rec is not None
    tuned.winner = winner.candidate.label()
    tuned.queue_delay_us = winner.candidate.max_queue_delay_us
    tuned.where = rec.where
    tuned.credited_rate = rec.request_rate if rec.request_rate else rec.throughput  # batch 1
    check = info.open_loop
    tuned.checked_rate = (check.limit_rate or check.sustained_rate) if check else None
    return winner.candidate


def remeasure(tuned: Tuned, candidate: Any, count: int, work: Path) -> None:
    """The winner served again, measured ``count`` times under Poisson arrivals at its credited rate."""
    model_dir = REPOSITORY / tuned.model
    config = mcfg.apply_candidate(mcfg.load_config(model_dir.parent, tuned.model), candidate)
    folder = work / f"remeasure-{tuned.model}-{tuned.mode}-{tuned.run}"
    stage_model(model_dir, config, folder / "repo")
    with LocalLauncher().serve(folder / "repo", tuned.model, folder / "server.log") as server:
        gen = LoadGenerator.connect(
            server.host, server.http_port, server.grpc_port, tuned.model, plan=REMEASURE_PLAN
        )
        for seed in range(1, count + 1):
            point = replace(gen, seed=seed).at_rate(tuned.credited_rate, "poisson")
            tuned.p95_ms.append(round(point.p95_ms, 2))
            over = point.p95_ms > SLA_MS[tuned.model] or point.errors or not point.trusted
            tuned.broke += bool(over)
            mark = " (over)" if over else ""
            _tools.log(f"  {tuned.mode} winner at {tuned.credited_rate:.4g} req/s, seed {seed}: "
                       f"p95 {point.p95_ms:.1f} ms{mark} {list(point.warnings)}")  # fmt: skip


def summary(model: str, rows: list[Tuned], count: int) -> list[str]:
    lines = [
        f"{model} (SLA p95 <= {SLA_MS[model]:g} ms; "
        f"winners re-measured {count}x, Poisson, at the credited rate)",
        f"{'run':>3} {'mode':<11} {'wall s':>7} {'trials':>6}  {'winner':<46} {'delay us':>8} "
        f"{'operating point':<16} {'credited':>9} {'sustained':>9}  "
        f"{'p95 ms med [min-max]':<22} {'broke':>5}",
    ]
    for t in rows:
        checked = "-" if t.checked_rate is None else f"{t.checked_rate:.4g}"
        winner = t.winner or f"(exit {t.exit_code})"
        lines.append(
            f"{t.run:>3} {t.mode:<11} {t.wall_s:>7.1f} {t.trials:>6}  {winner:<46} "
            f"{t.queue_delay_us:>8} {t.where:<16} {t.credited_rate:>9.4g} {checked:>9}  {t.p95_text():<22} "
            f"{t.broke:>2}/{len(t.p95_ms)}"
        )  # fmt: skip
    walls = {m: [t.wall_s for t in rows if t.mode == m and t.exit_code == 0] for m in MODES}
    if all(walls.values()):
        ratios = [
            r.wall_s / c.wall_s
            for c in rows if c.mode == "concurrency"
            for r in rows if r.mode == "rate" and r.run == c.run
        ]  # fmt: skip
        lines.append(
            f"wall time: concurrency median {statistics.median(walls['concurrency']):.0f} s, rate median "
            f"{statistics.median(walls['rate']):.0f} s; rate/concurrency median "
            f"{statistics.median(walls['rate']) / statistics.median(walls['concurrency']):.2f} "
            f"(per run: {', '.join(f'{r:.2f}' for r in ratios)})"
        )
    for mode in MODES:
        mine = [t for t in rows if t.mode == mode]
        broke, total = sum(t.broke for t in mine), sum(len(t.p95_ms) for t in mine)
        lines.append(
            f"{mode} winners at their credited rate broke the SLA in {broke}/{total} re-measurements"
        )
    for run in sorted({t.run for t in rows}):
        pair = {t.mode: t for t in rows if t.run == run}
        if len(pair) == 2:
            c, r = pair["concurrency"], pair["rate"]
            same = c.winner == r.winner
            lines.append(
                f"run {run}: the modes chose {'the same config' if same else 'different configs'}"
                + ("" if same else f" (concurrency: {c.winner}; rate: {r.winner})")
            )
    return lines


def _tools_load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="bertQA,cnn", help="comma-separated example models")
    parser.add_argument("--runs", type=int, default=2, help="tuning runs per mode per model (default 2)")
    parser.add_argument("--remeasure", type=int, default=5, help="Poisson re-measurements per winner")
    parser.add_argument("--seed", type=int, default=1, help="base sampler seed (run i uses seed + i)")
    parser.add_argument("--out", type=Path, default=_tools.ROOT / "benchmarks/results")
    parser.add_argument("--smoke", action="store_true", help="bertQA, 1 run, 2 re-measurements, 3 trials")
    args = parser.parse_args()
    models = ["bertQA"] if args.smoke else args.models.split(",")
    if args.smoke:
        args.runs, args.remeasure = 1, 2
    args.autotune_args = ["--max-trials", "3"] if args.smoke else []
    _tools.stop_on_sigint()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    head = [
        f"rate_vs_concurrency {stamp}: {os.cpu_count()} cores, load {_tools_load()}",
        f"models {', '.join(models)}; {args.runs} run(s) per mode; "
        f"{args.remeasure} re-measurements per winner",
    ]
    print("\n".join(head), flush=True)
    results: list[Tuned] = []
    lines = list(head)
    with tempfile.TemporaryDirectory(prefix="rate-vs-conc-") as tmp:
        work = Path(tmp)
        for model in models:
            rows: list[Tuned] = []
            for run in range(args.runs):
                for mode in MODES if run % 2 == 0 else tuple(reversed(MODES)):
                    tuned, run_dir = tune(model, run, mode, args, work)
                    candidate = read_winner(tuned, run_dir) if run_dir is not None else None
                    if candidate is not None and tuned.credited_rate > 0:
                        remeasure(tuned, candidate, args.remeasure, work)
                    rows.append(tuned)
            rows.sort(key=lambda t: (t.run, t.mode))
            block = summary(model, rows, args.remeasure)
            print("\n" + "\n".join(block), flush=True)
            lines += ["", *block]
            results += rows
    if not args.smoke:
        args.out.mkdir(parents=True, exist_ok=True)
        base = args.out / f"rate_vs_concurrency-{stamp}"
        base.with_suffix(".txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        base.with_suffix(".json").write_text(
            json.dumps([asdict(t) for t in results], indent=1), encoding="utf-8"
        )
        print(f"\nwrote {base}.txt and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
