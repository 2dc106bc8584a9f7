"""autotune.pipeline: an ensemble's or a BLS model's composing models, read and checked from the
repository before any server starts (pure logic: config files on disk)."""

from __future__ import annotations

import json
from dataclasses import replace
from html import unescape
from pathlib import Path

import pytest

from autotune.errors import ConfigError, UsageError
from autotune.model_config import load_config
from autotune.pipeline import BLS, ENSEMBLE, for_step, read_pipeline
from tests.conftest import changed_files, files_of


def _model(repo: Path, name: str, text: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{text}')


def _tensor(kind: str, name: str, dtype: str = "TYPE_FP32") -> str:
    return f'{kind} [{{ name: "{name}" data_type: {dtype} dims: [ -1 ] }}]\n'


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'step [{{ model_name: "{model}" model_version: -1 {ins} {outs} }}]'


def _pipeline_repo(tmp_path: Path, steps: list[str], ensemble_mbs: int = 8) -> Path:
    """pre (TEXT: BYTES -> IDS: INT64), encoder (IDS -> LOGITS: FP32), post (LOGITS -> ANSWER:
    BYTES), smooth (X: FP32 -> Y: FP32), and an ensemble "qa" of ``steps``."""
    repo = tmp_path / "repo"
    py = 'backend: "python"\nmax_batch_size: 16\n'
    _model(repo, "pre", py + _tensor("input", "TEXT", "TYPE_STRING") + _tensor("output", "IDS", "TYPE_INT64"))
    _model(repo, "encoder", py + _tensor("input", "IDS", "TYPE_INT64") + _tensor("output", "LOGITS"))
    _model(repo, "post", py + _tensor("input", "LOGITS") + _tensor("output", "ANSWER", "TYPE_STRING"))
    _model(repo, "smooth", py + _tensor("input", "X") + _tensor("output", "Y"))
    ensemble = (
        f'platform: "ensemble"\nmax_batch_size: {ensemble_mbs}\n'
        + _tensor("input", "QUESTION", "TYPE_STRING")
        + _tensor("output", "ANSWER", "TYPE_STRING")
        + "ensemble_scheduling {\n"
        + "\n".join(steps)
        + "\n}\n"
    )
    _model(repo, "qa", ensemble)
    return repo


GOOD = [
    _step("post", {"LOGITS": "logits"}, {"ANSWER": "ANSWER"}),  # listed out of order: data decides
    _step("pre", {"TEXT": "QUESTION"}, {"IDS": "ids"}),
    _step("encoder", {"IDS": "ids"}, {"LOGITS": "logits"}),
]


def test_an_ensembles_members_come_in_the_order_data_flows_through_them(tmp_path: Path) -> None:
    repo = _pipeline_repo(tmp_path, GOOD)
    found = read_pipeline(repo, "qa")
    assert found is not None and found.kind == ENSEMBLE
    assert found.members == ("pre", "encoder", "post")
    assert read_pipeline(repo, "encoder") is None  # a model that serves alone
    bls = read_pipeline(repo, "encoder", ["pre", "post", "pre"])
    assert bls is not None and bls.kind == BLS and bls.members == ("pre", "post")


@pytest.mark.parametrize(
    ("steps", "ensemble_mbs", "message"),
    [
        ([*GOOD[:2], _step("missing", {"IDS": "ids"}, {"LOGITS": "logits"})], 8,
         r"qa: step 3 names 'missing', which is not in .*repo"),
        ([GOOD[0], GOOD[1], _step("encoder", {"IDS": "ids"}, {"SCORES": "logits"})], 8,
         r"step 3 \(encoder\) maps output 'SCORES', which encoder does not have"),
        ([GOOD[0], _step("pre", {"TEXT": "QUESTION"}, {"IDS": "ids"}),
          _step("encoder", {"IDS": "QUESTION"}, {"LOGITS": "logits"})], 8,
         r"step 3 \(encoder\) takes 'IDS' as TYPE_INT64, but 'QUESTION' from the ensemble's input is "
         r"TYPE_STRING"),
        ([_step("post", {"LOGITS": "logits"}, {"ANSWER": "ANSWER"}),
          _step("encoder", {"IDS": "ids"}, {"LOGITS": "logits"})], 8,
         r"step 2 \(encoder\) consumes 'ids', which no ensemble input or step produces"),
        ([*GOOD, _step("smooth", {"X": "a"}, {"Y": "b"}), _step("smooth", {"X": "b"}, {"Y": "a"})], 8,
         r"qa: its steps form a cycle \(smooth, smooth each wait"),
        ([*GOOD[:2], _step("qa", {"QUESTION": "ids"}, {"ANSWER": "logits"})], 8,
         r"names the ensemble itself"),
        (GOOD, 32, r"max_batch_size 32, but its step pre has 16"),
    ],
)  # fmt: skip
def test_a_broken_ensemble_is_one_line_before_any_server(
    tmp_path: Path, steps: list[str], ensemble_mbs: int, message: str
) -> None:
    repo = _pipeline_repo(tmp_path, steps, ensemble_mbs)
    with pytest.raises(ConfigError, match=message) as caught:
        read_pipeline(repo, "qa")
    assert "\n" not in str(caught.value) and caught.value.exit_code == 2


def test_composing_models_must_be_in_the_repository(tmp_path: Path) -> None:
    repo = _pipeline_repo(tmp_path, GOOD)
    with pytest.raises(ConfigError, match=r"encoder: --composing-models names 'tokenizer', which is not in"):
        read_pipeline(repo, "encoder", ["pre", "tokenizer"])
    with pytest.raises(ConfigError, match="is an ensemble"):
        read_pipeline(repo, "qa", ["pre"])
    with pytest.raises(ConfigError, match="names 'encoder' itself"):
        read_pipeline(repo, "encoder", ["encoder"])


def test_bad_steps_and_composing_models_are_one_line_before_any_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step that is not one of the ensemble's, --step on a model that is not an ensemble,
    composing models not in the repository, a broken ensemble: one line each, exit code 2,
    before any server, nothing written."""
    from autotune.cli import main

    repo = _pipeline_repo(tmp_path, GOOD)
    argv = ["run", "--model", "qa", "--model-repository", str(repo), "--sla-p95-ms", "50",
            "--reports-dir", str(tmp_path / "reports")]  # fmt: skip
    with pytest.raises(UsageError, match="give the step to tune with --step"):  # a library call
        for_step(repo, load_config(repo, "qa"), "")
    assert main([*argv, "--step", "tokenizer"]) == 2
    assert (
        "--step 'tokenizer' is not a step of ensemble 'qa' (pre -> encoder -> post)"
        in capsys.readouterr().err
    )
    assert main([*argv[:2], "encoder", *argv[3:], "--step", "pre"]) == 2
    assert "model 'encoder' is not an ensemble" in capsys.readouterr().err
    assert main([*argv[:2], "encoder", *argv[3:], "--composing-models", "pre,tokenizer"]) == 2
    assert "encoder: --composing-models names 'tokenizer', which is not in" in capsys.readouterr().err
    assert main([*argv[:2], "encoder", *argv[3:], "--composing-models", "pre", "--step", "post"]) == 2
    assert "--step 'post' is not 'encoder' or one of pre" in capsys.readouterr().err
    assert main([*argv[:2], "encoder", *argv[3:], "--composing-models", " , "]) == 2
    assert "--composing-models needs model names" in capsys.readouterr().err
    broken = _pipeline_repo(
        tmp_path / "broken", [*GOOD[:2], _step("missing", {"IDS": "ids"}, {"LOGITS": "logits"})]
    )
    assert main([*argv[:4], str(broken), *argv[5:]]) == 2
    err = capsys.readouterr().err
    assert "step 3 names 'missing', which is not in" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "reports").exists()


def _toy_pipeline(repo: Path, per_item_ms: str = "2") -> Path:
    """``pipe``, an ensemble of two toy steps in ``repo`` (tests/models copied): ``toy`` (x -> y),
    then ``slow``, a toy that costs ``per_item_ms`` per item (toy: 0.5; both 4 ms per execution)."""
    import shutil

    shutil.copytree(repo / "toy", repo / "slow")
    config = (repo / "slow" / "config.pbtxt").read_text()
    config = config.replace('name: "toy"', 'name: "slow"')
    config = config.replace('string_value: "0.5"', f'string_value: "{per_item_ms}"')
    (repo / "slow" / "config.pbtxt").write_text(config)
    tensor = "data_type: TYPE_FP32 dims: [ 16 ]"
    _model(
        repo,
        "pipe",
        f'platform: "ensemble"\nmax_batch_size: 8\ninput [{{ name: "INPUT" {tensor} }}]\n'
        f'output [{{ name: "OUTPUT" {tensor} }}]\nensemble_scheduling {{\n'
        + _step("toy", {"x": "INPUT"}, {"y": "mid"})
        + "\n"
        + _step("slow", {"x": "mid"}, {"y": "OUTPUT"})
        + "\n}\n",
    )
    return repo


@pytest.mark.integration
def test_a_step_of_an_ensemble_is_tuned_end_to_end_and_written_back_alone(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """--step: the step's config varies, the ensemble and its other step are served as they are,
    every point is measured through the ensemble (its answers checked against your pipeline's,
    each step's time from Triton's statistics, the bottleneck named);
    apply writes only the step's config (verified by loading the whole pipeline), --undo
    restores it byte for byte; no file of the repository changes otherwise."""
    from autotune.cli import main
    from autotune.reload import reload_outcome
    from tests.conftest import servers_of, staged_servers

    repo = _toy_pipeline(toy_repo)
    before = files_of(repo)
    reports = tmp_path / "reports"
    argv = ["run", "--model", "pipe", "--step", "slow", "--model-repository", str(repo),
            "--sla-p95-ms", "80", "--reports-dir", str(reports), "--search-space", str(small_space),
            "--window", "0.5", "--finalists", "1", "--repeats", "2", "--no-open-loop-check",
            "--max-trials", "3", "--seed", "1"]  # fmt: skip
    assert main(argv) == 0
    (run_dir,) = list((reports / "pipe").iterdir())
    outcome = reload_outcome(run_dir)
    assert outcome.winner is not None and outcome.baseline is not None
    assert outcome.winner.goodput() > 1.2 * outcome.baseline.goodput()  # the bottleneck step tuned
    record = json.loads((run_dir / "run.json").read_text())
    assert record["model"] == "pipe" and record["step"] == "slow"
    html = unescape((run_dir / "report.html").read_text())
    assert "step slow of ensemble pipe (toy -> slow)" in html and "Where the time goes, step by step" in html
    base = outcome.baseline.best  # your pipeline: the slow step is where requests wait
    assert (
        base is not None and set(base.server.steps) == {"toy", "slow"} and base.server.bottleneck() == "slow"
    )
    assert files_of(repo) == before
    assert main(["apply", str(run_dir)]) == 0
    changed = changed_files(repo, before)
    assert [p.relative_to(repo).as_posix() for p in changed if ".autotune-" not in p.name] == [
        "slow/config.pbtxt"
    ]
    assert (run_dir / "winner.pbtxt").read_text() == (repo / "slow" / "config.pbtxt").read_text()
    assert main(["apply", "--undo", str(run_dir)]) == 0
    assert (repo / "slow" / "config.pbtxt").read_bytes() == before[repo / "slow" / "config.pbtxt"]
    assert servers_of(run_dir) == [] and staged_servers() == []


@pytest.mark.integration
def test_without_step_an_ensemble_is_tuned_in_rounds_and_written_back_whole(
    toy_repo: Path, tmp_path: Path, small_space: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --step: round 1 tunes the step requests wait for at your config's operating point,
    under load (slow: 5.5 ms a request against toy's 4.5, one instance each); its winner (two
    instances, or batching) leaves toy the step requests wait for, so round 2 tunes toy with
    slow's winner served; then slow limits again, a step tuned already, and the rounds end. No
    file of the repository changes; apply on the last round writes both steps' configs, --undo
    restores both byte for byte."""
    from autotune.cli import main
    from autotune.rundir import RunDir
    from tests.conftest import staged_servers

    repo = _toy_pipeline(toy_repo, per_item_ms="1.5")
    before = files_of(repo)
    reports = tmp_path / "reports"
    argv = ["run", "--model", "pipe", "--model-repository", str(repo), "--sla-p95-ms", "80",
            "--reports-dir", str(reports), "--search-space", str(small_space), "--window", "0.5",
            "--finalists", "1", "--repeats", "1", "--no-open-loop-check", "--max-trials", "3",
            "--seed", "1"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "round 1: at your config's operating point, concurrency" in err and "bottleneck: slow" in err
    assert "; tunes slow" in err
    assert "round 2: at the winner's operating point bottleneck: toy" in err and "tuning toy" in err
    assert "rounds done: at the winner's operating point bottleneck: slow" in err
    first, second = sorted((reports / "pipe").iterdir())
    one, two = RunDir.load(first).record, RunDir.load(second).record
    assert (one.step, one.rounds, one.tuned_steps) == ("slow", True, ())
    assert two.step == "toy" and two.rounds and [t.model for t in two.tuned_steps] == ["slow"]
    assert two.tuned_steps[0].config == (first / "winner.pbtxt").read_text()
    assert "slow (run " in two.made["tuned in earlier rounds"]
    assert files_of(repo) == before

    capsys.readouterr()
    assert main(["apply", str(second)]) == 0
    out = capsys.readouterr().out
    assert "toy/config.pbtxt" in out and "slow/config.pbtxt" in out and "loaded them in Triton" in out
    changed = changed_files(repo, before)
    assert sorted(p.relative_to(repo).as_posix() for p in changed if ".autotune-" not in p.name) == [
        "slow/config.pbtxt", "toy/config.pbtxt"
    ]  # fmt: skip
    assert (repo / "slow" / "config.pbtxt").read_text() == (first / "winner.pbtxt").read_text()
    assert (repo / "toy" / "config.pbtxt").read_text() == (second / "winner.pbtxt").read_text()
    assert main(["apply", "--undo", str(second)]) == 0
    assert {p: p.read_bytes() for p in before} == before
    assert staged_servers() == []


def _model_stats(name: str, queue_ns: int, infer_ns: int, count: int) -> dict[str, object]:
    phases = {"success": count, "queue": queue_ns, "compute_input": 0, "compute_infer": infer_ns,
              "compute_output": 0}  # fmt: skip
    return {
        "name": name,
        "version": "1",
        "execution_count": count,
        "inference_stats": {
            p: {"count": count, "ns": ns if p != "success" else 0} for p, ns in phases.items()
        },
        "batch_stats": [],
    }


def test_a_point_breaks_an_ensembles_time_down_by_step_and_names_the_bottleneck() -> None:
    """Triton's statistics of every model: the ensemble's own are the point's, each step's its
    own; the step a request spends the most time in is the bottleneck; a point keeps them
    through its record."""
    from autotune.loadgen._stats import StatsSnapshot, breakdown
    from autotune.points import Point, bottleneck_line

    def doc(n: int) -> dict[str, object]:
        models = [
            _model_stats("pipe", 0, 0, n),
            _model_stats("toy", 100_000 * n, 1_000_000 * n, n),
            _model_stats("slow", 9_000_000 * n, 4_000_000 * n, n),
            _model_stats("other", 0, 0, n),
        ]
        return {"model_stats": models}

    before = StatsSnapshot.parse(doc(10), model="pipe", steps=("toy", "slow"))
    after = StatsSnapshot.parse(doc(30), model="pipe", steps=("toy", "slow"))
    found = breakdown(before, after)
    assert found.requests == 20 and set(found.steps) == {"toy", "slow"}  # not a model outside the ensemble
    assert found.steps["slow"].queue_us == pytest.approx(9000) and found.steps["toy"].compute_infer_us == 1000
    assert found.bottleneck() == "slow"
    point = Point(8, 0.0, 100.0, 10, 10, 10, 10, 10, 100, 0, 1.0, 3, True, server=found)
    assert Point.from_dict(json.loads(json.dumps(point.to_dict()))) == point
    assert bottleneck_line(point) == "bottleneck: slow (queue 9.0 ms, compute 4.0 ms; toy 0.1 + 1.0 ms)"
    alone = StatsSnapshot.parse(doc(10), model="toy")  # no steps asked: as before
    assert alone.steps == {} and alone.totals["queue"] == (10, 1_000_000)
    assert bottleneck_line(replace(point, server=breakdown(alone, alone))) == ""


CALLER = '''"""A BLS model for the tests: each request is sent on to the model its "calls" parameter names."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.calls = config["parameters"]["calls"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x")
            answer = pb_utils.InferenceRequest(
                model_name=self.calls, requested_output_names=["y"], inputs=[x]
            ).exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message())))
                continue
            y = pb_utils.get_output_tensor_by_name(answer, "y")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", y.as_numpy())]))
        return responses
'''


def _caller(toy_repo: Path, instances: int = 4) -> Path:
    """``caller``, a BLS model (``instances`` instances) that sends each request on to ``slow``,
    beside the toy pipeline's models in ``toy_repo``."""
    repo = _toy_pipeline(toy_repo)
    (repo / "caller" / "1").mkdir(parents=True)
    (repo / "caller" / "1" / "model.py").write_text(CALLER)
    toy = (repo / "toy" / "config.pbtxt").read_text()
    head, _, _ = toy.partition("instance_group")
    caller = head.replace('name: "toy"', 'name: "caller"')
    caller += f"instance_group [{{ count: {instances} kind: KIND_CPU }}]\n"
    caller += 'parameters { key: "calls" value { string_value: "slow" } }\n'
    (repo / "caller" / "config.pbtxt").write_text(caller)
    return repo


@pytest.mark.integration
def test_a_model_a_bls_model_calls_is_tuned_through_it(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """--composing-models: the BLS model is served with the models it calls; --step picks the
    called one to tune, every point measured through the caller; apply writes only its config."""
    from autotune.cli import main
    from autotune.reload import reload_outcome
    from tests.conftest import servers_of, staged_servers

    repo = _caller(toy_repo)
    before = files_of(repo)
    reports = tmp_path / "reports"
    argv = ["run", "--model", "caller", "--composing-models", "slow", "--step", "slow",
            "--model-repository", str(repo), "--sla-p95-ms", "80", "--reports-dir", str(reports),
            "--search-space", str(small_space), "--window", "0.5", "--finalists", "1", "--repeats", "2",
            "--no-open-loop-check", "--max-trials", "2", "--seed", "1"]  # fmt: skip
    assert main(argv) == 0
    (run_dir,) = list((reports / "caller").iterdir())
    outcome = reload_outcome(run_dir)
    assert outcome.winner is not None and outcome.baseline is not None and outcome.baseline.best is not None
    assert set(outcome.baseline.best.server.steps) == {"slow"}  # the called model's own time
    record = json.loads((run_dir / "run.json").read_text())
    assert record["step"] == "slow" and record["composing"] == ["slow"]
    assert "slow, called by caller (BLS, calling slow)" in unescape((run_dir / "report.html").read_text())
    assert files_of(repo) == before
    if outcome.winner.number != outcome.baseline.number:
        assert main(["apply", str(run_dir)]) == 0
        changed = changed_files(repo, before)
        assert {p.relative_to(repo).as_posix() for p in changed if ".autotune-" not in p.name} == {
            "slow/config.pbtxt"
        }
    assert servers_of(run_dir) == [] and staged_servers() == []


@pytest.mark.integration
def test_without_step_a_bls_model_is_tuned_through_the_model_it_calls(
    toy_repo: Path, tmp_path: Path, small_space: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--composing-models without --step: round 1 tunes the model requests wait for under load
    (slow, the only one), the BLS model (one instance) served with as many
    instances as it; slow is then tuned already and the rounds end; apply writes slow's winner
    and the BLS model with its instances, --undo puts both back."""
    from autotune.cli import main
    from autotune.model_config import instances_of, parse_config
    from autotune.rundir import RunDir

    repo = _caller(toy_repo, instances=1)
    reports = tmp_path / "reports"
    argv = ["run", "--model", "caller", "--composing-models", "slow", "--model-repository", str(repo),
            "--sla-p95-ms", "80", "--reports-dir", str(reports), "--search-space", str(small_space),
            "--window", "0.5", "--finalists", "1", "--repeats", "1", "--no-open-loop-check",
            "--max-trials", "2", "--seed", "1"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "caller: calls slow; finding its bottleneck under load" in err
    assert "; tunes slow" in err and "rounds done" in err
    (run_dir,) = list((reports / "caller").iterdir())
    record = RunDir.load(run_dir).record
    assert (record.tuned, record.rounds, record.tuned_steps) == ("slow", True, ())
    assert record.caller_digest
    count = instances_of(parse_config((run_dir / "winner.pbtxt").read_text(), "winner"))[0]
    written = "slow, caller" if count > 1 else "slow"
    assert f"autotune apply {run_dir} writes the configs of {written}\n" in err
    configs = [repo / "caller" / "config.pbtxt", repo / "slow" / "config.pbtxt"]
    before = [c.read_bytes() for c in configs]
    assert main(["apply", str(run_dir)]) == 0
    assert (repo / "slow" / "config.pbtxt").read_text() == (run_dir / "winner.pbtxt").read_text()
    assert instances_of(load_config(repo, "caller"))[0] == count
    assert main(["apply", "--undo", str(run_dir)]) == 0
    assert [c.read_bytes() for c in configs] == before


@pytest.mark.integration
@pytest.mark.parametrize("model", ["bertQA_pipeline", "bertQA_bls"])
def test_the_question_answering_pipeline_is_tuned_as_an_ensemble_and_as_a_bls_model(
    tmp_path: Path, small_space: Path, model: str
) -> None:
    """The example (a small encoder): strings in through --input-data, answers strings; the
    ensemble's encoder step tuned end to end, the BLS model tuned with the models it calls."""
    from autotune.cli import main
    from autotune.reload import reload_outcome
    from tests.conftest import examples_builder, staged_servers

    repo = tmp_path / "repo"
    builder = examples_builder()
    builder.build(model, repo, layers=1, hidden=32, heads=2, seq=64, vocab=2000)
    which = (  # one run each: the rounds are tested on the toy pipeline and caller
        ["--step", "bertQA"]
        if model == "bertQA_pipeline"
        else ["--composing-models", "bertQA_tokenizer,bertQA,bertQA_answer", "--step", "bertQA_bls"]
    )
    reports = tmp_path / "reports"
    argv = ["run", "--model", model, *which, "--model-repository", str(repo), "--sla-p95-ms", "150",
            "--input-data", str(repo / model / "input.json"), "--reports-dir", str(reports),
            "--search-space", str(small_space), "--window", "0.5", "--finalists", "1", "--repeats", "2",
            "--no-open-loop-check", "--max-trials", "2", "--seed", "1"]  # fmt: skip
    assert main(argv) == 0
    (run_dir,) = list((reports / model).iterdir())
    outcome = reload_outcome(run_dir)
    assert outcome.winner is not None and outcome.baseline is not None and outcome.baseline.best is not None
    assert set(outcome.baseline.best.server.steps) == {"bertQA_tokenizer", "bertQA", "bertQA_answer"}
    assert staged_servers() == []


@pytest.mark.integration
def test_a_pipeline_run_killed_mid_trial_changes_no_file_and_resumes(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """kill -9 during a trial of --step: no file of the repository changed, no server left;
    the same command again resumes the run and finishes it."""
    import os
    import signal
    import subprocess
    import time

    from autotune.reload import reload_outcome
    from tests.conftest import CLI, servers_of

    repo = _toy_pipeline(toy_repo)
    before = files_of(repo)
    reports = tmp_path / "reports"
    argv = [*CLI, "run", "--model", "pipe", "--step", "slow", "--model-repository", str(repo),
            "--sla-p95-ms", "80", "--reports-dir", str(reports), "--search-space", str(small_space),
            "--window", "0.5", "--finalists", "1", "--repeats", "1", "--no-open-loop-check",
            "--max-trials", "3", "--seed", "2"]  # fmt: skip
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 300
        while len(list(reports.glob("pipe/*/logs/trial-*.log"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # into trial 1's measurement
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run_dir,) = list((reports / "pipe").iterdir())
    deadline = time.monotonic() + 5
    while servers_of(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert servers_of(run_dir) == []
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and "__pycache__" not in p.parts} == {
        p: b for p, b in before.items() if "__pycache__" not in p.parts
    }
    again = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert "resuming the unfinished run" in again.stderr
    outcome = reload_outcome(run_dir)
    assert outcome.info.winner is not None and len([t for t in outcome.trials if not t.interrupted]) == 3
    assert servers_of(run_dir) == []


def test_the_step_of_least_capacity_counts_its_instances() -> None:
    """At one client nothing queues: a step's compute per request over its instances is how
    much of the pipeline's time it holds; two instances halve it."""
    from autotune.bottleneck import line, slowest
    from autotune.points import Point, ServerBreakdown

    steps = {
        "toy": ServerBreakdown(compute_infer_us=4000.0),
        "slow": ServerBreakdown(compute_infer_us=6000.0, queue_us=50.0),
    }
    point = Point(
        1, 0.0, 100.0, 10, 10, 10, 10, 10, 100, 0, 1.0, 3, True, server=ServerBreakdown(steps=steps)
    )
    assert slowest(point, {"toy": 1, "slow": 1}) == "slow"
    assert slowest(point, {"toy": 1, "slow": 2}) == "toy"
    assert line(point, {"toy": 1, "slow": 2}) == "toy 4.0 ms x1, slow 6.0 ms x2"
    assert slowest(Point(1, 0.0, 1.0, 1, 1, 1, 1, 1, 1, 0, 1.0, 1, True), {}) == ""


def test_a_bls_model_runs_at_least_as_many_instances_as_each_model_it_calls(tmp_path: Path) -> None:
    """While a model it calls is tuned, a BLS model is served with as many instances as the
    busiest model it calls runs (its own when it has more; GPU instances count on each GPU)."""
    from autotune.model_config import instances_of, parse_config
    from autotune.pipeline import Pipeline, caller_served, with_caller

    def config(name: str, groups: str) -> object:
        return parse_config(f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n{groups}', name)

    one = config(
        "caller",
        'instance_group [{ count: 1 kind: KIND_CPU }]\nparameters { key: "k" value { string_value: "v" } }',
    )
    three = config("a", "instance_group [{ count: 3 kind: KIND_CPU }]")
    gpus = config("b", "instance_group [{ count: 2 kind: KIND_GPU gpus: [0, 1] }]")
    assert instances_of(caller_served(one, [three, config("c", "")])) == (3, "KIND_CPU", ())
    served = caller_served(one, [three, gpus])
    assert instances_of(served) == (4, "KIND_CPU", ()) and served.parameters["k"].string_value == "v"
    four = config("caller", "instance_group [{ count: 4 kind: KIND_CPU }]")
    assert caller_served(four, [three]) is four and caller_served(one, []) is one

    repo = tmp_path / "repo"
    for name, text in (("caller", one), ("a", three)):
        (repo / name).mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(str(text))
    bls = Pipeline("caller", BLS, ("a",))
    assert instances_of(with_caller(bls, repo, {})["caller"])[0] == 3  # the repository's a: 3
    tuned_a = config("a", "instance_group [{ count: 1 kind: KIND_CPU }]")
    assert "caller" not in with_caller(bls, repo, {"a": tuned_a})  # one instance each: as it is
    assert with_caller(replace(bls, kind=ENSEMBLE), repo, {}) == {}


def test_apply_writes_a_bls_model_with_the_instances_it_was_served_with(tmp_path: Path) -> None:
    """A round that tuned a model a BLS model calls: apply writes that model's winner and the BLS
    model with as many instances (it was served so); --undo puts both back byte for byte; a BLS
    model changed since the round began is refused, nothing written."""
    from autotune.errors import WriteBackError
    from autotune.files import file_digest
    from autotune.launch import Launch
    from autotune.model_config import instances_of
    from autotune.objective import Sla
    from autotune.rundir import RunDir, RunRecord
    from autotune.writeback import models_written, undo, write_back

    repo = tmp_path / "repo"
    _model(
        repo, "caller", 'backend: "python"\nmax_batch_size: 8\ninstance_group [{ count: 1 kind: KIND_CPU }]\n'
    )
    _model(
        repo, "slow", 'backend: "python"\nmax_batch_size: 8\ninstance_group [{ count: 1 kind: KIND_CPU }]\n'
    )
    configs = {m: repo / m / "config.pbtxt" for m in ("caller", "slow")}
    before = {m: p.read_bytes() for m, p in configs.items()}

    def round_dir(name: str) -> Path:
        record = RunRecord(
            run_id=name, model="caller", step="slow", composing=("slow",), repository=repo.resolve(),
            sla=Sla(95, 80.0), launch=Launch(), protocol="http", study_name=name, storage=None,
            original_config=before["slow"].decode(), original_digest=file_digest(configs["slow"]),
            caller_digest=file_digest(configs["caller"]), started="", winner=1, rounds=True,
        )  # fmt: skip
        run = RunDir.create(tmp_path / name, record)
        winner = before["slow"].decode().replace("count: 1", "count: 2")
        (run.path / "winner.pbtxt").write_text(winner)
        return run.path

    run_dir = round_dir("round")
    assert models_written(run_dir, RunDir.load(run_dir).record) == ["slow", "caller"]
    write_back(run_dir, verify=False)
    assert (
        instances_of(load_config(repo, "slow"))[0] == 2 and instances_of(load_config(repo, "caller"))[0] == 2
    )
    undo(run_dir)
    assert {m: p.read_bytes() for m, p in configs.items()} == before
    changed = round_dir("changed")
    configs["caller"].write_text(before["caller"].decode() + "\n# edited\n")
    with pytest.raises(WriteBackError):
        write_back(changed, verify=False)
    assert configs["slow"].read_bytes() == before["slow"]


@pytest.mark.integration
def test_a_step_is_tuned_on_a_remote_server_and_every_model_put_back(
    toy_repo: Path, tmp_path: Path, small_space: Path
) -> None:
    """--launcher remote with --step: each trial loads the step with the candidate config and
    the ensemble's other models as staged, through the repository API, and puts each back after
    it; the server ends on its own configs, the repository unchanged."""
    from autotune.cli import main
    from autotune.control import ServerControl
    from autotune.launch.local import LocalLauncher

    repo = _toy_pipeline(toy_repo)
    before = {p: p.read_bytes() for p in repo.rglob("config.pbtxt")}  # the server writes bytecode there
    launcher = LocalLauncher(extra_args=("--model-control-mode=explicit", "--load-model=pipe"))
    with launcher.serve(repo, "pipe", tmp_path / "server.log") as server:
        argv = ["run", "--model", "pipe", "--step", "slow", "--model-repository", str(repo),
                "--sla-p95-ms", "80", "--reports-dir", str(tmp_path / "reports"), "--search-space",
                str(small_space), "--window", "0.5", "--finalists", "1", "--repeats", "1",
                "--no-open-loop-check", "--max-trials", "2", "--seed", "1", "--launcher", "remote",
                "--url", f"{server.host}:{server.http_port}",
                "--grpc-url", f"{server.host}:{server.grpc_port}"]  # fmt: skip
        assert main(argv) == 0
        (run_dir,) = list((tmp_path / "reports" / "pipe").iterdir())
        logs = sorted((run_dir / "logs").glob("trial-*.log"))
        assert logs
        for log in logs:
            text = log.read_text()
            assert "load slow as staged: ok" in text and "load pipe with the candidate config: ok" in text
            assert "load slow from the server's repository: ok" in text
        with ServerControl(server.host, server.http_port) as control:
            assert all(control.model_ready(m) for m in ("pipe", "toy", "slow"))
            assert control.config("slow")["instance_group"][0]["count"] == 1
            assert "dynamic_batching" not in control.config("slow")
    assert {p: p.read_bytes() for p in repo.rglob("config.pbtxt")} == before
