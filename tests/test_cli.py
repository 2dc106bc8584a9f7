"""The command line on bad input: one clear line, exit code 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.cli import main

BAD_RUNS = [
    (["--model", "nope"], "model 'nope' not found"),
    (["--model-repository", "{tmp}/absent"], "model repository not found"),
    (["--sla-p95-ms", "0"], "SLA must be > 0"),
    (["--sla-p95-ms", "-3"], "SLA must be > 0"),
    (["--sla-p95-ms", "1e9"], "over an hour"),
    (["--sla-p95-ms", "fast"], "invalid float value"),
    (["--time-budget", "soon"], "cannot read time budget"),
    (["--time-budget", "0m"], "cannot read time budget"),
    (["--max-trials", "0"], "--max-trials must be >= 1"),
    (["--patience", "-1"], "--patience must be >= 0"),
    (["--launcher", "kubernetes"], "invalid choice"),
    (["--launcher", "remote"], "needs --url"),
    (["--search-space", "{tmp}/none.yaml"], "search space file not found"),
    (["--search-space", "{tmp}/bad_key.yaml"], "unknown key 'instances'"),
    (["--search-space", "{tmp}/empty_range.yaml"], "min 4 > max 1"),
    (["--search-space", "{tmp}/pref.yaml"], "> the largest max_batch_size"),
    (["--margin", "0.9"], "--margin must be in"),
    (["--margin", "1.5"], "--margin must be in [0, 0.5), got 1.5"),  # not an SLA it tightened below 0
    (["--model", "{tmp}/toy/"], "--model takes the model's name"),  # a folder that is not there
    (["--window", "0"], "--window must be > 0"),
    (["--trt-build-timeout-s", "0"], "--trt-build-timeout-s must be > 0"),
    (["--protocol", "smtp"], "invalid choice"),
    (["--resume", "{tmp}"], "not a run directory"),
    (["--max-gpu-memory-mb", "-1"], "--max-gpu-memory-mb must be >= 0"),
    # the output check
    (["--output-check", "maybe"], "invalid choice: 'maybe'"),
    (["--output-tolerance", "-1"], "--output-tolerance '-1': expected a number >= 0"),
    (["--output-tolerance", "loose"], "--output-tolerance 'loose': expected a number >= 0"),
    (["--output-tolerance", "INT8=1"], "'INT8' is not a float type"),
    # the workload: checked against the inputs config.pbtxt declares, before anything starts
    (["--input-data", "{tmp}/missing.json"], "--input-data: no such file or directory"),
    (["--input-data", "{tmp}/malformed.json"], "not perf_analyzer input data"),
    (["--input-data", "{tmp}/unknown_input.json"], "entry 1: model 'toy' has no input 'z'"),
    (["--input-data", "{tmp}/missing_input.json"], "entry 0: no data for input 'x'"),
    (["--input-data", "{tmp}/wrong_shape.json"], "input 'x': shape [8] does not fit the model's [16]"),
    (["--input-data", "{tmp}/bad_b64.json"], "'b64' is not base64"),
    (["--batch-size", "9"], "--batch-size 9 exceeds model 'toy''s max_batch_size 8"),
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--shape", "x:32"], "--shape x:32 does not fit the model's dims [16]"),
    (["--shape", "nope:4"], "has no input 'nope'"),
    (["--shape", "x"], "--shape must be NAME:D1,D2"),
    # the traffic: arrivals at a rate
    (["--load", "burst"], "invalid choice"),
    (["--load", "concurrency", "--request-intervals", "{tmp}/intervals.txt"], "not --load concurrency"),
    (["--load", "concurrency", "--distribution", "constant"], "--distribution shapes arrivals at a rate"),
    (["--distribution", "constant", "--request-intervals", "{tmp}/intervals.txt"], "not both"),
    (["--request-intervals", "{tmp}/absent.txt"], "--request-intervals: no such file"),
    (["--request-intervals", "{tmp}/empty.txt"], "no intervals"),
    (["--request-intervals", "{tmp}/zeros.txt"], "not all 0"),
    (["--request-intervals", "{tmp}/words.txt"], "line 2: 'soon' is not a whole number"),
    (["--request-intervals", "{tmp}/negative.txt"], "line 1: '-5' is not a whole number"),
    (
        ["--load", "rate", "--search-space", "{tmp}/zero_rate.yaml"],
        "load.request_rate.min: expected a rate > 0",
    ),
    (["--load", "rate", "--search-space", "{tmp}/negative_rate.yaml"], "expected a rate > 0"),
    (["--load", "rate", "--search-space", "{tmp}/rate_range.yaml"], "load.request_rate: min 50 > max 5"),
]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "bad_key.yaml").write_text("instances: [1]\n")
    (tmp_path / "empty_range.yaml").write_text("instance_group:\n  count: {min: 4, max: 1}\n")
    (tmp_path / "pref.yaml").write_text(
        "max_batch_size: [4]\ndynamic_batching:\n  preferred_batch_size: [16]\n"
    )
    x = [0.5] * 16
    (tmp_path / "malformed.json").write_text('{"data": [{"x": [1,')
    (tmp_path / "unknown_input.json").write_text(json.dumps({"data": [{"x": x}, {"x": x, "z": [1]}]}))
    (tmp_path / "missing_input.json").write_text(json.dumps({"data": [{}]}))
    short = {"x": {"content": x[:8], "shape": [8]}}
    (tmp_path / "wrong_shape.json").write_text(json.dumps({"data": [short]}))
    (tmp_path / "bad_b64.json").write_text(json.dumps({"data": [{"x": {"b64": "not base64!"}}]}))
    (tmp_path / "intervals.txt").write_text("1000\n2000\n")
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "zeros.txt").write_text("0\n0\n")
    (tmp_path / "words.txt").write_text("1000\nsoon\n")
    (tmp_path / "negative.txt").write_text("-5\n")
    (tmp_path / "zero_rate.yaml").write_text("load:\n  request_rate: {min: 0, max: 100}\n")
    (tmp_path / "negative_rate.yaml").write_text("load:\n  request_rate: {max: -10}\n")
    (tmp_path / "rate_range.yaml").write_text("load:\n  request_rate: {min: 50, max: 5}\n")
    return tmp_path


def _argv(extra: list[str], toy_repo: Path, tmp: Path) -> list[str]:
    base = {
        "--model": "toy",
        "--model-repository": str(toy_repo),
        "--sla-p95-ms": "50",
        "--reports-dir": str(tmp / "reports"),
    }
    extra = [e.format(tmp=tmp) for e in extra]
    for key in list(base):
        if key in extra:
            base.pop(key)
    return ["run", *[x for kv in base.items() for x in kv], *extra]


@pytest.mark.parametrize(("extra", "message"), BAD_RUNS)
def test_bad_run_input(
    extra: list[str], message: str, toy_repo: Path, files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (toy_repo / "toy" / "config.pbtxt").read_bytes()
    code = main(_argv(extra, toy_repo, files))
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert err.startswith("autotune: error: ") and len(err.strip().splitlines()) == 1
    assert not (files / "reports").exists()
    assert (toy_repo / "toy" / "config.pbtxt").read_bytes() == before


def test_malformed_config(toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (toy_repo / "toy" / "config.pbtxt").write_text("max_batch_size: eight\n")
    assert main(_argv([], toy_repo, tmp_path)) == 2
    assert "malformed config" in capsys.readouterr().err


def test_invalid_config(toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = toy_repo / "toy" / "config.pbtxt"
    path.write_text(
        path.read_text().replace("max_batch_size: 8", "max_batch_size: 0") + "dynamic_batching {}\n"
    )
    assert main(_argv([], toy_repo, tmp_path)) == 2
    assert "dynamic_batching needs max_batch_size > 0" in capsys.readouterr().err


def test_reports_dir_not_writable(toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_text("")
    code = main(_argv(["--reports-dir", str(target / "sub")], toy_repo, tmp_path))
    assert code == 2 and "not writable" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["run"], ["apply"], ["frobnicate"]])
def test_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("autotune: error: ")


def test_apply_on_a_non_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_help_explains(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for words in (
        "--sla-p95-ms",
        "--write-back",
        "--time-budget",
        "--resume",
        "exit codes",
        "--input-data",
        "--shape",
        "--batch-size",
        "perf_analyzer",
        "--load",
        "--distribution",
        "--request-intervals",
        "scheduled send",
        "--trt-build-timeout-s",
        "(default 900)",
        "gpu (instances per GPU",
        "--max-gpu-memory-mb",
        "peak GPU memory",
    ):
        assert words in out


def test_help_claims_no_threshold_but_the_margin(capsys: pytest.CaptureFixture[str]) -> None:
    """Better, tied and settled are verdicts on intervals: the only share --help states is
    --margin's."""
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "without a goodput shown better than the best" in out
    assert out.count("%") == out.count("10%") >= 1, "no other threshold is claimed"


def test_launcher_options_are_grouped_by_launcher(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    groups = {
        "--launcher local": ["--tritonserver"],
        "--launcher docker": ["--image", "--gpus"],
        "--launcher remote": ["--url", "--grpc-url"],
    }
    for group, options in groups.items():
        section = out[out.index(group) :]
        assert all(option in section.split("\n\n")[0] for option in options), (group, section[:400])


def test_the_gpu_memory_limit_is_part_of_the_sla_and_a_resume_keeps_the_runs_own(tmp_path: Path) -> None:
    from autotune.cli import build_parser, settings_from
    from autotune.objective import Sla
    from autotune.rundir import RunRecord
    from autotune.settings import Launch

    def settings(*extra: str) -> tuple[Any, Any]:
        args = build_parser().parse_args(["run", "--model", "toy", "--model-repository", str(tmp_path),
                                          "--sla-p95-ms", "50", *extra])  # fmt: skip
        return args, settings_from(args)

    assert settings("--max-gpu-memory-mb", "8000")[1].sla == Sla(95, 50.0, 8000.0)
    assert settings()[1].sla == Sla(95, 50.0) == settings("--max-gpu-memory-mb", "0")[1].sla
    record = RunRecord(
        run_id="r", model="toy", repository=tmp_path, sla=Sla(95, 50.0, 8000.0), launch=Launch(),
        protocol="http", study_name="s", storage=None, original_config="", original_digest="", started="",
    )  # fmt: skip
    args, _ = settings()
    assert settings_from(args, record).sla == Sla(95, 50.0, 8000.0)  # not given: the run's own
    args, _ = settings("--max-gpu-memory-mb", "0")
    assert settings_from(args, record).sla == Sla(95, 50.0)  # given: the resume is refused as a change


def _record(tmp_path: Path, repo: Path) -> Any:
    """A run directory of a run started with non-default flags; its record."""
    from autotune.cli import build_parser, settings_from
    from autotune.rundir import RunDir, RunRecord
    from autotune.settings import RunOptions

    argv = ["run", "--model", "toy", "--model-repository", str(repo), "--sla-p99-ms", "40",
            "--max-trials", "3", "--time-budget", "4m", "--window", "0.25", "--margin", "0.2",
            "--no-open-loop-check", "--batch-size", "2", "--input-data", "zero", "--load", "rate",
            "--launcher", "docker", "--image", "mine:1", "--write-back"]  # fmt: skip
    settings = settings_from(build_parser().parse_args(argv))
    record = RunRecord(
        run_id="20261127-101010", model="toy", repository=repo.resolve(), sla=settings.sla,
        launch=settings.launch, protocol="http", study_name="s", storage=None, original_config="",
        original_digest="", started="",
        workload=settings.workload, traffic=settings.traffic, options=RunOptions.of(settings),
    )  # fmt: skip
    return settings, RunDir.create(tmp_path / "my runs" / "20261127-101010", record)


def test_the_printed_resume_line_resumes_the_run_as_it_was(toy_repo: Path, tmp_path: Path) -> None:
    """Ctrl-C prints `autotune run --resume DIR`: that line alone gives back the run's model,
    SLA, repository, budget, windows, margin, workload, traffic and launcher."""
    import shlex
    from dataclasses import replace

    from autotune.cli import build_parser, resume_line, settings_from

    original, run = _record(tmp_path, toy_repo)
    typed = shlex.split(resume_line(run.path, None))
    assert typed[:3] == ["autotune", "run", "--resume"]
    args = build_parser().parse_args(typed[1:])
    resumed = settings_from(args, run.load(args.resume).record)
    assert resumed == replace(original, run_dir=run.path, repository=toy_repo.resolve())
    assert resumed.max_trials == 3 and resumed.time_budget_s == 240 and resumed.plan.window_s == 0.25
    again = settings_from(build_parser().parse_args([*typed[1:], "--max-trials", "5"]), run.record)
    assert again.max_trials == 5 and again.margin == 0.2  # a flag given again wins, the rest is kept


def test_a_run_made_by_the_stability_rules_is_not_resumed(toy_repo: Path, tmp_path: Path) -> None:
    """A run recorded by the removed stability rules (its options say so, or predate the field)
    has no window samples to judge: resuming it is one clear refusal, not a wrong winner."""
    from dataclasses import replace

    from autotune.cli import build_parser, settings_from
    from autotune.errors import UsageError
    from autotune.settings import RACE_ROUNDS, RunOptions

    _, run = _record(tmp_path, toy_repo)
    args = build_parser().parse_args(["run", "--resume", str(run.path)])
    assert settings_from(args, run.record).repeats == RACE_ROUNDS  # made by this version: resumed
    old = replace(run.record, options=replace(run.record.options, rules="stability"))
    with pytest.raises(UsageError, match="stability rules of an earlier autotune"):
        settings_from(args, old)
    assert RunOptions.from_json({"max_trials": 5}).rules == "stability"  # recorded before the field
    assert RunOptions.from_json(RunOptions().to_json()) == RunOptions()


def test_a_model_named_by_its_folder(toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--model toy/`, as a shell completes it; `--model repo/toy/` without --model-repository."""
    from autotune.cli import build_parser, settings_from

    def settings(*argv: str) -> Any:
        return settings_from(build_parser().parse_args(["run", "--sla-p95-ms", "50", *argv]))

    assert settings("--model", "toy/", "--model-repository", str(toy_repo)).model == "toy"
    found = settings("--model", f"{toy_repo}/toy/")
    assert (found.model, found.repository) == ("toy", toy_repo)
    monkeypatch.chdir(toy_repo)
    assert settings("--model", "toy/", "--model-repository", ".").model == "toy"


def test_the_race_has_six_rounds_unless_repeats_is_given(toy_repo: Path) -> None:
    from autotune.cli import build_parser, settings_from
    from autotune.settings import RACE_ROUNDS

    def repeats(*argv: str) -> int:
        base = ["run", "--model", "toy", "--model-repository", str(toy_repo), "--sla-p95-ms", "50"]
        return settings_from(build_parser().parse_args([*base, *argv])).repeats

    assert repeats() == RACE_ROUNDS == 6
    assert repeats("--repeats", "4") == 4


def test_a_model_folder_without_a_version_folder_is_refused_in_tritons_words(
    toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = toy_repo / "toy"
    (model / "1" / "model.py").rename(model / "model.py")
    (model / "1").rmdir()
    assert main(_argv([], toy_repo, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "no version folder" in err and "No model version was found" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "reports").exists()


def test_batch_sizes_all_below_the_requests_are_named(toy_repo: Path, tmp_path: Path) -> None:
    from autotune.cli import build_parser, settings_from
    from autotune.prepare import prepare

    space = tmp_path / "space.yaml"
    space.write_text("max_batch_size: [2, 4]\n")
    prep = prepare(settings_from(build_parser().parse_args(_argv(["--search-space", str(space), "-b", "8"],
                                                                  toy_repo, tmp_path))))  # fmt: skip
    assert prep.space.max_batch_size == (8,)
    assert prep.notes == ("the search space's max_batch_size 2, 4 cannot take requests of --batch-size 8: "
                          "trying max_batch_size 8",)  # fmt: skip


def test_a_shape_too_large_for_memory_is_bad_input(
    toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = toy_repo / "toy" / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 16 ]", "dims: [ -1 ]"))
    assert main(_argv(["--shape", "x:100000000000"], toy_repo, tmp_path)) == 2
    err = capsys.readouterr().err
    assert "--shape x:100000000000: one request would need 372.5 GiB of data" in err and "available" in err
