"""The output check on a real tritonserver (autotune.outputs): the sentiment example answers
wrongly with dynamic batching, which is faster; the run must not choose it, and says why."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.reload import reload_outcome
from tests.conftest import examples_builder

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
SPACE = """instance_group:
  count: [1]
max_batch_size: [16]
dynamic_batching:
  enabled: [true, false]
  max_queue_delay_microseconds: [0, 2000]
load:
  concurrency: {min: 1, max: 16}
"""


def _run(tmp_path: Path, name: str, *extra: str) -> Path:
    repo = tmp_path / "repo"
    if not (repo / "sentiment").exists():
        examples_builder().build("sentiment", repo)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE, encoding="utf-8")
    reports = tmp_path / name
    argv = ["run", "--model", "sentiment", "--model-repository", str(repo), "--sla-p95-ms", "200",
            "--input-data", str(repo / "sentiment" / "input.json"), "--search-space", str(space),
            "--reports-dir", str(reports), "--window", "0.5", "--finalists", "1", "--repeats", "1",
            "--no-open-loop-check", "--max-trials", "3", "--patience", "0", *extra]  # fmt: skip
    assert main(argv) == 0
    (run_dir,) = list((reports / "sentiment").iterdir())
    return run_dir


def test_a_faster_config_that_answers_wrongly_never_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unchecked = reload_outcome(_run(tmp_path, "unchecked", "--output-check", "off"))
    assert unchecked.winner is not None and unchecked.winner.candidate is not None
    assert unchecked.winner.candidate.dynamic_batching, "without the check, batching wins: it is faster"

    run_dir = _run(tmp_path, "checked")
    outcome = reload_outcome(run_dir)
    winner = outcome.winner
    assert winner is not None and winner.candidate is not None and not winner.candidate.dynamic_batching
    batching = [t for t in outcome.trials if t.candidate is not None and t.candidate.dynamic_batching]
    assert batching and all(t.wrong_outputs and not t.feasible for t in batching)
    assert all(
        t.reason.startswith("answers differ from your config's: output 'probs' of request ") for t in batching
    )
    reason = batching[0].reason
    assert " (entry " in reason and " of input.json): largest difference " in reason
    with (run_dir / "trials.csv").open(encoding="utf-8") as handle:
        checks = {int(r["trial"]): r["output_check"] for r in csv.DictReader(handle)}
    assert checks[0] == "reference" and {checks[t.number] for t in batching} == {"differs"}
    assert "wrong answers" in (run_dir / "report.html").read_text(encoding="utf-8")
    assert (run_dir / "reference.npz").is_file()
    captured = capsys.readouterr()
    assert "infeasible, answers differ from your config's" in captured.err
    # the one config left is yours (one instance, no batching): the run says keep it
    assert winner.baseline and "keep your config: no candidate was shown better" in captured.out

    # apply checks the written config's answers too (--force: written even where the run said to
    # keep yours): the winner's pass, a batching one's do not
    config = tmp_path / "repo" / "sentiment" / "config.pbtxt"
    original = config.read_bytes()
    assert main(["apply", "--force", str(run_dir)]) == 0
    assert "16 answers as your config's" in capsys.readouterr().out
    assert main(["apply", "--undo", str(run_dir)]) == 0 and config.read_bytes() == original
    (run_dir / "writeback.json").unlink()
    (run_dir / "winner.pbtxt").write_text(
        (run_dir / "winner.pbtxt").read_text() + "dynamic_batching {\n}\n", encoding="utf-8"
    )
    assert main(["apply", "--force", str(run_dir)]) == 6
    assert "answers differ from your config's" in capsys.readouterr().err
    assert config.read_bytes() == original
