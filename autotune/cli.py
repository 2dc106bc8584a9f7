"""The command line: the only place that prints for people and turns errors into exit codes."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import shlex
import signal
import sys
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import __version__, stopping
from autotune.errors import (
    AutotuneError,
    DiskFullError,
    MachineLimitError,
    MeasurementError,
    NoConfigMetError,
    UsageError,
)
from autotune.objective import Sla
from autotune.results import FAIL
from autotune.settings import (
    LAUNCHERS,
    CoModel,
    DockerOptions,
    Launch,
    LocalOptions,
    RemoteOptions,
    RunOptions,
    RunSettings,
    add_traffic_arguments,
    add_workload_arguments,
    parse_duration,
    read_models,
    serving,
    traffic_from_args,
    traffic_given,
    workload_from_args,
    workload_given,
)

if TYPE_CHECKING:
    from autotune.results import Outcome
    from autotune.rundir import RunRecord

DEFAULTS = RunOptions()  # each option's default, in one place

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
failed: nothing to apply), 5 study storage, 6 write-back refused, 7 no config met the SLA
(measured, nothing to apply), 130 interrupted."""


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
    run.add_argument(
        "--model",
        action="append",
        help="the model's directory name in the repository (or the model's folder itself, e.g. "
        "model_repository/bertQA/, when --model-repository is not given); given again, several "
        "models served on one server, each loaded by its own clients with the same SLA and "
        "workload, tuned one after another in rounds (the others served beside it with their "
        "configs so far), every model held to its SLA at every point and their throughputs summed "
        "(--models gives each its own SLA, workload and weight); --resume: the run's",
    )
    run.add_argument(
        "--models",
        type=Path,
        default=None,
        metavar="FILE",
        help="several models on one server, each with its own SLA, workload and weight: a YAML "
        "list of {model, sla_p95_ms (or p50/p90/p99), weight (default 1), input_data, shape, "
        "batch_size}; an entry without an SLA or workload takes the command line's",
    )
    run.add_argument(
        "--model-repository",
        type=Path,
        default=None,
        help="Triton model repository (default: ./model_repository, else examples/model_repository)",
    )
    run.add_argument(
        "--step",
        default=None,
        metavar="MODEL",
        help="with an ensemble --model: the step (a composing model) whose config is tuned, every "
        "point measured end to end through the ensemble, the other steps served as they are "
        "(default: every step that limits it, in rounds: first the step of least capacity, then "
        "the one where requests spend the most time at the last winner's operating point, each "
        "round with the earlier rounds' winners and a budget of its own, until that is a step "
        "tuned already; apply writes every step's winner); --resume: the run's",
    )
    run.add_argument(
        "--composing-models",
        default=None,
        metavar="A,B",
        help="with a BLS --model (a python model that calls others): the models it calls, served "
        "with it; --step picks one of them (or the BLS model itself) to tune; without --step, rounds "
        "as for an ensemble's steps: first the model it calls of least capacity, then the one where "
        "requests spend the most time at the last winner's operating point, until that is one tuned "
        "already; while a model it calls is tuned the BLS model runs at least as many instances as "
        "each (apply writes it so); --resume: the run's",
    )
    sla = run.add_mutually_exclusive_group()
    for p in (50, 90, 95, 99):
        sla.add_argument(
            f"--sla-p{p}-ms",
            type=float,
            metavar="MS",
            dest=f"sla_p{p}",
            help=f"latency SLA on the {p}th percentile, in milliseconds (one is needed; --resume: the run's)"
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
    budget = run.add_argument_group(
        "budget (whichever ends first; --resume keeps the run's, and its other options, unless given)"
    )
    budget.add_argument("--max-trials", type=int, help=f"configs to try (default {DEFAULTS.max_trials})")
    budget.add_argument(
        "--time-budget",
        help="wall time for the whole run, counted over every --resume, e.g. 90s, 10m, 1h: the search "
        "stops in time for the race of the finalists and the open-loop check (their time read off the "
        "run's own trials); a race round or check once started runs to its end, and an overrun is said "
        f"(default {(DEFAULTS.time_budget_s or 0) / 60:g}m; 'none' for no limit)",
    )
    budget.add_argument(
        "--patience",
        type=int,
        help="stop after this many measured configs in a row without a goodput shown better "
        "than the best (its interval above the best's), once every one-step change of the "
        "finalists (--finalists: the best config and the ties the race takes; an instance more or fewer, "
        "unless that step lost elsewhere without batching, "
        "batching on or off, the next max batch size, queue delay or preferred size) is measured "
        f"too (default {DEFAULTS.patience}; 0: never)",
    )
    run.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        help="where Triton runs: a local process (default), a docker container, a remote server",
    )
    run.add_argument(
        "--protocol",
        choices=("http", "grpc"),
        help="protocol candidates are measured over (default http); near saturation the two can differ: "
        "grpc to compare with Model Analyzer (docs/loadgen.md)",
    )
    run.add_argument(
        "--write-back", action="store_true", default=None, help="write the winner into the model repository"
    )
    run.add_argument("--reports-dir", type=Path, default=Path("reports"), help="where run directories go")
    run.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue an interrupted run with its own model, SLA, repository, workload, traffic, "
        "launcher and options (the same command again also resumes the newest unfinished run of "
        "the model)",
    )
    run.add_argument(
        "--wait",
        action="store_true",
        help="if another autotune command is measuring on this machine, wait for it to finish "
        "(default: refuse, naming it: two measurements at once would each read the other's load)",
    )
    run.add_argument("--fresh", action="store_true", help="start a new run even if an unfinished one exists")
    run.add_argument("--seed", type=int, help="sampler seed, for reproducible searches")
    run.add_argument("--storage", help="Optuna storage URL shared by several workers (e.g. postgresql://...)")
    run.add_argument("--study-name", help="study name in --storage (workers of one study use the same)")
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the trials on a Ray cluster, several at once (auto: the cluster this machine runs; "
        "pip install 'autotune[ray]'). Each node offers trials with ray start --resources "
        "'{\"autotune\": N}' and reaches the model repository and --reports-dir at the same path "
        "(docs/fleet.md)",
    )
    run.add_argument(
        "--trials-at-once",
        type=int,
        metavar="N",
        help="with --ray: at most N trials at once (default: as many as the nodes offer)",
    )
    run.add_argument(
        "--margin",
        type=float,
        help="latency headroom kept under the SLA: while searching, a point counts as meeting "
        "the SLA only below (1 - margin) x the limit, and a finalist's race rounds must meet "
        "that too (else it races a level lower), so that "
        f"re-measuring the winner meets it (default {DEFAULTS.margin:g} = {DEFAULTS.margin * 100:g}%%). "
        "It also holds how another tool's client reads the latency higher than ours where it "
        "shares the server's cores (perf_analyzer on two cores: README); raise it if you will "
        "judge the winner with such a tool on such a machine",
    )
    run.add_argument(
        "--finalists",
        type=int,
        help=f"configs raced at the end: the best one and those not shown worse than it, at most "
        f"this many (default {DEFAULTS.finalists})",
    )
    run.add_argument(
        "--repeats",
        type=int,
        help=f"the race's rounds at most: each finalist re-measured once a round on a fresh server "
        f"(one server serves a round's finalists, each as a model of its own), until one is left; "
        f"the leader must meet the SLA there as a mean across servers: undecided, up to this many "
        f"rounds where it stands, then as many a level down "
        f"(default {DEFAULTS.repeats}; 0: no race, the best trial wins)",
    )
    run.add_argument(
        "--no-open-loop-check",
        dest="open_loop_check",
        action="store_false",
        default=None,
        help="--load concurrency: skip the short check, at the end, of what arrival rate the winner sustains "
        "within the SLA under Poisson arrivals (a few points on one more server)",
    )
    run.add_argument(
        "--window",
        type=float,
        help="measurement window in seconds; a point gets windows until its latency's interval "
        f"lies on one side of the SLA (default {DEFAULTS.window:g})",
    )
    run.add_argument(
        "--trt-build-timeout-s",
        type=float,
        metavar="S",
        help="how long a candidate with TensorRT (FP16) may take to load: its engine is built then, "
        "which takes minutes; a build that runs longer fails that trial, saying so "
        f"(default {DEFAULTS.trt_build_timeout_s:.0f})",
    )
    run.add_argument(
        "--output-check",
        choices=("on", "off"),
        help="before a candidate is measured, send it a sample of the workload and compare its answers "
        "with your config's: one that answers differently is infeasible (default on; off for models "
        "whose outputs are random by design)",
    )
    run.add_argument(
        "--output-tolerance",
        metavar="TOL",
        help="how far a float output may differ, times max(1, |your config's value|): one number for "
        "every float type, or TYPE=TOL pairs, e.g. FP16=1e-2,FP32=1e-3 (default FP64=1e-9, FP32=1e-4, "
        "FP16=1e-2, BF16=5e-2; a candidate that computes in FP16 is held to FP16's at least); integers, "
        "booleans and strings must match exactly",
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
    docker.add_argument("--image", help=f"Triton image (default {DockerOptions.image})")
    docker.add_argument("--gpus", help="'all' or GPU ids like 0,1 (default: none)")
    docker.add_argument("--shm-size", help=f"/dev/shm size (default {DockerOptions.shm_size})")
    docker.add_argument("--pull", action="store_true", default=None, help="pull the image if it is missing")
    remote = run.add_argument_group("--launcher remote (a running server in explicit model-control mode)")
    remote.add_argument("--url", help="HOST:HTTP_PORT of the server")
    remote.add_argument("--grpc-url", help="HOST:GRPC_PORT (default: the HTTP port + 1)")
    remote.add_argument(
        "--metrics-url",
        help="the server's Prometheus metrics, where its GPUs and their figures are read "
        "(default: http://HOST:8002/metrics, HOST of --url)",
    )


def _add_apply(sub: Any) -> None:
    apply = sub.add_parser(
        "apply",
        help="write a run's winning config into the model repository",
        description="Atomically write the winner's config.pbtxt (backup kept, verified by loading "
        "it in Triton), or --undo it. Only the fields the winner changes are rewritten: the rest of "
        "the file (comments, order, layout) stays byte for byte, and the diff printed is of the "
        "file as written.",
    )
    apply.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    apply.add_argument("--undo", action="store_true", help="restore the config saved before the write-back")
    apply.add_argument("--no-verify", action="store_true", help="skip loading the written config in Triton")
    apply.add_argument(
        "--force",
        action="store_true",
        help="write the winner even where the race did not show it better than your config "
        "(the run said: keep your config)",
    )
    apply.set_defaults(handler=_apply)


def _add_report(sub: Any) -> None:
    report = sub.add_parser("report", help="(re)write report.html and trials.csv of a run")
    report.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    report.add_argument("--storage", help="the study's storage URL, if it is not the run's SQLite file")
    report.set_defaults(handler=_report)


def _add_clean(sub: Any) -> None:
    clean = sub.add_parser(
        "clean", help="stop servers and containers, and remove staging folders, left behind by killed runs"
    )
    clean.set_defaults(handler=_clean)


# ---------------------------------------------------------------- handlers


def _sla(args: argparse.Namespace, record: RunRecord | None, required: bool = True) -> Sla:
    """The SLA given, else the resumed run's; its GPU memory limit, when not given, the run's own
    (not ``required``: None when none is given, for --models whose entries give theirs)."""
    kept = record.sla.max_gpu_memory_mb if record is not None else None
    memory = kept if args.max_gpu_memory_mb is None else args.max_gpu_memory_mb
    for p in (50, 90, 95, 99):
        value = getattr(args, f"sla_p{p}")
        if value is not None:
            return Sla(p, value, memory)
    if record is not None:
        return replace(record.sla, max_gpu_memory_mb=memory)
    if not required:
        return None  # type: ignore[return-value]
    raise UsageError("give an SLA, e.g. --sla-p95-ms 50 (or --resume RUN_DIR)")


def _composing(args: argparse.Namespace, record: RunRecord | None) -> tuple[str, ...]:
    """--composing-models as given (comma separated), else the resumed run's."""
    if args.composing_models is None:
        return record.composing if record is not None else ()
    names = tuple(n.strip() for n in args.composing_models.split(",") if n.strip())
    if not names:
        raise UsageError("--composing-models needs model names, e.g. --composing-models tokenizer,encoder")
    return names


def _model(args: argparse.Namespace, record: RunRecord | None) -> tuple[str, Path]:
    """The model's name and repository: as given (``--model`` may name the model's folder, as a
    shell completes it: ``cnn/``, or ``model_repository/cnn/`` without --model-repository),
    else the resumed run's, else ./model_repository or examples/model_repository."""
    given, repository = (args.model[0] if args.model else None), args.model_repository
    if given is None:
        if record is None:
            raise UsageError("give --model NAME (or --resume RUN_DIR)")
        return record.model, Path(repository) if repository is not None else record.repository
    name = given.rstrip("/")
    if "/" in name:
        folder = Path(name)
        if repository is not None or not folder.is_dir():
            raise UsageError(
                f"--model takes the model's name, its folder in the repository: got {given!r}",
                hint=f"--model {folder.name} --model-repository {folder.parent}",
            )
        return folder.name, folder.parent
    if not name:
        raise UsageError(f"--model takes the model's name, got {given!r}")
    if repository is not None:
        return name, Path(repository)
    if record is not None:
        return name, record.repository
    for candidate in (Path("model_repository"), Path("examples/model_repository")):
        if candidate.is_dir():
            return name, candidate
    raise UsageError("no model repository: give --model-repository DIR")


LAUNCH_FLAGS = (
    "launcher",
    "tritonserver",
    "image",
    "gpus",
    "shm_size",
    "pull",
    "url",
    "grpc_url",
    "metrics_url",
)


def _launch(args: argparse.Namespace, record: RunRecord | None) -> Launch:
    """The launcher and its options as given; none given: the resumed run's, else the defaults."""
    if record is not None and all(getattr(args, name) is None for name in LAUNCH_FLAGS):
        return record.launch
    default = DockerOptions()
    docker = DockerOptions(
        image=args.image or default.image,
        gpus=args.gpus or "",
        shm_size=args.shm_size or default.shm_size,
        pull=bool(args.pull),
    )
    remote = RemoteOptions(args.url or "", args.grpc_url or "", args.metrics_url or "")
    return Launch(
        args.launcher or "local", local=LocalOptions(args.tritonserver), docker=docker, remote=remote
    )


def _options(args: argparse.Namespace, record: RunRecord | None) -> RunOptions:
    """Each option as given, else the resumed run's own, else its default."""
    kept = record.options if record is not None else DEFAULTS
    if kept.rules != DEFAULTS.rules:
        raise UsageError(
            f"run {record.run_id if record else ''} was made by the {kept.rules} rules of an earlier "
            "autotune, which this one no longer has: it cannot be resumed; start a new run"
        )
    given = {f.name: getattr(args, f.name, None) for f in fields(RunOptions)}
    if args.time_budget is not None:
        budget = str(args.time_budget).strip().lower()
        given["time_budget_s"] = None if budget == "none" else parse_duration(args.time_budget)
    else:
        given["time_budget_s"] = kept.time_budget_s
    if args.search_space is not None:
        given["search_space"] = str(args.search_space)
    if args.output_check is not None:
        given["output_check"] = args.output_check == "on"
    return RunOptions(
        **{name: getattr(kept, name) if value is None else value for name, value in given.items()}
    )


def settings_from(args: argparse.Namespace, record: RunRecord | None = None) -> RunSettings:
    """The run's settings: each flag as given, else (``record``: a run to resume) the run's
    own, else its default."""
    from autotune.search.level_search import search_plan

    opts = _options(args, record)
    served = None
    if args.models is not None:
        if args.model:
            raise UsageError("give the models with --model (repeated) or --models FILE, not both")
        served = read_models(args.models, _sla(args, None, required=False), workload_from_args(args))
        args.model = [served[0].model]
    model, repository = _model(args, record)
    if opts.window <= 0:
        raise UsageError(f"--window must be > 0, got {opts.window}")
    if opts.finalists < 0 or opts.repeats < 0:
        raise UsageError("--finalists and --repeats must be >= 0")
    sla = served[0].sla if served else _sla(args, record)
    settings = RunSettings(
        model=model,
        repository=repository,
        sla=sla,
        step=args.step if args.step is not None else (record.step if record is not None else ""),
        composing=_composing(args, record),
        search_space=Path(opts.search_space) if opts.search_space else None,
        max_trials=opts.max_trials,
        time_budget_s=opts.time_budget_s,
        patience=opts.patience,
        launch=_launch(args, record),
        workload=workload_from_args(args) if record is None or workload_given(args) else record.workload,
        traffic=traffic_from_args(args) if record is None or traffic_given(args) else record.traffic,
        write_back=opts.write_back,
        reports_dir=args.reports_dir,
        run_dir=args.resume,
        protocol=args.protocol or (record.protocol if record is not None else "http"),
        seed=opts.seed,
        storage=args.storage,
        study_name=args.study_name,
        ray=args.ray,
        trials_at_once=args.trials_at_once,
        finalists=opts.finalists,
        repeats=opts.repeats,
        margin=opts.margin,  # checked here, before the SLA is tightened by it
        open_loop_check=opts.open_loop_check,
        trt_build_timeout_s=opts.trt_build_timeout_s,
        output_check=opts.output_check,
        output_tolerance=opts.output_tolerance,
        command=shlex.join(["autotune", *getattr(args, "argv", [])]),
        rounds=record.rounds if record is not None else False,
        tuned_steps=record.tuned_steps if record is not None else (),
        beside=record.beside if record is not None else (),
        weight=record.weight if record is not None else 1.0,
    )
    if served is not None:  # --models: the first model tuned first, the others beside it
        settings = serving(replace(settings, rounds=True), served[0], served[1:])
    elif args.model and len(args.model) > 1:
        settings = _models_beside(settings, [n.rstrip("/") for n in args.model[1:]])
    plan = search_plan(settings.sla, opts.window)  # a trial draws its limit
    return replace(settings, plan=plan)


def _models_beside(settings: RunSettings, names: list[str]) -> RunSettings:
    """``--model A --model B``: A tuned first, in rounds, the others served beside it with its
    SLA and workload."""
    model = settings.model
    if len(set([model, *names])) != len(names) + 1:
        raise UsageError(f"--model given twice for one model: {', '.join([model, *names])}")
    tuned = CoModel(model, settings.sla, 1.0, settings.workload)
    beside = tuple(CoModel(n, settings.sla, 1.0, settings.workload) for n in names)
    return serving(replace(settings, rounds=True), tuned, beside)


def resume_line(run_dir: Path, storage: str | None) -> str:
    """The command that continues the run in ``run_dir`` (its model, SLA, repository, workload,
    traffic, launcher and options come from its run.json): a storage whose password is hidden
    there must be given again."""
    line = f"autotune run --resume {shlex.quote(str(run_dir))}"
    if storage and "***" in storage:
        line += " --storage URL (the study's URL, with its password)"
    return line


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    """``autotune run``: one run, or the rounds of a pipeline or of models on one server
    (:mod:`autotune.rounds`) one after another;
    the write-back (--write-back) after the last."""
    from autotune import openfiles, rounds
    from autotune.rundir import RunDir, find_unfinished

    openfiles.raise_limit()  # each client holds a file here and one in the server, which inherits it
    record = RunDir.load(args.resume).record if args.resume is not None else None
    settings = settings_from(args, record)
    if settings.run_dir is None and not args.fresh:
        unfinished = find_unfinished(settings)
        if unfinished is not None:
            print(f"resuming the unfinished run {unfinished} (--fresh starts a new one)", file=sys.stderr)
            record = RunDir.load(unfinished).record
            settings = replace(settings_from(args, record), run_dir=unfinished)
        elif (later := rounds.unfinished_round(settings)) is not None:
            print(f"resuming the unfinished round {later.run_dir} (--fresh starts anew)", file=sys.stderr)
            record, settings = RunDir.load(later.run_dir).record, later  # type: ignore[arg-type]
    if settings.run_dir is None and not settings.step and not settings.beside:
        settings = rounds.first_round(settings, args.wait, _say)
    while True:
        code, outcome = _tune_once(args, settings, record)
        following = rounds.next_round(settings, outcome, _say) if code == 0 and outcome is not None else None
        if following is None:
            break
        settings, record = following, None
    if code == 0 and outcome is not None and settings.write_back and outcome.winner is not None:
        if RunDir.load(outcome.run_dir).record.shown_better is False:
            print("--write-back: keep your config: nothing was written", file=sys.stderr)
            return code
        return _write_back(outcome.run_dir, verify=True)
    return code


def _tune_once(
    args: argparse.Namespace, settings: RunSettings, record: RunRecord | None
) -> tuple[int, Outcome | None]:
    """One run, start to finish, its summary printed: the exit code and its outcome (None:
    stopped before it ended)."""
    from autotune import prepare, tuner
    from autotune._console import RichEvents, print_summary
    from autotune.launch import server_gpus

    gpus = server_gpus(settings.launch)
    if gpus.note:
        print(gpus.note, file=sys.stderr)
    prep = prepare.prepare(settings, server_gpus=gpus.count)
    count = len(prep.data.entries) if prep.data else 1
    entries = f" ({count} entries, sent in turn)" if count > 1 else ""
    print(f"workload: {settings.workload.label}{entries}; {settings.traffic.label}", file=sys.stderr)
    for note in prep.notes:
        print(f"note: {note}", file=sys.stderr)
    events = RichEvents(settings.sla.percentile, prep.scoring, settings.sla.max_gpu_memory_mb)
    try:
        with events:
            outcome = tuner.tune(prep, events, wait=args.wait)
    except KeyboardInterrupt:
        if events.run_dir is None:
            print("\ninterrupted before the run started: nothing was written", file=sys.stderr)
            return 130, None
        line = resume_line(events.run_dir, record.storage if record else settings.storage)
        print(f"\ninterrupted: servers stopped, finished trials kept; continue with: {line}", file=sys.stderr)
        return 130, None
    except (DiskFullError, MachineLimitError) as exc:
        where = events.run_dir or settings.run_dir
        first = "free space on that disk" if isinstance(exc, DiskFullError) else exc.hint
        exc.hint = (
            f"{first}, then continue with: {resume_line(where, settings.storage)}" if where else exc.hint
        )
        raise
    print_summary(outcome, apply_line=not settings.rounds)  # rounds: the last round's line says it
    if outcome.all_failed:
        raise MeasurementError(
            f"every trial failed: {_first_reason(outcome)}",
            hint=f"each trial's reason and server log: {outcome.run_dir / 'report.html'}",
        )
    if outcome.winner is None:
        raise _nothing_met(outcome, settings.sla)
    return 0, outcome


def _nothing_met(outcome: Outcome, sla: Sla) -> NoConfigMetError:
    """A run with no winner: how far the SLA lies from the closest point measured."""
    closest = outcome.closest(sla.percentile)
    where = ""
    if closest is not None:
        trial, point = closest
        latency = point.latency_ms(sla.percentile)
        where = (
            f": the lowest p{sla.percentile} measured was {latency:.3g} ms (trial {trial.number} at "
            f"{point.where}), {latency / sla.limit_ms:.3g}x the limit"
        )
    report = outcome.run_dir / "report.html"
    hint = f"--sla-p{sla.percentile}-ms is in milliseconds; the closest configs: {report}"
    return NoConfigMetError(f"no config met the SLA ({sla.label}){where}", hint=hint)


def _first_reason(outcome: Outcome) -> str:
    """Why the trials failed: the first one's reason (the baseline's, your own config), and how
    many others failed otherwise."""
    reasons = [t.reason for t in outcome.trials if t.state == FAIL and not t.interrupted and t.reason]
    if not reasons:
        return "no config could be measured"
    others = len([r for r in reasons[1:] if r != reasons[0]])
    return reasons[0] + (f" ({others} other trial(s) failed otherwise)" if others else "")


def _apply(args: argparse.Namespace) -> int:
    if args.undo:
        from autotune.writeback import undo

        paths, restored = undo(args.run_dir)
        names = ", ".join(map(str, paths))
        hold = "already holds the original config" if len(paths) == 1 else "already hold the original configs"
        backups = "its backup" if len(paths) == 1 else "their backups"
        print(f"restored {names} from {backups}" if restored else f"{names} {hold}")
        return 0
    return _write_back(args.run_dir, verify=not args.no_verify, force=args.force)


def _write_back(run_dir: Path, verify: bool, force: bool = False) -> int:
    from autotune.writeback import write_back

    result = write_back(run_dir, verify=verify, force=force)
    for written in result.written:
        print(written.diff or f"({written.path}: the winner's config equals it: nothing to change)")
    them = "them" if len(result.written) > 1 else "it"
    loaded = f" and loaded {them} in Triton ({result.verified_on})" if result.verified else ""
    lines = [f"wrote {w.path} (backup: {w.backup})" for w in result.written]
    print("\n".join(lines) + loaded)
    return 0


def _report(args: argparse.Namespace) -> int:
    from autotune.reload import reload_outcome
    from autotune.report import write_report

    outcome = reload_outcome(args.run_dir, args.storage)
    print(f"wrote {write_report(outcome.info, outcome.trials, outcome.run_dir)}")
    return 0


def _clean(args: argparse.Namespace) -> int:
    from autotune.launch import reap_leftovers
    from autotune.staging import reap, stage_root

    servers, containers = reap_leftovers()
    stages = reap(stage_root())
    print(
        f"stopped {len(servers)} server process(es) and {len(containers)} container(s), and removed "
        f"{len(stages)} staging folder(s), left by earlier runs"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    restore = stopping.install()  # SIGTERM unwinds like Ctrl-C: servers stopped, trial marked
    with contextlib.suppress(ValueError, AttributeError):  # kill -USR2 PID: every thread's stack
        faulthandler.register(signal.SIGUSR2, all_threads=True)
    try:
        return _main(argv, debug)
    finally:
        restore()


def _main(argv: list[str], debug: bool) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.argv = argv  # the run's record shows the command line that made it
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
