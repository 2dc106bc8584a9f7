"""Several models on one server (--model A --model B, --models FILE): each held to its own SLA at
every point, their throughputs weighted into the objective, tuned one after another in rounds
with the others served and loaded beside it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import UsageError
from autotune.objective import Sla
from autotune.points import Point
from autotune.settings import CoModel, Workload, read_models
from tests.conftest import files_of

SLA = Sla(95, 50.0, others=(("twin", Sla(99, 20.0)),))
SLA80 = Sla(95, 80.0)
MINE = Point(4, 0.0, 200.0, 10.0, 9.0, 11.0, 40.0, 45.0, 100, 0, 1.0, 3, True)


def test_a_point_meets_the_sla_only_where_every_model_meets_its_own() -> None:
    """The tuned model's SLA holds the others' (:attr:`Sla.others`): a point without their
    figures, or with one over its limit, is not admitted, and the constraint says by how much
    (their excess relative to their limit, in the tuned model's milliseconds)."""
    twin_ok = replace(MINE, p99_ms=18.0)
    twin_late = replace(MINE, p99_ms=30.0)  # 50% over its 20 ms
    assert SLA.met_by(replace(MINE, others=(("toy", MINE), ("twin", twin_ok))))
    assert not SLA.met_by(MINE)  # the twin's figures are missing
    late = replace(MINE, others=(("toy", MINE), ("twin", twin_late)))
    assert not SLA.met_by(late) and SLA.violation(late) == pytest.approx(0.5 * 50.0)
    assert SLA.label == "p95 <= 50 ms; twin p99 <= 20 ms"
    assert SLA.tightened(0.1).others[0][1].limit_ms == pytest.approx(18.0)
    assert Sla.from_json(json.loads(json.dumps(SLA.to_json()))) == SLA
    nested = replace(MINE, others=(("toy", MINE), ("twin", twin_ok)))
    assert Point.from_dict(json.loads(json.dumps(nested.to_dict()))) == nested


def test_a_point_with_models_beside_counts_their_weighted_throughputs() -> None:
    """Its throughput, and each window's, is every model's weighted; its latencies the tuned
    model's; its errors every model's."""
    from autotune.loadgen import Beside, _combined

    mine = replace(MINE, window_throughputs=(190.0, 210.0))
    theirs = replace(MINE, throughput=100.0, errors=2, window_throughputs=(90.0, 110.0), first_error="x")
    gen = type("Gen", (), {"io": type("IO", (), {"name": "twin"})()})()
    point = _combined(mine, "toy", 2.0, [Beside(gen, 0.5, 99)], [theirs])  # type: ignore[arg-type]
    assert point.throughput == pytest.approx(2.0 * 200 + 0.5 * 100)
    assert point.window_throughputs == pytest.approx((2 * 190 + 0.5 * 90, 2 * 210 + 0.5 * 110))
    assert point.p95_ms == MINE.p95_ms and point.errors == 2 and point.first_error == "x"
    assert [name for name, _ in point.others] == ["toy", "twin"] and point.other("twin") == theirs


def test_a_models_file_gives_each_model_its_sla_workload_and_weight(tmp_path: Path) -> None:
    data = tmp_path / "questions.json"
    data.write_text("{}")
    models = tmp_path / "models.yaml"
    models.write_text(
        "- model: toy\n  sla_p95_ms: 50\n  weight: 2\n  input_data: questions.json\n"
        "- model: twin\n  shape: ['x:16']\n  batch_size: 2\n"
    )
    toy, twin = read_models(models, Sla(99, 20.0), Workload())
    assert toy == CoModel("toy", Sla(95, 50.0), 2.0, Workload(str(data.resolve())))
    assert twin == CoModel("twin", Sla(99, 20.0), 1.0, Workload("random", (("x", (16,)),), 2))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- model: toy\n", "a YAML list of at least two models"),
        ("- model: toy\n- modle: twin\n", "entry 2 has unknown key 'modle'"),
        ("- model: toy\n- model: toy\n", "a model is listed twice"),
        ("- model: toy\n- model: twin\n  sla_p95_ms: fast\n", "entry 2 (twin): could not convert"),
        ("- model: toy\n- model: twin\n  sla_p95_ms: 5\n  sla_p99_ms: 9\n", "entry 2 (twin) needs one SLA"),
        ("- model: toy\n- model: twin\n  input_data: gone.json\n", "no such input data"),
        ("- model: toy\n- model: twin\n  weight: 0\n", "weight must be > 0"),
        ("[", "cannot read it"),
    ],
)
def test_a_bad_models_file_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    models = tmp_path / "models.yaml"
    models.write_text(text)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_models(models, Sla(95, 50.0), Workload())


def _twin_repo(toy_repo: Path) -> Path:
    """``twin``, a second toy model in ``toy_repo`` (tests/models copied)."""
    shutil.copytree(toy_repo / "toy", toy_repo / "twin")
    config = toy_repo / "twin" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "toy"', 'name: "twin"'))
    return toy_repo


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "toy"], "--model given twice for one model"),
        (["--model", "gone"], "gone"),
        (["--model", "twin", "--load", "rate"], "measured in a closed loop only"),
        (["--models", "models.yaml"], "not both"),
    ],
)
def test_bad_models_on_one_server_are_one_line_and_write_nothing(
    toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    repo = _twin_repo(toy_repo)
    (tmp_path / "models.yaml").write_text("- model: toy\n- model: twin\n")
    reports = tmp_path / "reports"
    argv = ["run", "--model", "toy", "--model-repository", str(repo), "--sla-p95-ms", "80",
            "--reports-dir", str(reports), *extra]  # fmt: skip
    argv = [str(tmp_path / a) if a == "models.yaml" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not reports.exists()


@pytest.mark.integration
def test_two_models_on_one_server_are_tuned_in_rounds_and_written_back_together(
    toy_repo: Path, tmp_path: Path, small_space: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--model toy --model twin: round 1 tunes toy with twin served and loaded beside it, round 2
    twin with toy's winner; every measured point has both models' own figures, and a point that
    meets the SLA has both within it; no file of the repository changes until apply, which
    writes both configs from the last round (verified by loading both); --undo restores both."""
    from autotune.reload import reload_outcome
    from autotune.rundir import RunDir
    from tests.conftest import staged_servers

    repo = _twin_repo(toy_repo)
    before = files_of(repo)
    reports = tmp_path / "reports"
    argv = ["run", "--model", "toy", "--model", "twin", "--model-repository", str(repo),
            "--sla-p95-ms", "80", "--reports-dir", str(reports), "--search-space", str(small_space),
            "--window", "0.5", "--finalists", "1", "--repeats", "1", "--no-open-loop-check",
            "--max-trials", "2", "--seed", "1"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "round 2: tuning twin, served with toy (toy with the configs their rounds chose)" in err
    assert "rounds done: every model tuned (toy, twin)" in err
    (first,) = list((reports / "toy").iterdir())
    (second,) = list((reports / "twin").iterdir())
    one, two = RunDir.load(first).record, RunDir.load(second).record
    assert [c.model for c in one.beside] == ["twin"] and [c.model for c in two.beside] == ["toy"]
    assert [t.model for t in two.tuned_steps] == ["toy"] and one.sla.others == (("twin", Sla(95, 80.0)),)
    for run_dir, model in ((first, "toy"), (second, "twin")):
        outcome = reload_outcome(run_dir)
        assert outcome.winner is not None and outcome.winner.best is not None
        best = outcome.winner.best
        assert [name for name, _ in best.others] == [model, "twin" if model == "toy" else "toy"]
        assert all(p.latency_ms(95) <= 80 and p.throughput > 0 for _, p in best.others)
        assert best.throughput == pytest.approx(sum(p.throughput for _, p in best.others))
    assert files_of(repo) == before

    capsys.readouterr()
    force = ["--force"] if two.shown_better is False else []  # a race within noise: the run said keep yours
    if force:
        assert main(["apply", str(second)]) == 6 and files_of(repo) == before
        assert "keep your config" in capsys.readouterr().err
    assert main(["apply", *force, str(second)]) == 0
    assert "loaded them in Triton" in capsys.readouterr().out
    assert (repo / "toy" / "config.pbtxt").read_text() == (first / "winner.pbtxt").read_text()
    assert (repo / "twin" / "config.pbtxt").read_text() == (second / "winner.pbtxt").read_text()
    assert main(["apply", "--undo", str(second)]) == 0
    assert {p: p.read_bytes() for p in before} == before
    assert staged_servers() == []


def test_each_model_gets_its_section_of_the_search_space_and_a_section_for_no_model_is_refused(
    toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A search space with ``models: {twin: ...}``: the round that tunes twin searches its
    section (pinned to 3 instances), the one that tunes toy the top level; a section for a model
    the run does not serve is one line, exit 2, nothing written."""
    from autotune.cli import build_parser, settings_from
    from autotune.prepare import prepare
    from autotune.settings import serving

    repo = _twin_repo(toy_repo)
    space = tmp_path / "space.yaml"
    space.write_text(
        "instance_group:\n  count: [1, 2]\nmodels:\n  twin:\n    instance_group:\n      count: [3]\n"
    )
    argv = ["run", "--model", "toy", "--model", "twin", "--model-repository", str(repo), "--sla-p95-ms", "80",
            "--search-space", str(space), "--reports-dir", str(tmp_path / "reports")]  # fmt: skip
    settings = settings_from(build_parser().parse_args(argv))
    assert prepare(settings).space.instance_count == (1, 2)
    twin, toy = settings.beside[0], CoModel("toy", replace(settings.sla, others=()), 1.0, settings.workload)
    assert prepare(serving(settings, twin, (toy,))).space.instance_count == (3,)
    space.write_text("models:\n  gone:\n    max_batch_size: [4]\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "a section for model 'gone' under models:, which this run does not serve (it serves toy, twin)" in err
    )
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "reports").exists()


def test_the_same_command_again_resumes_a_later_round_that_stopped(toy_repo: Path, tmp_path: Path) -> None:
    """A round that tunes twin (the second model) stopped: the command that started the rounds
    finds it under twin's folder and continues it as that round tunes it (twin, toy beside it
    with its SLA, the steps tuned before); a finished one is not continued."""
    import socket

    from autotune.cli import build_parser, settings_from
    from autotune.pipeline import TunedStep
    from autotune.processes import Owner
    from autotune.rounds import unfinished_round
    from autotune.rundir import RunDir, RunRecord

    repo, reports = _twin_repo(toy_repo), tmp_path / "reports"
    argv = ["run", "--model", "toy", "--model", "twin", "--model-repository", str(repo), "--sla-p95-ms", "80",
            "--reports-dir", str(reports)]  # fmt: skip
    settings = settings_from(build_parser().parse_args(argv))
    toy = TunedStep("toy", 'name: "toy"\n', "ab", str(reports / "toy" / "1"))
    record = RunRecord(
        run_id="2", model="twin", repository=repo.resolve(), sla=replace(SLA80, others=(("toy", SLA80),)),
        launch=settings.launch, protocol="http", study_name="twin-2", storage=None, original_config="",
        original_digest="cd", started="", owner=Owner(socket.gethostname(), 999_999_999), rounds=True,
        tuned_steps=(toy,), beside=(CoModel("toy", SLA80),),
    )  # fmt: skip
    run = RunDir.create(reports / "twin" / "2", record)
    later = unfinished_round(settings)
    assert later is not None and later.run_dir == run.path and later.model == "twin"
    assert later.tuned_steps == (toy,) and later.beside_names == ("toy",) and later.sla == record.sla
    run.update(finished="2026")
    assert unfinished_round(settings) is None
