"""Several models on one server: tuned together (``autotune run --models``) against each tuned alone.

Issue 44's comparison. For the models of ``--models`` (default ``examples/two_models.yaml``):

1. each model tuned alone (``autotune run --model M`` with its own SLA and workload);
2. the models tuned together (``autotune run --models FILE``: rounds, each model with the others
   loaded beside it);
3. three pairs served together on one local tritonserver, each model loaded by its own clients
   (as many as the first model's, as the tuner loads them), measured at rising levels: your
   configs, the winners tuned alone, and the winners tuned together. A pair's goodput is the
   highest sum of the models' throughputs (weighted as the file says) at a level where every
   model meets its own SLA. The pairs are measured in turn, ``--repeats`` times.

It prints each pair's goodput (median and range over the repeats), how often every model met its
SLA at that level, each model's figures there, the ratios of the joint pair to the others, and
each tuning's wall time; the results go to ``benchmarks/results/shared_server-<time>.{txt,json}``.

    python benchmarks/shared_server.py                        # about 20 minutes on two cores
    python benchmarks/shared_server.py --repeats 5 --max-trials 12
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _tools

from autotune import hostlock
from autotune import model_config as mcfg
from autotune.launch import make_launcher
from autotune.loadgen import Beside, LoadGenerator
from autotune.objective import Sla
from autotune.points import Point, WindowPlan
from autotune.rundir import WINNER_CONFIG, RunDir
from autotune.settings import CoModel, Launch, Workload, read_models

ROOT = _tools.ROOT
LEVELS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def tune_alone(model: CoModel, repo: Path, reports: Path, extra: list[str]) -> tuple[str, float]:
    """``model`` tuned alone: its winner's config text and the run's wall time."""
    argv = ["run", "--model", model.model, "--model-repository", str(repo), "--reports-dir", str(reports),
            f"--sla-p{model.sla.percentile}-ms", f"{model.sla.limit_ms:g}", *workload_flags(model.workload),
            *extra]  # fmt: skip
    wall = autotune(argv, reports.parent / f"alone-{model.model}.log")
    (run_dir,) = list((reports / model.model).iterdir())
    return (run_dir / WINNER_CONFIG).read_text(encoding="utf-8"), wall


def tune_together(
    models_file: Path, repo: Path, reports: Path, extra: list[str]
) -> tuple[dict[str, str], float]:
    """The models tuned together: every model's config as the last round has them, and the wall time."""
    argv = ["run", "--models", str(models_file), "--model-repository", str(repo),
            "--reports-dir", str(reports), *extra]  # fmt: skip
    wall = autotune(argv, reports.parent / "together.log")
    last = max((p for p in reports.glob("*/*") if (p / "run.json").is_file()), key=lambda p: p.name)
    record = RunDir.load(last).record
    configs = {t.model: t.config for t in record.tuned_steps}
    configs[record.tuned] = (last / WINNER_CONFIG).read_text(encoding="utf-8")
    return configs, wall


def workload_flags(workload: Workload) -> list[str]:
    flags = ["--input-data", workload.input_data, "--batch-size", str(workload.batch_size)]
    for name, dims in workload.shapes:
        flags += ["--shape", f"{name}:{','.join(map(str, dims))}"]
    return flags


def autotune(argv: list[str], log: Path) -> float:
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        code = subprocess.run(
            [sys.executable, "-m", "autotune.cli", *argv], stdout=out, stderr=subprocess.STDOUT, check=False
        ).returncode
    if code != 0:
        raise SystemExit(f"autotune {' '.join(argv[:3])} failed ({code}): see {log}")
    return time.monotonic() - started


def measure_pair(
    served: tuple[CoModel, ...], repo: Path, configs: dict[str, str], folder: Path, window_s: float
) -> dict[str, Any]:
    """The pair with ``configs`` (a model missing there keeps the repository's) on one server: the
    best level where every model meets its SLA, its weighted throughput and each model's figures."""
    stage = folder / "repo"
    shutil.rmtree(stage, ignore_errors=True)
    for model in served:
        _tools.copy_model(repo, model.model, stage)
        if model.model in configs:
            (stage / model.model / mcfg.CONFIG_NAME).write_text(configs[model.model], encoding="utf-8")
    first, beside = served[0], served[1:]
    sla = Sla(first.sla.percentile, first.sla.limit_ms, others=tuple((c.model, c.sla) for c in beside))
    plan = WindowPlan(window_s=window_s, percentile=first.sla.percentile)
    launcher = make_launcher(Launch(), f"shared-{folder.name}")
    best: Point | None = None
    points = []
    with launcher.serve(stage, first.model, folder / "server.log") as server:

        def gen(model: CoModel) -> LoadGenerator:
            return LoadGenerator.connect(server.host, server.http_port, server.grpc_port, model.model,
                                         plan=plan, workload=model.workload, preflight=True)  # fmt: skip

        others = [Beside(gen(c), c.weight, c.sla.percentile) for c in beside]
        load = gen(first).with_beside(others, first.weight)
        misses = 0
        for level in LEVELS:
            point = load.at_concurrency(level)
            points.append(point)
            if sla.met_by(point):
                misses = 0
                best = point if best is None or point.throughput > best.throughput else best
            else:
                misses += 1
                if misses == 2:
                    break
    return {
        "goodput": best.throughput if best else 0.0,
        "level": best.concurrency if best else 0,
        "models": {
            name: {"throughput": p.throughput, f"p{c.sla.percentile}_ms": p.latency_ms(c.sla.percentile)}
            for name, p in (best.others if best else ())
            for c in served
            if c.model == name
        },
        "levels": [
            {"level": p.concurrency, "throughput": p.throughput, "met": sla.met_by(p)} for p in points
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=Path, default=ROOT / "examples" / "two_models.yaml")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each pair (default 3)")
    parser.add_argument("--window", type=float, default=1.0, help="seconds per window of the pairs' points")
    parser.add_argument("--max-trials", type=int, default=12, help="each tuning's --max-trials (default 12)")
    parser.add_argument("--work", type=Path, default=None, help="default: a folder in the cache")
    args = parser.parse_args(argv)
    _tools.stop_on_sigint()
    served = read_models(args.models, None, Workload())
    work = args.work or _tools.cache_dir() / f"shared_server-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    repo = _tools.example_models([c.model for c in served])
    extra = ["--max-trials", str(args.max_trials), "--wait"]
    _tools.log(f"tuning {', '.join(c.model for c in served)} each alone, then together (logs in {work})")
    alone: dict[str, str] = {}
    walls: dict[str, float] = {}
    for model in served:
        alone[model.model], walls[f"{model.model} alone"] = tune_alone(model, repo, work / "alone", extra)
    together, walls["together"] = tune_together(args.models, repo, work / "together", extra)
    pairs = {"yours": {}, "alone": alone, "together": together}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in pairs}
    with hostlock.measuring("benchmarks/shared_server.py", wait=True):
        for repeat in range(args.repeats):
            for name, configs in pairs.items():
                _tools.log(f"repeat {repeat + 1}: the pair {name}")
                results[name].append(
                    measure_pair(served, repo, configs, work / f"{name}-{repeat}", args.window)
                )
    lines = report(served, results, walls, args)
    text = "\n".join(lines)
    print(text)
    stamp = time.strftime("%Y%m%d-%H%M")
    out = ROOT / "benchmarks" / "results" / f"shared_server-{stamp}"
    out.with_suffix(".txt").write_text(text + "\n", encoding="utf-8")
    data = {"models": [c.to_json() for c in served], "walls_s": walls, "pairs": results, "configs": pairs}
    out.with_suffix(".json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 0


def report(
    served: tuple[CoModel, ...], results: dict[str, list[dict[str, Any]]], walls: dict[str, float],
    args: argparse.Namespace,
) -> list[str]:  # fmt: skip
    lines = [
        f"shared_server: {', '.join(c.label for c in served)}",
        f"each tuning --max-trials {args.max_trials}; each pair measured {args.repeats} times in turn, "
        f"windows of {args.window:g} s, levels {', '.join(map(str, LEVELS))} (each model that many clients)",
        "",
        f"{'pair':<10} {'goodput':>9} {'range':>17} {'SLAs met':>12}  each model at the median run's level",
    ]
    medians = {}
    for name, runs in results.items():
        goodputs = [r["goodput"] for r in runs]
        medians[name] = statistics.median(goodputs)
        middle = sorted(runs, key=lambda r: r["goodput"])[len(runs) // 2]
        each = ", ".join(
            f"{m} {f['throughput']:.0f}/s "
            + " ".join(f"{k} {v:.1f}" for k, v in f.items() if k != "throughput")
            for m, f in middle["models"].items()
        )
        met = sum(r["goodput"] > 0 for r in runs)
        lines.append(
            f"{name:<10} {medians[name]:>9.0f} {min(goodputs):>8.0f}-{max(goodputs):<8.0f} "
            f"{met:>5}/{len(runs):<6}  c={middle['level']}: {each}"
        )
    lines.append("")
    for other in ("alone", "yours"):
        if medians[other] > 0:
            lines.append(f"together / {other}: {medians['together'] / medians[other]:.2f}x goodput")
    lines += [f"wall: {name} {seconds:.0f} s" for name, seconds in walls.items()]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
