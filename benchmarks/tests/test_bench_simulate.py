"""benchmarks/simulate.py and picture.py: what they print and draw of simulated runs. Pure logic."""

from __future__ import annotations

import math
import statistics
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


def test_sim_vs_real_reads_a_benchmarks_runs_and_simulates_their_settings(tmp_path: Path) -> None:
    """benchmarks/sim_vs_real.py: each finished real run's steps (search, race to the open-loop
    check's server, the check, from its record and its logs) beside the simulator's
    runs of the same options on the model's survey, its open-loop check included, and their
    medians' ratios."""
    import json

    import sim_vs_real

    space = tmp_path / "space.yaml"
    space.write_text("instance_group:\n  count: [1, 2]\nmax_batch_size: [4, 8]\n", encoding="utf-8")
    options = {"search_space": str(space), "max_trials": 6, "finalists": 1, "repeats": 2, "margin": 0.1}
    for i, (wall, searched) in enumerate([(100.0, 60.0), (120.0, 70.0), (90.0, 50.0)]):
        run = tmp_path / "cnn" / f"autotune-{i}" / "run"
        (run / "logs").mkdir(parents=True)
        (run / "logs" / "race-001-1.log").write_text("")
        (run / "logs" / "open-loop-001.log").write_text(
            "W1205 10:01:30.500000 1 a line\nI1205 10:01:31.0 x\n"
        )
        record = {
            "searched_s": searched, "options": options, "sla": {"percentile": 99, "limit_ms": 20.0},
            "started": "2026-12-05T10:00:00+00:00", "finished": "2026-12-05T10:01:40+00:00",
            "study_name": "s",
            "verifications": [{"points": [
                {"throughput": t, "p99_ms": ms, "window_throughputs": [t, t], "window_latencies_ms": [ms, ms]}
                for t, ms in ((100.0, 10.0), (110.0, 12.0))  # two rounds on fresh servers
            ]}],
        }  # fmt: skip
        (run / "run.json").write_text(json.dumps(record))
        status = "finished" if i < 2 else "timeout"  # a run that did not finish is not read
        result = {"status": status, "wall_s": wall, "details": {"run_dir": str(run), "trials": 6}}
        (run.parent / "result.json").write_text(json.dumps(result))
    reals = sim_vs_real.real_runs(tmp_path, "cnn")
    assert [(r.searched_s, r.raced_s, r.checked_s, r.rounds) for r in reals] == [
        (60.0, 100 - 9.5 - 60.0, 9.5, 1),
        (70.0, 100 - 9.5 - 70.0, 9.5, 1),
    ]  # the check's server started at 1:30.5, the record ended at 1:40
    server, tail = sim_vs_real.round_spreads(reals)  # their windows agree: all of it is the servers'
    assert server == pytest.approx(math.log(1.1) / math.sqrt(2))
    assert tail == pytest.approx(math.sqrt((math.log(1.2) ** 2 - math.log(1.1) ** 2) / 2))
    sims, start_s = sim_vs_real.simulated(sim_vs_real.SURVEYS / "cnn.json.gz", reals, seeds=2)
    assert len(sims) == 2 and all(
        0 < s.searched_s < s.sim_s and 0 < s.measured <= s.trials <= 6 for s in sims
    )
    assert all(3.0 < s.checked_s < s.sim_s - s.searched_s for s in sims)  # a server's start, and points
    assert start_s == 3.0  # neither the survey nor these runs timed a start: the simulator's own
    lines = sim_vs_real.report("cnn", reals, sims, start_s)
    whole = statistics.median(s.sim_s for s in sims) / statistics.median(r.simulated_s for r in reals)
    assert lines[2].split()[-1] == f"{whole:.2f}" and lines[2].startswith("  whole ")
    check = statistics.median(s.checked_s for s in sims) / 9.5
    assert next(line for line in lines if line.startswith("  check ")).split()[-1] == f"{check:.2f}"
    low, high = sim_vs_real.ratio_interval([1.0, 2.0, 3.0], [2.0, 2.0, 2.0, 2.0])
    assert low == pytest.approx(0.5) and high == pytest.approx(1.5)  # the real runs agree: the sims' range
    assert sim_vs_real.ratio_interval([2.0] * 3, [2.0] * 4) == (1.0, 1.0)
    assert lines[-1].startswith("  whole (less the start and the report), sim/real: 90% interval")
    # a real run's own time beyond starts, warm-ups and windows: 0.4 s a server, 0.1 s a point
    # beyond the 0.5 s warm-up and the 0.3 s ramps the simulator charges already
    cycles = [(n, 0.4 + 0.5 + 0.3 * (n - 1) + 0.1 * n) for n in (1, 2, 4, 5)]
    fit = sim_vs_real.fit_overheads(cycles, window_s=0.5)
    assert fit is not None and fit.server_s == pytest.approx(0.4) and fit.point_s == pytest.approx(0.1)
    assert sim_vs_real.fit_overheads([(3, 1.0), (3, 1.2)], window_s=0.5) is None  # no slope to fit
    assert sim_vs_real.overheads(reals) is None  # these runs kept no study: the simulator's own


def test_first_windows_drift_fit_reads_back_the_drift_the_simulator_draws() -> None:
    """``first_window.py --drift``: a server's 5 s blocks compared lag by lag, and the drift that
    explains them (:func:`first_window.fit_drift`), read back from windows drawn on a
    :class:`sim.Drift` path; windows alone read a small part of it."""
    import random

    from first_window import fit_drift, lag_spreads

    lags = [5, 10, 20, 40, 80, 160, 320]
    rng = random.Random(0)
    path = sim.Drift(sd=0.05, hold_s=20.0).path(rng)
    drifting = [1000 * path.speed(i * 0.5) * (1 + rng.gauss(0, 0.05)) for i in range(7200)]
    sd, hold_s, _ = fit_drift(lag_spreads(drifting, lags))
    assert sd == pytest.approx(0.05, rel=0.25) and 10 < hold_s < 40
    alone = [1000 * (1 + rng.gauss(0, 0.05)) for _ in range(7200)]
    spreads = lag_spreads(alone, lags)
    assert fit_drift(spreads)[0] < 0.02 and spreads[5] == pytest.approx(0.05 * math.sqrt(2 / 10), rel=0.2)
