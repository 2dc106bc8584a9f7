"""The models users bring, tuned end to end on a real tritonserver with their own workload:
a BERT encoder with variable-length inputs fed entries of several lengths, a python-backend
food classifier fed base64 JPEGs (whose config asks for a GPU this machine may not have), a
text recognizer of variable width measured as Triton's tutorial measures it (``-b 2 --shape
input.1:1,32,100``), a MobileNetV2, a recommender that waits on its feature store per
request and a sentence embedder with fixed batch shapes (each tuned with the search's own seeds
and neighbours), a model that refuses the data it is sent, and two of them on one server."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.gpu_probe import local_gpu_count
from autotune.reload import reload_outcome
from autotune.results import COMPLETE, FAIL, PRUNED, Outcome
from autotune.search import walk
from tests.conftest import examples_builder, servers_of, staged_servers

pytestmark = pytest.mark.integration
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]
SMALL_BERT = {"layers": 1, "hidden": 64, "heads": 2, "vocab": 1000}
FAST = ["--window", "0.4", "--finalists", "1", "--repeats", "2", "--seed", "1", "--time-budget", "4m"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example models, built once (a small BERT), copied by each test that changes them."""
    out = tmp_path_factory.mktemp("examples")
    builder = examples_builder()
    builder.build("bertQA_dynamic", out, **SMALL_BERT)
    builder.build("food_classifier", out)
    builder.build("text_recognition", out)
    builder.build("mobilenet", out, image=48, width=0.5, classes=10)
    builder.build("recommender", out, wait_ms=4.0)
    builder.build("embedder", out)
    return out


@pytest.fixture
def repo(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(built, copy)
    return copy


@pytest.fixture
def space(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(
        "instance_group:\n  count: [1, 2]\nmax_batch_size: [8]\n"
        "dynamic_batching:\n  enabled: [true, false]\n  max_queue_delay_microseconds: [0]\n"
        "load:\n  concurrency: {min: 1, max: 8}\n",
        encoding="utf-8",
    )
    return path


def _run(model: str, repo: Path, space: Path, reports: Path, sla_ms: float, *extra: str) -> int:
    return main(["run", "--model", model, "--model-repository", str(repo), "--sla-p95-ms", str(sla_ms),
                 "--reports-dir", str(reports), "--search-space", str(space), *FAST, *extra])  # fmt: skip


def _run_dir(reports: Path, model: str) -> Path:
    (run_dir,) = list((reports / model).iterdir())
    return run_dir


def _tune_alone(
    built: Path, tmp_path: Path, model: str, space_yaml: str, sla_ms: float, *extra: str
) -> Outcome:
    """``model`` alone in a repository of its own, tuned over ``space_yaml`` (it must succeed)."""
    repo, space, reports = tmp_path / "repo", tmp_path / "space.yaml", tmp_path / "reports"
    shutil.copytree(built / model, repo / model)
    space.write_text(space_yaml, encoding="utf-8")
    assert _run(model, repo, space, reports, sla_ms, *extra) == 0
    return reload_outcome(_run_dir(reports, model))


def test_bert_with_variable_lengths_is_tuned_on_the_users_entries(
    repo: Path, space: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = repo / "bertQA_dynamic" / "input.json"
    reports = tmp_path / "reports"
    assert (
        _run("bertQA_dynamic", repo, space, reports, 200, "--input-data", str(data), "--max-trials", "3") == 0
    )
    assert "workload: input.json (8 entries, sent in turn)" in capsys.readouterr().err
    run_dir = _run_dir(reports, "bertQA_dynamic")
    recorded = json.loads((run_dir / "run.json").read_text())["workload"]
    assert recorded["input_data"] == str(data.resolve())
    assert (recorded["shapes"], recorded["batch_size"]) == ({}, 1)
    outcome = reload_outcome(run_dir)
    assert outcome.winner is not None and all(t.state == COMPLETE for t in outcome.trials)
    # one request per entry, in turn: the server saw requests of every length, and batched
    # only equal shapes (its execution count is at least its distinct lengths' worth)
    points = [p for t in outcome.trials if t.measurement for p in t.measurement.points]
    assert all(p.errors == 0 and p.requests > 0 for p in points)
    assert "workload <b>input.json</b>" in (run_dir / "report.html").read_text()
    assert servers_of(run_dir) == []


def test_food_classifier_on_base64_jpegs_tunes_the_cpu_candidates_when_its_gpu_config_cannot_load(
    repo: Path, space: Path, tmp_path: Path
) -> None:
    data = repo / "food_classifier" / "input.json"
    reports = tmp_path / "reports"
    assert (
        _run("food_classifier", repo, space, reports, 200, "--input-data", str(data), "--max-trials", "3")
        == 0
    )
    outcome = reload_outcome(_run_dir(reports, "food_classifier"))
    baseline = next(t for t in outcome.trials if t.baseline)  # the user's config, as it is
    assert baseline.candidate is not None and baseline.candidate.kind == "KIND_GPU"
    if not local_gpu_count():  # failed, with the server's own reason in the trial's one line
        assert baseline.state == FAIL and "unsupported gpu id 0" in baseline.reason
        twin = outcome.trials[1]  # measured next: the same config on this machine's CPU
        assert twin.candidate == replace(baseline.candidate, kind="KIND_CPU", gpus=())
    tuned = [t for t in outcome.trials if not t.baseline]
    assert tuned and all(t.state == COMPLETE and t.candidate for t in tuned)
    assert all(t.candidate is not None and t.candidate.kind == "KIND_CPU" for t in tuned)
    assert outcome.winner is not None and outcome.winner.goodput() > 0


def test_a_client_batch_of_two_is_counted_in_inferences(repo: Path, space: Path, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    workload = ["--shape", "input.1:1,32,100", "--batch-size", "2"]  # as the tutorial's perf_analyzer
    assert _run("text_recognition", repo, space, reports, 200, *workload, "--max-trials", "2") == 0
    run_dir = _run_dir(reports, "text_recognition")
    recorded = json.loads((run_dir / "run.json").read_text())["workload"]
    assert (recorded["shapes"], recorded["batch_size"]) == ({"input.1": [1, 32, 100]}, 2)
    outcome = reload_outcome(run_dir)
    baseline = outcome.baseline
    assert baseline is not None and baseline.measurement is not None and baseline.measurement.points
    for point in baseline.measurement.points:  # no dynamic batching: every execution is one request of 2
        assert set(point.server.batch_sizes) == {2}
        assert point.throughput == pytest.approx(2 * point.requests / point.duration_s, rel=0.02)
    points = [p for t in outcome.trials if t.measurement for p in t.measurement.points]
    assert all(p.errors == 0 and p.server.batch_sizes for p in points)
    assert all(size % 2 == 0 for p in points for size in p.server.batch_sizes)  # a batcher joins pairs


def test_mobilenet_is_measured_with_an_instance_per_core_before_batching(
    repo: Path, space: Path, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    assert _run("mobilenet", repo, space, reports, 200, "--max-trials", "3") == 0
    outcome = reload_outcome(_run_dir(reports, "mobilenet"))
    baseline, first = outcome.trials[0], outcome.trials[1]
    assert baseline.baseline and baseline.candidate is not None and first.candidate is not None
    per_core = walk.closest((1, 2), os.cpu_count() or 1)
    if per_core != baseline.candidate.instance_count:  # the first seed changes the instances alone
        assert walk.equivalent(first.candidate, replace(baseline.candidate, instance_count=per_core))
    assert all(t.state == COMPLETE for t in outcome.trials)
    assert outcome.winner is not None and outcome.winner.goodput() > 0


def test_a_model_waiting_on_io_is_tuned_past_one_instance_per_core(tmp_path: Path, built: Path) -> None:
    """recommender: 4 ms of waiting per request, under a millisecond of CPU; 1 to 4 instances
    without batching. However the sampler wanders, the search does not end while an instance
    more than the best is untried, and with two cores the best is past two instances."""
    space = (
        "instance_group:\n  count: {min: 1, max: 4}\nmax_batch_size: [16]\n"
        "dynamic_batching:\n  enabled: [false]\nload:\n  concurrency: {min: 1, max: 16}\n"
    )
    outcome = _tune_alone(built, tmp_path, "recommender", space, 100, "--max-trials", "6", "--patience", "1")
    counts = {
        t.candidate.instance_count for t in outcome.trials if t.candidate is not None and not t.reused_from
    }
    best = max((t for t in outcome.trials if t.feasible), key=lambda t: t.goodput())
    assert best.candidate is not None and best.candidate.instance_count + 1 in counts | {5}  # its neighbour
    if (os.cpu_count() or 1) <= 2:
        assert best.candidate.instance_count > 2
    assert outcome.winner is not None and outcome.winner.goodput() > 0


def test_a_model_of_fixed_batch_shapes_is_tuned_to_preferred_sizes_or_a_queue_delay(
    tmp_path: Path, built: Path
) -> None:
    """embedder: every call is padded to a multiple of 8 rows (1 row costs what 8 do). Plain
    dynamic batching at delay 0 runs part-filled tiles; preferred sizes [8, 16] or a queue delay
    fill them (1.2x to 1.5x the goodput at p99 50 ms in benchmarks/results/embedder-shape-*.txt).
    The search reaches them from its seed (batching, no preferred size, delay 0) as neighbours,
    and one of them wins. Two finalists, as by default: one low reading of a neighbour makes it a
    tie the race settles, not a loser (with one finalist, CI once saw [8, 16] read 0.95x the seed)."""
    space = (
        "instance_group:\n  count: [2]\nmax_batch_size: [16]\n"
        "dynamic_batching:\n  enabled: [true, false]\n  preferred_batch_size: [none, [8, 16]]\n"
        "  max_queue_delay_microseconds: [0, 5000]\nload:\n  concurrency: {min: 1, max: 24}\n"
    )
    outcome = _tune_alone(
        built, tmp_path, "embedder", space, 50, "--max-trials", "10", "--patience", "1", "--finalists", "2"
    )
    assert all(t.state in (COMPLETE, PRUNED) for t in outcome.trials)  # measured, or a repeat not measured
    tried = {(c.preferred_batch_sizes, c.max_queue_delay_us) for t in outcome.trials
             if (c := t.candidate) is not None and c.dynamic_batching}  # fmt: skip
    assert ((), 0) in tried and len(tried) > 1  # the seed, then what fills the tiles
    winner = outcome.winner
    assert winner is not None and winner.candidate is not None and winner.goodput() > 0
    assert winner.candidate.dynamic_batching
    assert winner.candidate.preferred_batch_sizes == (8, 16) or winner.candidate.max_queue_delay_us > 0


def test_data_the_model_cannot_take_stops_the_run_at_the_preflight_with_the_servers_message(
    repo: Path, space: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = repo / "food_classifier" / "config.pbtxt"
    config.write_text(config.read_text().replace("gpus: 0\n", "").replace("KIND_GPU", "KIND_CPU"))
    reports = tmp_path / "reports"
    code = _run("food_classifier", repo, space, reports, 200, "--input-data", "random")
    err = capsys.readouterr().err
    assert code == 2, err
    line = next(x for x in err.splitlines() if x.startswith("autotune: error:"))
    assert "answered an error to random data" in line and "INPUT_IMAGE is not a base64-encoded image" in line
    assert not (reports / "food_classifier").exists() or not any((reports / "food_classifier").iterdir())
    assert staged_servers() == []


def test_two_examples_share_a_server_each_held_to_its_own_sla(
    repo: Path, space: Path, tmp_path: Path
) -> None:
    """examples/two_models.yaml: the text recognizer (two lines of width 100 per request) and
    mobilenet on one server, tuned in two rounds; each round's winner, measured with both
    models loaded, holds each to its own SLA (50 and 25 ms)."""
    reports = tmp_path / "reports"
    models = ROOT / "examples" / "two_models.yaml"
    argv = ["run", "--models", str(models), "--model-repository", str(repo), "--reports-dir", str(reports),
            "--search-space", str(space), *FAST, "--max-trials", "2"]  # fmt: skip
    assert main(argv) == 0
    for model in ("text_recognition", "mobilenet"):
        outcome = reload_outcome(_run_dir(reports, model))
        assert outcome.winner is not None and outcome.winner.best is not None
        figures = dict(outcome.winner.best.others)
        assert set(figures) == {"text_recognition", "mobilenet"}
        assert figures["text_recognition"].latency_ms(95) <= 50 and figures["mobilenet"].latency_ms(95) <= 25
    assert staged_servers() == []
