#!/usr/bin/env python3
"""autotune against Triton Model Analyzer 1.58 quick mode on pipelines: an ensemble and a BLS model.

    .venv/bin/python benchmarks/pipeline_vs_model_analyzer.py            # bertQA_pipeline, bertQA_bls
    .venv/bin/python benchmarks/pipeline_vs_model_analyzer.py --smoke    # the plumbing, minutes
    .venv/bin/python benchmarks/pipeline_vs_model_analyzer.py --models bertQA_bls --repeats 5

Issue 44's comparison. Quick mode is Model Analyzer's only mode for ensembles and BLS models: it
searches each composing model's instance count and max batch size (dynamic batching on, with its
defaults) and measures end to end through the top model, its perf_analyzer fed the example's
``input.json`` (``perf_analyzer_flags: {input-data: ...}``); ``cpu_only_composing_models`` keeps
every step on the CPU (../shared/ENVIRONMENT.md), and a BLS model names its callees with
``bls_composing_models``. Both tools get the bounds of ``search_spaces/model_analyzer.yaml``, the
p99 SLA (``--sla-ms``), the same input data and gRPC. autotune runs as the README shows it (an
ensemble in rounds, the steps that limit it; a BLS model with ``--composing-models``), then
``autotune apply`` writes every config its winner changed into its own copy of the repository.

Each tool's winner (every config of the pipeline, at the concurrency the tool recommends) is
re-measured by perf_analyzer through the top model, the same input data, ``--repeats`` times
round-robin, each on a fresh server after a discarded warm-up; the goodput is the median
throughput where most repeats met the SLA. Per model it prints each tool's wall time, configs
measured, winner, re-measured figures and the two ratios the issue asks for (goodput at least
Model Analyzer's; wall time at most half its). ``--out`` gets the table (.txt) and every figure
(.json); ``--work DIR`` keeps the work folder and resumes in it (a tool that finished there is
not run again). Shares its installation and instruments with ``vs_model_analyzer.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import _tools
import vs_model_analyzer as vma
import yaml
from google.protobuf import json_format

from autotune import model_config as mcfg
from autotune.errors import AutotuneError
from autotune.launch.local import LocalLauncher
from autotune.pipeline import BLS, Pipeline, read_pipeline
from autotune.reload import reload_outcome
from autotune.results import recommendation
from autotune.search_space import load_search_space

ROOT = _tools.ROOT
DEFAULT_MODELS = ("bertQA_pipeline", "bertQA_bls")
COMPOSING = {"bertQA_bls": ("bertQA_tokenizer", "bertQA", "bertQA_answer")}  # a BLS model's callees
DEFAULT_SLA_MS = 300.0  # the README's pipeline SLA (p95 there; p99 here, Model Analyzer's constraint)
_VARIANT = re.compile(r"_config_(\d+|default)$")


@dataclass(frozen=True)
class Winner:
    """A tool's choice: every config of the pipeline (by model) and the concurrency to run it at."""

    configs: dict[str, str]
    concurrency: int
    throughput: float
    p99_ms: float
    source: str = ""


@dataclass(frozen=True)
class ToolRun:
    model: str
    tool: str  # "autotune" or "MA quick"
    status: str
    wall_s: float
    configs: int  # distinct pipeline configs measured
    points: int
    winner: Winner | None
    note: str = ""
    load1: tuple[float, float] = (0.0, 0.0)
    details: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- the two tools


def pipeline_of(models: Path, model: str) -> Pipeline:
    found = read_pipeline(models, model, COMPOSING.get(model, ()))
    if found is None:
        raise SystemExit(f"{model} is not a pipeline (an ensemble, or a BLS model of COMPOSING)")
    return found


def copy_pipeline(models: Path, spec: Pipeline, repo: Path) -> Path:
    for name in spec.models:
        _tools.copy_model(models, name, repo)
    return repo


def input_data(models: Path, spec: Pipeline) -> Path:
    return models / spec.model / "input.json"


def run_model_analyzer(
    spec: Pipeline,
    sla_ms: float,
    folder: Path,
    peers: vma.Peers,
    budget: vma.Budget,
    space_file: Path,
    monitor: vma.LoadMonitor,
) -> ToolRun:
    repo, out = folder / "repo", folder / "out"
    (out / "export").mkdir(parents=True)
    copy_pipeline(peers.models, spec, repo)
    extra: dict[str, Any] = {
        "cpu_only_composing_models": list(spec.members),
        "perf_analyzer_flags": {"input-data": str(input_data(peers.models, spec))},
    }
    if spec.kind == BLS:
        extra["bls_composing_models"] = list(spec.members)
    space = load_search_space(space_file)  # the file autotune is given too
    config = vma.ma_config(spec.model, sla_ms, "quick", repo, out, peers, vma.ma_bounds(space), extra)
    config_path = folder / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    _tools.log(
        f"{spec.model}: Model Analyzer quick (limit {budget.quick_watchdog_s:.0f} s; log {folder / 'ma.log'})"
    )
    start = time.monotonic()
    status, wall, watch = vma.supervise(
        [str(peers.model_analyzer), "profile", "-f", str(config_path)],
        folder,
        folder / "ma.log",
        budget.quick_watchdog_s,
    )
    points = vma.ma_points(out / "checkpoints", spec.model)
    winner = ma_winner(out / "checkpoints", spec, points, sla_ms)
    notes = [status] if status != "finished" else []
    if status == "failed":
        notes.append(vma._last_error(folder / "ma.log"))
    if not points:
        notes.append("no measurement")
    elif winner is None:
        notes.append("no config met the constraint")
    return ToolRun(
        spec.model,
        "MA quick",
        status,
        wall,
        len({p.variant for p in points}),
        len(points),
        winner,
        "; ".join(notes),
        monitor.between(start, time.monotonic()),
        {"config": config, "measurements": [asdict(p) for p in points], "last_new_s": watch.last_new_s},
    )


def ma_winner(checkpoints: Path, spec: Pipeline, points: list[vma.MaPoint], sla_ms: float) -> Winner | None:
    """Model Analyzer's choice (the most throughput whose p99 met the constraint) with every
    config of the pipeline it measured it with, read from its newest checkpoint's run config."""
    feasible = [p for p in points if p.p99_ms <= sla_ms]
    if not feasible:
        return None
    best = max(feasible, key=lambda p: p.throughput)
    files = sorted(checkpoints.glob("*.ckpt"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
    state = json.loads(files[-1].read_text(encoding="utf-8"))
    run_config = state["ResultManager.results"]["_results"][spec.model][best.variant][0]
    configs: dict[str, str] = {}
    for mrc in run_config["_model_run_configs"]:
        variants = [mrc["_model_config_variant"], *mrc.get("_composing_config_variants", [])]
        for variant in variants:
            name = _VARIANT.sub("", variant["variant_name"])
            configs[name] = _config_text(variant["model_config"], name)
    return Winner(configs, best.concurrency, best.throughput, best.p99_ms, f"{best.variant} (checkpoint)")


def _config_text(data: dict[str, Any], name: str) -> str:
    """A config as Model Analyzer's checkpoint holds it (protobuf JSON), named ``name``."""
    data = data.get("_model_config", data)
    config = json_format.ParseDict(data, mcfg.ModelConfig(), ignore_unknown_fields=True)
    config.name = name
    return mcfg.config_text(config)


def run_autotune(
    spec: Pipeline,
    sla_ms: float,
    folder: Path,
    peers: vma.Peers,
    budget: vma.Budget,
    space_file: Path,
    monitor: vma.LoadMonitor,
) -> ToolRun:
    repo, reports = copy_pipeline(peers.models, spec, folder / "repo"), folder / "reports"
    cmd = [
        sys.executable, "-m", "autotune.cli", "run", "--model", spec.model, "--model-repository", str(repo),
        "--sla-p99-ms", f"{sla_ms:g}", "--search-space", str(space_file), "--reports-dir", str(reports),
        "--input-data", str(input_data(peers.models, spec)), "--protocol", "grpc", "--fresh",
        *(["--composing-models", ",".join(spec.members)] if spec.kind == BLS else []),
        *budget.autotune_args,
    ]  # fmt: skip
    _tools.log(f"{spec.model}: autotune {' '.join(cmd[4:])} (log {folder / 'autotune.log'})")
    start = time.monotonic()
    env = vma._plain_terminal()
    src = peers.autotune_srcs.get("")
    if src is not None:  # autotune as committed, not the working tree being edited meanwhile
        env["PYTHONPATH"] = str(src)
    status, wall, _ = vma.supervise(cmd, folder, folder / "autotune.log", 3600.0, env=env)
    load = monitor.between(start, time.monotonic())
    run_dirs = sorted((p.parent for p in reports.rglob("run.json")), key=lambda p: p.stat().st_mtime)
    if status != "finished" or not run_dirs:
        note = f"{status}: {vma._last_error(folder / 'autotune.log')}"
        return ToolRun(spec.model, "autotune", "failed", wall, 0, 0, None, note, load)
    last = run_dirs[-1]  # the last round's run: apply writes its winner and every earlier round's
    applied = vma.supervise(
        [sys.executable, "-m", "autotune.cli", "apply", "--no-verify", str(last)],
        folder,
        folder / "apply.log",
        300.0,
        env=env,
    )[0]
    outcome = reload_outcome(last)
    winner = None
    if applied == "finished" and outcome.winner is not None and outcome.winner.best is not None:
        chosen = recommendation(outcome.winner, outcome.info.verifications, 99)
        assert chosen is not None
        configs = {name: (repo / name / mcfg.CONFIG_NAME).read_text(encoding="utf-8") for name in spec.models}
        winner = Winner(configs, chosen.concurrency, chosen.throughput, chosen.latency_ms, f"{last.name}")
    trials, points = 0, 0
    for run_dir in run_dirs:  # every round's measured trials and points
        done = reload_outcome(run_dir)
        measured = [t for t in done.trials if t.reused_from is None and t.measurement is not None]
        trials += len(measured)
        points += sum(len(t.measurement.points) for t in measured if t.measurement)
        points += sum(len(v.points) for v in done.info.verifications)
    note = f"{len(run_dirs)} round(s)" + ("" if applied == "finished" else f"; apply {applied}")
    return ToolRun(
        spec.model, "autotune", status, wall, trials, points, winner, note, load,
        {"run_dirs": [str(d) for d in run_dirs]},
    )  # fmt: skip


# ---------------------------------------------------------------- the common instrument


def remeasure(
    spec: Pipeline, runs: list[ToolRun], sla_ms: float, work: Path, peers: vma.Peers, budget: vma.Budget
) -> list[vma.Remeasured]:
    """Each tool's winner, ``repeats`` times round-robin, on a fresh server each time."""
    chosen = [r for r in runs if r.winner is not None]
    points: dict[str, list[vma.PaPoint]] = {r.tool: [] for r in chosen}
    for repeat in range(budget.repeats):
        for run in chosen:
            assert run.winner is not None
            _tools.log(
                f"{spec.model}: perf_analyzer on {run.tool}'s winner at concurrency "
                f"{run.winner.concurrency}, repeat {repeat + 1}/{budget.repeats}"
            )
            folder = work / spec.model / "remeasure" / vma._slug(run.tool)
            shutil.rmtree(folder, ignore_errors=True)
            try:
                point = measure(spec, run.winner, folder, peers, budget)
            except AutotuneError as exc:
                _tools.log(f"{run.tool}'s winner could not be measured: {exc}")
                continue
            if point is not None:
                points[run.tool].append(point)
    return [
        vma.Remeasured(r.tool, r.winner.concurrency, tuple(points[r.tool]), sla_ms)
        for r in chosen
        if r.winner
    ]


def measure(
    spec: Pipeline, winner: Winner, folder: Path, peers: vma.Peers, budget: vma.Budget
) -> vma.PaPoint | None:
    """The pipeline with the winner's configs on a fresh server: a discarded warm-up, then
    perf_analyzer through the top model at the winner's concurrency."""
    stage = copy_pipeline(peers.models, spec, folder / "repo")
    for name, text in winner.configs.items():
        (stage / name / mcfg.CONFIG_NAME).write_text(text, encoding="utf-8")
    data = ["--input-data", str(input_data(peers.models, spec))]
    with LocalLauncher().serve(stage, spec.model, folder / "server.log") as server:
        port = server.grpc_port
        c = winner.concurrency
        vma.perf_analyzer(peers.pa, spec.model, port, c, 1000, folder / "warmup.csv", 100, data)
        return vma.perf_analyzer(
            peers.pa, spec.model, port, c, budget.window_ms, folder / "measure.csv", budget.stability, data
        )


# ---------------------------------------------------------------- the table


def describe(winner: Winner, spec: Pipeline) -> str:
    """Each model's config in vs_model_analyzer's short form (a BLS model's own first, then its
    members in the order data flows; an ensemble's own has no instances to tell)."""
    names = spec.members if spec.kind != BLS else spec.models
    return "; ".join(f"{m}: {vma.describe(winner.configs[m])}" for m in names if m in winner.configs)


def table(
    spec: Pipeline, sla_ms: float, runs: list[ToolRun], measured: list[vma.Remeasured], budget: vma.Budget
) -> str:
    by_tool = {m.tool: m for m in measured}
    lines = [
        f"{spec.model} ({spec.kind}: {', '.join(spec.members)}): p99 <= {sla_ms:g} ms. Winners re-measured "
        f"by perf_analyzer through {spec.model} (gRPC, --percentile=99, its input.json, "
        f"{budget.window_ms} ms windows), {budget.repeats} repeats round-robin; medians.",
        f"{'tool':<10} {'status':<8} {'wall':>7} {'load':>9} {'configs':>7} {'points':>6} {'conc':>4} "
        f"{'own thr':>8} {'thr':>8} {'p99 ms':>7} {'met':>5} {'goodput':>8}",
    ]
    for run in runs:
        w, m = run.winner, by_tool.get(run.tool)
        left = (
            f"{run.tool:<10} {run.status:<8} {run.wall_s:>6.0f}s {run.load1[0]:>4.1f}/{run.load1[1]:<4.1f} "
            f"{run.configs:>7} {run.points:>6} "
        )
        if w is None:
            lines.append(left + "(no winner)")
            continue
        right = f"{w.concurrency:>4} {w.throughput:>8.1f} "
        if m is None or not m.points:
            lines.append(left + right + "(not re-measured)")
        else:
            good = f"{m.goodput:>8.1f}" if m.goodput else f"{'MISS':>8}"
            lines.append(
                left
                + right
                + f"{m.median_throughput:>8.1f} {m.median_p99:>7.1f} {m.met}/{len(m.points):<3} {good}"
            )
    lines.append("")
    for run in runs:
        if run.winner is not None:
            lines.append(f"  {run.tool} winner: {describe(run.winner, spec)}")
        if run.note:
            lines.append(f"  {run.tool}: {run.note}")
    ours = next((r for r in runs if r.tool == "autotune"), None)
    theirs = next((r for r in runs if r.tool == "MA quick"), None)
    if ours is not None and theirs is not None:
        g_ours = by_tool["autotune"].goodput if "autotune" in by_tool else 0.0
        g_theirs = by_tool["MA quick"].goodput if "MA quick" in by_tool else 0.0
        goodput = f"{g_ours / g_theirs:.2f}x" if g_theirs else ("n/a (MA has none)" if g_ours else "n/a")
        wall = ours.wall_s / theirs.wall_s if theirs.wall_s else float("nan")
        lines.append(
            f"autotune / MA quick: goodput {goodput} (issue 44: at least 1.00x), "
            f"wall time {wall:.2f}x (at most 0.50x)"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- the run


def bench(
    model: str, sla_ms: float, work: Path, peers: vma.Peers, budget: vma.Budget, space_file: Path,
    monitor: vma.LoadMonitor,
) -> dict[str, Any]:  # fmt: skip
    spec = pipeline_of(peers.models, model)
    runs = [
        once(
            work / model / "ma-quick",
            lambda f: run_model_analyzer(spec, sla_ms, f, peers, budget, space_file, monitor),
        ),
        once(
            work / model / "autotune",
            lambda f: run_autotune(spec, sla_ms, f, peers, budget, space_file, monitor),
        ),
    ]
    start = time.monotonic()
    measured = remeasure(spec, runs, sla_ms, work, peers, budget)
    text = table(spec, sla_ms, runs, measured, budget)
    print(text + "\n", flush=True)
    return {
        "model": model,
        "sla_p99_ms": sla_ms,
        "runs": [asdict(r) for r in runs],
        "remeasured": [{**asdict(m), "met": m.met, "goodput": m.goodput} for m in measured],
        "remeasure_s": round(time.monotonic() - start, 1),
        "table": text,
    }


def once(folder: Path, run: Any) -> ToolRun:
    """Run a tool in ``folder``, or read back its result if it finished there before (``--work``)."""
    record = folder / "result.json"
    if record.is_file():
        data = json.loads(record.read_text(encoding="utf-8"))
        winner = Winner(**data["winner"]) if data["winner"] else None
        earlier = ToolRun(**{**data, "winner": winner, "load1": tuple(data["load1"])})
        return replace(earlier, note=" ".join(filter(None, [earlier.note, "[from an earlier invocation]"])))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    result: ToolRun = run(folder)
    record.write_text(json.dumps(asdict(result), indent=1, default=str), encoding="utf-8")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="pipeline examples")
    parser.add_argument("--sla-ms", type=float, default=DEFAULT_SLA_MS, help="p99 SLA in ms (default 300)")
    parser.add_argument("--repeats", type=int, default=5, help="perf_analyzer re-measurements of each winner")
    parser.add_argument("--window-ms", type=int, default=4000, help="perf_analyzer measurement interval")
    parser.add_argument("--stability", type=int, default=100, help="perf_analyzer --stability-percentage")
    parser.add_argument("--quick-watchdog-s", type=float, default=1800.0, help="Model Analyzer quick's limit")
    parser.add_argument(
        "--max-instances", type=int, default=0, help="instance counts up to this (both tools)"
    )
    parser.add_argument("--ma-timeout-s", type=float, default=2400.0, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny budgets: checks the plumbing in minutes")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--work", type=Path, help="work folder, kept; tools finished in it are not run again")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, vma._terminated)
    _tools.stop_on_sigint()
    budget = vma.smoke_budget(args) if args.smoke else vma.full_budget(args)
    budget = replace(budget, repeats=args.repeats if not args.smoke else 1)
    work = (args.work or Path(tempfile.mkdtemp(prefix="pipeline-vs-ma-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        peers = vma.install(work, args.models, worktree=False)  # a pipeline's build makes its members
        space_file = work / "space.yaml"
        space_file.write_text(yaml.safe_dump(budget.space, sort_keys=False), encoding="utf-8")
        stamp = datetime.now(timezone.utc)
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        header = (
            f"pipeline_vs_model_analyzer {stamp.isoformat(timespec='seconds')}  autotune {rev}  "
            f"Model Analyzer 1.58.0 quick  perf_analyzer (tritonclient 2.41.0)  {os.cpu_count()} cores  "
            f"load {vma.load1():.2f} at start\n"
            f"$ .venv/bin/python benchmarks/pipeline_vs_model_analyzer.py {' '.join(sys.argv[1:])}"
        )
        print(header + "\n", flush=True)
        base = args.out / f"pipeline_vs_model_analyzer-{stamp:%Y%m%d-%H%M}{'-smoke' if args.smoke else ''}"
        results = []
        with vma.LoadMonitor() as monitor:
            for model in args.models:
                results.append(bench(model, args.sla_ms, work, peers, budget, space_file, monitor))
                base.parent.mkdir(parents=True, exist_ok=True)
                text = "\n\n".join([header, *(r["table"] for r in results)]) + "\n"
                base.with_suffix(".txt").write_text(text, encoding="utf-8")
                data = {"header": header, "budget": asdict(budget), "results": results}
                base.with_suffix(".json").write_text(
                    json.dumps(data, indent=1, default=str), encoding="utf-8"
                )
        _tools.log(f"wrote {base}.txt and .json")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
