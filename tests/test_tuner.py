"""prepare.prepare (no server): the per-GPU decision is made once, from the space and the server's
GPUs, and a resumed run keeps the one it recorded; and the SLA a trial's search keeps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from autotune.objective import RAW, Scoring, Sla
from autotune.prepare import prepare
from autotune.rundir import RunDir, RunRecord
from autotune.settings import Launch, RunSettings

TWO_SIZES = "instance_group:\n  kind: [KIND_GPU]\n  gpus: [[0], [0, 1]]\nmax_batch_size: [8]\n"


def settings(toy_repo: Path, tmp_path: Path) -> RunSettings:
    space = tmp_path / "space.yaml"
    space.write_text(TWO_SIZES, encoding="utf-8")
    return RunSettings("toy", toy_repo, Sla(95, 50.0), search_space=space, reports_dir=tmp_path / "reports")


def test_the_goodput_is_compared_per_gpu_when_candidates_use_one_or_two_gpus(
    toy_repo: Path, tmp_path: Path
) -> None:
    assert prepare(settings(toy_repo, tmp_path), server_gpus=2).scoring == Scoring(True, 2)
    cpu_only = prepare(settings(toy_repo, tmp_path), server_gpus=0)  # no GPU: CPU instances only
    assert cpu_only.scoring == Scoring(False, 0) and cpu_only.space.kind == ("KIND_CPU",)


def test_a_resumed_run_keeps_the_scoring_it_recorded(toy_repo: Path, tmp_path: Path) -> None:
    record = RunRecord(
        run_id="r", model="toy", repository=toy_repo.resolve(), sla=Sla(95, 50.0), launch=Launch(),
        protocol="http", study_name="s", storage=None, original_config="", original_digest="", started="",
        scoring=RAW,
    )  # fmt: skip
    run = RunDir.create(tmp_path / "run", record)
    resumed = prepare(replace(settings(toy_repo, tmp_path), run_dir=run.path), server_gpus=2)
    assert resumed.scoring == RAW  # recorded before this machine had two GPUs: its scores stay comparable


def test_every_candidate_is_searched_and_raced_at_the_sla_less_the_margin(
    toy_repo: Path, tmp_path: Path
) -> None:
    """The search and the race hold every candidate, batching or not, to the limit less ``--margin``."""
    prep = prepare(replace(settings(toy_repo, tmp_path), margin=0.10), server_gpus=0)
    assert prep.settings.search_sla == Sla(95, 45.0)
    assert replace(prep.settings, margin=0.0).search_sla == Sla(95, 50.0)
