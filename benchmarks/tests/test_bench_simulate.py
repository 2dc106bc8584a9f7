"""benchmarks/simulate.py and picture.py: what they print and draw of simulated runs. Pure logic."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import simulate
from picture import draw

from autotune import sim
from autotune.search import ranking


def test_the_picture_of_a_run_draws_every_trial_each_race_round_and_the_winner() -> None:
    """benchmarks/simulate.py --picture: an SVG with a label per trial, a mark or an interval
    for each (an x where none met the SLA), a dot per race round and the winner's label."""
    surface = sim.synthetic_family(1, 0.05, seed=1)[0]
    outcome = sim.simulate(surface, seed=0, max_trials=10)
    root = ET.fromstring(draw(surface, outcome))
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert [t for t in texts if t.isdigit()] == [str(i) for i in range(len(outcome.results))]
    without = sum(ranking.trial_estimate(r) is None for r in outcome.results)
    assert texts.count("x") == without and 0 < without < len(outcome.results)
    rounds = sum(len(v.points) for v in outcome.verifications)
    dots = [c for c in root.iter("{http://www.w3.org/2000/svg}circle") if c.get("r") == "2.5"]
    assert rounds >= 2 and len(dots) == rounds
    assert f"#{outcome.winner} won" in texts


def test_simulate_lists_each_surfaces_misses_by_winner() -> None:
    """``simulate.py --misses``: the winners below 0.95 of the best, counted by config and by their
    goodput at the SLA and at the search's limit, most first."""
    one = sim.candidates(sim.default_space())[0]
    ratios = ((0.948, 0.993), (0.948, 0.993), (0.99, 1.0), (0.5, 0.6), (0.948, 0.9), (0.0, 0.0))
    judged = [
        sim.Judged("s", i, one if r else None, 0, r, 0.9, 1.0, 1, True, ratio_at_limit=at)
        for i, (r, at) in enumerate(ratios)
    ]
    label = sim.survey_label(one)
    assert simulate.misses(sim.Tally(judged)) == [
        f"2x 0.948 (0.993 at the limit) {label}",
        f"1x 0.500 (0.600 at the limit) {label}",
        f"1x 0.948 (0.900 at the limit) {label}",
        "1x 0.000 (0.000 at the limit) none",
    ]


def test_the_held_out_set_shares_no_family_run_seed_or_survey_with_the_tuning_set(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--set``: the headline is read on surfaces and seeds the rules were never chosen on; a
    survey of the set not made yet is left out, and said."""
    given = ["--per-family", "2", "--cv", "0.05", "--stalls", "0"]
    tuning = simulate.build_parser().parse_args(["--set", "tuning", *given])
    held = simulate.build_parser().parse_args(["--set", "held-out", *given])
    ours = simulate.surfaces(tuning)
    monkeypatch.setattr(simulate, "SURVEYS", tmp_path)  # none of the held-out examples surveyed here
    theirs = simulate.surfaces(held)
    assert simulate.run_seed(tuning) == 0 and simulate.run_seed(held) >= 100_000  # 200 runs apart
    synthetic = [s for s in theirs if isinstance(s, sim.Synthetic)]
    assert len(synthetic) == 2 and all(s not in ours for s in synthetic)  # other surfaces, same kind
    assert {s.name for s in ours if isinstance(s, sim.Surveyed)} == {
        "cnn",
        "torch_mlp",
        "bertQA",
        "bertQA-20261129",
    }
    assert not {s.name for s in theirs} & {s.name for s in ours if isinstance(s, sim.Surveyed)}
    assert "--set held-out: embedder left out: not surveyed yet" in capsys.readouterr().err
