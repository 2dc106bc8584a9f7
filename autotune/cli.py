"""The command line: the only place that prints for people and turns errors into exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import __version__, stopping
from autotune.decide import IMPROVEMENT
from autotune.errors import AutotuneError, MeasurementError, UsageError
from autotune.objective import Sla
from autotune.settings import (
    LAUNCHERS,
    TRT_BUILD_TIMEOUT_S,
    DockerOptions,
    Launch,
    LocalOptions,
    RemoteOptions,
    RunSettings,
    add_traffic_arguments,
    add_workload_arguments,
    parse_duration,
    traffic_from_args,
    traffic_given,
    workload_from_args,
    workload_given,
)

if TYPE_CHECKING:
    from autotune.rundir import RunRecord

# what counts as progress, and as a finalist worth verifying ("%%": argparse formats help text)
GAIN = f"{IMPROVEMENT * 100:g}%%"

EPILOG_RUN = """examples:
  autotune run --model bertQA --sla-p95-ms 50
  autotune run --model bertQA --sla-p99-ms 50 --time-budget 10m --write-back
  autotune run --model bertQA --sla-p95-ms 50 --load rate          # arrivals at a rate (Poisson)
  autotune run --model bertQA --sla-p95-ms 50 --request-intervals arrivals.txt
  autotune run --model bertQA --sla-p95-ms 50 --resume reports/bertQA/20261122-080000

The run directory (reports/<model>/<run-id>/) holds report.html, trials.csv, the
winner's config (winner.pbtxt, winner.diff), the study (study.db) and the server logs.
exit codes: 0 ok, 1 error, 2 bad input (nothing written), 3 server failed to start (or a
remote server could not go back to its own config), 4 measurement failed (or every trial
failed: nothing to apply), 5 study storage, 6 write-back refused, 130 interrupted."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own errors: one line, exit 2
        raise UsageError(message, hint=f"see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="autotune",
        description="Find the best Triton Inference Server config for a model under a latency SLA.",
    )
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_run(sub)
    _add_apply(sub)
    _add_report(sub)
    _add_clean(sub)
    from autotune import bench

    bench.add_parser(sub)
    return parser


def _add_run(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="tune a model and write the report",
        epilog=EPILOG_RUN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Search Triton configs (instances, batching, ...) for the highest throughput "
        "that meets a latency SLA, measured on a real server.",
    )
    run.add_argument("--model", required=True, help="the model's directory name in the repository")
    run.add_argument(
        "--model-repository",
        type=Path,
        default=None,
        help="Triton model repository (default: ./model_repository, else examples/model_repository)",
    )
    sla = run.add_mutually_exclusive_group(required=True)
    for p in (50, 90, 95, 99):
        sla.add_argument(
            f"--sla-p{p}-ms",
            type=float,
            metavar="MS",
            dest=f"sla_p{p}",
            help=f"latency SLA on the {p}th percentile, in milliseconds"
            if p in (95, 99)
            else argparse.SUPPRESS,
        )
    run.add_argument(
        "--max-gpu-memory-mb",
        type=float,
        metavar="MIB",
        help="part of the SLA: a point whose peak GPU memory (the most any one GPU of the server "
        "used while it was measured, from Triton's metrics) is over this many MiB does not meet it "
        "(default: no limit; 0: none). Points without GPU figures (a CPU server) are not held to it. "
        "--resume without it keeps the run's own",
    )
    run.add_argument(
        "--search-space",
        type=Path,
        help="search space YAML, or the name of a bundled one: default (the default), gpu (instances "
        "per GPU, bigger batches, TensorRT FP16), model_analyzer",
    )
    budget = run.add_argument_group("budget (whichever ends first)")
    budget.add_argument("--max-trials", type=int, default=20, help="configs to try (default 20)")
    budget.add_argument(
        "--time-budget",
        default="12m",
        help="wall time for the search, e.g. 90s, 10m, 1h (default 12m; 'none' for no limit)",
    )
    budget.add_argument(
        "--patience",
        type=int,
        default=4,
        help=f"stop after this many measured configs in a row without a goodput {GAIN} better "
        "than the best, once every one-step change of the best config (an instance more or fewer, "
        "unless that step lost elsewhere without batching, "
        "batching on or off, the next max batch size, queue delay or preferred size) is measured "
        "too (default 4; 0: never)",
    )
    run.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="where Triton runs: a local process (default), a docker container, a remote server",
    )
    run.add_argument(
        "--protocol",
        choices=("http", "grpc"),
        default="http",
        help="protocol candidates are measured over (default http); near saturation the two can differ: "
        "grpc to compare with Model Analyzer (docs/loadgen.md)",
    )
    run.add_argument("--write-back", action="store_true", help="write the winner into the model repository")
    run.add_argument("--reports-dir", type=Path, default=Path("reports"), help="where run directories go")
    run.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue an interrupted run "
        "(the same command again also resumes the newest unfinished run of the model)",
    )
    run.add_argument("--fresh", action="store_true", help="start a new run even if an unfinished one exists")
    run.add_argument("--seed", type=int, help="sampler seed, for reproducible searches")
    run.add_argument("--storage", help="Optuna storage URL shared by several workers (e.g. postgresql://...)")
    run.add_argument("--study-name", help="study name in --storage (workers of one study use the same)")
    run.add_argument(
        "--margin",
        type=float,
        default=0.10,
        help="latency headroom kept under the SLA: while searching, a point counts as meeting "
        "the SLA only below (1 - margin) x the limit (1 - 2 x margin with dynamic batching, where "
        "other load generators read the tail highest), and every verification repeat of a "
        "finalist must stay below that too (else a lower level is verified), so that "
        "re-measuring the winner meets it (default 0.10 = 10%%)",
    )
    run.add_argument(
        "--finalists",
        type=int,
        default=2,
        help="top configs re-measured at the end (default 2); one after a finalist that met the SLA "
        f"every time only if it could beat it by {GAIN}",
    )
    run.add_argument("--repeats", type=int, default=3, help="re-measurements of each finalist (default 3)")
    run.add_argument(
        "--no-open-loop-check",
        action="store_true",
        help="--load concurrency: skip the short check, at the end, of what arrival rate the winner sustains "
        "within the SLA under Poisson arrivals (a few points on one more server)",
    )
    run.add_argument(
        "--window",
        type=float,
        default=0.5,
        help="measurement window in seconds while searching; finalists are verified with "
        "windows twice as long (default 0.5)",
    )
    run.add_argument(
        "--trt-build-timeout-s",
        type=float,
        default=TRT_BUILD_TIMEOUT_S,
        metavar="S",
        help="how long a candidate with TensorRT (FP16) may take to load: its engine is built then, "
        "which takes minutes; a build that runs longer fails that trial, saying so (default %(default).0f)",
    )
    add_workload_arguments(run)
    add_traffic_arguments(run)
    _add_launcher_options(run)
    run.set_defaults(handler=_run)


def _add_launcher_options(run: Any) -> None:
    """One group per launcher, as settings.Launch groups them (the run directory records the
    group in use, and `autotune apply` verifies on it)."""
    local = run.add_argument_group("--launcher local (a tritonserver process here)")
    local.add_argument(
        "--tritonserver",
        type=Path,
        help="the tritonserver binary (default: on PATH, else the nvidia-pytriton wheel's)",
    )
    docker = run.add_argument_group("--launcher docker (a container per trial)")
    docker.add_argument("--image", default=DockerOptions.image, help="Triton image (default %(default)s)")
    docker.add_argument("--gpus", default="", help="'all' or GPU ids like 0,1 (default: none)")
    docker.add_argument(
        "--shm-size", default=DockerOptions.shm_size, help="/dev/shm size (default %(default)s)"
    )
    docker.add_argument("--pull", action="store_true", help="pull the image if it is missing")
    remote = run.add_argument_group("--launcher remote (a running server in explicit model-control mode)")
    remote.add_argument("--url", default="", help="HOST:HTTP_PORT of the server")
    remote.add_argument("--grpc-url", default="", help="HOST:GRPC_PORT (default: the HTTP port + 1)")
    remote.add_argument(
        "--metrics-url",
        default="",
        help="the server's Prometheus metrics, where its GPUs and their figures are read "
        "(default: http://HOST:8002/metrics, HOST of --url)",
    )


def _add_apply(sub: Any) -> None:
    apply = sub.add_parser(
        "apply",
        help="write a run's winning config into the model repository",
        description="Atomically write the winner's config.pbtxt (backup kept, diff "
        "shown, verified by loading it in Triton), or --undo it.",
    )
    apply.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    apply.add_argument("--undo", action="store_true", help="restore the config saved before the write-back")
    apply.add_argument("--no-verify", action="store_true", help="skip loading the written config in Triton")
    apply.set_defaults(handler=_apply)


def _add_report(sub: Any) -> None:
    report = sub.add_parser("report", help="(re)write report.html and trials.csv of a run")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    report.add_argument("--storage", help="the study's storage URL, if it is not the run's SQLite file")
    report.set_defaults(handler=_report)


def _add_clean(sub: Any) -> None:
    clean = sub.add_parser("clean", help="stop servers and containers left behind by killed runs")
    clean.set_defaults(handler=_clean)


# ---------------------------------------------------------------- handlers


def _sla(args: argparse.Namespace) -> Sla:
    for p in (50, 90, 95, 99):
        value = getattr(args, f"sla_p{p}")
        if value is not None:
            return Sla(p, value, args.max_gpu_memory_mb)
    raise UsageError("give an SLA, e.g. --sla-p95-ms 50")


def _repository(args: argparse.Namespace) -> Path:
    if args.model_repository is not None:
        return Path(args.model_repository)
    for candidate in (Path("model_repository"), Path("examples/model_repository")):
        if candidate.is_dir():
            return candidate
    raise UsageError("no model repository: give --model-repository DIR")


def settings_from(args: argparse.Namespace) -> RunSettings:
    from autotune.measure import DECIDED, WindowPlan, verdict_bands

    sla = _sla(args)
    budget = None if str(args.time_budget).lower() == "none" else parse_duration(args.time_budget)
    if args.window <= 0:
        raise UsageError(f"--window must be > 0, got {args.window}")
    if args.finalists < 0 or args.repeats < 0:
        raise UsageError("--finalists and --repeats must be >= 0")
    clear_ms, over_ms = verdict_bands(sla.tightened(args.margin).limit_ms)  # a trial: its own (with_bands)
    launch = Launch(
        args.launcher,
        local=LocalOptions(args.tritonserver),
        docker=DockerOptions(image=args.image, gpus=args.gpus, shm_size=args.shm_size, pull=args.pull),
        remote=RemoteOptions(args.url, args.grpc_url, args.metrics_url),
    )
    return RunSettings(
        model=args.model,
        repository=_repository(args),
        sla=sla,
        search_space=args.search_space,
        max_trials=args.max_trials,
        time_budget_s=budget,
        patience=args.patience,
        launch=launch,
        workload=workload_from_args(args),
        traffic=traffic_from_args(args),
        write_back=args.write_back,
        reports_dir=args.reports_dir,
        run_dir=args.resume,
        protocol=args.protocol,
        seed=args.seed,
        storage=args.storage,
        study_name=args.study_name,
        plan=WindowPlan(
            window_s=args.window,
            warmup_s=max(args.window, 1.0),
            percentile=sla.percentile,
            fail_ms=DECIDED * sla.limit_ms,
            clear_ms=clear_ms,
            over_ms=over_ms,
        ),
        finalists=args.finalists,
        repeats=args.repeats,
        margin=args.margin,
        open_loop_check=not args.no_open_loop_check,
        trt_build_timeout_s=args.trt_build_timeout_s,
    )


def resumed(settings: RunSettings, args: argparse.Namespace, record: RunRecord) -> RunSettings:
    """--resume without the workload, traffic or GPU memory flags: the run's own."""
    if not workload_given(args):
        settings = replace(settings, workload=record.workload)
    if not traffic_given(args):
        settings = replace(settings, traffic=record.traffic)
    if args.max_gpu_memory_mb is None:
        sla = replace(settings.sla, max_gpu_memory_mb=record.sla.max_gpu_memory_mb)
        settings = replace(settings, sla=sla)
    return settings


def _run(args: argparse.Namespace) -> int:
    from autotune import tuner
    from autotune._console import RichEvents, print_summary
    from autotune.launch import server_gpus
    from autotune.rundir import RunDir, find_unfinished

    settings = settings_from(args)
    if settings.run_dir is not None:
        settings = resumed(settings, args, RunDir.load(settings.run_dir).record)
    if settings.run_dir is None and not args.fresh:
        unfinished = find_unfinished(settings)
        if unfinished is not None:
            print(f"resuming the unfinished run {unfinished} (--fresh starts a new one)", file=sys.stderr)
            settings = replace(settings, run_dir=unfinished)
    gpus = server_gpus(settings.launch)
    if gpus.note:
        print(gpus.note, file=sys.stderr)
    prep = tuner.prepare(settings, server_gpus=gpus.count)
    count = len(prep.data.entries) if prep.data else 1
    entries = f" ({count} entries, sent in turn)" if count > 1 else ""
    print(f"workload: {settings.workload.label}{entries}; {settings.traffic.label}", file=sys.stderr)
    events = RichEvents(settings.sla.percentile, prep.scoring, settings.sla.max_gpu_memory_mb)
    try:
        with events:
            outcome = tuner.tune(prep, events)
    except KeyboardInterrupt:
        memory = settings.sla.max_gpu_memory_mb
        ceiling = f"--max-gpu-memory-mb {memory:g}" if memory else ""
        flags = " ".join(f for f in (ceiling, settings.workload.flags, settings.traffic.flags) if f)
        where = f" {flags}" if flags else ""
        where += f" --resume {events.run_dir}" if events.run_dir else ""
        print(
            f"\ninterrupted: servers stopped, finished trials kept; continue with: autotune run "
            f"--model {settings.model} --sla-p{settings.sla.percentile}-ms {settings.sla.limit_ms:g}{where}",
            file=sys.stderr,
        )
        return 130
    print_summary(outcome)
    if outcome.all_failed:
        raise MeasurementError(
            f"every trial failed: no config could be measured (reasons: {outcome.run_dir / 'report.html'})",
            hint="the first trial is your own config: look at its reason and server log",
        )
    if settings.write_back and outcome.winner is not None:
        return _write_back(outcome.run_dir, verify=True)
    return 0


def _apply(args: argparse.Namespace) -> int:
    if args.undo:
        from autotune.writeback import undo

        path = undo(args.run_dir)
        print(f"restored {path} from its backup")
        return 0
    return _write_back(args.run_dir, verify=not args.no_verify)


def _write_back(run_dir: Path, verify: bool) -> int:
    from autotune.writeback import write_back

    result = write_back(run_dir, verify=verify)
    print(result.diff or "(the winner's config equals the current one: nothing to change)")
    loaded = f" and loaded it in Triton ({result.verified_on})" if result.verified else ""
    print(f"wrote {result.path} (backup: {result.backup}){loaded}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from autotune.reload import reload_outcome
    from autotune.report import write_report

    outcome = reload_outcome(args.run_dir, args.storage)
    print(f"wrote {write_report(outcome.info, outcome.trials, outcome.run_dir)}")
    return 0


def _clean(args: argparse.Namespace) -> int:
    from autotune.launch import reap_leftovers

    servers, containers = reap_leftovers()
    print(
        f"stopped {len(servers)} server process(es) and {len(containers)} container(s) left by earlier runs"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    stopping.install()  # SIGTERM unwinds like Ctrl-C: servers stopped, trial marked
    try:
        args = build_parser().parse_args(argv)
        code: int = args.handler(args)
        return code
    except AutotuneError as exc:
        if debug:
            raise
        _print_error(exc)
        return exc.exit_code
    except Exception as exc:  # a bug of ours: one line and where to look, not a traceback
        if debug:
            raise
        print(
            f"autotune: internal error: {type(exc).__name__}: {exc} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            "\ninterrupted: servers stopped; finished trials are kept (resume with --resume RUN_DIR)",
            file=sys.stderr,
        )
        return 130


def _print_error(exc: AutotuneError) -> None:
    lines = str(exc).splitlines() or [type(exc).__name__]
    if isinstance(exc, UsageError):  # bad input: one line, hint included
        hint = f" ({exc.hint})" if exc.hint else ""
        print(f"autotune: error: {' '.join(lines)}{hint}", file=sys.stderr)
        return
    print(f"autotune: error: {lines[0]}", file=sys.stderr)
    if len(lines) > 1:
        print("\n".join("  " + line for line in lines[1:]), file=sys.stderr)
    if exc.hint:
        print(f"  hint: {exc.hint}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
