"""Survey a model on a real server: every config of a space, at every surveyed level, in windows.

For the simulator (``autotune.sim.Surveyed``): each config of the space (one of each class of
configs that make the server do the same), served on a fresh local tritonserver, measured at each
of ``--levels`` (client concurrencies) in ``--windows`` windows of ``--window`` seconds, each
window's throughput and latency at the SLA's percentile kept. The file (JSON, gzipped) is small:
about 10 numbers per point. A survey that stops (Ctrl-C, a crash) is resumed by the same command:
configs already in the file are not measured again. ``--server 2`` (3, ...) surveys every config
again on fresh servers into the same file: the simulator takes the servers' mean for the truth and
their spread for its fresh servers' (one server's reading of a config is off the truth by that
spread, so a top finer than it cannot be told from one reading).

    python benchmarks/survey.py --model cnn --sla-p95-ms 20 --out benchmarks/surveys/cnn.json.gz
    python benchmarks/survey.py --model toy --model-repository tests/models --sla-p95-ms 60 \\
        --search-space small.yaml --levels 1 2 4 8 --windows 4 --out /tmp/toy.json.gz
    python benchmarks/survey.py --model bertQA --sla-p99-ms 50 --server 2 \\
        --out benchmarks/surveys/bertQA.json.gz
    python benchmarks/survey.py --model text_recognition --sla-p99-ms 50 --shape input.1:1,32,100 \\
        --batch-size 2 --out benchmarks/surveys/text_recognition.json.gz

It costs, per config, a server start and ``levels x (warm-up + windows x window)`` seconds: the
default space's 136 configs at the default 10 levels and 10 windows of 0.5 s take about 2.1 hours,
less where a config's latency reaches twice the limit below the top level (:data:`BEYOND`: its
higher levels are not measured).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune import hostlock, prepare, sim, stopping
from autotune.launch import make_launcher, server_gpus
from autotune.launched import LaunchedServers
from autotune.objective import Sla
from autotune.points import WindowPlan
from autotune.prepare import default_space_path
from autotune.rundir import RunDir, RunRecord
from autotune.search_space import Candidate, SearchSpace, space_document
from autotune.serving import Load
from autotune.settings import Launch, RunSettings, Workload, add_workload_arguments, workload_from_args

LEVELS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
# a config's levels end at the first whose latency is this many times the limit: above it a
# closed loop only queues (Little's law), and the simulator extends the last level so
BEYOND = 2.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--model-repository", type=Path, help="default: examples/model_repository")
    parser.add_argument("--sla-p95-ms", type=float)
    parser.add_argument("--sla-p99-ms", type=float)
    parser.add_argument("--search-space", type=Path, help="default: the bundled default space")
    parser.add_argument("--levels", type=int, nargs="+", default=list(LEVELS))
    parser.add_argument("--windows", type=int, default=10, help="windows per level (default 10)")
    parser.add_argument("--window", type=float, default=0.5, help="seconds a window lasts (default 0.5)")
    parser.add_argument("--configs", type=int, default=0, help="survey at most this many configs (0: all)")
    parser.add_argument(
        "--only", action="append", metavar="LABEL",
        help="survey only this config (its label as the survey prints it; repeatable): with "
        "--server 2..., a sample of configs read again, for the server-to-server spread",
    )  # fmt: skip
    parser.add_argument(
        "--server", type=int, default=1, metavar="N",
        help="whose reading: 1 (default) the first server's; 2, 3... every config again on another "
        "server, kept beside the first in the same file (the simulator's truth is the servers' mean, "
        "their spread its fresh servers')",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="the survey file (.json.gz)")
    add_workload_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.server < 1 or (args.server > 1 and not args.out.exists()):
        parser.error(f"--server {args.server}: a reading again needs the first one in {args.out}")
    stopping.install()  # SIGTERM unwinds like Ctrl-C: the server stopped, the file whole
    if (args.sla_p95_ms is None) == (args.sla_p99_ms is None):
        parser.error("give one of --sla-p95-ms and --sla-p99-ms")
    sla = Sla(95, args.sla_p95_ms) if args.sla_p95_ms else Sla(99, args.sla_p99_ms)
    repository = (
        args.model_repository or Path(__file__).resolve().parent.parent / "examples" / "model_repository"
    )
    settings = RunSettings(
        model=args.model, repository=repository, sla=sla, search_space=args.search_space, output_check=False,
        workload=workload_from_args(args),
    )  # fmt: skip
    gpus = server_gpus(settings.launch)  # a KIND_GPU space stays on the GPU where there is one
    prep = prepare.prepare(settings, server_gpus=gpus.count)
    data = _read(args.out) or _new(args, sla, gpus.count, prep.baseline, settings.workload)
    readings = data["windows"]
    if args.server > 1:
        again = data.setdefault("again", [])
        again += [{} for _ in range(args.server - 1 - len(again))]
        readings = again[args.server - 2]
    configs = _configs(prep.space, args, parser)
    plan = WindowPlan(
        window_s=args.window, warmup_s=1.0, tolerance=0.0, stable_windows=args.windows,
        max_windows=args.windows, min_requests=1, percentile=sla.percentile,
    )  # fmt: skip
    ramp = replace(plan, warmup_s=0.3)
    started = time.monotonic()
    with (
        hostlock.measuring("benchmarks/survey.py", wait=True),
        tempfile.TemporaryDirectory(prefix="survey-") as tmp,
    ):
        record = RunRecord(
            run_id="survey", model=args.model, repository=repository, sla=sla, launch=Launch(),
            protocol="http", study_name="survey", storage=None, original_config="", original_digest="",
            started="",
        )  # fmt: skip
        run = RunDir.create(Path(tmp) / "survey", record)
        launcher = make_launcher(settings.launch, "survey")
        servers = LaunchedServers(prep, launcher, run.record.run_id)
        try:
            for i, config in enumerate(configs):
                label = sim.survey_label(config)
                if label in readings:
                    continue
                began = time.monotonic()
                with servers.serve(config, run.log(f"{i:03d}.log"), f"survey-{i:03d}") as server:
                    data.setdefault("starts_s", []).append(round(time.monotonic() - began, 2))
                    readings[label] = _levels(servers.generator(server, plan), args.levels, ramp, sla)
                _write(args.out, data)
                done = len(readings)
                print(f"{done}/{len(configs)} {label} ({time.monotonic() - started:.0f} s)", flush=True)
        finally:
            servers.close()
    return 0


def _new(
    args: argparse.Namespace, sla: Sla, gpus: int, baseline: Candidate, workload: Workload
) -> dict[str, Any]:
    """A survey with no readings yet: what it measures, and on what (the workload's batch size
    narrows the space the simulator tunes in, as it narrows a run's)."""
    return {
        "version": sim.SURVEY_VERSION, "model": args.model, "percentile": sla.percentile,
        "limit_ms": sla.limit_ms, "cores": os.cpu_count() or 1, "gpus": gpus,
        "window_s": args.window, "windows": {},
        # what the simulator tunes in, and from: the space file's document and the model's config
        "space": space_document(args.search_space or default_space_path()),
        "baseline": asdict(baseline), "workload": workload.to_json(),
    }  # fmt: skip


def _configs(
    space: SearchSpace, args: argparse.Namespace, parser: argparse.ArgumentParser
) -> list[Candidate]:
    """The configs to survey: one of each class of the space (:func:`sim.candidates`), those of
    ``--only``, the first ``--configs``."""
    configs = sim.candidates(space)
    if args.only:
        unknown = sorted(set(args.only) - {sim.survey_label(c) for c in configs})
        if unknown:
            parser.error(f"--only {unknown[0]!r}: no config of the space has that label")
        configs = [c for c in configs if sim.survey_label(c) in args.only]
    return configs[: args.configs] if args.configs else configs


def _levels(gen: Load, levels: list[int], ramp: WindowPlan, sla: Sla) -> dict[str, list[list[float]]]:
    """One config's windows at each level, each window's throughput and latency, up to the first
    level whose latency reaches :data:`BEYOND` times the limit."""
    out = {}
    for level in sorted(levels):
        point = gen.at_concurrency(level)
        gen = gen.with_plan(ramp)
        pairs = zip(point.window_throughputs, point.window_latencies_ms, strict=True)
        out[str(level)] = [[float(f"{t:.4g}"), float(f"{ms:.4g}")] for t, ms in pairs]
        if point.latency_ms(sla.percentile) >= BEYOND * sla.limit_ms:
            break  # the levels above only add latency (sim.Surveyed extends it)
    return out


def _read(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data = json.loads(gzip.decompress(path.read_bytes()))
    return data if isinstance(data, dict) else None


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0))
    tmp.replace(path)


if __name__ == "__main__":
    raise SystemExit(main())
